"""The session's notes, the pure side: a notes file per session, ten sections, kept current by
a background side call (the keeper lives in agent/notes.py). Here: the template and its caps,
when an extraction is due, the prompt that asks for an update and how its reply is applied,
and the compaction from notes: the notes become the summary, with no model call, and the most
recent messages are kept as they are.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctx_magic.context.autocompact import Compaction, CompactionResult, Split, plan_split, rebuild, summary_request
from ctx_magic.context.snip import safe_cuts
from ctx_magic.context.thresholds import Thresholds
from ctx_magic.context.tokens import count_text, message_tokens
from ctx_magic.errors import CompactionFailed
from ctx_magic.messages import Message

SECTIONS: tuple[tuple[str, str], ...] = (
    ("Session Title", "a distinctive 5-10 word title for the session"),
    ("Current State", "what is being worked on right now, pending tasks, the next steps"),
    ("Task Specification", "what the user asked for, with their design decisions and constraints"),
    ("Files and Functions", "the files, notebooks, tables and functions that matter, and why"),
    ("Workflow", "the commands and code that are run, in which order, and how to read their output"),
    ("Errors & Corrections", "errors met and how they were fixed; what the user corrected"),
    ("Codebase and System Documentation", "how the pieces of the data and code fit together"),
    ("Learnings", "what worked, what did not, what to avoid"),
    ("Key Results", "the exact results the user asked for"),
    ("Worklog", "a terse step-by-step record of what was done"),
)
MAX_SECTION_TOKENS = 2_000  # Claude Code: each section stays readable at a glance
MAX_TOTAL_TOKENS = 12_000  # Claude Code: the whole file fits comfortably in a summary's place
SECTION_CHARS_FOR_COMPACT = 8_000  # ~2,000 tokens of a section carried into a compaction

# When to extract (departing from Claude Code's 10,000 / 5,000 on purpose): notes exist to be
# the summary of a coming compaction, so they are kept only once one is in sight (the warning
# level), then updated twice on the way to the threshold, after three tool calls or a quiet turn.
# On a 200,000 window Claude Code's schedule paid for notes that no compaction ever used.
NOTES_UPDATES_PER_APPROACH = 2
TOOL_CALLS_BETWEEN = 3

# Session-memory compaction: the kept tail, at most a share of the threshold on small
# windows: a fixed 10,000-token tail turned a 22,400-token context into 17,900, and the next
# compaction came right after.
KEEP_MIN_TOKENS = 10_000
KEEP_MIN_TEXT_MESSAGES = 5
KEEP_MAX_TOKENS = 40_000
KEEP_MAX_SHARE_OF_THRESHOLD = 0.3
WAIT_FOR_EXTRACTION_SECONDS = 15.0

_HEADING = re.compile(r"^# (.+?)\s*$", re.MULTILINE)


def empty_template() -> str:
    return "\n\n".join(f"# {title}\n_{what}_" for title, what in SECTIONS) + "\n"


def sections(notes: str) -> dict[str, str]:
    """Section title -> body (the italic description line included)."""
    found: dict[str, str] = {}
    matches = list(_HEADING.finditer(notes))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(notes)
        found[match.group(1).strip()] = notes[match.end():end].strip("\n")
    return found


def _content(body: str) -> str:
    """A section's text without its italic description line."""
    return "\n".join(line for line in body.splitlines() if not re.fullmatch(r"_.*_", line.strip())).strip()


def is_empty(notes: str | None) -> bool:
    """No notes yet, or only the template."""
    return not notes or not any(_content(body) for body in sections(notes).values())


def oversized_sections(notes: str) -> list[str]:
    return [title for title, body in sections(notes).items() if count_text(body) > MAX_SECTION_TOKENS]


def truncate_for_compact(notes: str, notes_path: str) -> str:
    """Each section cut to about 2,000 tokens for the summary's place, with a pointer to the rest."""
    parts = []
    for title, body in sections(notes).items():
        if len(body) > SECTION_CHARS_FOR_COMPACT:
            body = body[:SECTION_CHARS_FOR_COMPACT] + f"\n[section cut here; the full notes are in {notes_path}]"
        parts.append(f"# {title}\n{body}")
    return "\n\n".join(parts)


# -- when to extract -----------------------------------------------------------------------------

# A correction opens the message ("No, ...", "Actually ...", "Don't ..."); a decision is said
# in so many words anywhere in it. "Why does this always return NaN?" is neither.
_CORRECTION = re.compile(
    r"^\W*(no\b|nope\b|wrong\b|that's not|that is not|not quite|actually\b|wait\b|instead\b|don't\b|"
    r"do not\b|never\b|stop\b)"
    r"|\b(i meant|rather than|let's go with|we'll go with|let's use|from now on|(?:we|i)(?: have|'ve)? decided|"
    r"use [\w.\-]+ instead|always use|never use|instead of)\b",
    re.IGNORECASE,
)


