"""One agent session: the live context, its store and everything the loop remembers.

The session owns the live messages and the engine state, writes every message and durable
event to the transcript as it happens, saves state.json at each turn end, and tells its
listeners about every change. The turn loop (loop.py) and compaction (compaction.py) act
through it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctx_magic.agent.files import FileRead, FileTools
from ctx_magic.agent.model import DEFAULT_MODEL, Model, ModelLimits, ModelRequest
from ctx_magic.agent.request import system_blocks, to_api_messages
from ctx_magic.agent.tools import CONTEXT_TOOLS, FILE_TOOLS, Executor
from ctx_magic.context.cache_break import CacheBaseline
from ctx_magic.context.cache_break import observe as observe_cache
from ctx_magic.context.engine import ContextSettings, ContextState, Prepared, measure, prepare, result_counts
from ctx_magic.context.invariants import close_dangling_tool_uses
from ctx_magic.context.microcompact import CACHE_TTL_MINUTES
from ctx_magic.context.resume import fold_transcript
from ctx_magic.context.tokens import count_text
from ctx_magic.errors import CtxMagicError, StorageError
from ctx_magic.events import CacheBroke, Cleared, Compacted, Event, Notice, Persisted, Snipped, notify
from ctx_magic.messages import Message, Usage, user_text
from ctx_magic.store.session import SessionDir, new_session_id

SYSTEM_PROMPT = """You are a data-science assistant working inside a Jupyter notebook through ctx_magic.
The user talks to you in %%agent cells and also runs cells of their own; those cells reach you as
`notebook_cell` tool results, so you see their code and outputs. Use the `python` tool to run code in
the user's kernel (their variables are there), and the file tools to read files under the session folder.
Keep replies short and concrete; show results rather than describing them.
Long outputs may be saved to disk and replaced by a preview; read the rest with read_file. Old tool
results may be cleared and older conversation summarized: the full transcript is always kept on disk."""

MAX_MODEL_CALLS_PER_TURN = 50  # bounds one turn however the model behaves


@dataclass
class AgentConfig:
    """Settings of a session; the notebook's `CtxMagic` traits map one to one onto these."""

    model: str = DEFAULT_MODEL
    """Model id sent to the Messages API."""
    context_window: int = 0
    """Window in tokens; 0 asks the Models API (falling back to a built-in table)."""
    max_output_tokens: int = 16_384
    """Cap on each reply (also capped by the model and to a quarter of the window)."""
    autocompact_pct: float = 0
    """Auto-compact at this percent of the effective window (0 = the default threshold)."""
    keep_recent: int = 5
    """Tool results microcompact always keeps."""
    idle_minutes: float = 0
    """Idle gap that clears old results (0 = the prompt-cache TTL)."""
    cache_ttl: str = "5m"
    """Prompt-cache TTL asked for: '5m' or '1h'."""
    snip_max_messages: int = 200
    """Live messages past which the middle is snipped."""
    clear_at_least: int = 0  # 0: 20,000 scaled to the window (T5)
    """Tokens a pressure microcompact must free to be worth a cache break."""
    system_prompt: str = SYSTEM_PROMPT
    """The system prompt (long-term memories are appended to it)."""


@dataclass
class Hooks:
    """PreCompact, PostCompact and SessionStart callables (SPEC C9)."""

    pre_compact: list[Callable[[str, str | None], str | None]] = field(default_factory=list)
    """(trigger, user instructions) -> extra instructions or None."""
    post_compact: list[Callable[[Compacted], None]] = field(default_factory=list)
    session_start: list[Callable[[str], str | None]] = field(default_factory=list)
    """(source: 'compact' | 'resume' | 'new') -> text added to the context, or None."""

    def add(self, name: str, fn: Callable[..., Any]) -> None:
        lists = {"PreCompact": self.pre_compact, "PostCompact": self.post_compact,
                 "SessionStart": self.session_start}
        if name not in lists:
            raise ValueError(f"unknown hook {name!r}; use one of {', '.join(lists)}")
        lists[name].append(fn)


