"""Snip: 0 API calls.

Past `snip_max_messages` live messages, keep the first three (the original request and its
setting) and the most recent ones, and put one marker in place of the middle naming how many
messages went and where the transcript keeps them. A cut never separates a tool_use from its
tool_result.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ctx_magic.context.span_facts import defined_names
from ctx_magic.context.thinking import has_thinking, is_prompt
from ctx_magic.context.tokens import message_tokens
from ctx_magic.events import FOLD_TRIGGER, Snipped
from ctx_magic.messages import Message, notebook_cell_code, result_text, user_text

KEEP_HEAD = 3  # the opening request and the first exchange carry the task's setting
# Cutting back to half the limit, not to the limit itself, means the next snip is far away:
# the marker and the head stay a stable prompt-cache prefix for many turns (a cut to exactly
# the limit would snip again at every new message and rewrite the cache each turn).
SNIP_TARGET_SHARE = 0.5
MIN_SNIP_MAX_MESSAGES = 10  # below this the tail could lose the response anchoring the count


def safe_cuts(messages: Sequence[Message]) -> list[bool]:
    """safe[p] is True when cutting between messages[p-1] and messages[p] splits no pair, and no
    tool loop whose first answer carries thinking: the API wants that answer, with its thinking,
    in front of the rest of the loop (as in Claude Code: thinking blocks travel with their turn)."""
    pending: set[str] = set()
    thinking_loop = False
    safe = [True]
    for index, message in enumerate(messages):
        if is_prompt(message):
            thinking_loop = False
        elif message.role == "assistant" and message.sent:  # an answer without a tool call ends the loop
            thinking_loop = (thinking_loop or has_thinking(message)) and bool(message.tool_use_ids)
        if message.sent:
            pending.update(message.tool_use_ids)
            pending.difference_update(message.tool_result_ids)
        following = messages[index + 1] if index + 1 < len(messages) else None
        inside_loop = thinking_loop and following is not None and not is_prompt(following)
        safe.append(not pending and not inside_loop)
    return safe


def snipped_count(message: Message) -> int:
    """How many original messages one live message stands for (a marker stands for many)."""
    return int(message.meta.get("snipped_count", 1))


def marker_text(count: int, transcript_path: str) -> str:
    return (
        f"[{count:,} earlier messages were snipped from the middle of this conversation to keep "
        "it within the context window. The session transcript keeps every one of them in full: "
        f"{transcript_path}]"
    )


def snip_middle(
    messages: Sequence[Message],
    max_messages: int,
    *,
    transcript_path: str,
    now: float,
    trigger: str = "auto",
    target: int | None = None,
) -> tuple[list[Message], list[Snipped]]:
    """Snip when more than `max_messages` are live, down to about `target` messages (half the
    limit unless told), never more than the limit."""
    max_messages = max(max_messages, MIN_SNIP_MAX_MESSAGES)
    if len(messages) <= max_messages:
        return list(messages), []
    keep = max(MIN_SNIP_MAX_MESSAGES, min(max_messages, target or int(max_messages * SNIP_TARGET_SHARE)))
    safe = safe_cuts(messages)
    head_end = next((p for p in range(KEEP_HEAD, len(messages)) if safe[p]), None)
    latest_tail = len(messages) - (keep - KEEP_HEAD - 1)
    tail_start = next((p for p in range(latest_tail, -1, -1) if safe[p]), None)
    if head_end is None or tail_start is None or tail_start - head_end < 2:
        return list(messages), []
    removed = messages[head_end:tail_start]
    count = sum(snipped_count(m) for m in removed)
    marker = user_text(marker_text(count, transcript_path), timestamp=now, snipped_count=count)
    freed = sum(message_tokens(m) for m in removed if m.sent) - message_tokens(marker)
    if freed <= 0:
        return list(messages), []  # a marker bigger than what it replaces would grow the context
    event = Snipped(count, tuple(m.uuid for m in removed), marker.uuid, freed, trigger)
    return [*messages[:head_end], marker, *messages[tail_start:]], [event]


# -- folding old notebook cells ----------------------------------------------------------------------

MIN_FOLDED_CELLS = 2  # one cell's pair is hardly larger than the line that stands for it
FOLD_LINE_CHARS = 100  # a folded cell's first line, cut past this
FOLD_OUTPUT_CHARS = 120  # an output this short is kept on its cell's line; longer ones were cleared
FOLD_NAMES = 12  # names a folded cell defines, listed at most


def folded_line(count: object, source: str, output: str | None) -> str:
    """One folded cell: its number, its first line, what it defines and its output if short."""
    first = next((line.strip() for line in source.splitlines() if line.strip()), "(empty)")
    if len(first) > FOLD_LINE_CHARS:
        first = first[:FOLD_LINE_CHARS] + " …"
    names = defined_names(source)
    line = f"In[{count}]: {first}"
    if names:
        line += f"  (defines {', '.join(names[:FOLD_NAMES])}{' …' if len(names) > FOLD_NAMES else ''})"
    if output is not None:
        line += f"  → {' '.join(output.split()) or '(no output)'}"
    return line


def fold_text(lines: Sequence[str], transcript_path: str) -> str:
    return (
        f"[{len(lines):,} notebook cells ran here, each folded to its first line (outputs longer than a line were "
        "cleared earlier). The session transcript keeps them in full (search_transcript with a cell number reads "
        f"one; {transcript_path}):\n" + "\n".join(lines) + "]"
    )


def _folded_cell(use: Message, result: Message, foldable: Collection[str], cleared: Collection[str]) -> str | None:
    """The line for one notebook cell's call/result pair, if the pair is one and may fold."""
    if use.role != "assistant" or result.role != "user" or len(use.content) != 1 or len(result.content) != 1:
        return None
    block, answer = use.content[0], result.content[0]
    if (block.get("type") != "tool_use" or block.get("name") != "notebook_cell" or block["id"] not in foldable
            or answer.get("type") != "tool_result" or answer.get("tool_use_id") != block["id"]):
        return None
    output = None if block["id"] in cleared else result_text(answer)
    if output is not None and (len(output) > FOLD_OUTPUT_CHARS or not isinstance(answer.get("content"), str)):
        return None  # an output worth keeping, or an image: only a clearing may take it
    tool_input = block.get("input") or {}
    count = use.meta.get("cell") or tool_input.get("execution_count") or "?"
    return folded_line(count, notebook_cell_code(tool_input), output)


