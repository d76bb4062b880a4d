"""From the live context to the API's request body.

`RequestFrame` holds what every request of a session carries before its messages: the model
and the settings in force, the system prompt (with the long-term memory section), the tools,
and where the previous main call's cached prefix ended. Once per model call it works out a
`CallSetup`: the window, the tools and their specs serialized once, what they add to every
request in tokens, the engine's settings and, under the 'server' strategy, the API's edits.
The request's body itself is built in request_body.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.agent.catalog import compacts_on_demand
from ctx_magic.agent.context_tools import CONTEXT_TOOLS
from ctx_magic.agent.files import FileTools, file_tools
from ctx_magic.agent.model import Model, ModelRequest
from ctx_magic.agent.request_body import TurnCache, build_request, thinking_param
from ctx_magic.agent.summaries_back import SummaryBlocks, with_summaries
from ctx_magic.agent.tools import Executor, ToolRegistry
from ctx_magic.context.api_count import request_tokens
from ctx_magic.context.composition import compose
from ctx_magic.context.decide import context_tools_from_start
from ctx_magic.context.engine import ContextSettings
from ctx_magic.context.invariants import opens_with_compaction
from ctx_magic.context.server import ServerPlan, server_plan
from ctx_magic.context.state import ContextState
from ctx_magic.context.thinking import is_thinking
from ctx_magic.context.thresholds import ENV_AUTOCOMPACT_PCT
from ctx_magic.context.tokens import count_text, message_tokens
from ctx_magic.events import Cleared, Compacted, Event, ServerCompacted, ServerEdited, Snipped
from ctx_magic.figures import Composition
from ctx_magic.messages import Message
from ctx_magic.prices import Prices, model_prices
from ctx_magic.settings import ModelLimits, Settings, Window
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
        """Whether requests offer the context tools (compact, snip, search_transcript): once something
        left the live context (before, they cost a session that never nears its threshold up to 5 %
        of its bill: the replay, at 200,000), and from then on, so the cached prefix keeps them."""
        self.sent_signature: str | None = None
        """The system prompt and tools of the last main call (`CallSetup.signature`); kept across
        a resume, so the first call after it knows whether they changed since."""
        self.bound: tuple[str, tuple[dict[str, Any], ...]] | None = None
        """Append-only, the system prompt and tools of the first main call: every later request sends
        them (thinking is checked against them) until a compaction of ctx_magic's replaces all before."""
        self.summaries = SummaryBlocks()
        self._advice = ""  # a word on the settings in force, said at the next main call
        self._turns = TurnCache()
        self._setups: dict[bool, tuple[tuple[Any, ...], CallSetup]] = {}
        """The last setup worked out with and without the context tools, with what it stood on."""

    def reconfigure(self, settings: Settings, model: Model | None = None) -> None:
        """New settings (and model) for the next turns; the window is resolved again when they changed."""
        if settings != self.settings or (model is not None and model is not self.model):
            self._window = None
        self.settings = settings
        self.model = model or self.model

    def prices(self) -> Prices:
        """The prices in force: the model's list prices, with any contract prices set."""
        return model_prices(self.settings.model, self.settings.prices)

    def set_memory_section(self, text: str) -> None:
        self.memory_section = text

    @property
    def window(self) -> Window:
        """The window and reply cap in force, resolved once from the settings and the model."""
        if self._window is None:
            limits = self.model.limits()
            self._window = self.settings.resolve(limits)
            self._advice = budget_advice(self._window, limits, self.model.name)
        return self._window

    def take_advice(self) -> str:
        """What the settings in force deserve a word on (once per change of them), else ''."""
        advice, self._advice = self._advice, ""
        return advice

    def system_prompt(self) -> str:
        return self._base_prompt + (f"\n\n{self.memory_section}" if self.memory_section else "")

    def setup(self, messages: Sequence[Message], store: SessionDir, *,
              context_tools: bool | None = None) -> CallSetup:
        """The setup of a call for a conversation of `messages` kept in `store`: worked out once,
        and again only when what it stands on changes (the settings or the model, the memory
        section, the context tools coming in, the executor's tools, the prefix an append-only
        conversation is bound to, the threshold's environment override, and under the 'server'
        strategy whether thinking is in it).
        `context_tools` asks for the setup with (or without) the context tools, whether or not they
        are offered yet; append-only, with them is the frame a compaction starts (not the one the
        conversation is bound to)."""
        append_only = self.window.append_only
        offered = self.context_tools if context_tools is None else context_tools
        # Append-only, tools join only where a prefix starts: the first request, or a compaction (the
        # frame asked for with the context tools is the one after it).
        bound = self.bound if append_only and context_tools is not True else None
        if append_only and context_tools is None:
            offered = self._offered_in_bound() if bound is not None else offered or self._tools_from_start(messages)
        thinking = self.settings.strategy == "server" and uses_thinking(self.window, messages)
        key = (self.model, store, self.settings, self.window, self.memory_section, offered, bound, thinking,
               os.environ.get(ENV_AUTOCOMPACT_PCT), tuple(self.executor.tools()))
        known = self._setups.get(offered)
        if known is not None and all(map(operator.is_, known[0][:2], key[:2])) and known[0][2:] == key[2:]:
            return known[1]
        setup = self._work_out(messages, store, offered, bound)
        self._setups[offered] = key, setup
        return setup

    def _work_out(self, messages: Sequence[Message], store: SessionDir, offered: bool,
                  bound: tuple[str, tuple[dict[str, Any], ...]] | None) -> CallSetup:
        """A call's setup worked out: the tools gathered and their specs serialized, what they add
        to every request counted, the engine's settings, the server's plan; `bound`: the system
        prompt and tools an append-only conversation keeps."""
        settings, window = self.settings, self.window
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

    def rebind(self, prefix: tuple[str, tuple[dict[str, Any], ...]] | None) -> None:
        """Append-only: the conversation is bound again to `prefix` (an undone compaction's), or
        to what the next main call sends (None)."""
        self.bound = prefix

    def offer_context_tools(self) -> None:
        self.context_tools = True

    def saved(self) -> dict[str, Any]:
        """What state.json keeps of the frame: the memory section, the cache's tail and signature,
        and the prefix an append-only conversation is bound to."""
        return {"system_extra": self.memory_section, "cached_tail": self.cached_tail,
                "sent_signature": self.sent_signature, "summary_blocks_refused": not self.summaries.taken,
                "bound_frame": {"system": self.bound[0], "tools": list(self.bound[1])} if self.bound else None}

    def restore(self, saved: Mapping[str, Any], *, cut: bool) -> None:
        """The frame as state.json kept it: the same system prompt, breakpoints and bound prefix as
        before (a change of tools since is seen as one), and the context tools once the context was `cut`."""
        self.set_memory_section(str(saved.get("system_extra") or ""))
        self.cached_tail, self.sent_signature = saved.get("cached_tail"), saved.get("sent_signature")
        self.summaries = SummaryBlocks(taken=saved.get("summary_blocks_refused") is not True)
        bound = saved.get("bound_frame")
        if isinstance(bound, dict) and isinstance(bound.get("system"), str) and isinstance(bound.get("tools"), list):
            self.bound = bound["system"], tuple(bound["tools"])  # what the thinking so far was written after
        if cut:
            self.offer_context_tools()

    def _tools_from_start(self, messages: Sequence[Message]) -> bool:
        """Whether a conversation starting with `messages` offers the context tools from its first request."""
        window = self.window
        thresholds = ContextSettings.create(window.tokens, window.reply_cap, self.settings,
                                            thinking_budget=window.thinking_budget).thresholds
        return context_tools_from_start((message_tokens(m) for m in messages if m.sent), thresholds)

    def _offered_in_bound(self) -> bool:
        """Whether the tools the conversation is bound to hold the context tools."""
        names = {spec.get("name") for spec in self.bound[1]} if self.bound is not None else set()
        return all(t.name in names for t in CONTEXT_TOOLS)

    def build(self, messages: Sequence[Message], setup: CallSetup, *, purpose: str = "main",
              max_tokens: int | None = None, server: ServerPlan | None = None,
              prompt_once: bool = False) -> ModelRequest:
        """Every call, main or side, carries the session's thinking settings (a change in them
        would invalidate the cached messages) with the thinking budget on top of its reply cap.
        `prompt_once`: the last message is a side call's prompt, never cached (build_request)."""
        window = setup.window
        request = build_request(messages, system=setup.system_prompt, tools=setup.specs,
                                max_tokens=(max_tokens or window.reply_cap) + window.thinking_budget,
                                cache_ttl=setup.settings.cache_ttl, cached_tail=self.cached_tail,
                                turns=self._turns if purpose == "main" else None,  # side calls: other threads
                                prompt_once=prompt_once)
        takes = self.summaries.taken and compacts_on_demand(self.model.name, self.model.provider)
        request, betas = with_summaries(request, [*window.betas, *(server.betas if server is not None else ())],
                                        carries=any(opens_with_compaction(m) for m in messages if m.sent), takes=takes)
        return dataclasses.replace(request, purpose=purpose, thinking=thinking_param(window), betas=betas,
                                   context_management=server.context_management if server is not None else None)

    def sent(self, messages: Sequence[Message], setup: CallSetup) -> bool:
        """A main call went out with `messages` and `setup`'s system prompt and tools: the cache
        now holds the prefix ending with them (and, append-only, they are the conversation's from
        now on). Whether the system prompt or the tools changed since the previous main call."""
        self.cached_tail = next((m.uuid for m in reversed(messages) if m.sent), None)
        changed = self.sent_signature is not None and setup.signature != self.sent_signature
        self.sent_signature = setup.signature
        if setup.window.append_only and self.bound is None:
            self.bound = setup.system_prompt, setup.specs
            for offered, (key, known) in list(self._setups.items()):
                if known is setup:  # bound to what it sends already: still the setup to use
                    self._setups[offered] = (*key[:6], self.bound, *key[7:]), setup
        return changed


def budget_advice(window: Window, limits: ModelLimits, model: str) -> str:
    """The line a thinking budget deserves where the model takes it only as deprecated, else ''."""
    if window.thinking != "enabled" or not limits.budget_deprecated:
        return ""
    return f"A thinking budget (CtxMagic.thinking = 'enabled') is deprecated on {model}: Anthropic recommends " \
           "'adaptive' for it."
