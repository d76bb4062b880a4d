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
import operator
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctx_magic.agent.context_tools import CONTEXT_TOOLS
from ctx_magic.agent.files import FileTools, file_tools
from ctx_magic.agent.model import Model, ModelRequest
from ctx_magic.agent.tools import Executor, ToolRegistry
from ctx_magic.context.composition import compose
from ctx_magic.context.state import ContextState
from ctx_magic.context.thresholds import Thresholds
from ctx_magic.context.tokens import count_text
from ctx_magic.events import Cleared, Compacted, Composition, Event, ServerCompacted, ServerEdited, Snipped
from ctx_magic.images import count_images, limit_images
from ctx_magic.messages import Block, Message
from ctx_magic.settings import CACHE_TTL, Settings, Window

CONTEXT_CUTS = (Cleared, Snipped, Compacted, ServerEdited, ServerCompacted)
"""Events that take something out of the live context (the first brings in the context tools)."""


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
        self.context_tools = False
        """Whether requests offer the context tools (compact, snip, search_transcript). Not until
        something was first taken out of the live context: before that they have nothing to act
        on or find, and their definitions in every request cost a session that never nears its
        threshold up to 14 % of its bill (the replay benchmark, at 200,000). Once offered they
        stay, so the cached prefix keeps them."""
        self.frame_changed = False
        """The last main request's system prompt or tools differ from the one before it: the API's
        count then moved by more than the messages, so it says nothing about their estimate."""
        self._sent_signature: str | None = None
        self._turns = TurnCache()

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

    def tools(self, *, cut: bool = False) -> ToolRegistry:
        """The session's tools, the context tools among them but not offered (they cannot be
        called) until the context was first cut, or when `cut` asks for the tools as they are
        from then on."""
        offered = self.context_tools or cut
        context = CONTEXT_TOOLS if offered else tuple(dataclasses.replace(t, offered=False) for t in CONTEXT_TOOLS)
        return ToolRegistry([*self.executor.tools(), *file_tools(self.files), *context])

    def saw(self, event: Event) -> None:
        """An event of the session: the first that cuts the live context brings the context tools
        in. The request is rewritten from the cut anyway (or the cache has expired, for an idle
        clearing), so the tools' definitions cost the cache little then."""
        if isinstance(event, CONTEXT_CUTS):
            self.offer_context_tools()

    def offer_context_tools(self) -> None:
        self.context_tools = True

    def overhead_tokens(self) -> int:
        """What the system prompt and the tools add to every request."""
        return count_text(self.system_prompt()) + count_text(json.dumps(self.tools().specs()))

    def composition(self, messages: Sequence[Message], state: ContextState, *, tokens: int,
                    thresholds: Thresholds) -> Composition:
        """What the next request carries, part by part, scaled to the measured `tokens`."""
        return compose(messages, state, tokens=tokens, thresholds=thresholds,
                       system_tokens=count_text(self.system_prompt()), memory_tokens=count_text(self.memory_section),
                       tools_tokens=count_text(json.dumps(self.tools().specs())))

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
                                cache_ttl=self.settings.cache_ttl, tool_choice=tool_choice, purpose=purpose,
                                cached_tail=self.cached_tail,
                                turns=self._turns if purpose == "main" else None)  # side calls: other threads
        return dataclasses.replace(request, thinking=thinking_param(window), context_management=context_management,
                                   betas=tuple(dict.fromkeys([*window.betas, *betas])))

    def resume_tail(self, cached_tail: str | None) -> None:
        """At resume: the message the cache held last (state.json), so the breakpoints are the same (M4)."""
        self.cached_tail = cached_tail

    def sent(self, messages: Sequence[Message]) -> None:
        """A main call went out with `messages`: the cache now holds the prefix ending with them."""
        self.cached_tail = next((m.uuid for m in reversed(messages) if m.sent), None)
        signature = self.signature()
        self.frame_changed = self._sent_signature is not None and signature != self._sent_signature
        self._sent_signature = signature


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
    if not any(k.startswith("_") or k == "cache_control" for k in block):
        return block
    return {k: v for k, v in block.items() if not k.startswith("_") and k != "cache_control"}


def _api_blocks(message: Message) -> tuple[list[Block], bool]:
    """A message's blocks in the API's shape, worked out once per message, and whether its
    tool_result blocks already come first. The blocks are shared, not copied: messages are
    values and requests are read-only (a breakpoint is put on a copy); copying 30,000 blocks
    each turn cost more than JSON-encoding the request (benchmarks/scale.py)."""
    memo = message.memo
    if "api_blocks" not in memo:
        blocks = tuple(_api_block(b) for b in message.content)
        kinds = [b.get("type") == "tool_result" for b in blocks]
        memo["api_blocks"] = blocks, kinds == sorted(kinds, reverse=True)
    blocks, ordered = memo["api_blocks"]
    return list(blocks), ordered


Turn = dict[str, Any]


