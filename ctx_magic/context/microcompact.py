"""Microcompact: 0 API calls.

Results of compactable tools older than the `keep_recent` most recent are replaced by a
short stub. Whether to clear (after an idle gap, or under pressure) is decided in decide.py;
this module finds what can be cleared and clears it. Results of tools whose output cannot be
reproduced are never cleared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ctx_magic.context.tokens import block_tokens
from ctx_magic.events import Cleared
from ctx_magic.messages import Message

CLEARED_TEXT = "[Old tool result content cleared]"
# Outputs that can be produced again by re-running or re-reading: safe to clear.
COMPACTABLE_TOOLS = frozenset(
    {"python", "notebook_cell", "notebook", "read_file", "list_files", "grep", "bash", "shell"}
)


def cleared_text(persisted_path: str | None = None) -> str:
    if persisted_path:
        return f"{CLEARED_TEXT} (the full output is saved at {persisted_path})"
    return CLEARED_TEXT


def last_assistant_time(messages: Sequence[Message]) -> float | None:
    for message in reversed(messages):
        if message.role == "assistant" and message.sent and message.api_id:
            return message.timestamp
    return None


def idle_gap(messages: Sequence[Message], now: float) -> float | None:
    """Seconds since the model last answered, or None before its first answer."""
    last = last_assistant_time(messages)
    return None if last is None else now - last


def clear_results(
    messages: Sequence[Message],
    positions: Mapping[str, int],
    tool_use_ids: Sequence[str],
    *,
    trigger: str,
    persisted_paths: Mapping[str, str],
    freed: Mapping[str, int] | None = None,
) -> tuple[list[Message], Cleared | None]:
    """Replace the named results by the cleared stub; `positions` maps id -> message index.

    `freed` gives the tokens each clearing frees when the caller already sized them.
    """
    out = list(messages)
    replacements: dict[str, str] = {}
    total = 0
    by_message: dict[int, set[str]] = {}
    for tool_use_id in tool_use_ids:
        if tool_use_id in positions:
            by_message.setdefault(positions[tool_use_id], set()).add(tool_use_id)
    for index, ids in sorted(by_message.items()):
        blocks = []
        for block in out[index].content:
            tool_use_id = block.get("tool_use_id")
            if block.get("type") == "tool_result" and tool_use_id in ids:
                text = cleared_text(persisted_paths.get(tool_use_id))
                if freed is not None and tool_use_id in freed:
                    total += freed[tool_use_id]
                else:
                    total += block_tokens(block) - block_tokens({**block, "content": text})
                replacements[tool_use_id] = text
                # Images in the result go too: they are the largest thing to free.
                block = {**block, "content": text}
            blocks.append(block)
        out[index] = out[index].with_content(blocks)
    if not replacements:
        return out, None
    return out, Cleared(trigger, replacements, total)


def clearable(compactable: Sequence[str], keep_recent: int) -> list[str]:
    """The compactable results older than the `keep_recent` most recent (at least one kept)."""
    keep = max(1, keep_recent)
    return list(compactable[:-keep]) if len(compactable) > keep else []