def is_correction_or_decision(text: str) -> bool:
    """A user message that corrects the agent or fixes a decision: worth noting at once."""
    return bool(_CORRECTION.search(text))


@dataclass(frozen=True)
class ExtractionState:
    """Where the notes stand relative to the conversation."""

    initialized: bool = False
    tokens_at_last: int = 0
    tool_calls_since: int = 0
    covered_uuid: str | None = None
    """The last message the notes were written from."""


def rebaselined(state: ExtractionState, tokens: int) -> ExtractionState:
    """After a compaction or clearing shrank the context, growth counts from its new size;
    otherwise the notes would wait until the context is back where it was before."""
    return dataclasses.replace(state, tokens_at_last=tokens) if tokens < state.tokens_at_last else state


def update_step(thresholds: Thresholds) -> int:
    """Context growth between two updates once a compaction is in sight."""
    return max(1, (thresholds.autocompact - thresholds.warning) // NOTES_UPDATES_PER_APPROACH)


def extraction_due(state: ExtractionState, tokens: int, thresholds: Thresholds, *, last_turn_tool_calls: int,
                   correction: bool) -> str | None:
    """Why an extraction is due now ('init', 'growth', 'correction'), or None (a pure decision).

    Below the warning level no compaction is in sight and notes would not be used: nothing is due.
    """
    if tokens < thresholds.warning:
        return None
    if not state.initialized:
        return "init"
    if correction:
        return "correction"
    grew = tokens - state.tokens_at_last >= update_step(thresholds)
    busy_enough = state.tool_calls_since + last_turn_tool_calls >= TOOL_CALLS_BETWEEN or last_turn_tool_calls == 0
    return "growth" if grew and busy_enough else None


# -- session-memory compaction ------------------------------------------------------------------


def _is_text_message(message: Message) -> bool:
    return message.sent and any(b.get("type") == "text" and b.get("text", "").strip() for b in message.content)


def tail_limits(threshold: int) -> tuple[int, int]:
    """(least, most) tokens the kept tail holds: Claude Code's 10,000 / 40,000, and at most 30 % of
    the threshold (half that at least) so that a small window keeps room after the compaction."""
    most = min(KEEP_MAX_TOKENS, int(threshold * KEEP_MAX_SHARE_OF_THRESHOLD))
    return min(KEEP_MIN_TOKENS, most // 2), most


def keep_from(messages: Sequence[Message], covered_uuid: str | None, threshold: int) -> int | None:
    """Index of the first kept message, or None when the notes cannot stand for the rest.

    Start after the last message the notes cover; grow backwards until the tail holds at least
    `tail_limits` tokens and 5 text messages, never past its most nor across the last boundary;
    then move the cut so no tool_use is separated from its result.
    """
    least, most = tail_limits(threshold)
    positions = {m.uuid: i for i, m in enumerate(messages)}
    if covered_uuid not in positions:
        return None
    floor = max((i + 1 for i, m in enumerate(messages) if m.kind == "boundary"), default=0)
    start = max(positions[covered_uuid] + 1, floor)
    tokens = sum(message_tokens(m) for m in messages[start:] if m.sent)
    texts = sum(1 for m in messages[start:] if _is_text_message(m))
    def enough() -> bool:
        return tokens >= most or (tokens >= least and texts >= KEEP_MIN_TEXT_MESSAGES)

    while start > floor and not enough():
        candidate = messages[start - 1]
        if candidate.sent and tokens + message_tokens(candidate) > most:
            break
        start -= 1
        tokens += message_tokens(candidate) if candidate.sent else 0
        texts += _is_text_message(candidate)
    safe = safe_cuts(messages)
    cut = start
    while cut > floor and not safe[cut]:
        cut -= 1
    if not safe[cut]:  # no safe cut at or after the floor going back: go forward instead
        cut = next((p for p in range(start, len(messages) + 1) if safe[p]), len(messages))
    return cut


def notes_split(messages: Sequence[Message], notes: str, covered_uuid: str | None, threshold: int) -> Split | None:
    """Where a compaction from the notes cuts the live context: the messages the notes cover are
    summarized by them, the recent tail is kept (`keep_from`). None when the notes cannot stand
    for what they would replace (none yet, or covering no live message) or there is nothing
    of the user's to replace."""
    if is_empty(notes):
        return None
    start = keep_from(messages, covered_uuid, threshold)
    if start is None or start == 0:
        return None
    split = plan_split(messages, "full", start)
    try:
        summary_request(split)
    except CompactionFailed:
        return None
    return split


def compact_from_notes(job: Compaction, notes: str, notes_path: str, *, originals: Sequence[Message] = (),
                       attachments: Callable[[Sequence[Message]], Sequence[Message]] = lambda kept: (),
                       ) -> CompactionResult | None:
    """The notes as the summary, zero model calls; None when the result would still be over the
    threshold (it would compact again at once)."""
    result = rebuild(job, truncate_for_compact(notes, notes_path), originals=originals, attachments=attachments)
    return None if result.event.rebound else result


# -- the notes' update: the prompt, and the reply applied ------------------------------------

NOTES_UPDATE_TAG = "notes-update"
_UPDATE = re.compile(rf"<{NOTES_UPDATE_TAG}>(.*?)(?:</{NOTES_UPDATE_TAG}>|\Z)", re.DOTALL)
_CHANGE = re.compile(r'<(section|append) title="([^"]+)">\n?(.*?)\n?</\1>', re.DOTALL)


def notes_prompt(current: str) -> str:
    """Ask for what the conversation above changes in the notes, and only that: rewritten
    sections whole, additions to a section as lines to append. The whole file back at every
    update was the costliest part of keeping notes (output is billed at five times input)."""
    listing = "\n".join(f"# {title}\n_{what}_" for title, what in SECTIONS)
    reminders = [f"The section '{title}' is over {MAX_SECTION_TOKENS:,} tokens: rewrite it shorter."
                 for title in oversized_sections(current)]
    if count_text(current) > MAX_TOTAL_TOKENS:
        reminders.append(f"CRITICAL: the notes are over {MAX_TOTAL_TOKENS:,} tokens: rewrite the longest sections "
                         "much shorter.")
    return "\n\n".join([
        "IMPORTANT: answer with plain text only; do not call any tool.",
        "You keep the session notes of the conversation above: a markdown file that lets anyone (you, after "
        "the conversation is compacted) pick the work up exactly where it is. It has these ten sections, each "
        "a '# Title' heading followed by its italic description line:\n" + listing,
        "Bring the current notes below up to date with everything the conversation adds: the user's requests "
        "in their own words, decisions and corrections, file and variable names, commands, exact results, "
        f"errors and their fixes. Keep each section under {MAX_SECTION_TOKENS:,} tokens and the whole file "
        f"under {MAX_TOTAL_TOKENS:,}.",
        *reminders,
        f"Answer with only what changes, inside <{NOTES_UPDATE_TAG}>: for a section that needs rewriting, "
        '<section title="Title">its new text</section>; for a section that only grows, '
        '<append title="Title">the lines to add at its end</append>. Leave out every section that does not '
        f"change; if nothing changes, answer <{NOTES_UPDATE_TAG}></{NOTES_UPDATE_TAG}>.",
        f"<current-notes>\n{current}\n</current-notes>",
    ])


def apply_update(current: str, reply: str) -> str | None:
    """The notes with a reply's changes made (rewritten and appended sections), every section
    present in its place; None when the reply holds no update at all."""
    match = _UPDATE.search(reply)
    if not match:
        return None
    template = sections(empty_template())
    bodies = {title: body for title, body in sections(current).items() if title in template} or dict(template)
    bodies = {title: bodies.get(title, template[title]) for title in template}
    for kind, title, text in _CHANGE.findall(match.group(1)):
        title = title.strip()
        if title not in bodies:
            continue  # a section that does not exist is not invented
        description = template[title].splitlines()[0]
        text = text.strip("\n")
        if kind == "append":
            bodies[title] = f"{bodies[title].rstrip()}\n{text}" if text else bodies[title]
        else:
            bodies[title] = text if text.startswith(description) else f"{description}\n{text}"
    return "\n\n".join(f"# {title}\n{body}" for title, body in bodies.items()) + "\n"


def enforce_caps(notes: str) -> str:
    """Cut sections past 2,000 tokens, then the longest ones until the file is under 12,000."""
    bodies = sections(notes)
    for title, body in bodies.items():
        while count_text(body) > MAX_SECTION_TOKENS:
            body = body[: int(len(body) * 0.8)] + "\n[condensed: cut to fit]"
        bodies[title] = body
    while sum(count_text(b) for b in bodies.values()) > MAX_TOTAL_TOKENS:
        longest = max(bodies, key=lambda t: len(bodies[t]))
        bodies[longest] = bodies[longest][: int(len(bodies[longest]) * 0.8)] + "\n[condensed: cut to fit]"
    return "\n\n".join(f"# {title}\n{body}" for title, body in bodies.items()) + "\n"
