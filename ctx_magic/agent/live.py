"""The live context and the engine's work on it: prepare before each call (budget, snip, the decision,
its clearing), clear and snip on demand, swap after a compaction, and adopt what the engine
returns, writing its durable changes first.

`LiveContext` is the only writer of the messages the next request carries, of the engine's
state that goes with them and of the last `Plan`. It is given what its work touches: the
recorder that writes the changes, the meter that counts what they freed, the file tools whose
read stubs a swap invalidates, and where its events go.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ctx_magic.agent.files import FileTools
from ctx_magic.agent.request import CallSetup
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.decide import Plan, SessionFacts, decide
from ctx_magic.context.engine import Prepared, clear_now, prepare, snip_now
from ctx_magic.context.index import measure
from ctx_magic.context.microcompact import idle_gap
from ctx_magic.context.state import ContextState, result_counts
from ctx_magic.context.thinking import clear_foreign_thinking, drop_thinking_from
from ctx_magic.context.tokens import ContextCount, Correction
from ctx_magic.events import Cleared, ContextMeasured, Event, Persisted, Snipped, ThinkingCleared
from ctx_magic.messages import Message
from ctx_magic.store.recorder import Recorder

FREED_KINDS = {Cleared: "cleared", Persisted: "persisted", Snipped: "snipped", ThinkingCleared: "thinking"}
"""What a zero-call change took out of the context, by the name the priced savings use."""


class LiveContext:
    """The conversation the next request carries, and the engine's changes to it."""

    def __init__(self, recorder: Recorder, meter: UsageMeter, files: FileTools,
                 emit: Callable[[Event], None]) -> None:
        self._recorder = recorder
        self._meter = meter
        self._files = files
        self._emit = emit
        self.messages: tuple[Message, ...] = ()
        self.state = ContextState()
        """The engine's frozen decisions, its index and the learned correction, for `messages`."""
        self.plan = Plan()
        """The last decision made before a call (context/decide.py), with its reason."""
        self.previous: tuple[Message, ...] = ()
        """The messages before the last change the engine made (what an undo of a snip or clearing restores)."""

    # -- before each call --------------------------------------------------------------------------

    def prepare(self, setup: CallSetup, now: float, facts: SessionFacts, *,
                write: bool = True) -> tuple[Prepared, list[Message | Event]]:
        """Budget -> snip -> the decision -> its clearing, adopted; with the writes it made (or, with
        `write=False`, left to make later from the kernel's main thread: the idle timer's)."""
        prepared = prepare(self.messages, self.state, now, setup.context, overhead_tokens=setup.overhead_tokens,
                           facts=facts, may_clear=not setup.server_clears)
        self.plan = prepared.plan
        events = [ContextMeasured(dataclasses.replace(e.figures, composition=setup.composition(
            prepared.messages, prepared.state, e.figures.tokens))) if isinstance(e, ContextMeasured) else e
            for e in prepared.events]
        prepared = dataclasses.replace(prepared, events=events)
        return prepared, self.adopt(prepared.messages, prepared.state, prepared.events, write=write)

    def write_changes(self, changes: Sequence[Message | Event]) -> None:
        """Writes a change made off the main thread deferred (see `prepare`)."""
        self._recorder.changes(changes)

    def replan(self, prepared: Prepared, exact_tokens: int) -> Plan:
        """The decision again, once the API counted the context itself."""
        self.plan = decide(prepared.situation.with_exact_count(exact_tokens))
        return self.plan

    # -- changes on demand -------------------------------------------------------------------------

    def clear_results(self, tool_use_ids: Sequence[str], trigger: str, setup: CallSetup
                      ) -> tuple[list[str], list[str]]:
        """Clear named results now (the model's snip tool); (cleared, unknown or protected).

        The call's setup says which tools' results may go and whether the conversation is
        append-only: there a clearing also drops the thinking after the first result it changes
        (its prefix is not what it was), so no caller can clear under kept thinking by leaving a
        flag at its default."""
        messages, state, events, unknown = clear_now(self.messages, self.state, tool_use_ids, trigger,
                                                     setup.context.compactable_tools,
                                                     append_only=setup.context.append_only)
        self.adopt(messages, state, events)
        return [i for e in events if isinstance(e, Cleared) for i in e.replacements], unknown

    def drop_thinking(self, trigger: str, start: int = 0) -> ThinkingCleared | None:
        """Every thinking block from `start` on leaves the live context (by default all: a compaction
        gave everything a new prefix)."""
        messages, event = drop_thinking_from(self.messages, start, trigger)
        if event is not None:
            self.adopt(messages, self.state, [event])
        return event

    def snip(self, keep_last: int, now: float, setup: CallSetup) -> int:
        """Snip the middle now, keeping about `keep_last` recent messages; how many were snipped."""
        messages, state, events = snip_now(self.messages, self.state, now, setup.context, keep_last)
        self.adopt(messages, state, events)
        return sum(e.count for e in events if isinstance(e, Snipped))

    def adopt(self, messages: Sequence[Message], state: ContextState, events: Sequence[Event], *,
              write: bool = True) -> list[Message | Event]:
        """Take what the engine returned: new snip markers and durable events go to the
        transcript first (or are returned, unwritten)."""
        live = {m.uuid for m in self.messages}
        changes: list[Message | Event] = [m for m in messages if m.meta.get("snipped_count") and m.uuid not in live]
        changes += [e for e in events if e.durable]
        if write:
            self._recorder.changes(changes)
        self.previous = self.messages
        self.messages, self.state = tuple(messages), state
        if any(isinstance(e, (Cleared, Snipped, ThinkingCleared)) for e in events):
            self._meter.expect_break()
        for event in events:
            kind = FREED_KINDS.get(type(event))
            if kind is not None:
                self._meter.freed(kind, getattr(event, "tokens_freed", 0))
            self._emit(event)
        return changes

    def replace(self, messages: Sequence[Message], state: ContextState | None = None) -> None:
        """A compaction or a 413 shrink swapped the live context: the index starts over, the read
        stubs and the cache baseline with it."""
        base = state or self.state
        self.messages, self.state = tuple(messages), dataclasses.replace(
            base, indexed=0, indexed_uuid=None, compactable=(), positions={}, freed_anchor=None, freed_tokens=0)
        self._files.invalidate_stubs()
        self._meter.expect_break()

    def append(self, message: Message) -> None:
        self.messages = (*self.messages, message)

    def learn_ratio(self, prompt_tokens: int, count: ContextCount) -> None:
        """Correct the estimate by what the API billed for the request `count` estimated."""
        # What the estimate stood for, as the API billed it: the prompt less the anchored part (and
        # less what a clearing removed from that part, only while the same response anchors the count).
        actual_new = prompt_tokens - (count.anchor_tokens - count.freed_tokens)
        self.correct(self.state.correction.observe(count.estimated_tokens, actual_new))

    def correct(self, correction: Correction) -> None:
        """The estimate's new correction ratio."""
        self.state = dataclasses.replace(self.state, correction=correction)

    def keep_thinking_of(self, model: str, provider: str, *, append_only: bool = False) -> ThinkingCleared | None:
        """After a switch of model or provider, the thinking blocks other models wrote leave the
        live context (their signatures are bound to the model that made them); append-only, the
        thinking after the first of them goes too (its prefix held them)."""
        messages, event = clear_foreign_thinking(
            self.messages, lambda m: (m.meta.get("model"), m.meta.get("provider", "anthropic")) == (model, provider))
        if event is not None and append_only:
            first = min(i for i, m in enumerate(self.messages) if m.uuid in event.message_uuids)
            messages, event = drop_thinking_from(self.messages, first, "model-switch")
        if event is not None:
            self.adopt(messages, self.state, [event])
        return event

    def restore(self, messages: Sequence[Message], state: ContextState) -> None:
        """The conversation read back from the transcript at resume."""
        self.messages, self.state = tuple(messages), state

    # -- reading -----------------------------------------------------------------------------------

    def tokens(self, overhead_tokens: int) -> int:
        return measure(self.messages, self.state, overhead_tokens).tokens

    def cache_warm(self, now: float, ttl_seconds: float) -> bool:
        """Whether the main call's prompt prefix is still in the cache (the last answer is younger
        than the cache TTL)."""
        gap = idle_gap(self.messages, now)
        return gap is not None and gap <= ttl_seconds

    def is_live_result(self, tool_use_id: str) -> bool:
        return tool_use_id in self.state.positions and tool_use_id not in self.state.cleared

    def result_counts(self) -> tuple[int, int, int]:
        """(live, cleared, persisted) tool results, from the index or, before one, the messages."""
        ids = None if self.state.indexed else [i for m in self.messages for i in m.tool_result_ids]
        return result_counts(self.state, ids)
