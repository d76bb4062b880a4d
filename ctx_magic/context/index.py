"""The engine's bookkeeping: the index of what was already checked (so a pass after one new
message costs in proportion to the new messages), and the tokens the layers freed since the last
usage (so the anchored count stays true between calls).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.microcompact import COMPACTABLE_TOOLS
from ctx_magic.context.state import ContextState, apply_decisions
from ctx_magic.context.tokens import ContextCount, count_context, estimate_family, find_anchor, message_tokens
from ctx_magic.messages import Message


def sync_index(
    messages: Sequence[Message], state: ContextState, *, pending_ok: bool = False,
    compactable_tools: frozenset[str] = COMPACTABLE_TOOLS,
) -> tuple[list[Message], ContextState, int]:
    """Check and index what is new since the last call; re-apply frozen decisions to it.

    Returns the messages, the state and the index where the new part starts. Raises
    InvariantError (the API's rules) naming the first offending index.
    """
    start = state.indexed
    if not (0 < start <= len(messages) and messages[start - 1].uuid == state.indexed_uuid):
        start = 0
    check_invariants(messages, start, pending_ok=pending_ok)
    out = list(messages)
    names = dict(state.tool_names)
    positions = dict(state.positions) if start else {}
    compactable = list(state.compactable) if start else []
    sent = state.sent_messages if start else 0
    for index in range(start, len(out)):
        message = out[index] = apply_decisions(out[index], state)
        sent += message.sent
        for block in message.blocks("tool_use"):
            names[block["id"]] = block["name"]
        for tool_use_id in message.tool_result_ids:
            positions[tool_use_id] = index
            if names.get(tool_use_id) in compactable_tools and tool_use_id not in state.cleared:
                compactable.append(tool_use_id)
    new_state = dataclasses.replace(
        state,
        tool_names=names,
        positions=positions,
        compactable=tuple(compactable),
        indexed=len(out),
        indexed_uuid=out[-1].uuid if out else None,
        sent_messages=sent,
    )
    return out, new_state, start


def freed_before_anchor(
    old: Sequence[Message], new: Sequence[Message], indices: Iterable[int], anchor: int
) -> int:
    """What a layer took from the messages the last usage covers: those before the anchor, and the
    last response itself (its thinking, dropped after an idle gap, was billed as its output)."""
    anchor_id = new[anchor].api_id if anchor >= 0 else None
    family = estimate_family(old)
    return sum(message_tokens(old[i], family) - message_tokens(new[i], family) for i in set(indices)
               if i < anchor or (anchor_id is not None and old[i].api_id == anchor_id))


def with_freed(state: ContextState, messages: Sequence[Message], freed: int) -> ContextState:
    anchor = find_anchor(messages)
    anchor_id = messages[anchor].api_id if anchor >= 0 else None
    base = state.freed_tokens if state.freed_anchor == anchor_id else 0
    return dataclasses.replace(state, freed_anchor=anchor_id, freed_tokens=base + freed)


def freed_tokens(state: ContextState, messages: Sequence[Message]) -> int:
    anchor = find_anchor(messages)
    anchor_id = messages[anchor].api_id if anchor >= 0 else None
    return state.freed_tokens if anchor_id is not None and state.freed_anchor == anchor_id else 0


def measure(messages: Sequence[Message], state: ContextState, overhead_tokens: int = 0) -> ContextCount:
    """The live context's size (the anchored count) with the engine's frozen corrections applied."""
    return count_context(
        messages,
        overhead_tokens=overhead_tokens,
        freed_since_anchor=freed_tokens(state, messages),
        correction=state.correction,
    )