class NotesSource(Protocol):
    """The session's notes (SPEC S1-S3), kept by a background extractor."""

    def wait(self, timeout: float) -> None:
        """Block until a running extraction ends (at most `timeout` seconds)."""

    def current(self) -> tuple[str, str | None] | None:
        """(notes, uuid of the last message they cover), or None when there are none yet."""


@dataclass
class UsageTotals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def add(self, usage: Usage) -> None:
        self.calls += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_creation_input_tokens += usage.cache_creation_input_tokens
        self.cache_read_input_tokens += usage.cache_read_input_tokens

    @property
    def cache_hit_ratio(self) -> float:
        prompt = self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
        return self.cache_read_input_tokens / prompt if prompt else 0.0


class Session:
    """The live conversation of one agent and the store behind it."""

    def __init__(self, model: Model, executor: Executor, store: SessionDir, config: AgentConfig | None = None,
                 *, root: Path | None = None, clock: Callable[[], float] = time.time, hooks: Hooks | None = None,
                 offline: bool = False) -> None:
        self.model = model
        self.executor = executor
        self.store = store.create()
        self.config = config or AgentConfig()
        self.clock = clock
        self.hooks = hooks or Hooks()
        self.offline = offline
        self.root = (root or Path.cwd()).resolve()
        self.files = FileTools(self.root, extra_roots=(self.store.root,))
        self.transcript = self.store.transcript()
        self.messages: list[Message] = []
        self.state = ContextState()
        self.failures = 0
        self.turns = 0
        self.turns_at_boundary = 0
        self.usage = UsageTotals()
        self.boundaries: list[dict[str, Any]] = []
        self.cache_baseline = CacheBaseline()
        self.cache_breaks: list[CacheBroke] = []
        self.unwritten: list[Message] = []
        """Live messages a full disk kept out of the transcript, oldest first."""
        self.listeners: list[Callable[[Event], None]] = []
        self.in_side_call = False
        self.last_prepared: Prepared | None = None
        self.system_extra = ""
        self._limits: ModelLimits | None = None
        self._usage_lock = threading.Lock()
        self.notes_source: NotesSource | None = None
        self.extra_state: dict[str, Any] = {}
        """What plug-ins (the notes keeper) keep in state.json, under their own keys."""
        self.after_turn: list[Callable[[Session, Any], None]] = []
        """Called at each turn end with (session, turn result): the notes keeper listens here."""

    # -- identity and settings ---------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.store.session_id

    def limits(self) -> ModelLimits:
        if self._limits is None:
            self._limits = self.model.limits()
        return self._limits

    def engine_settings(self) -> ContextSettings:
        limits = self.limits()
        window = self.config.context_window or limits.window
        return ContextSettings.create(
            window,
            self.max_output(),
            autocompact_pct=self.config.autocompact_pct or None,
            cache_ttl=self.config.cache_ttl,
            idle_minutes=self.config.idle_minutes or None,
            keep_recent=self.config.keep_recent,
            clear_at_least=self.config.clear_at_least,
            snip_max_messages=self.config.snip_max_messages,
            tool_results_dir=str(self.store.tool_results_dir),
            transcript_path=str(self.store.transcript_path),
        )

    def max_output(self) -> int:
        window = self.config.context_window or self.limits().window
        return max(256, min(self.config.max_output_tokens, self.limits().max_output, window // 4))

    @property
    def breaker_open(self) -> bool:
        return self.failures >= 3

    def system_prompt(self) -> str:
        return self.config.system_prompt + (f"\n\n{self.system_extra}" if self.system_extra else "")

    def tool_specs(self) -> list[dict[str, Any]]:
        return [*self.executor.tool_specs(), *FILE_TOOLS, *CONTEXT_TOOLS]

    def overhead_tokens(self) -> int:
        return count_text(self.system_prompt()) + count_text(json.dumps(self.tool_specs()))

    def request(self, messages: Sequence[Message] | None = None, *, purpose: str = "main",
                tool_choice: dict[str, Any] | None = None, max_tokens: int | None = None) -> ModelRequest:
        ttl = self.config.cache_ttl
        return ModelRequest(
            system=system_blocks(self.system_prompt(), cache_ttl=ttl),
            tools=self.tool_specs(),
            messages=to_api_messages(self.messages if messages is None else messages, cache_ttl=ttl),
            max_tokens=max_tokens or self.max_output(),
            tool_choice=tool_choice,
            purpose=purpose,
        )

    def side_call(self, messages: Sequence[Message], prompt: str, *, purpose: str = "memory",
                  max_tokens: int = 8_000) -> str:
        """One text-only call beside the conversation (memory extraction, dreaming): the same
        system prompt and tools, so the cached prefix is shared, with tool use forbidden.

        Safe from any thread: it reads the given messages, never the live context.
        """
        request = self.request([*messages, user_text(prompt)], purpose=purpose, tool_choice={"type": "none"},
                               max_tokens=min(max_tokens, self.max_output()))
        reply = self.model.stream(request)
        self.record_usage(reply.usage)
        return "\n".join(b.get("text", "") for b in reply.content if b.get("type") == "text")

    def observe_cache(self, usage: Usage) -> None:
        """Compare a main-loop response's cache read with the previous one (C10's detector)."""
        ttl = CACHE_TTL_MINUTES.get(self.config.cache_ttl, CACHE_TTL_MINUTES["5m"]) * 60
        signature = hashlib.sha256((self.system_prompt() + json.dumps(self.tool_specs())).encode()).hexdigest()
        self.cache_baseline, broke = observe_cache(self.cache_baseline, usage, self.clock(), ttl_seconds=ttl,
                                                   signature=signature)
        if broke is not None:
            self.cache_breaks.append(broke)
            self.emit(broke)

    def expect_cache_break(self) -> None:
        """The prefix is being rewritten on purpose (compaction, clearing, snip): the next
        response sets a new baseline instead of being compared with the old one."""
        self.cache_baseline = self.cache_baseline.reset()

    def record_usage(self, usage: Usage) -> None:
        """Add one response's usage to the totals (side calls run in other threads)."""
        with self._usage_lock:
            self.usage.add(usage)

    # -- events and the store ----------------------------------------------------------------

    def emit(self, event: Event) -> None:
        notify(self.listeners, event)

    def notice(self, text: str, level: str = "info") -> None:
        self.emit(Notice(level, text))

    def record_message(self, message: Message) -> None:
        """Write a message to the transcript (before any layer can change it, M2)."""
        self.flush_unwritten()
        self.transcript.append_message(message)

    def record_event(self, event: Event) -> None:
        if isinstance(event, Persisted):
            self.ensure_transcript()
            self.store.write_tool_result(event.tool_use_id, event.content)
        if event.durable:
            self.flush_unwritten()
            self.transcript.append_event(event)
        self.emit(event)

    def append(self, message: Message) -> None:
        """Add a message to the live context and the transcript. When the disk is full the
        message stays live (a tool call keeps its results, M5) and waits, in order, to be written
        before anything else is; the StorageError still ends the turn."""
        try:
            self.ensure_transcript()  # before the message is live: a new transcript must not hold it twice
        except StorageError:
            self.messages.append(message)
            self.unwritten.append(message)
            raise
        self.messages.append(message)
        try:
            self.record_message(message)
        except StorageError:
            self.unwritten.append(message)
            raise

    def ensure_transcript(self) -> None:
        """If the session folder or its transcript was deleted while the session ran, start a
        new transcript from the live context (what only the old file held is gone), and say so."""
        if not self.transcript.gone():
            return
        self.transcript.reopen()
        self.store.create()
        waiting = {m.uuid for m in self.unwritten}
        written = [m for m in self.messages if m.uuid not in waiting]
        for message in written:
            self.transcript.append_message(message)
        self.transcript.sync()
        self.notice(f"The transcript {self.store.transcript_path} was removed while the session ran; a new one "
                    f"was started from the live context ({len(written)} messages). Earlier records are gone.",
                    "warning")

    def flush_unwritten(self) -> None:
        """Write the messages a full disk held back; raises StorageError while there is no room."""
        self.ensure_transcript()
        while self.unwritten:
            self.transcript.append_message(self.unwritten[0])
            self.unwritten.pop(0)

    # -- the engine --------------------------------------------------------------------------

    def prepare(self) -> Prepared:
        """L1 -> L2 -> L3 on the live context; acts on their events (files, transcript)."""
        prepared = self._prepare()
        self.apply_change(prepared.messages, prepared.state, prepared.events)
        self.last_prepared = prepared
        return prepared

    def prepare_in_memory(self) -> list[Message | Event]:
        """The same layers without touching disk (for the idle timer's thread); returns the
        writes to make later with `write_deferred`, from the kernel's main thread."""
        prepared = self._prepare()
        changes = self.apply_change(prepared.messages, prepared.state, prepared.events, write=False)
        self.last_prepared = prepared
        return changes

    def apply_change(self, messages: list[Message], state: ContextState, events: Sequence[Event], *,
                     write: bool = True) -> list[Message | Event]:
        """Adopt what the engine returned (prepare, a snip or a clearing on request): new snip
        markers and durable events go to the transcript first (or are returned, unwritten)."""
        live = {m.uuid for m in self.messages}
        changes: list[Message | Event] = [m for m in messages if m.meta.get("snipped_count") and m.uuid not in live]
        changes += [e for e in events if e.durable]
        if write:
            self.write_deferred(changes)
        self.messages, self.state = messages, state
        if any(isinstance(e, (Cleared, Snipped)) for e in events):
            self.expect_cache_break()
        for event in events:
            self.emit(event)
        return changes

    def write_deferred(self, changes: Sequence[Message | Event]) -> None:
        self.flush_unwritten()
        for change in changes:
            if isinstance(change, Message):
                self.record_message(change)
            else:
                if isinstance(change, Persisted):
                    self.store.write_tool_result(change.tool_use_id, change.content)
                self.transcript.append_event(change)

    def _prepare(self) -> Prepared:
        return prepare(self.messages, self.state, self.clock(), self.engine_settings(),
                       overhead_tokens=self.overhead_tokens(),
                       compaction_available=not (self.breaker_open or self.in_side_call))

    def exact_tokens(self) -> int | None:
        """The API's own count of the next request (T3), or None when the endpoint fails."""
        try:
            return self.model.count_tokens(self.request())
        except CtxMagicError:
            return None

    def tokens(self) -> int:
        return measure(self.messages, self.state, self.overhead_tokens()).tokens

    def replace_live(self, messages: list[Message]) -> None:
        """A compaction swapped the live context: the engine's index starts over (C10)."""
        self.messages = messages
        self.state = dataclasses.replace(self.state, indexed=0, indexed_uuid=None, compactable=(),
                                         positions={}, freed_anchor=None, freed_tokens=0)
        self.files.invalidate_stubs()
        self.expect_cache_break()

    def is_live_result(self, tool_use_id: str) -> bool:
        return tool_use_id in self.state.positions and tool_use_id not in self.state.cleared

    # -- turn boundaries and persistence -----------------------------------------------------

    def end_turn(self) -> None:
        """Make the transcript durable and save state.json (each turn end, M2)."""
        try:
            self.flush_unwritten()
            self.transcript.sync()
            self.store.save_state(self.state_json())
        except StorageError as error:
            waiting = f" ({len(self.unwritten)} message(s) wait to be written)" if self.unwritten else ""
            self.notice(f"ctx_magic could not save the session{waiting}: {error}", "error")

    def state_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "model": self.config.model,
            "turns": self.turns,
            "turns_at_boundary": self.turns_at_boundary,
            "failures": self.failures,
            "engine": self.state.to_json(),
            "usage": dataclasses.asdict(self.usage),
            "reads": [dataclasses.asdict(r) for r in self.files.reads.values()],
            "saved_at": self.clock(),
            "system_extra": self.system_extra,
            "extra": dict(self.extra_state),
        }

    def resume(self) -> list[str]:
        """Rebuild the live context from transcript and state (SPEC M4); returns problems."""
        loaded = self.store.load_transcript()
        saved = self.store.load_state()
        engine = ContextState.from_json(saved.get("engine") or {})
        self.messages, self.state, problems = fold_transcript(loaded.records, engine)
        problems = loaded.problems + problems
        self.turns = int(saved.get("turns", 0))
        self.turns_at_boundary = int(saved.get("turns_at_boundary", 0))
        self.failures = int(saved.get("failures", 0))
        self.usage = UsageTotals(**(saved.get("usage") or {}))
        self.system_extra = str(saved.get("system_extra") or "")  # the same system prompt as before (M4)
        self.extra_state.update(saved.get("extra") or {})
        for read in saved.get("reads") or []:
            entry = FileRead(**read)
            self.files.reads[entry.path] = entry
        self.boundaries = [
            {"trigger": r["trigger"], "tokens_before": r["tokens_before"], "tokens_after": r["tokens_after"],
             "messages_summarized": r.get("messages_summarized", 0), "summary": r.get("summary", ""),
             "boundary_uuid": r.get("boundary_uuid")}
            for r in loaded.records if r.get("type") == "event" and r.get("event") == "compacted"
        ]
        closing = close_dangling_tool_uses(self.messages, self.clock())
        if closing is not None:
            self.append(closing)
            problems.append("the last tool calls had no results (interrupted); they were closed with an error")
        return problems

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        settings = self.engine_settings()
        th = settings.thresholds
        tokens = self.tokens()
        live, cleared, persisted = result_counts(self.state) if self.state.indexed else self._count_results()
        return {
            "session_id": self.session_id,
            "model": self.config.model,
            "backend": "offline" if self.offline else "anthropic",
            "window": th.window,
            "max_output": th.max_output,
            "threshold": th.autocompact,
            "warning": th.warning,
            "blocking": th.blocking,
            "tokens": tokens,
            "zone": th.zone(tokens),
            "percent_left": th.percent_left(tokens),
            "messages": sum(1 for m in self.messages if m.sent),
            "tool_results": {"live": live, "cleared": cleared, "persisted": persisted},
            "boundaries": [
                {k: b[k] for k in ("trigger", "tokens_before", "tokens_after", "messages_summarized")}
                for b in self.boundaries
            ],
            "breaker_open": self.breaker_open,
            "consecutive_failures": self.failures,
            "turns": self.turns,
            "usage": {**dataclasses.asdict(self.usage), "cache_hit_ratio": round(self.usage.cache_hit_ratio, 4)},
            "cache_breaks": [b.summary() for b in self.cache_breaks],
            "transcript": str(self.store.transcript_path),
        }

    def _count_results(self) -> tuple[int, int, int]:
        ids = [i for m in self.messages for i in m.tool_result_ids]
        cleared = sum(1 for i in ids if i in self.state.cleared)
        persisted = sum(1 for i in ids if i in self.state.persisted and i not in self.state.cleared)
        return len(ids) - cleared - persisted, cleared, persisted


def open_session(model: Model, executor: Executor, storage: Path, config: AgentConfig | None = None, *,
                 session_id: str | None = None, resume: bool = False, **kwargs: Any) -> tuple[Session, list[str]]:
    """A new session, or the named one resumed from its folder (problems found are returned)."""
    sid = session_id or new_session_id()
    session = Session(model, executor, SessionDir(storage, sid), config, **kwargs)
    session.store.claim()
    problems = session.resume() if resume else []
    return session, problems