def _add_turns(turns: list[Turn], messages: Iterable[Message]) -> list[Turn]:
    """`turns` with `messages` after them: same-role runs merged, tool results first in each
    user turn (the API wants them before anything else in it). Changes only the last turn of
    `turns` (replaced, not edited) and the turns it adds."""
    unordered: set[int] = set()
    for message in messages:
        if not message.sent:
            continue
        blocks, ordered = _api_blocks(message)
        if turns and turns[-1]["role"] == message.role:
            turns[-1] = {"role": message.role, "content": [*turns[-1]["content"], *blocks]}
            ordered = False  # merged: its results may now follow another message's text
        else:
            turns.append({"role": message.role, "content": blocks})
        if message.role == "user" and not ordered:
            unordered.add(len(turns) - 1)
    for index in unordered:
        content = turns[index]["content"]
        turns[index] = {**turns[index], "content": [b for b in content if b.get("type") == "tool_result"]
                        + [b for b in content if b.get("type") != "tool_result"]}
    return turns


def _with_breakpoints(turns: list[Turn], cache_ttl: str | None, tail: Message | None) -> list[Turn]:
    """The turns with cache breakpoints on the last block and on `tail`'s last block; only the
    turns they touch are copied."""
    if not cache_ttl or not turns:
        return turns
    control = cache_control(cache_ttl)
    marked = list(turns)
    targets = [turns[-1]["content"][-1]]
    if tail is not None and tail.sent and tail.content:
        targets.append(_api_blocks(tail)[0][-1])
    for target in targets:
        for index in range(len(marked) - 1, -1, -1):
            content = marked[index]["content"]
            hit = next((i for i in range(len(content) - 1, -1, -1) if content[i] is target), None)
            if hit is not None:
                copied = [*content[:hit], {**target, "cache_control": control}, *content[hit + 1:]]
                marked[index] = {**marked[index], "content": copied}
                break
    return marked


def to_api_messages(messages: Sequence[Message], *, cache_ttl: str | None = CACHE_TTL,
                    cached_tail: str | None = None) -> list[Turn]:
    """Sendable messages, same-role runs merged, tool results first in each user turn, and the
    cache breakpoints: on the last block, and on the last block of `cached_tail` (the message
    the previous request ended with) when it is still there.

    The API looks for an earlier cache entry only about 20 blocks back from a breakpoint; a
    user who ran many cells between two turns adds more than that, and the whole cached
    conversation would be written again. A breakpoint where the previous request ended finds
    its entry wherever it is (two breakpoints here, one on the system prompt: 3 of the API's 4).
    """
    messages, _omitted = limit_images(messages)  # the API takes at most 100 images a request
    tail = next((m for m in messages if m.uuid == cached_tail), None) if cached_tail else None
    return _with_breakpoints(_add_turns([], messages), cache_ttl, tail)


class TurnCache:
    """The last request's turns and image count, reused when the next request starts with the
    same messages: a turn adds a few messages at the end, and rebuilding 10,000 messages' turns
    (or counting their images) each call cost more than the rest of the pipeline together
    (benchmarks/scale.py)."""

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._turns: list[Turn] = []
        self._counted: list[Message] = []
        self._images = 0
        self._lock = threading.Lock()

    def image_count(self, messages: Sequence[Message]) -> int:
        """`count_images(messages)`, counting only what follows the last request's messages."""
        with self._lock:
            known = len(self._counted)
            reuse = 0 < known <= len(messages) and all(map(operator.is_, messages, self._counted))
            total = (self._images if reuse else 0) + count_images(messages[known:] if reuse else messages)
            self._counted, self._images = list(messages), total
            return total

    def turns(self, messages: Sequence[Message]) -> list[Turn]:
        with self._lock:
            known = len(self._messages)
            # The same objects up to `known` (compared in C: this runs over every message each call).
            reuse = 0 < known <= len(messages) and all(map(operator.is_, messages, self._messages))
            turns = _add_turns(list(self._turns) if reuse else [], messages[known:] if reuse else messages)
            self._messages, self._turns = list(messages), turns
            return list(turns)


def system_blocks(system_prompt: str, *, cache_ttl: str | None = CACHE_TTL) -> list[Block]:
    block: Block = {"type": "text", "text": system_prompt}
    if cache_ttl:
        block["cache_control"] = cache_control(cache_ttl)
    return [block]


def build_request(messages: Sequence[Message], *, system: str, tools: Sequence[Mapping[str, Any]], max_tokens: int,
                  cache_ttl: str, tool_choice: Mapping[str, Any] | None = None, purpose: str = "main",
                  cached_tail: str | None = None, turns: TurnCache | None = None) -> ModelRequest:
    """One Messages-API call: the system prompt and tools every call shares, then the messages
    (at most 100 images of them: the oldest become a line saying so)."""
    messages, _omitted = limit_images(messages, total=turns.image_count(messages) if turns is not None else None)
    tail = next((m for m in reversed(messages) if m.uuid == cached_tail), None) if cached_tail else None
    built = turns.turns(messages) if turns is not None else _add_turns([], messages)
    return ModelRequest(
        system=system_blocks(system, cache_ttl=cache_ttl),
        tools=list(tools),
        messages=_with_breakpoints(built, cache_ttl, tail),
        max_tokens=max_tokens,
        tool_choice=tool_choice,
        purpose=purpose,
    )
