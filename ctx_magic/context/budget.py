"""The tool-result budget: 0 API calls.

A tool result over 50,000 characters, or the results of one user message over 200,000
together (largest first), move to `tool-results/<tool_use_id>.txt` and leave a
`<persisted-output>` block with a preview. Decisions are frozen per tool_use_id: a result
kept once is never persisted later, and a persisted one is replaced by the very same bytes
every time, so the prompt-cache prefix never changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctx_magic.context.tokens import count_text
from ctx_magic.events import Persisted
from ctx_magic.messages import Block, Message, result_chars, result_text

# Claude Code: one result past this is worth a file of its own.
MAX_RESULT_CHARS = 50_000
# Claude Code: all results of one message together, persisted largest first.
MAX_MESSAGE_RESULTS_CHARS = 200_000
PREVIEW_CHARS = 2_000
MIN_PREVIEW_CHARS = 200  # a smaller window still shows the first lines of a persisted result
PREVIEW_SHARE_OF_RESULT = 4  # a preview is at most a quarter of the result limit, so persisting pays
# read_file reads persisted outputs back; persisting its result again would be circular.
NEVER_PERSISTED_TOOLS = frozenset({"read_file"})


@dataclass(frozen=True)
class BudgetSettings:
    max_result_chars: int = MAX_RESULT_CHARS
    max_message_chars: int = MAX_MESSAGE_RESULTS_CHARS
    preview_chars: int = PREVIEW_CHARS


def scaled_budget(scale: float) -> BudgetSettings:
    """The budget's limits for a window (scaled to it, beyond Claude Code's fixed figures): 50,000 / 200,000 / 2,000
    characters at 200,000 tokens and in proportion below it. At a fixed 50,000, one result of
    dense text is over 20,000 tokens: in a 12,000-token window it could never be sent, and no
    summary could take it in."""
    scale = min(1.0, scale)
    result = round(MAX_RESULT_CHARS * scale)
    preview_chars = max(MIN_PREVIEW_CHARS, min(PREVIEW_CHARS, result // PREVIEW_SHARE_OF_RESULT))
    return BudgetSettings(max(result, 2 * preview_chars), round(MAX_MESSAGE_RESULTS_CHARS * scale), preview_chars)


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """The first `limit` characters, cut back to a line end when one is in the second half."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = head.rfind("\n")
    return head[:cut] if cut >= limit // 2 else head


def _tail(text: str, limit: int) -> str:
    """The last `limit` characters, from a line start when one is in the first half."""
    if len(text) <= limit:
        return text
    tail = text[len(text) - limit:]
    cut = tail.find("\n")
    return tail[cut + 1:] if 0 <= cut < limit // 2 else tail


def _gap_line(lines: int, chars: int) -> str:
    return f"[... {lines:,} lines ({chars:,} characters) left out here; read_file shows them ...]"


