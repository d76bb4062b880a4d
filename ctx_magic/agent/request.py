"""From the live context to the API's request body.

`RequestFrame` holds what every request of a session carries before its messages: the model
and the settings in force, the system prompt (with the long-term memory section), the tools,
and where the previous main call's cached prefix ended. Once per model call it works out a
`CallSetup`: the window, the tools and their specs serialized once, what they add to every
request in tokens, the engine's settings and, under the 'server' strategy, the API's edits.

Boundaries and meta messages are dropped, consecutive messages of one role are merged into
one turn (notebook cells arrive as synthetic tool calls after the assistant's own reply),
and prompt-cache breakpoints go on the system prompt and on the latest message, so each call
reads the previous call's prefix from the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.agent.context_tools import CONTEXT_TOOLS
from ctx_magic.agent.files import FileTools, file_tools
from ctx_magic.agent.model import Model, ModelRequest
from ctx_magic.agent.tools import Executor, ToolRegistry
from ctx_magic.context.api_count import request_tokens
from ctx_magic.context.composition import compose
from ctx_magic.context.decide import context_tools_from_start
from ctx_magic.context.engine import ContextSettings
from ctx_magic.context.server import ServerPlan, server_plan
from ctx_magic.context.state import ContextState
from ctx_magic.context.thinking import is_thinking, keep_valid_thinking
from ctx_magic.context.tokens import count_text, message_tokens
from ctx_magic.events import Cleared, Compacted, Event, ServerCompacted, ServerEdited, Snipped
from ctx_magic.figures import Composition
from ctx_magic.images import count_images, limit_images
from ctx_magic.messages import Block, Message
from ctx_magic.settings import CACHE_TTL, Settings, Window
from ctx_magic.store.session import SessionDir


@dataclass(frozen=True)
class CallSetup:
    """What one model call's requests carry besides their messages, worked out once per call."""

    settings: Settings
    window: Window
    tools: ToolRegistry
    specs: tuple[dict[str, Any], ...]
    """What the model is offered, in the API's shape."""
    system_prompt: str
    system_tokens: int
    memory_tokens: int
    """The long-term memory section's share of `system_tokens`."""
    tools_tokens: int
    overhead_tokens: int
    """What the system prompt, the tools and the request's own frame (with the API's hidden
    tool-use prompt) add to every request, counted as the API counts them."""
    signature: str
    """Changes when the system prompt or the tools change (a cache break's explanation)."""
    context: ContextSettings
    """The engine's settings for this window and these tools."""
    server: ServerPlan | None
    """What the API takes over under the 'server' strategy (None under 'client')."""
    server_thinking: bool = False
    """Whether `server` was planned for a conversation with thinking in it."""
    context_edits: tuple[str, ...] = ()
    """The context edits the model takes (the Models API's, or the table's)."""
    context_tools: bool = False
    """Whether the context tools are offered (from the context's first cut on)."""

    def tool_names_after_cut(self) -> list[str]:
        """The tools offered from a cut of the context on: these, with the context tools."""
        names = self.tools.names()
        return [*names, *(t.name for t in CONTEXT_TOOLS if t.name not in names)]

    def composition(self, messages: Sequence[Message], state: ContextState, tokens: int) -> Composition:
        """What the next request carries, part by part, scaled to the measured `tokens`."""
        return compose(messages, state, tokens=tokens, thresholds=self.context.thresholds,
                       system_tokens=self.system_tokens, memory_tokens=self.memory_tokens,
                       tools_tokens=self.tools_tokens)

    def server_plan(self, messages: Sequence[Message]) -> ServerPlan | None:
        """The API's edits for a request of `messages`: the call's plan, planned again only when
        the thinking blocks it was planned for are gone (or came) since."""
        if self.server is None or uses_thinking(self.window, messages) == self.server_thinking:
            return self.server
        return _server_plan(self.window, self.context, self.tools, self.context_edits, not self.server_thinking)

    @property
    def server_compacts(self) -> bool:
        """The API compacts what is sent to it: ctx_magic neither auto-compacts nor refuses a
        request as blocked."""
        return self.server is not None and self.server.server_compacts

    @property
    def server_clears(self) -> bool:
        return self.server is not None and self.server.server_clears


def uses_thinking(window: Window, messages: Sequence[Message]) -> bool:
    """Whether a request carries thinking: the setting, or thinking blocks earlier models wrote."""
    return window.thinking != "off" or any(is_thinking(b) for m in messages for b in m.content)


