"""The Messages-API invariants (the API's rules), checked on what is actually sent.

Consecutive messages of the same role reach the API as one turn (the loop merges them), so
the rules are checked per turn: the first turn is the user's (or the API's compaction block);
every tool_use is answered in the next turn; every tool_result answers a tool_use of the turn
before it; nothing is empty.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctx_magic.errors import InvariantError
from ctx_magic.messages import Message, says_something, tool_result_block, usable_content


def _turns(messages: Sequence[Message], start: int) -> list[list[int]]:
    """Indices of sendable messages from `start`, grouped into same-role runs."""
    turns: list[list[int]] = []
    for i in range(start, len(messages)):
        message = messages[i]
        if not message.sent:
            continue
        if turns and messages[turns[-1][0]].role == message.role:
            turns[-1].append(i)
        else:
            turns.append([i])
    return turns


def _turn_start(messages: Sequence[Message], index: int) -> int:
    """Index of the first message of the turn *before* the one holding `index`."""
    i = min(index, len(messages) - 1)
    role_changes = 0
    last_role = None
    while i > 0:
        message = messages[i]
        if message.sent:
            if last_role is not None and message.role != last_role:
                role_changes += 1
                if role_changes == 2:
                    return i + 1
            last_role = message.role
        i -= 1
    return 0


def check_message_content(message: Message, index: int) -> None:
    if not message.content:
        raise InvariantError(index, "its content is empty")
    for block in message.content:
        kind = block.get("type")
        if kind == "text" and not str(block.get("text", "")).strip():
            raise InvariantError(index, "it has an empty text block")
        if kind == "tool_use" and message.role != "assistant":
            raise InvariantError(index, "a tool_use block in a user message")
        if kind == "tool_result" and message.role != "user":
            raise InvariantError(index, "a tool_result block in an assistant message")


def opens_with_compaction(message: Message) -> bool:
    """An assistant message holding the API's compaction block: it goes first in `messages`, in
    place of what it summarizes (the one assistant message that may open a conversation)."""
    return message.role == "assistant" and bool(message.content) and message.content[0].get("type") == "compaction"


def check_invariants(messages: Sequence[Message], start: int = 0, *, pending_ok: bool = False) -> None:
    """Raise InvariantError naming the first offending index; check from `start` on.

    `start` lets a caller that already checked a prefix verify only what is new (the turn
    before `start` is re-read, since its tool_use blocks may be answered by the new part).
    `pending_ok` accepts a last assistant turn whose tools are still running.
    """
    begin = _turn_start(messages, start) if start > 0 else 0
    turns = _turns(messages, begin)
    if not turns:
        return
    first = messages[turns[0][0]]
    if begin == 0 and first.role != "user" and not opens_with_compaction(first):
        raise InvariantError(turns[0][0], "the first message sent must be the user's")
    previous_uses: set[str] = set()
    previous_role: str | None = None
    for turn_number, turn in enumerate(turns):
        role = messages[turn[0]].role
        uses: set[str] = set()
        answered: set[str] = set()
        for index in turn:
            message = messages[index]
            if index >= start:
                check_message_content(message, index)
            for tool_use_id in message.tool_use_ids:
                if tool_use_id in uses:
                    raise InvariantError(index, f"tool_use id {tool_use_id} appears twice")
                uses.add(tool_use_id)
            for tool_use_id in message.tool_result_ids:
                if tool_use_id in answered:
                    raise InvariantError(index, f"two results for tool_use {tool_use_id}")
                if previous_role != "assistant" or tool_use_id not in previous_uses:
                    if turn_number > 0 or begin == 0:
                        raise InvariantError(
                            index, f"tool_result {tool_use_id} does not follow its tool_use"
                        )
                answered.add(tool_use_id)
        if previous_role == "assistant" and previous_uses - answered and role == "user":
            missing = sorted(previous_uses - answered)[0]
            raise InvariantError(turn[0], f"tool_use {missing} has no result in this message")
        if previous_role == "assistant" and previous_uses and role != "user":
            raise InvariantError(turn[0], "tool_use results must come in the next message")
        previous_uses, previous_role = (uses, role) if role == "assistant" else (set(), role)
    if previous_role == "assistant" and previous_uses and not pending_ok:
        last = turns[-1][-1]
        raise InvariantError(last, f"tool_use {sorted(previous_uses)[0]} is left without a result")



INTERRUPTED_RESULT = "[interrupted: this tool did not finish (the kernel was interrupted or restarted)]"


def dangling_tool_uses(messages: Sequence[Message]) -> list[str]:
    """tool_use ids of the last sent turn when it is the assistant's and has no results yet."""
    pending: list[str] = []
    for message in reversed(messages):
        if not message.sent:
            continue
        if message.role == "user":
            break
        pending[:0] = message.tool_use_ids
    return pending


def close_dangling_tool_uses(messages: Sequence[Message], now: float) -> Message | None:
    """An error-result message answering unanswered tool_use blocks at the end, if any."""
    pending = dangling_tool_uses(messages)
    if not pending:
        return None
    blocks = tuple(tool_result_block(i, INTERRUPTED_RESULT, is_error=True) for i in pending)
    return Message("user", blocks, timestamp=now)


def without_empty(messages: Sequence[Message]) -> tuple[list[Message], int]:
    """The messages with those no request may carry repaired: an answer of nothing (empty, or
    only whitespace or thinking, as an earlier version stored a faulty reply) left out, and
    whitespace-only text blocks dropped from the rest. Returns how many were left out. Only
    broken messages change: every other one keeps its bytes (and the prompt cache its prefix)."""
    out: list[Message] = []
    dropped = 0
    for message in messages:
        broken = not message.content or any(
            b.get("type") == "text" and not str(b.get("text", "")).strip() for b in message.content)
        if not message.sent or not broken:
            out.append(message)
            continue
        content = usable_content(message.content)
        if not content or (message.role == "assistant" and not says_something(content)):
            dropped += 1
            continue
        out.append(message.with_content(content))
    return out, dropped
