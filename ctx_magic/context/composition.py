"""What the next request carries, part by part (the context panel; Claude Code's `/context` shows the same).

The parts in use (system prompt, tools, memory and pins, messages, live tool results, persisted
previews) are counted locally and scaled so that together they equal the measured context size
(the anchored count: the API's usage plus an estimate), because only the total is known exactly. The rest of the
window is split the way the thresholds split it: free space up to the compaction threshold,
the compaction buffer between the threshold and the effective window, and the reply reserve.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctx_magic.context.state import ContextState
from ctx_magic.context.thresholds import Thresholds
from ctx_magic.context.tokens import block_tokens
from ctx_magic.figures import USED_PARTS, Composition
from ctx_magic.messages import Message


def _message_parts(message: Message) -> tuple[int, dict[str, int]]:
    """(tokens outside tool results, tokens of each tool result by tool_use_id), memoized on the
    (immutable) message: a status after one more exchange counts only the new messages."""
    cached = message.memo.get("composition")
    if cached is None:
        results: dict[str, int] = {}
        other = 0
        for block in message.content:
            if block.get("type") == "tool_result":
                results[block["tool_use_id"]] = block_tokens(block)
            else:
                other += block_tokens(block)
        cached = message.memo["composition"] = (other, results)
    return cached


def compose(messages: Sequence[Message], state: ContextState, *, tokens: int, thresholds: Thresholds,
            system_tokens: int, memory_tokens: int, tools_tokens: int) -> Composition:
    """The composition of the live context measured at `tokens` (pure).

    `system_tokens` is the whole system prompt, `memory_tokens` the memory section inside it.
    """
    counted = {name: 0 for name in USED_PARTS}
    counted["system"] = max(0, system_tokens - memory_tokens)
    counted["memory"] = memory_tokens
    counted["tools"] = tools_tokens
    for message in messages:
        if not message.sent:
            continue
        other, results = _message_parts(message)
        counted["memory" if message.kind == "attachment" else "messages"] += other
        for tool_use_id, size in results.items():
            if tool_use_id in state.cleared:
                counted["messages"] += size  # a one-line stub: part of what was said, not a result
            elif tool_use_id in state.persisted:
                counted["persisted"] += size
            else:
                counted["tool_results"] += size
    scaled = _scaled(counted, tokens)
    th = thresholds
    free = max(0, th.autocompact - tokens)
    buffer = max(0, th.effective - max(tokens, th.autocompact))
    reserve = max(0, th.window - max(tokens, th.effective))
    return Composition(**scaled, free=free, buffer=buffer, reserve=reserve, window=th.window)


def _scaled(counted: dict[str, int], total: int) -> dict[str, int]:
    """The local counts scaled to sum to `total` exactly (largest remainders get the rounding)."""
    estimate = sum(counted.values())
    if estimate <= 0 or total <= 0:
        return {name: 0 for name in counted} if total <= 0 else {**{n: 0 for n in counted}, "messages": total}
    exact = {name: value * total / estimate for name, value in counted.items()}
    scaled = {name: int(value) for name, value in exact.items()}
    short = total - sum(scaled.values())
    for name in sorted(exact, key=lambda n: exact[n] - scaled[n], reverse=True)[:short]:
        scaled[name] += 1
    return scaled