def _server_plan(window: Window, context: ContextSettings, tools: ToolRegistry, supported: Sequence[str],
                 thinking: bool) -> ServerPlan:
    th = context.thresholds
    return server_plan(warning=th.warning, autocompact=th.autocompact, keep_recent=context.keep_recent,
                       clear_at_least=context.clear_threshold, thinking=thinking, supported=supported,
                       tools=tools.names(), clearable_tools=tools.clearable())


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
        """Long-term memories for the system prompt, set at the session's first turn."""
        self._window: Window | None = None
        self.cached_tail: str | None = None
        """The last message the previous main call sent: the cache holds the prefix ending there."""
        self.context_tools = False
        """Whether requests offer the context tools (compact, snip, search_transcript). Not until
        something was first taken out of the live context: before that they have nothing to act
        on or find, and their definitions in every request cost a session that never nears its
        threshold up to 5 % of its bill (the replay benchmark, at 200,000). Once offered they
        stay, so the cached prefix keeps them."""
        self.sent_signature: str | None = None
        """The system prompt and tools of the last main call (`CallSetup.signature`); kept across
        a resume, so the first call after it knows whether they changed since."""
        self.bound: tuple[str, tuple[dict[str, Any], ...]] | None = None
        """In an append-only conversation, the system prompt and tool specs its first main call went
        out with: every later request sends them unchanged (a thinking block is checked against
        them), until a compaction of ctx_magic's replaces everything before it."""
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

    def setup(self, messages: Sequence[Message], store: SessionDir, *,
              context_tools: bool | None = None) -> CallSetup:
        """This call's setup for a conversation of `messages` kept in `store`: the tools gathered
        and their specs serialized once, the engine's settings, the server's plan. `context_tools`
        asks for the setup with (or without) the context tools, whether or not they are offered yet;
        append-only, with them is the frame a compaction starts (not the one the conversation is bound to)."""
        settings, window = self.settings, self.window
        offered = self.context_tools if context_tools is None else context_tools
        # Append-only, tools join only where a prefix starts: the first request, or a compaction (the
        # frame asked for with the context tools is the one after it).
        bound = self.bound if window.append_only and context_tools is not True else None
        if window.append_only and context_tools is None:
            offered = self._offered_in_bound() if bound is not None else offered or self._tools_from_start(messages)
        tools = self._tools(offered=offered)
        specs, system = tools.specs(), self.system_prompt()
        if bound is not None:
            system, specs = bound[0], list(bound[1])
        specs_json = json.dumps(specs)
        context = ContextSettings.create(
            window.tokens, window.reply_cap, settings, thinking_budget=window.thinking_budget,
            append_only=window.append_only,
            compactable_tools=tools.clearable(), tool_results_dir=str(store.tool_results_dir),
            transcript_path=str(store.transcript_path))
        server, thinking, edits = None, False, ()
        if settings.strategy == "server":
            thinking, edits = uses_thinking(window, messages), self.model.limits().context_edits
            server = _server_plan(window, context, tools, edits, thinking)
        overhead = request_tokens({"model": settings.model, "system": system, "tools": specs, "messages": []})
        return CallSetup(settings, window, tools, tuple(specs), system, count_text(system),
                         count_text(self.memory_section), count_text(specs_json), overhead,
                         hashlib.sha256((system + specs_json).encode()).hexdigest(), context, server, thinking,
                         tuple(edits), offered)

    def _tools(self, *, offered: bool) -> ToolRegistry:
        """The session's tools, the context tools among them but not offered (they cannot be
        called) until `offered`: from the context's first cut on."""
        context = CONTEXT_TOOLS if offered else tuple(dataclasses.replace(t, offered=False) for t in CONTEXT_TOOLS)
        return ToolRegistry([*self.executor.tools(), *file_tools(self.files), *context])

    def saw(self, event: Event) -> None:
        """An event of the session: the first that cuts the live context brings the context tools
        in. The request is rewritten from the cut anyway (or the cache has expired, for an idle
        clearing), so the tools' definitions cost the cache little then."""
        if isinstance(event, CONTEXT_CUTS):
            self.offer_context_tools()
        if isinstance(event, Compacted):  # everything before it was replaced: a new prefix may start
            self.bound = None

    def offer_context_tools(self) -> None:
        self.context_tools = True

    def _tools_from_start(self, messages: Sequence[Message]) -> bool:
        """Whether a conversation starting with `messages` offers the context tools from its first request."""
        window = self.window
        thresholds = ContextSettings.create(window.tokens, window.reply_cap, self.settings,
                                            thinking_budget=window.thinking_budget).thresholds
        return context_tools_from_start(sum(message_tokens(m) for m in messages if m.sent), thresholds)

    def _offered_in_bound(self) -> bool:
        """Whether the tools the conversation is bound to hold the context tools."""
        names = {spec.get("name") for spec in self.bound[1]} if self.bound is not None else set()
        return all(t.name in names for t in CONTEXT_TOOLS)

    def build(self, messages: Sequence[Message], setup: CallSetup, *, purpose: str = "main",
              max_tokens: int | None = None, server: ServerPlan | None = None) -> ModelRequest:
        """Every call, main or side, carries the session's thinking settings (a change in them
        would invalidate the cached messages) with the thinking budget on top of its reply cap."""
        window = setup.window
        request = build_request(messages, system=setup.system_prompt, tools=setup.specs,
                                max_tokens=(max_tokens or window.reply_cap) + window.thinking_budget,
                                cache_ttl=setup.settings.cache_ttl, cached_tail=self.cached_tail,
                                turns=self._turns if purpose == "main" else None,  # side calls: other threads
                                append_only=window.append_only)
        return dataclasses.replace(
            request, purpose=purpose, thinking=thinking_param(window),
            context_management=server.context_management if server is not None else None,
            betas=tuple(dict.fromkeys([*window.betas, *(server.betas if server is not None else ())])))

    def sent(self, messages: Sequence[Message], setup: CallSetup) -> bool:
        """A main call went out with `messages` and `setup`'s system prompt and tools: the cache
        now holds the prefix ending with them (and, append-only, they are the conversation's from
        now on). Whether the system prompt or the tools changed since the previous main call."""
        self.cached_tail = next((m.uuid for m in reversed(messages) if m.sent), None)
        changed = self.sent_signature is not None and setup.signature != self.sent_signature
        self.sent_signature = setup.signature
        if setup.window.append_only and self.bound is None:
            self.bound = setup.system_prompt, setup.specs
        return changed


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


