"""The coverage audit: what a summary must keep, checked without a model.

The compaction prompt asks the model to keep every user message, file, error and the code that
matters; nothing made sure it did. After every summary (a model's or the session notes; auto,
manual, reactive, partial) this module looks in the summary's text for the facts of the span it
replaces (context/span_facts.py): the user's messages (word for word, whitespace aside), file
paths, error lines and the names the code defined.

What is missing is appended after the summary: the user's messages verbatim (a long one as its
first lines and where to read the rest), the rest in one short "Not in the summary above" list.
Pure: messages and text in, text and a report out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctx_magic.context.span_facts import SpanFacts, UserMessage, span_facts
from ctx_magic.context.tokens import count_text
from ctx_magic.events import AuditReport
from ctx_magic.messages import Message

SEARCH_TOOL = "search_transcript"
"""The recovery tool's name (agent/context_tools.py declares it; prompts and pointers name it)."""

# A message this long is pasted material more than an instruction; its head shows what it was,
# and the whole is one search away. Below it, a message is always appended whole.
LONG_MESSAGE_CHARS = 2_000
HEAD_LINES = 12
HEAD_CHARS = 1_000
# Lists past these lengths end with a count and the search tool: a span that defined hundreds
# of names is rare, and the list must stay short beside the summary.
MAX_PATHS = 100
MAX_ERRORS = 40
MAX_NAMES = 200
REF_CHARS = 8  # a message's ref: the start of its uuid (unique within a session in practice)
STUB_CHARS = 100  # a message past the budget: its first line, cut to this
# The user's messages appended after a summary stay under this share of the compaction threshold
# (past it the oldest become their first line and ref, one search away): a summary that kept none
# of them (session notes do not quote) must not leave a context that is mostly old messages.
# benchmarks/fidelity.py, notebook at a 20,000 window: audit + inventory came to 15% of the contexts
# at 0.25 and again at 0.10 (each notes compaction re-appending ~1,400 tokens); 7% at 0.05.
MESSAGES_SHARE_OF_THRESHOLD = 0.05

@dataclass(frozen=True)
class Audit:
    """The audit of one summary: the text to append after it, its report, and the user's
    messages the new summary now answers for (carried to the next compaction)."""

    text: str
    report: AuditReport
    carried: tuple[UserMessage, ...]


# -- what the summary kept ----------------------------------------------------------------------


def _normal(text: str) -> str:
    return " ".join(text.split())


def has_path(text: str, path: str) -> bool:
    return path in text or (path.startswith("./") and path[2:] in text)


def has_name(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?!\w)", text) is not None


def left_out(facts: SpanFacts, summary: str) -> tuple[UserMessage, ...]:
    """The user's messages the summary does not hold word for word (whitespace aside)."""
    flat = _normal(summary)
    return tuple(m for m in facts.user_messages if _normal(m.text) not in flat)


def missing(facts: SpanFacts, summary: str, messages: tuple[UserMessage, ...], appended: str) -> SpanFacts:
    """The facts the summary does not hold: `messages`, the user's it left out (`left_out`), and
    the paths, errors and names found neither in it nor in `appended`, those messages as the audit
    shows them after it (each is said once): a message the budget cut to its first line, or to a
    count, shows no more."""
    text = "\n".join([summary, appended])
    flat = _normal(text)
    return SpanFacts(
        messages,
        tuple(p for p in facts.paths if not has_path(text, p)),
        tuple(e for e in facts.errors if _normal(e.rstrip("…")) not in flat),
        tuple(n for n in facts.names if not has_name(text, n)),
    )


# -- what is appended ---------------------------------------------------------------------------


def is_long(text: str) -> bool:
    return len(text) > LONG_MESSAGE_CHARS


def head(text: str) -> str:
    lines = text.splitlines()[:HEAD_LINES]
    shown = "\n".join(lines)
    return shown if len(shown) <= HEAD_CHARS else shown[:HEAD_CHARS]


def ref(uuid: str) -> str:
    return uuid[:REF_CHARS]


def head_quoted(message: UserMessage, summary: str) -> bool:
    """A long message whose head the summary already quotes: appending the head again adds nothing."""
    return is_long(message.text) and _normal(head(message.text)) in _normal(summary)


def _message_block(message: UserMessage, transcript_path: str, quoted: bool = False) -> str:
    if not is_long(message.text):
        return f'<user-message ref="{ref(message.uuid)}">\n{message.text}\n</user-message>'
    if quoted:
        return (f'[The user\'s message ref="{ref(message.uuid)}" ({len(message.text):,} characters) is quoted above '
                f'only in part: {SEARCH_TOOL} with ref "{ref(message.uuid)}" reads it whole]')
    shown = head(message.text)
    rest = len(message.text) - len(shown)
    return (
        f'<user-message ref="{ref(message.uuid)}" cut="true">\n{shown}\n</user-message>\n'
        f'[{rest:,} more characters: {SEARCH_TOOL} with ref "{ref(message.uuid)}" reads the whole message; '
        f"it is also in {transcript_path}]"
    )


