"""One agent session: the live conversation, its record on disk, and what the loop learns as
it runs.

The session is the only writer of its fields; the turn loop (loop.py), compaction
(compaction.py) and the notebook act through its methods. Each part has one job: `Recorder`
writes the transcript and state.json, `LiveContext` holds the live context and carries out the
engine's changes to it (agent/live.py), `CompactionState`
holds the boundaries and the breaker, `UsageMeter` the spend and the cache watch, `SideCalls`
the calls made beside the conversation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctx_magic.agent.files import FileTools
from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.model import Model, ModelReply, ModelRequest
from ctx_magic.agent.pin_board import PinBoard
from ctx_magic.agent.plugins import Hooks, Plugins
from ctx_magic.agent.request import RequestFrame
from ctx_magic.agent.restore import load_saved, saved_state
from ctx_magic.agent.server_side import ServerSide
from ctx_magic.agent.side_calls import SideCalls
from ctx_magic.agent.status import StatusSnapshot, snapshot_of
from ctx_magic.agent.tools import Executor
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.compaction_state import CompactionState
from ctx_magic.context.conversation import Conversation
from ctx_magic.context.engine import ContextSettings
from ctx_magic.context.invariants import close_dangling_tool_uses
from ctx_magic.context.pins import Pin
from ctx_magic.context.server import cleared_tokens
from ctx_magic.context.state import ContextState
from ctx_magic.context.thinking import side_call_view
from ctx_magic.context.tokens import ContextCount
from ctx_magic.errors import Remedy
from ctx_magic.events import (
    Compacted,
    Event,
    Notice,
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
        self.recorder = Recorder(store, live=lambda: self.live.messages, notice=self.notice)
        self.files = FileTools((root or Path.cwd()).resolve(), extra_roots=(store.root,))
        self.frame = RequestFrame(model, executor, self.files, settings or Settings(), system_prompt)
        self.live = LiveContext(self)
        """The conversation the next request carries, and the engine's work on it."""
        self.compaction = CompactionState()
        self.meter = UsageMeter(prices=self.prices)
        self.side_calls = SideCalls(self)
        self.plugins = Plugins()
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
        return self.live.messages

    @property
    def state(self) -> ContextState:
        return self.live.state

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

    def request(self, messages: Sequence[Message] | None = None, *, purpose: str = "main",
                tool_choice: dict[str, Any] | None = None, max_tokens: int | None = None) -> ModelRequest:
        """A main call (the live context, with the server's edits under the 'server' strategy), or
        a side call's (its messages seen as context/thinking.side_call_view says)."""
        if purpose != "main":
            view = side_call_view(self.messages if messages is None else messages, cache_warm=self.live.cache_warm())
            return self.frame.build(view, purpose=purpose, tool_choice=tool_choice, max_tokens=max_tokens)
        plan = self.server.plan()
        return self.frame.build(self.messages if messages is None else messages, purpose=purpose,
                                tool_choice=tool_choice, max_tokens=max_tokens,
                                context_management=plan.context_management if plan else None,
                                betas=plan.betas if plan else ())

    # -- events and the store ----------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        self.frame.saw(event)
        notify(self.listeners, event)

    def notice(self, text: str, level: str = "info", remedy: Remedy = Remedy.NONE) -> None:
        self.emit(Notice(level, text, remedy.value))

    def append(self, message: Message) -> None:
        """Add a message to the transcript (before any layer can change it, M2) and the live
        context. On a full disk it stays live and waits to be written; the StorageError ends the turn."""
        try:
            self.recorder.message(message)
        finally:
            self.live.append(message)

    def record(self, event: Event) -> None:
        self.recorder.event(event)
        self.emit(event)

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
        if not self.frame.frame_changed:  # new tools or system prompt: the count moved by more than the messages
            self.live.learn_ratio(reply.usage.prompt_tokens, count)
        totals = self.meter.snapshot()
        self.emit(UsageUpdated(reply.usage, count.tokens, self.state.correction.ratio, totals.to_json(),
                               round(totals.cache_hit_ratio, 4), round(cost, 6)))

    # -- compactions -------------------------------------------------------------------------------

    def compacted(self, new_messages: Sequence[Message], live: Sequence[Message], event: Compacted) -> None:
        """A compaction's result: recorded first (M2), then live; the breaker closes (L6)."""
        for message in new_messages:
            self.recorder.message(message)
        self.record(event)
        self.live.replace(live)
        self.compaction = self.compaction.compacted(event)
        self.meter.freed("compacted", event.tokens_before - event.tokens_after)

    def switch_model(self, settings: Settings, model: Model, *, backend: str | None = None) -> ThinkingCleared | None:
        """Another model (or provider) for the next turns: the thinking blocks other models wrote
        leave the live context (their signatures are bound to the model that made them)."""
        self.frame.reconfigure(settings, model)
        self.backend = backend or self.backend
        return self.live.keep_thinking_of(model.name, getattr(model, "provider", "anthropic"))

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
        return saved_state(self)

    def resume(self) -> list[str]:
        """Rebuild the live context from transcript and state (SPEC M4); returns problems."""
        saved = load_saved(self.store)
        self.live.restore(Conversation(tuple(saved.messages), saved.state))
        self.compaction = saved.compaction
        self.meter = UsageMeter(saved.usage, prices=self.prices)
        self.frame.set_memory_section(saved.memory_section)  # the same system prompt as before (M4)
        self.frame.resume_tail(saved.cached_tail)  # and the same breakpoints
        if saved.state.cleared or saved.compaction.boundaries or any(
                m.kind in ("summary", "boundary") or m.meta.get("snipped_count") for m in saved.messages):
            self.frame.offer_context_tools()  # and the same tools, once the context was cut
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
        return snapshot_of(self)

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
