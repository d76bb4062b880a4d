"""The live context and the engine's work on it: prepare before each call (L1, L2, the decision,
its clearing), clear and snip on demand, swap after a compaction, and adopt what the engine
returns, writing its durable changes first.

`LiveContext` is the only writer of the session's `Conversation` and of the last `Plan`; it reads
the rest of its session through the small `Host` protocol below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from ctx_magic.context.conversation import Conversation
from ctx_magic.context.costs import Prices as CachePrices
from ctx_magic.context.decide import Plan, SessionFacts, decide
from ctx_magic.context.engine import ContextSettings, Prepared, clear_now, measure, prepare, snip_now
from ctx_magic.context.microcompact import idle_gap
from ctx_magic.context.state import ContextState
from ctx_magic.context.thinking import clear_foreign_thinking
from ctx_magic.context.tokens import ContextCount, Correction
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import Cleared, ContextMeasured, Event, Persisted, Snipped, ThinkingCleared
from ctx_magic.figures import ContextFigures
from ctx_magic.messages import Message

if TYPE_CHECKING:
    from ctx_magic.agent.files import FileTools
    from ctx_magic.agent.model import Model, ModelRequest
    from ctx_magic.agent.plugins import Plugins
    from ctx_magic.agent.request import RequestFrame
    from ctx_magic.agent.server_side import ServerSide
    from ctx_magic.agent.side_calls import SideCalls
    from ctx_magic.agent.usage import UsageMeter
    from ctx_magic.context.compaction_state import CompactionState
    from ctx_magic.prices import Prices
    from ctx_magic.settings import Settings
    from ctx_magic.store.recorder import Recorder

FREED_KINDS = {Cleared: "cleared", Persisted: "persisted", Snipped: "snipped", ThinkingCleared: "thinking"}
"""What a zero-call change took out of the context, by the name the priced savings use."""


class Host(Protocol):
    """What the live context reads and calls of its session (agent/session.py's Session)."""

    clock: Callable[[], float]
    recorder: Recorder
    frame: RequestFrame
    files: FileTools
    meter: UsageMeter
    compaction: CompactionState
    server: ServerSide
    side_calls: SideCalls
    plugins: Plugins

    @property
    def settings(self) -> Settings: ...
    @property
    def model(self) -> Model: ...
    def prices(self) -> Prices: ...
    def context_settings(self) -> ContextSettings: ...
    def request(self) -> ModelRequest: ...
    def emit(self, event: Event) -> None: ...


class LiveContext:
    """The conversation the next request carries, and the engine's changes to it."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.conversation = Conversation()
        self.plan = Plan()
        """The last decision made before a call (context/decide.py), with its reason."""

    @property
    def messages(self) -> tuple[Message, ...]:
        return self.conversation.messages

    @property
    def state(self) -> ContextState:
        return self.conversation.state

    # -- before each call --------------------------------------------------------------------------

    def prepare(self) -> Prepared:
        """L1 -> L2 -> the decision -> its clearing, adopted (files and transcript written)."""
        prepared = self._prepared()
        self.adopt(prepared.messages, prepared.state, prepared.events)
        return prepared

    def prepare_in_memory(self) -> list[Message | Event]:
        """The same without touching disk (the idle timer's thread): the writes to make later,
        from the kernel's main thread, with `write_changes`."""
        prepared = self._prepared()
        return self.adopt(prepared.messages, prepared.state, prepared.events, write=False)

    def write_changes(self, changes: Sequence[Message | Event]) -> None:
        """Writes a change made off the main thread deferred (see `prepare_in_memory`)."""
        self.host.recorder.changes(changes)

    def replan(self, prepared: Prepared, exact_tokens: int) -> Plan:
        """The decision again, once the API counted the context itself (T3)."""
        self.plan = decide(prepared.situation.with_exact_count(exact_tokens))
        return self.plan

    def _prepared(self) -> Prepared:
        host = self.host
        server = host.server.plan()
        auto = not host.side_calls.busy and not (server is not None and server.server_compacts)
        settings = host.context_settings()
        prepared = prepare(self.messages, self.state, host.clock(), settings,
                           overhead_tokens=host.frame.overhead_tokens(), facts=self._facts(auto),
                           may_clear=not (server is not None and server.server_clears))
        self.plan = prepared.plan
        events = [ContextMeasured(self._with_composition(e.figures, prepared, settings))
                  if isinstance(e, ContextMeasured) else e for e in prepared.events]
        return dataclasses.replace(prepared, events=events)

    def _facts(self, auto_compaction: bool) -> SessionFacts:
        """What the decision needs to know about the session beyond its messages (decide.py)."""
        host = self.host
        notes = host.plugins.notes
        boundaries = host.compaction.boundaries
        last = boundaries[-1] if boundaries else None
        return SessionFacts(
            auto_compaction=auto_compaction, breaker_open=host.compaction.breaker_open,
            notes_tokens=notes.tokens() if notes is not None else 0, calls=host.meter.totals.main_calls,
            growth=host.meter.growth(), summary_tokens=last.summary_tokens if last is not None else 0,
            after_compaction=last.tokens_after if last is not None else 0,
            prices=CachePrices.of_model(host.prices(), host.settings.cache_ttl))

    def _with_composition(self, figures: ContextFigures, prepared: Prepared,
                          settings: ContextSettings) -> ContextFigures:
        """The figures with what the next request carries, part by part (the panel's bar)."""
        return dataclasses.replace(figures, composition=self.host.frame.composition(
            prepared.messages, prepared.state, tokens=figures.tokens, thresholds=settings.thresholds))

    # -- changes on demand -------------------------------------------------------------------------

    def clear_results(self, tool_use_ids: Sequence[str], trigger: str) -> tuple[list[str], list[str]]:
        """Clear named results now (the model's snip tool); (cleared, unknown or protected)."""
        messages, state, events, unknown = clear_now(self.messages, self.state, tool_use_ids, trigger,
                                                     self.host.context_settings().compactable_tools)
        self.adopt(messages, state, events)
        return [i for e in events for i in e.replacements], unknown

    def snip(self, keep_last: int) -> int:
        """Snip the middle now, keeping about `keep_last` recent messages; how many were snipped."""
        messages, state, events = snip_now(self.messages, self.state, self.host.clock(),
                                           self.host.context_settings(), keep_last)
        self.adopt(messages, state, events)
        return sum(e.count for e in events)

    def adopt(self, messages: Sequence[Message], state: ContextState, events: Sequence[Event], *,
              write: bool = True) -> list[Message | Event]:
        """Take what the engine returned: new snip markers and durable events go to the
        transcript first (or are returned, unwritten)."""
        live = {m.uuid for m in self.messages}
        changes: list[Message | Event] = [m for m in messages if m.meta.get("snipped_count") and m.uuid not in live]
        changes += [e for e in events if e.durable]
        if write:
            self.host.recorder.changes(changes)
        self.conversation = self.conversation.adopted(messages, state)
        meter = self.host.meter
        if any(isinstance(e, (Cleared, Snipped, ThinkingCleared)) for e in events):
            meter.expect_break()
        for event in events:
            kind = FREED_KINDS.get(type(event))
            if kind is not None:
                meter.freed(kind, getattr(event, "tokens_freed", 0))
            self.host.emit(event)
        return changes

    def replace(self, messages: Sequence[Message], state: ContextState | None = None) -> None:
        """A compaction or a 413 shrink swapped the live context: the index starts over (C10)."""
        self.conversation = self.conversation.replaced(messages, state)
        self.host.files.invalidate_stubs()
        self.host.meter.expect_break()

    def append(self, message: Message) -> None:
        self.conversation = self.conversation.appended(message)

    def correct(self, correction: Correction) -> None:
        """The estimate's new correction ratio (T2)."""
        self.conversation = self.conversation.learned(correction)

    def learn_ratio(self, prompt_tokens: int, count: ContextCount) -> None:
        """Correct the estimate (T2) by what the API billed for the request `count` estimated."""
        # What the estimate stood for, as the API billed it: the prompt less the anchored part (and
        # less what a clearing removed from that part, only while the same response anchors the count).
        actual_new = prompt_tokens - (count.anchor_tokens - count.freed_tokens)
        self.correct(self.state.correction.observe(count.estimated_tokens, actual_new))

    def keep_thinking_of(self, model: str, provider: str) -> ThinkingCleared | None:
        """After a switch of model or provider, the thinking blocks other models wrote leave the
        live context (their signatures are bound to the model that made them)."""
        messages, event = clear_foreign_thinking(
            self.messages, lambda m: (m.meta.get("model"), m.meta.get("provider", "anthropic")) == (model, provider))
        if event is not None:
            self.adopt(messages, self.state, [event])
        return event

    def restore(self, conversation: Conversation) -> None:
        """The conversation read back from the transcript at resume (M4)."""
        self.conversation = conversation

    # -- counting ----------------------------------------------------------------------------------

    def tokens(self) -> int:
        return measure(self.messages, self.state, self.host.frame.overhead_tokens()).tokens

    def exact_tokens(self) -> int | None:
        """The API's own count of the next request (T3), or None when the endpoint fails."""
        try:
            return self.host.model.count_tokens(self.host.request())
        except CtxMagicError:
            return None

    def cache_warm(self) -> bool:
        """Whether the main call's prompt prefix is still in the cache (the last answer is younger
        than the cache TTL)."""
        gap = idle_gap(self.messages, self.host.clock())
        return gap is not None and gap <= self.host.settings.cache_ttl_seconds

    def is_live_result(self, tool_use_id: str) -> bool:
        return self.conversation.is_live_result(tool_use_id)