def _listing(label: str, items: Sequence[str], limit: int, *, one_per_line: bool = False) -> list[str]:
    if not items:
        return []
    shown = list(items[:limit])
    more = f" (and {len(items) - limit:,} more; {SEARCH_TOOL} finds them)" if len(items) > limit else ""
    if one_per_line:
        return [f"- {label}:", *(f"  - {item}" for item in shown)] + ([f"  {more.strip()}"] if more else [])
    return [f"- {label}: {', '.join(shown)}{more}"]


def _first_line(message: UserMessage) -> str:
    first = next((line.strip() for line in message.text.splitlines() if line.strip()), "")
    return first if len(first) <= STUB_CHARS else first[: STUB_CHARS - 1] + "…"


def _render_messages(messages: Sequence[UserMessage], whole: Sequence[str], stubbed: int, dropped: int) -> str:
    """The oldest `dropped` counted, the next ones up to `stubbed` as first lines, the rest whole."""
    parts = []
    if dropped:
        parts.append(f"[{dropped:,} earlier messages are not shown here: {SEARCH_TOOL} finds them by text or turn]")
    stubs = [f"- ref {ref(m.uuid)}: {_first_line(m)}" for m in messages[dropped:stubbed]]
    if stubs:
        parts.append(f"Earlier ones by their first line ({SEARCH_TOOL} with the ref reads one whole):\n"
                     + "\n".join(stubs))
    return "\n".join([*parts, *whole[stubbed:]])


def message_section(messages: Sequence[UserMessage], transcript_path: str,
                    budget: int | None = None, quoted: frozenset[str] = frozenset()) -> tuple[str, set[str]]:
    """The messages, each verbatim (a long one as its head, or only its ref when its head is
    `quoted` already). Past `budget` tokens the oldest become their first line and ref, then, if
    even that is too much, a count: the newest stay whole. Also the uuids of those not shown whole."""
    whole = [_message_block(m, transcript_path, m.uuid in quoted) for m in messages]
    stubbed = dropped = 0

    def over() -> bool:
        return budget is not None and count_text(_render_messages(messages, whole, stubbed, dropped)) > budget

    while over() and stubbed < len(messages) - 1:
        stubbed += 1
    while over() and dropped < stubbed:
        dropped += 1
    cut = {m.uuid for m in messages[:stubbed]} | {m.uuid for m in messages if is_long(m.text)}
    return _render_messages(messages, whole, stubbed, dropped), cut


def addendum(messages: str, gaps: SpanFacts) -> str:
    """The text appended after a summary for what it left out ('' when nothing is missing):
    `messages`, the user's messages as `message_section` shows them, then the other facts."""
    parts: list[str] = []
    if messages:
        parts.append("The user's messages the summary above left out, word for word and in order:\n" + messages)
    lines = [
        *_listing("files", gaps.paths, MAX_PATHS),
        *_listing("errors", gaps.errors, MAX_ERRORS, one_per_line=True),
        *_listing("names the code defined", gaps.names, MAX_NAMES),
    ]
    if lines:
        parts.append("Not in the summary above, but in the conversation it replaces:\n" + "\n".join(lines))
    return "\n\n".join(parts)


def audit_summary(span: Sequence[Message], summary: str, *, transcript_path: str,
                  message_budget: int | None = None) -> Audit:
    """Check `summary` against the span it replaces; what to append and what was found.
    `message_budget` caps the tokens of the user's messages appended (see `message_section`);
    the other facts are checked against what is shown of them."""
    facts = span_facts(span)
    messages = left_out(facts, summary)
    quoted = frozenset(m.uuid for m in messages if head_quoted(m, summary))
    section, cut = message_section(messages, transcript_path, message_budget, quoted)
    gaps = missing(facts, summary, messages, section)
    text = addendum(section, gaps)
    report = AuditReport(
        user_messages=tuple(m.uuid for m in gaps.user_messages),
        cut_messages=tuple(m.uuid for m in gaps.user_messages if m.uuid in cut),
        paths=gaps.paths, errors=gaps.errors, names=gaps.names,
        user_messages_checked=len(facts.user_messages), paths_checked=len(facts.paths),
        errors_checked=len(facts.errors), names_checked=len(facts.names),
        tokens=count_text(text) if text else 0, text=text,
    )
    return Audit(text, report, facts.user_messages)


def audit_line(report: AuditReport) -> str:
    """One line on what the coverage audit appended after a summary."""
    parts = [f"{len(items)} of {checked} {what}" for items, checked, what in (
        (report.user_messages, report.user_messages_checked, "of your messages"),
        (report.paths, report.paths_checked, "file paths"),
        (report.errors, report.errors_checked, "error lines"),
        (report.names, report.names_checked, "names the code defined"),
    ) if items]
    return f"The summary left out {', '.join(parts)}: they were added after it ({report.tokens:,} tokens)."
