"""From the live context to the API's request body.

`RequestFrame` holds what every request of a session carries before its messages: the system
prompt (with the long-term memory section), the tools, the reply cap and the cache TTL.
Boundaries and meta messages are dropped, consecutive messages of one role are merged into
one turn (notebook cells arrive as synthetic tool calls after the assistant's own reply),
and prompt-cache breakpoints go on the system prompt and on the latest message (SPEC, agent
loop issue), so each call reads the previous call's prefix from the cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctx_magic.agent.context_tools import CONTEXT_TOOLS
from ctx_magic.agent.files import FileTools, file_tools
from ctx_magic.agent.model import Model, ModelRequest
from ctx_magic.agent.tools import Executor, ToolRegistry
from ctx_magic.context.tokens import count_text
from ctx_magic.messages import Block, Message
from ctx_magic.settings import CACHE_TTL, Settings, Window


class RequestFrame:
    """The fixed part of a session's requests, and the model and settings they go out with."""

    def __init__(self, model: Model, executor: Executor, files: FileTools, settings: Settings,
                 system_prompt: str) -> None:
        self.model = model
        self.settings = settings
        self.files = files
        self.executor = executor
        self._base_prompt = system_prompt
        self.memory_section = ""
        """Long-term memories for the system prompt, set at the session's first turn (X3)."""
        self._window: Window | None = None
        self.cached_tail: str | None = None
        """The last message the previous main call sent: the cache holds the prefix ending there."""

    def reconfigure(self, settings: Settings, model: Model | None = None) -> None:
        """New settings (and model) for the next turns; the window is resolved again."""
        self.settings = settings
        self.model = model or self.model
        self._window = None

    def set_memory_section(self, text: str) -> None:
        self.memory_section = text

    @property
    def window(self) -> Window:
        """The window and reply cap in force, resolved once from the settings and the model."""
        if self._window is None:
            self._window = self.settings.resolve(self.model.limits())
        return self._window

    def system_prompt(self) -> str:
        return self._base_prompt + (f"\n\n{self.memory_section}" if self.memory_section else "")

    def tools(self) -> ToolRegistry:
        return ToolRegistry([*self.executor.tools(), *file_tools(self.files), *CONTEXT_TOOLS])

    def overhead_tokens(self) -> int:
        """What the system prompt and the tools add to every request."""
        return count_text(self.system_prompt()) + count_text(json.dumps(self.tools().specs()))

    def signature(self) -> str:
        """Changes when the system prompt or the tools change (a cache break's explanation)."""
        return hashlib.sha256((self.system_prompt() + json.dumps(self.tools().specs())).encode()).hexdigest()

    def build(self, messages: Sequence[Message], *, purpose: str = "main",
              tool_choice: Mapping[str, Any] | None = None, max_tokens: int | None = None) -> ModelRequest:
        return build_request(messages, system=self.system_prompt(), tools=self.tools().specs(),
                             max_tokens=max_tokens or self.window.reply_cap, cache_ttl=self.settings.cache_ttl,
                             tool_choice=tool_choice, purpose=purpose, cached_tail=self.cached_tail)

    def sent(self, messages: Sequence[Message]) -> None:
        """A main call went out with `messages`: the cache now holds the prefix ending with them."""
        self.cached_tail = next((m.uuid for m in reversed(messages) if m.sent), None)


def cache_control(ttl: str) -> dict[str, str]:
    control = {"type": "ephemeral"}
    if ttl == "1h":
        control["ttl"] = "1h"
    return control


def _api_block(block: Block) -> Block:
    """The block as the API takes it: our own bookkeeping keys never leave."""
    return {k: v for k, v in block.items() if not k.startswith("_") and k != "cache_control"}


def to_api_messages(messages: Sequence[Message], *, cache_ttl: str | None = CACHE_TTL,
                    cached_tail: str | None = None) -> list[dict[str, Any]]:
    """Sendable messages, same-role runs merged, tool results first in each user turn, and the
    cache breakpoints: on the last block, and on the last block of `cached_tail` (the message
    the previous request ended with) when it is still there.

    The API looks for an earlier cache entry only about 20 blocks back from a breakpoint; a
    user who ran many cells between two turns adds more than that, and the whole cached
    conversation would be written again. A breakpoint where the previous request ended finds
    its entry wherever it is (two breakpoints here, one on the system prompt: 3 of the API's 4).
    """
    turns: list[dict[str, Any]] = []
    tail_block: dict[str, Any] | None = None
    for message in messages:
        if not message.sent:
            continue
        blocks = [_api_block(b) for b in message.content]
        if message.uuid == cached_tail and blocks:
            tail_block = blocks[-1]
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
        marked = [turns[-1]["content"][-1]] + ([tail_block] if tail_block is not None else [])
        for turn in turns:
            turn["content"] = [{**b, "cache_control": cache_control(cache_ttl)} if any(b is m for m in marked) else b
                               for b in turn["content"]]
    return turns


def system_blocks(system_prompt: str, *, cache_ttl: str | None = CACHE_TTL) -> list[Block]:
    block: Block = {"type": "text", "text": system_prompt}
    if cache_ttl:
        block["cache_control"] = cache_control(cache_ttl)
    return [block]


def build_request(messages: Sequence[Message], *, system: str, tools: Sequence[Mapping[str, Any]], max_tokens: int,
                  cache_ttl: str, tool_choice: Mapping[str, Any] | None = None, purpose: str = "main",
                  cached_tail: str | None = None) -> ModelRequest:
    """One Messages-API call: the system prompt and tools every call shares, then the messages."""
    return ModelRequest(
        system=system_blocks(system, cache_ttl=cache_ttl),
        tools=list(tools),
        messages=to_api_messages(messages, cache_ttl=cache_ttl, cached_tail=cached_tail),
        max_tokens=max_tokens,
        tool_choice=tool_choice,
        purpose=purpose,
    )
