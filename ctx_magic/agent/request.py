"""From the live context to the API's request body.

Boundaries and meta messages are dropped, consecutive messages of one role are merged into
one turn (notebook cells arrive as synthetic tool calls after the assistant's own reply),
and prompt-cache breakpoints go on the system prompt and on the latest message (SPEC, agent
loop issue), so each call reads the previous call's prefix from the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctx_magic.messages import Block, Message

CACHE_TTLS = ("5m", "1h")


def cache_control(ttl: str) -> dict[str, str]:
    control = {"type": "ephemeral"}
    if ttl == "1h":
        control["ttl"] = "1h"
    return control


def _api_block(block: Block) -> Block:
    """The block as the API takes it: our own bookkeeping keys never leave."""
    return {k: v for k, v in block.items() if not k.startswith("_") and k != "cache_control"}


def to_api_messages(messages: Sequence[Message], *, cache_ttl: str | None = "5m") -> list[dict[str, Any]]:
    """Sendable messages, same-role runs merged, tool results first in each user turn."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if not message.sent:
            continue
        blocks = [_api_block(b) for b in message.content]
        if turns and turns[-1]["role"] == message.role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": message.role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # The API wants a user turn's tool_result blocks before anything else in it.
            results = [b for b in turn["content"] if b.get("type") == "tool_result"]
            others = [b for b in turn["content"] if b.get("type") != "tool_result"]
            turn["content"] = results + others
    if cache_ttl and turns:
        last = turns[-1]["content"][-1]
        turns[-1]["content"][-1] = {**last, "cache_control": cache_control(cache_ttl)}
    return turns


def system_blocks(system_prompt: str, *, cache_ttl: str | None = "5m") -> list[Block]:
    block: Block = {"type": "text", "text": system_prompt}
    if cache_ttl:
        block["cache_control"] = cache_control(cache_ttl)
    return [block]