def head_and_tail(text: str, limit: int = PREVIEW_CHARS) -> str:
    """At most `limit` characters: the start and the end of the text (each cut at a line end, half
    the room each), and between them one line naming how much was left out. The end is where
    tests, tracebacks and summaries land; replayed sessions use it as often as the start."""
    if len(text) <= limit:
        return text
    room = limit - len(_gap_line(text.count("\n"), len(text))) - 2  # the widest gap line and its two line ends
    if room < 2:
        return preview(text, limit)
    head = preview(text, room // 2)
    tail = _tail(text[len(head):], room - len(head))
    middle = text[len(head):len(text) - len(tail)]
    middle = middle[1:] if middle.startswith("\n") else middle  # the head's own line end is not left out
    lines = middle.count("\n") + (0 if middle.endswith("\n") else 1)
    return f"{head}\n{_gap_line(lines, len(middle))}\n{tail}"


def persisted_block(path: str, original_chars: int, preview_text: str) -> str:
    return (
        "<persisted-output>\n"
        f"This tool result was too large to keep in the conversation ({original_chars:,} characters).\n"
        f"The full output is saved at: {path}\n"
        "Read any part of it with the read_file tool (path above, offset and limit in lines).\n"
        f"Preview (its start and its end, {len(preview_text):,} characters):\n"
        f"{preview_text}\n"
        "</persisted-output>"
    )


def replace_result(block: Block, replacement: str) -> Block:
    """The tool_result block with its text replaced; images in it are kept."""
    content = block.get("content", "")
    new_content: str | list[Block] = replacement
    if isinstance(content, list):
        images = [b for b in content if b.get("type") != "text"]
        if images:
            new_content = [{"type": "text", "text": replacement}, *images]
    return {**block, "content": new_content}


def persist_result(block: Block, path_for: Callable[[str], str],
                   preview_chars: int = PREVIEW_CHARS) -> tuple[Block, Persisted]:
    """One tool_result moved to its file: the block with the `<persisted-output>` stand-in, and
    the event that carries the full text for the code that writes the file."""
    tool_use_id = block["tool_use_id"]
    text = result_text(block)
    path = path_for(tool_use_id)
    replacement = persisted_block(path, len(text), head_and_tail(text, preview_chars))
    freed = math.ceil(len(text) / 4) - math.ceil(len(replacement) / 4)
    return replace_result(block, replacement), Persisted(tool_use_id, path, len(text), freed, replacement, text)


def _choose(results: list[tuple[Block, str]], settings: BudgetSettings) -> set[int]:
    """Which of one message's undecided results to persist (the budget's rule), by block id()."""
    persistable = [b for b, tool in results if tool not in NEVER_PERSISTED_TOOLS]
    chosen = {id(b) for b in persistable if result_chars(b) > settings.max_result_chars}
    remaining = sum(
        settings.preview_chars if id(b) in chosen else result_chars(b) for b, _ in results
    )
    for block in sorted(persistable, key=result_chars, reverse=True):
        if remaining <= settings.max_message_chars:
            break
        if id(block) not in chosen and _worth_persisting(block, settings):
            chosen.add(id(block))
            remaining -= result_chars(block) - settings.preview_chars
    return chosen


def _worth_persisting(block: Block, settings: BudgetSettings) -> bool:
    """A result under the single-result limit is persisted only if that makes it smaller.

    (Over 50,000 characters a 2,000-character preview always is; below, a result of mostly
    whitespace can tokenize smaller than the preview plus the note, and the live count must
    never grow.)
    """
    text = result_text(block)
    if len(text) <= settings.preview_chars:
        return False
    stand_in = persisted_block("tool-results/x.txt", len(text), head_and_tail(text, settings.preview_chars))
    return count_text(stand_in) < count_text(text)


def apply_tool_result_budget(
    messages: Sequence[Message],
    start: int,
    decided: frozenset[str],
    tool_names: dict[str, str],
    path_for: Callable[[str], str],
    settings: BudgetSettings = BudgetSettings(),
) -> tuple[list[Message], frozenset[str], list[Persisted]]:
    """Persist the oversized results among messages[start:] that have no decision yet.

    Returns the new messages, the grown set of decided ids and one event per persisted
    result (carrying the full text for the code that writes the file).
    """
    out = list(messages)
    events: list[Persisted] = []
    newly_decided: set[str] = set()
    for index in range(start, len(out)):
        message = out[index]
        if message.role != "user":
            continue
        results = [
            (b, tool_names.get(b["tool_use_id"], ""))
            for b in message.blocks("tool_result")
            if b["tool_use_id"] not in decided
        ]
        if not results:
            continue
        newly_decided.update(b["tool_use_id"] for b, _ in results)
        chosen_ids = _choose(results, settings)
        if not chosen_ids:
            continue
        blocks = []
        for block in message.content:
            if id(block) in chosen_ids:
                block, event = persist_result(block, path_for, settings.preview_chars)
                events.append(event)
            blocks.append(block)
        out[index] = message.with_content(blocks)
    return out, decided | newly_decided, events


# -- the user's own message ----------------------------------------------------------------------

PROMPT_SHARE_OF_THRESHOLD = 4  # a message may take at most a quarter of the room before compaction


def prompt_limit_tokens(autocompact_threshold: int) -> int:
    return max(PREVIEW_CHARS // 4, autocompact_threshold // PROMPT_SHARE_OF_THRESHOLD)


def oversized_prompt(text: str, autocompact_threshold: int) -> bool:
    """A pasted message too big for the conversation (Claude Code keeps big
    pastes out of the prompt too). Without this, one message larger than the window could
    never be sent nor compacted away."""
    return len(text) > MAX_RESULT_CHARS or count_text(text) > prompt_limit_tokens(autocompact_threshold)


def persisted_prompt(path: str, text: str, preview_chars: int = PREVIEW_CHARS) -> str:
    """What the model sees of an oversized message of the user's: where it is, and its start."""
    head = preview(text, preview_chars)
    return (
        "<persisted-input>\n"
        f"My message was too large to keep in the conversation ({len(text):,} characters).\n"
        f"The full text is saved at: {path}\n"
        "Read any part of it with the read_file tool (path above, offset and limit in lines).\n"
        f"Its first {len(head):,} characters:\n"
        f"{head}\n"
        "</persisted-input>"
    )