def fold_cells(
    messages: Sequence[Message], foldable: Collection[str], cleared: Collection[str], *,
    transcript_path: str, now: float,
) -> tuple[list[Message], list[Snipped]]:
    """Fold each run of old notebook cells into one marker with a line per cell.

    `foldable`: the cells that may fold (old ones: their outputs cleared, or too short to clear);
    `cleared`: those whose output was cleared. A cell still costs its code and the API's wrapper
    on a call and a result, cleared or not; a run of them folds into one message. Only cells the
    model has answered after fold (it saw them whole once), and a run is cut only where snip may
    cut. The caller folds when the prompt cache has expired, so the rewrite costs nothing.
    """
    answered = max((i for i, m in enumerate(messages) if m.role == "assistant" and m.api_id), default=-1)
    safe = safe_cuts(messages)
    runs: list[tuple[int, int, list[str]]] = []
    start, lines = -1, []
    index = 0
    while index <= len(messages):
        line = (_folded_cell(messages[index], messages[index + 1], foldable, cleared)
                if index + 1 < answered else None)
        if line is not None:
            start = index if not lines else start
            lines.append(line)
            index += 2
            continue
        if len(lines) >= MIN_FOLDED_CELLS and safe[start] and safe[index]:
            runs.append((start, index, lines))
        lines = []
        index += 1
    out: list[Message] = list(messages)
    events: list[Snipped] = []
    for start, end, lines in reversed(runs):
        removed = out[start:end]
        marker = user_text(fold_text(lines, transcript_path), timestamp=now, snipped_count=len(removed))
        freed = sum(message_tokens(m) for m in removed) - message_tokens(marker)
        if freed <= 0:
            continue
        out[start:end] = [marker]
        events.append(Snipped(len(removed), tuple(m.uuid for m in removed), marker.uuid, freed, FOLD_TRIGGER))
    return out, events[::-1]
