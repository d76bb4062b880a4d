"""One agent session: the live conversation, its record on disk, and what the loop learns as
it runs.

The session is the only writer of its fields; the turn loop (loop.py), compaction
(compaction.py) and the notebook act through its methods. Each part has one job: `Recorder`
writes the transcript and state.json, `Conversation` is the live context, `CompactionState`
holds the boundaries and the breaker, `UsageMeter` the spend and the cache watch, `SideCalls`
the calls made beside the conversation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctx_magic.agent.files import FileTools
from ctx_magic.agent.model import Model, ModelReply, ModelRequest
from ctx_magic.agent.pin_board import PinBoard
from ctx_magic.agent.plugins import Hooks, Plugins
from ctx_magic.agent.request import RequestFrame
from ctx_magic.agent.restore import load_saved
from ctx_magic.agent.server_side import ServerSide
from ctx_magic.agent.side_calls import SideCalls
from ctx_magic.agent.status import StatusSnapshot
from ctx_magic.agent.tools import Executor
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.compaction_state import CompactionState
from ctx_magic.context.conversation import Conversation
from ctx_magic.context.costs import Prices as CachePrices
from ctx_magic.context.decide import Plan, SessionFacts, decide
from ctx_magic.context.engine import ContextSettings, Prepared, clear_now, figures, measure, prepare, snip_now
from ctx_magic.context.invariants import close_dangling_tool_uses
from ctx_magic.context.microcompact import idle_gap
from ctx_magic.context.pins import Pin
from ctx_magic.context.server import cleared_tokens
from ctx_magic.context.state import ContextState
from ctx_magic.context.thinking import clear_foreign_thinking, side_call_view
from ctx_magic.context.tokens import ContextCount
from ctx_magic.errors import CtxMagicError, Remedy
from ctx_magic.events import (
    Cleared,
    Compacted,
    Event,
    Notice,
    Persisted,
    Snipped,
    ThinkingCleared,
    UsageUpdated,
    notify,
)
from ctx_magic.messages import Message
from ctx_magic.prices import Prices, model_prices
from ctx_magic.settings import Settings, Window
from ctx_magic.store.recorder import Recorder
from ctx_magic.store.session import SessionDir, new_session_id

DEFAULT_SYSTEM_PROMPT = """You are an assistant that works with the user's data through the tools you are given.
Keep replies short and concrete; show results rather than describing them.
Long outputs may be saved to disk and replaced by a preview; read the rest with read_file. Old tool
results may be cleared and older conversation summarized: the full transcript is always kept on disk."""


class Session:
    """The live conversation of one agent and the store behind it."""

    def __init__(self, model: Model, executor: Executor, store: SessionDir, settings: Settings | None = None, *,
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT, root: Path | None = None,
                 clock: Callable[[], float] = time.time, hooks: Hooks | None = None,
                 backend: str = "anthropic", sleep: Callable[[float], None] = time.sleep) -> None:
        self.clock = clock
        self.sleep = sleep
        """What waits before a call is asked again (injected: tests never wait on the wall clock)."""
        self.hooks = hooks or Hooks()
        self.backend = backend
        """Which server answers: 'anthropic' or 'offline' (shown in the status)."""
        self.listeners: list[Callable[[Event], None]] = []
        self.recorder = Recorder(store, live=lambda: self.conversation.messages, notice=self.notice)
        self.files = FileTools((root or Path.cwd()).resolve(), extra_roots=(store.root,))
        self.frame = RequestFrame(model, executor, self.files, settings or Settings(), system_prompt)
        self.conversation = Conversation()
        self.compaction = CompactionState()
        self.meter = UsageMeter(prices=self.prices)
        self.side_calls = SideCalls(self)
        self.plugins = Plugins()
        self.plan = Plan()
        """The last decision made before a call (context/decide.py), with its reason."""
        self.pin_board = PinBoard(store, self.append, clock, lambda: self.settings.pin_budget_tokens)
        """What the user pinned: re-injected after every summary, kept across resume."""
        self.server = ServerSide(self)
        """What the API does to the requests under the 'server' strategy."""

    # -- identity, settings, what every request carries ------------------------------------------

    @property
    def store(self) -> SessionDir:
        return self.recorder.store

    @property
    def session_id(self) -> str:
        return self.store.session_id

    @property
    def messages(self) -> tuple[Message, ...]:
        return self.conversation.messages

    @property
    def state(self) -> ContextState:
        return self.conversation.state

    @property
    def model(self) -> Model:
        return self.frame.model

    @property
    def executor(self) -> Executor:
        return self.frame.executor

    @property
    def settings(self) -> Settings:
        return self.frame.settings

    @property
    def window(self) -> Window:
        return self.frame.window

    def prices(self) -> Prices:
        """The prices in force: the model's list prices, with any contract prices set."""
        return model_prices(self.settings.model, self.settings.prices)

    def context_settings(self) -> ContextSettings:
        return ContextSettings.create(
            self.window.tokens, self.window.reply_cap, self.settings, thinking_budget=self.window.thinking_budget,
            compactable_tools=self.frame.tools().clearable(),
            tool_results_dir=str(self.store.tool_results_dir), transcript_path=str(self.store.transcript_path))

    @property
    def pins(self) -> tuple[Pin, ...]:
        return self.pin_board.pins

    def cache_warm(self) -> bool:
        """Whether the main call's prompt prefix is still in the cache (the last answer is younger
        than the cache TTL)."""
        gap = idle_gap(self.messages, self.clock())
        return gap is not None and gap <= self.settings.cache_ttl_seconds

    def request(self, messages: Sequence[Message] | None = None, *, purpose: str = "main",
                tool_choice: dict[str, Any] | None = None, max_tokens: int | None = None) -> ModelRequest:
        """A main call (the live context, with the server's edits under the 'server' strategy), or
        a side call's (its messages seen as context/thinking.side_call_view says)."""
        if purpose != "main":
            view = side_call_view(self.messages if messages is None else messages, cache_warm=self.cache_warm())
            return self.frame.build(view, purpose=purpose, tool_choice=tool_choice, max_tokens=max_tokens)
        plan = self.server.plan()
        return self.frame.build(self.messages if messages is None else messages, purpose=purpose,
                                tool_choice=tool_choice, max_tokens=max_tokens,
                                context_management=plan.context_management if plan else None,
                                betas=plan.betas if plan else ())

    # -- events and the store ----------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        notify(self.listeners, event)

    def notice(self, text: str, level: str = "info", remedy: Remedy = Remedy.NONE) -> None:
        self.emit(Notice(level, text, remedy.value))

    def append(self, message: Message) -> None:
        """Add a message to the transcript (before any layer can change it, M2) and the live
        context. On a full disk it stays live and waits to be written; the StorageError ends the turn."""
        try:
            self.recorder.message(message)
        finally:
            self.conversation = self.conversation.appended(message)

    def record(self, event: Event) -> None:
        self.recorder.event(event)
        self.emit(event)

    # -- the engine --------------------------------------------------------------------------------

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

    def _prepared(self) -> Prepared:
        plan = self.server.plan()
        auto = not self.side_calls.busy and not (plan is not None and plan.server_compacts)
        prepared = prepare(self.messages, self.state, self.clock(), self.context_settings(),
                           overhead_tokens=self.frame.overhead_tokens(), facts=self._facts(auto),
                           may_clear=not (plan is not None and plan.server_clears))
        self.plan = prepared.plan
        return prepared

    def _facts(self, auto_compaction: bool) -> SessionFacts:
        """What the decision needs to know about the session beyond its messages (decide.py)."""
        notes = self.plugins.notes
        last = self.compaction.boundaries[-1] if self.compaction.boundaries else None
        return SessionFacts(
            auto_compaction=auto_compaction, breaker_open=self.compaction.breaker_open,
            notes_tokens=notes.tokens() if notes is not None else 0, calls=self.meter.totals.main_calls,
            growth=self.meter.growth(), summary_tokens=last.summary_tokens if last is not None else 0,
            after_compaction=last.tokens_after if last is not None else 0,
            prices=CachePrices.of_model(self.prices(), self.settings.cache_ttl))

    def replan(self, prepared: Prepared, exact_tokens: int) -> Plan:
        """The decision again, once the API counted the context itself (T3)."""
        self.plan = decide(prepared.situation.with_exact_count(exact_tokens))
        return self.plan

    def adopt(self, messages: Sequence[Message], state: ContextState, events: Sequence[Event], *,
              write: bool = True) -> list[Message | Event]:
        """Take what the engine returned: new snip markers and durable events go to the
        transcript first (or are returned, unwritten)."""
        live = {m.uuid for m in self.messages}
        changes: list[Message | Event] = [m for m in messages if m.meta.get("snipped_count") and m.uuid not in live]
        changes += [e for e in events if e.durable]
        if write:
            self.recorder.changes(changes)
        self.conversation = self.conversation.adopted(messages, state)
        if any(isinstance(e, (Cleared, Snipped, ThinkingCleared)) for e in events):
            self.meter.expect_break()
        for event in events:
            self._count_freed(event)
            self.emit(event)
        return changes

    def _count_freed(self, event: Event) -> None:
        """What a change took out of the live context, for the priced savings."""
        kinds = {Cleared: "cleared", Persisted: "persisted", Snipped: "snipped", ThinkingCleared: "thinking"}
        kind = kinds.get(type(event))
        if kind is not None:
            self.meter.freed(kind, getattr(event, "tokens_freed", 0))

    def write_changes(self, changes: Sequence[Message | Event]) -> None:
        """Writes a change made off the main thread deferred (see `prepare(write=False)`)."""
        self.recorder.changes(changes)

    def clear_results(self, tool_use_ids: Sequence[str], trigger: str) -> tuple[list[str], list[str]]:
        """Clear named results now (the model's snip tool); (cleared, unknown or protected)."""
        messages, state, events, unknown = clear_now(self.messages, self.state, tool_use_ids, trigger,
                                                     self.context_settings().compactable_tools)
        self.adopt(messages, state, events)
        return [i for e in events for i in e.replacements], unknown

    def snip(self, keep_last: int) -> int:
        """Snip the middle now, keeping about `keep_last` recent messages; how many were snipped."""
        messages, state, events = snip_now(self.messages, self.state, self.clock(), self.context_settings(),
                                           keep_last)
        self.adopt(messages, state, events)
        return sum(e.count for e in events)

    def replace_live(self, messages: Sequence[Message], state: ContextState | None = None) -> None:
        """A compaction or a 413 shrink swapped the live context: the index starts over (C10)."""
        self.conversation = self.conversation.replaced(messages, state)
        self.files.invalidate_stubs()
        self.meter.expect_break()

    def tokens(self) -> int:
        return measure(self.messages, self.state, self.frame.overhead_tokens()).tokens

    def exact_tokens(self) -> int | None:
        """The API's own count of the next request (T3), or None when the endpoint fails."""
        try:
            return self.model.count_tokens(self.request())
        except CtxMagicError:
            return None

    def is_live_result(self, tool_use_id: str) -> bool:
        return self.conversation.is_live_result(tool_use_id)

    # -- what a response teaches -------------------------------------------------------------------

    def learn(self, reply: ModelReply, count: ContextCount) -> None:
        """A main-loop response: its usage and cost, the cache watch, the estimate's correction
        (T2), and what the server's edits did to the request (the 'server' strategy)."""
        cost = self.meter.add(reply.usage)
        for part in reply.compaction_usage:  # a server compaction's own call, billed with this answer
            cost += self.meter.add(part, call=False)
        server_cleared = cleared_tokens(reply.applied_edits)
        self.meter.count_savings(server_cleared)
        self.server.edited(reply)
        self.meter.main_call(reply.usage.prompt_tokens)
        self.frame.sent(self.messages)
        broke = self.meter.observe(reply.usage, self.clock(), ttl_seconds=self.settings.cache_ttl_seconds,
                                   signature=self.frame.signature())
        if broke is not None:
            self.emit(broke)
        # What the estimate stood for, as the API billed it: the prompt less the anchored part (and
        # less what a clearing removed from that part, only while the same response anchors the count).
        actual_new = reply.usage.prompt_tokens - (count.anchor_tokens - count.freed_tokens)
        self.conversation = self.conversation.learned(self.state.correction.observe(count.estimated_tokens,
                                                                                      actual_new))
        totals = self.meter.snapshot()
        self.emit(UsageUpdated(reply.usage, count.tokens, self.state.correction.ratio, totals.to_json(),
                               round(totals.cache_hit_ratio, 4), round(cost, 6)))

    # -- compactions -------------------------------------------------------------------------------

    def compacted(self, new_messages: Sequence[Message], live: Sequence[Message], event: Compacted) -> None:
        """A compaction's result: recorded first (M2), then live; the breaker closes (L6)."""
        for message in new_messages:
            self.recorder.message(message)
        self.record(event)
        self.replace_live(live)
        self.compaction = self.compaction.compacted(event)
        self.meter.freed("compacted", event.tokens_before - event.tokens_after)

    def switch_model(self, settings: Settings, model: Model, *, backend: str | None = None) -> ThinkingCleared | None:
        """Another model (or provider) for the next turns: the thinking blocks other models wrote
        leave the live context (their signatures are bound to the model that made them)."""
        self.frame.reconfigure(settings, model)
        self.backend = backend or self.backend
        here = (model.name, getattr(model, "provider", "anthropic"))
        messages, event = clear_foreign_thinking(
            self.messages, lambda m: (m.meta.get("model"), m.meta.get("provider", "anthropic")) == here)
        if event is not None:
            self.adopt(messages, self.state, [event])
        return event

    def compaction_failed(self) -> CompactionState:
        self.compaction = self.compaction.failed()
        return self.compaction

    # -- turns, plug-ins, persistence ----------------------------------------------------------------

    def begin_turn(self) -> None:
        self.compaction = self.compaction.turn_started()

    def turn_ended(self, result: Any) -> None:
        for problem in self.plugins.turn_ended(self, result):
            self.notice(problem, "warning")

    def end_turn(self) -> None:
        """Make the transcript durable and save state.json (each turn end, M2)."""
        self.recorder.end_turn(self.state_json())

    def state_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id, "model": self.settings.model, **self.compaction.to_json(),
            "engine": self.state.to_json(), "usage": self.meter.snapshot().to_json(),
            "reads": [dataclasses.asdict(r) for r in self.files.reads.values()], "saved_at": self.clock(),
            "system_extra": self.frame.memory_section, "cached_tail": self.frame.cached_tail,
            "extra": self.plugins.saved(),
        }

    def resume(self) -> list[str]:
        """Rebuild the live context from transcript and state (SPEC M4); returns problems."""
        saved = load_saved(self.store)
        self.conversation = Conversation(tuple(saved.messages), saved.state)
        self.compaction = saved.compaction
        self.meter = UsageMeter(saved.usage, prices=self.prices)
        self.frame.set_memory_section(saved.memory_section)  # the same system prompt as before (M4)
        self.frame.cached_tail = saved.cached_tail  # and the same breakpoints
        self.plugins.restore(saved.plugin_state)
        self.files.reads.update({r.path: r for r in saved.reads})
        problems = list(saved.problems)
        closing = close_dangling_tool_uses(self.messages, self.clock())
        if closing is not None:
            self.append(closing)
            problems.append("the last tool calls had no results (interrupted); they were closed with an error")
        return problems

    def status(self) -> StatusSnapshot:
        """The session as it stands (counted locally, never by an API call)."""
        conversation = self.conversation
        context = figures(conversation.messages, conversation.state, self.context_settings(), self.tokens(),
                          self.plan.reason, counts=conversation.result_counts())
        return StatusSnapshot(
            session_id=self.session_id, model=self.settings.model, backend=self.backend,
            window_source=self.window.source, max_output=self.window.reply_cap, context=context,
            thinking=self.window.thinking, thinking_budget=self.window.thinking_budget, prices=self.prices(),
            provider=self.settings.provider, strategy=self.settings.strategy,
            boundaries=self.compaction.boundaries, consecutive_failures=self.compaction.failures,
            turns=self.compaction.turns, usage=self.meter.snapshot(),
            cache_breaks=tuple(b.summary() for b in self.meter.breaks), transcript=str(self.store.transcript_path))

    def close(self) -> None:
        """Save and close the transcript; the session folder is free for another kernel."""
        self.end_turn()
        self.recorder.close()
        self.store.release()


def open_session(model: Model, executor: Executor, storage: Path, settings: Settings | None = None, *,
                 session_id: str | None = None, resume: bool = False, **kwargs: Any) -> tuple[Session, list[str]]:
    """A new session, or the named one resumed from its folder (problems found are returned)."""
    session = Session(model, executor, SessionDir(storage, session_id or new_session_id()), settings, **kwargs)
    session.store.claim()
    problems = session.resume() if resume else []
    return session, problems
