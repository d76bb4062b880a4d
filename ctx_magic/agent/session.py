"""One agent session: the live conversation, its record on disk, and what the loop learns as
it runs.

The session builds its parts and is the only writer of its fields; each part is given the
few collaborators it uses. `Recorder` writes the transcript and state.json, `RequestFrame`
holds the model, the settings and what every request carries (the call's setup, worked out
once per conversation), `LiveContext` holds the live context and carries out the engine's
changes to it, `CompactionState` holds the boundaries and the breaker, `UsageMeter` the spend
and the cache watch, `ReplyLearner` takes each answer into them, `StatusReader` reads the
status, `SideCalls` makes the calls beside the conversation, `PinBoard` keeps the user's pins.
The turn loop (loop.py), compaction (compaction.py) and the notes keeper take the parts they
use, and ask the session itself only its own verbs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctx_magic.agent.files import FileTools
from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.model import Model, ModelRequest
from ctx_magic.agent.on_demand import OnDemand
from ctx_magic.agent.pin_board import PinBoard
from ctx_magic.agent.plugins import Hooks, Plugins
from ctx_magic.agent.replies import ReplyLearner
from ctx_magic.agent.request import CallSetup, RequestFrame
from ctx_magic.agent.side_calls import SideCalls
from ctx_magic.agent.status import StatusReader, StatusSnapshot
from ctx_magic.agent.tools import Executor
from ctx_magic.agent.undo import UndoHistory
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.compaction_state import CompactionState
from ctx_magic.context.costs import RelativePrices
from ctx_magic.context.decide import SessionFacts
from ctx_magic.context.engine import Prepared
from ctx_magic.context.invariants import close_dangling_tool_uses
from ctx_magic.context.notes import WAIT_FOR_EXTRACTION_SECONDS
from ctx_magic.context.resume import compactions, fold_transcript
from ctx_magic.context.state import ContextState
from ctx_magic.context.thinking import first_written_after_another_prefix
from ctx_magic.context.undo import points_from_transcript
from ctx_magic.errors import CtxMagicError, Remedy
from ctx_magic.events import Compacted, Event, Notice, ServerCompacted, ThinkingCleared, notify
from ctx_magic.messages import Message, user_text
from ctx_magic.settings import Settings
from ctx_magic.store.recorder import Recorder
from ctx_magic.store.session import SessionDir, new_session_id

NEWS_TAG = "background-runs"
"""The tag around what the executor says changed beside the conversation (a background run ended)."""
DEFAULT_SYSTEM_PROMPT = """You are an assistant that works with the user's data through the tools you are given.
Keep replies short and concrete; show results rather than describing them.
Long outputs may be saved to disk and replaced by a preview; read the rest with read_file. Old tool
results may be cleared and older conversation summarized: the full transcript is always kept on disk."""


class Session:
    """The live conversation of one agent and the store behind it."""

    def __init__(self, model: Model, executor: Executor, store: SessionDir, settings: Settings | None = None, *,
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT, root: Path | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.session_id = store.session_id
        self.clock = clock
        self.sleep = sleep
        """What waits before a call is asked again (injected: tests never wait on the wall clock)."""
        self.listeners: list[Callable[[Event], None]] = []
        self.hooks = Hooks()
        """PreCompact, PostCompact and SessionStart callables, registered with `hooks.add`."""
        self.recorder = Recorder(store, live=lambda: self.live.messages, notice=self.notice)
        self.files = FileTools((root or Path.cwd()).resolve(), extra_roots=(store.root,))
        self.frame = RequestFrame(model, executor, self.files, settings or Settings(), system_prompt)
        self.meter = UsageMeter(prices=self.frame.prices)
        self.live = LiveContext(self.recorder, self.meter, self.files, self.emit)
        """The conversation the next request carries, and the engine's work on it."""
        self._status = StatusReader(self.frame, self.live, self.meter, store)
        self.compaction = CompactionState()
        self.side_calls = SideCalls(self.frame, self.live, self.meter, store, clock=clock, sleep=sleep)
        self.on_demand = OnDemand(self.frame, self.meter, self.notice, sleep=sleep)
        """Summaries the API writes, where the model and provider take it."""
        self.plugins = Plugins()
        self.pin_board = PinBoard(store, self.frame, self.append, clock)
        """What the user pinned: re-injected after every summary, kept across resume."""
        self.replies = ReplyLearner(self.frame, self.live, self.meter, clock, self.record, self.emit)
        """What each main-loop answer teaches the meter, the frame and the live context."""
        self.undo = UndoHistory(self.live, self.frame, lambda: self.meter.totals.cost_usd, self.recorder.event)
        """The compactions, snips and clearings `%compact --undo` can take back."""

    # -- what every request carries ------------------------------------------------------------------

    def setup(self, *, context_tools: bool | None = None) -> CallSetup:
        """The next model call's setup (the tools, the engine's settings, the server's plan), worked
        out once per conversation; `context_tools` asks for it with (or without) the context tools."""
        return self.frame.setup(self.live.messages, self.store, context_tools=context_tools)

    def request(self, setup: CallSetup) -> ModelRequest:
        """The main call's request: the live context, with the server's edits under the 'server'
        strategy."""
        messages = self.live.messages
        return self.frame.build(messages, setup, server=setup.server_plan(messages))

    def prepare(self, setup: CallSetup | None = None, *,
                write: bool = True) -> tuple[Prepared, list[Message | Event]]:
        """The live context prepared for a call (live.py), with what the decision needs to know of
        the session beyond its messages. Written, it first says a refused summary and a word on the
        settings, and leaves out thinking the model would refuse (`drop_void_thinking`): counted as sent."""
        setup = setup or self.setup()
        if write:
            if line := self.frame.summaries.take_line():
                self.notice(line, "warning")
            if advice := self.frame.take_advice():
                self.notice(advice)
            drop_void_thinking(self.frame, self.live, setup)
        if self.live.tokens(setup.overhead_tokens) >= setup.context.thresholds.autocompact:
            self.settle_notes()  # a compaction is at hand: it would stand on the notes being written
        return self.live.prepare(setup, self.clock(), self._facts(setup, self.compaction.turns), write=write)

    def _facts(self, setup: CallSetup, turn: int) -> SessionFacts:
        """What the decision needs to know of the session beyond its messages, for a call of `turn`."""
        notes = self.plugins.notes
        last = self.compaction.last  # an undone compaction tells nothing of the next one
        return SessionFacts(
            auto_compaction=not (self.side_calls.busy or self.on_demand.busy or setup.server_compacts),
            breaker_open=self.compaction.breaker_open, notes_tokens=notes.tokens() if notes is not None else 0,
            calls=self.meter.totals.main_calls, growth=self.meter.growth(),
            summary_tokens=last.summary_tokens if last is not None else 0,
            after_compaction=last.tokens_after if last is not None else 0,
            prices=RelativePrices.of_model(self.frame.prices(), setup.settings.cache_ttl),
            deferred=self.compaction.deferred_turn == turn, summary_by_api=self.on_demand.available(setup))

    def defer_compaction(self) -> None:
        """Let the next turn through without an automatic compaction while the context stays under
        the blocking limit (one turn only: the one after it compacts as usual)."""
        self.compaction = self.compaction.deferred()

    def tokens(self) -> int:
        """The live context's size as the next request would carry it, by the local count."""
        return self.live.tokens(self.setup().overhead_tokens)

    def exact_tokens(self, setup: CallSetup | None = None) -> int | None:
        """The API's own count of the next request, or None when the endpoint fails."""
        try:
            return self.frame.model.count_tokens(self.request(setup or self.setup()))
        except CtxMagicError:
            return None

    def emit(self, event: Event) -> None:
        self.undo.saw(event)  # first: a compaction's undo point keeps the prefix the frame lets go of
        self.frame.saw(event)
        notify(self.listeners, event)

    def notice(self, text: str, level: str = "info", remedy: Remedy = Remedy.NONE) -> None:
        self.emit(Notice(level, text, remedy.value))

    def append(self, message: Message) -> None:
        """Add a message to the transcript (before any layer can change it) and the live context.
        On a full disk it stays live and waits to be written; the StorageError ends the turn."""
        try:
            self.recorder.message(message)
        finally:
            self.live.append(message)

    def record(self, event: Event) -> None:
        self.recorder.event(event)
        self.emit(event)

    def take_news(self) -> None:
        """What changed where the tools run since the last request (a run ended, failed or stalled): one
        attachment at the end, each line shown in the cell; nothing new leaves the cached prefix alone."""
        lines = self.frame.executor.news()
        if lines:
            self.append(news_message(lines, self.clock()))
        for line in lines:
            self.notice(line)

    def compacted(self, new_messages: Sequence[Message], live: Sequence[Message],
                  event: Compacted | ServerCompacted) -> None:
        """A compaction's result, recorded first, then live; after ctx_magic's own the breaker closes."""
        for message in new_messages:
            self.recorder.message(message)
        self.record(event)
        self.live.replace(live)
        if isinstance(event, Compacted):
            self.compaction = self.compaction.compacted(event)
        self.meter.freed("compacted", event.tokens_before - event.tokens_after)

    def switch_model(self, settings: Settings, model: Model) -> ThinkingCleared | None:
        """Another model or provider: the thinking other models wrote (bound to them) leaves the context."""
        self.frame.reconfigure(settings, model)
        return self.live.keep_thinking_of(model.name, model.provider, append_only=self.frame.window.append_only)

    def settle_notes(self) -> None:
        """Wait as a compaction would for the session notes being written, if any are."""
        notes = self.plugins.notes
        if notes is not None and notes.running:
            notes.wait(WAIT_FOR_EXTRACTION_SECONDS)

    def compaction_undone(self, key: str) -> None:
        self.compaction = self.compaction.undone(key)

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
        """Make the transcript durable and save state.json (each turn end)."""
        self.undo.keep()
        self.recorder.end_turn(self.state_json())

    def state_json(self) -> dict[str, Any]:
        """What state.json keeps of the session (read back by `resume`)."""
        return {"session_id": self.session_id, "model": self.frame.settings.model, **self.compaction.to_json(),
                "engine": self.live.state.to_json(), "usage": self.meter.snapshot().to_json(),
                "growth": self.meter.growth_json(), "reads": self.files.saved_reads(), "saved_at": self.clock(),
                **self.frame.saved(), "extra": self.plugins.saved()}

    def resume(self) -> list[str]:
        """Rebuild the live context from the transcript and what state.json kept beside it (engine
        decisions, compaction state, usage, plug-in state); returns problems."""
        loaded, saved = self.store.load_transcript(), self.store.load_state()
        messages, state, problems = fold_transcript(loaded.records, ContextState.from_json(saved.get("engine") or {}))
        self.live.restore(messages, state)
        self.undo.resumed(points_from_transcript(loaded.records))
        self.compaction = CompactionState.from_json(saved, *compactions(loaded.records))
        self.meter.restore(saved.get("usage") or {}, saved.get("growth"))
        self.frame.restore(saved, cut=bool(state.cleared or self.compaction.boundaries or any(
            m.kind in ("summary", "boundary") or m.meta.get("snipped_count") for m in messages)))
        self.plugins.restore(saved.get("extra") or {})
        self.files.restore_reads(saved.get("reads") or [])
        problems = loaded.problems + problems
        closing = close_dangling_tool_uses(self.live.messages, self.clock())
        if closing is not None:
            self.append(closing)
            problems.append("the last tool calls had no results (interrupted); they were closed with an error")
        return problems

    def status(self) -> StatusSnapshot:
        """The session as it stands before the next turn (status.py reads it)."""
        setup = self.setup()
        return self._status.read(setup, self.compaction, self._facts(setup, self.compaction.turns + 1), self.clock())

    def close(self) -> None:
        """Save and close the transcript; the session folder is free for another kernel."""
        self.end_turn()
        self.recorder.close()
        self.store.release()


