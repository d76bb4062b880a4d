"""Snip: 0 API calls.

Past `snip_max_messages` live messages, keep the first three (the original request and its
setting) and the most recent ones, and put one marker in place of the middle naming how many
messages went and where the transcript keeps them. A cut never separates a tool_use from its
tool_result.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctx_magic.context.thinking import has_thinking, is_prompt
from ctx_magic.context.tokens import message_tokens
from ctx_magic.events import Snipped
from ctx_magic.messages import Message, user_text

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