ApiTurn = dict[str, Any]
"""One message in the API's shape: a role and its blocks, same-role runs merged."""


def _add_turns(turns: list[ApiTurn], messages: Iterable[Message]) -> list[ApiTurn]:
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


def _with_breakpoints(turns: list[ApiTurn], cache_ttl: str | None, tail: Message | None) -> list[ApiTurn]:
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


class TurnCache:
    """The last request's turns and image count, reused when the next request starts with the
    same messages: a turn adds a few messages at the end, and rebuilding 10,000 messages' turns
    (or counting their images) each call cost more than the rest of the pipeline together
    (benchmarks/scale.py)."""

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._turns: list[ApiTurn] = []
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

    def turns(self, messages: Sequence[Message]) -> list[ApiTurn]:
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
                  cache_ttl: str, cached_tail: str | None = None, turns: TurnCache | None = None,
                  append_only: bool = False) -> ModelRequest:
    """One Messages-API call: the system prompt and tools every call shares, then the messages
    (at most 100 images of them: the oldest become a line saying so), same-role runs merged,
    tool results first in each user turn, and the cache breakpoints: on the last block, and on
    the last block of `cached_tail` (the message the previous request ended with) when it is
    still there.

    The API looks for an earlier cache entry only about 20 blocks back from a breakpoint; a
    user who ran many cells between two turns adds more than that, and the whole cached
    conversation would be written again. A breakpoint where the previous request ended finds
    its entry wherever it is (two breakpoints here, one on the system prompt: 3 of the API's 4).
    An image left out changes what came before the thinking after it: `append_only`, that goes too.
    """
    limited, omitted = limit_images(messages, total=turns.image_count(messages) if turns is not None else None)
    messages = keep_valid_thinking(messages, limited)[0] if omitted and append_only else limited
    tail = next((m for m in reversed(messages) if m.uuid == cached_tail), None) if cached_tail else None
    built = turns.turns(messages) if turns is not None else _add_turns([], messages)
    return ModelRequest(
        system=system_blocks(system, cache_ttl=cache_ttl),
        tools=list(tools),
        messages=_with_breakpoints(built, cache_ttl, tail),
        max_tokens=max_tokens,
    )
