"""From the live context to the API's request body.

`RequestFrame` holds what every request of a session carries before its messages: the system
prompt (with the long-term memory section), the tools, the reply cap and the cache TTL.
Boundaries and meta messages are dropped, consecutive messages of one role are merged into
one turn (notebook cells arrive as synthetic tool calls after the assistant's own reply),
and prompt-cache breakpoints go on the system prompt and on the latest message (SPEC, agent
loop issue), so each call reads the previous call's prefix from the cache.
"""

from __future__ import annotations

import dataclasses
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
              tool_choice: Mapping[str, Any] | None = None, max_tokens: int | None = None,
              context_management: Mapping[str, Any] | None = None, betas: Sequence[str] = ()) -> ModelRequest:
        """Every call, main or side, carries the session's thinking settings (a change in them
        would invalidate the cached messages) with the thinking budget on top of its reply cap."""
        window = self.window
        request = build_request(messages, system=self.system_prompt(), tools=self.tools().specs(),
                                max_tokens=(max_tokens or window.reply_cap) + window.thinking_budget,
                                cache_ttl=self.settings.cache_ttl, tool_choice=tool_choice, purpose=purpose)
        return dataclasses.replace(request, thinking=thinking_param(window), context_management=context_management,
                                   betas=tuple(dict.fromkeys([*window.betas, *betas])))


def thinking_param(window: Window) -> dict[str, Any] | None:
    """The `thinking` parameter for the window's thinking type (None: thinking is off)."""
    if window.thinking == "enabled":
        return {"type": "enabled", "budget_tokens": window.thinking_budget}
    if window.thinking == "adaptive":
        return {"type": "adaptive"}
    return None


def cache_control(ttl: str) -> dict[str, str]:
    control = {"type": "ephemeral"}
    if ttl == "1h":
        control["ttl"] = "1h"
    return control


def _api_block(block: Block) -> Block:
    """The block as the API takes it: our own bookkeeping keys never leave."""
    return {k: v for k, v in block.items() if not k.startswith("_") and k != "cache_control"}


def to_api_messages(messages: Sequence[Message], *, cache_ttl: str | None = CACHE_TTL) -> list[dict[str, Any]]:
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


def system_blocks(system_prompt: str, *, cache_ttl: str | None = CACHE_TTL) -> list[Block]:
    block: Block = {"type": "text", "text": system_prompt}
    if cache_ttl:
        block["cache_control"] = cache_control(cache_ttl)
    return [block]


def build_request(messages: Sequence[Message], *, system: str, tools: Sequence[Mapping[str, Any]], max_tokens: int,
                  cache_ttl: str, tool_choice: Mapping[str, Any] | None = None, purpose: str = "main") -> ModelRequest:
    """One Messages-API call: the system prompt and tools every call shares, then the messages."""
    return ModelRequest(
        system=system_blocks(system, cache_ttl=cache_ttl),
        tools=list(tools),
        messages=to_api_messages(messages, cache_ttl=cache_ttl),
        max_tokens=max_tokens,
        tool_choice=tool_choice,
        purpose=purpose,
    )