def news_message(lines: Sequence[str], now: float) -> Message:
    """The attachment that tells the model what changed beside the conversation."""
    text = f"<{NEWS_TAG}>\n" + "\n".join(lines) + f"\n</{NEWS_TAG}>"
    return user_text(text, kind="attachment", timestamp=now, news=True)


def open_session(model: Model, executor: Executor, storage: Path, settings: Settings | None = None, *,
                 session_id: str | None = None, resume: bool = False, **kwargs: Any) -> tuple[Session, list[str]]:
    """A new session, or the named one resumed from its folder (problems found are returned)."""
    session = Session(model, executor, SessionDir(storage, session_id or new_session_id()), settings, **kwargs)
    session.store.claim()
    problems = session.resume() if resume else []
    return session, problems


def drop_void_thinking(frame: RequestFrame, live: LiveContext, setup: CallSetup) -> None:
    """Thinking the model would find invalid leaves the live context before a main call: after a
    summary block the API refused since the last one (append-only), or, on a model that checks the
    prefix, from the first answer written after another system prompt or other tools than `setup`'s."""
    if frame.summaries.take_voided() and setup.window.append_only:
        live.drop_thinking("prefix-check")
    elif setup.window.append_only or frame.model.limits().prefix_check:
        start = first_written_after_another_prefix(live.messages, setup.signature)
        if start is not None:
            live.drop_thinking("tools", start)
