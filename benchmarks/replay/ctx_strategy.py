"""The ctx_magic strategy: the real agent loop, replaying a session. The coupling of the replay
benchmark to ctx_magic's internals is in this file (the Session / loop APIs, the notes keeper,
the memory manager) and in cell_render.py (cell capture), so that a rename upstream is adapted
there only.

What runs: `open_session` + `run_turn` with an `AnthropicModel` whose SDK client talks to the
billing meter in process (`offline_client(meter)`), a scripted Executor answering each tool call
with the recorded output (in order, checked against the recorded call), the session notes
keeper (its background extraction is waited for at each turn end, so that runs are
deterministic) and the end-of-session memory extraction, as the notebook controller wires them.
The user's notebook cells go in as the controller puts them: the idle check runs when each cell
is run, and the cells enter the context as notebook_cell pairs at the next turn. The loop's
per-turn call limit is lifted for the replay, so a long trajectory stays one turn.

Ablations (`CtxOptions`) switch mechanisms off to show what each one costs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import ctx_magic.agent.loop as loop_module
import ctx_magic.context.decide as decide_module
import ctx_magic.context.engine as engine_module
from benchmarks.clock import ManualClock
from benchmarks.replay.billing import Bench
from benchmarks.replay.cell_render import cell_record
from benchmarks.replay.corpus import TOOL_SECONDS, Replay
from benchmarks.replay.harness import MAX_OUTPUT, Outcome, ReplayDesync
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import AnthropicModel, ModelReply, ModelRequest
from ctx_magic.agent.notes import NotesKeeper
from ctx_magic.agent.session import Session, open_session
from ctx_magic.agent.tools import Executor, Tool, ToolCall, ToolContext, ToolOutput
from ctx_magic.context.model_families import CLAUDE_4, family_of
from ctx_magic.context.thresholds import Thresholds, compute_thresholds
from ctx_magic.events import (
    FOLD_TRIGGER,
    Cleared,
    Compacted,
    CompactionFailedEvent,
    Event,
    Persisted,
    Snipped,
    ThinkingCleared,
)
from ctx_magic.memory.extraction import SessionSource, extraction_due
from ctx_magic.memory.manager import MemoryManager
from ctx_magic.messages import notebook_cell_id, user_text
from ctx_magic.notebook.outputs import cell_messages
from ctx_magic.offline import OfflineAPI, OfflineConfig
from ctx_magic.offline.transport import offline_client
from ctx_magic.settings import DEFAULTS, Settings

CELLS_INTRO = "(Notebook cells the user ran before this conversation started follow.)"  # the controller's
NOTES_WAIT_SECONDS = 120.0  # a background notes extraction is waited for at each turn end
UNBOUNDED_CALLS = 1_000_000  # the replay's per-turn model-call limit
NEVER = 10**9  # a clearing threshold (tokens) or idle time (minutes) that is never reached
REFERENCE_WINDOW = 200_000
EDIT_VARIANTS: dict[str, dict[str, bool]] = {"ctx_magic": {}, "ctx_magic-edit": {"edit": True, "drop_block": True},
                                             "ctx_magic-edit-refused": {"edit": True}}
CC_RESERVE = 20_000  # min(max output, 20,000) with a current model's 64,000 output cap
AUTOCOMPACT_BUFFER = 13_000
MEMORY_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class CtxOptions:
    """Which of ctx_magic's mechanisms run (all of them by default)."""

    notes: bool = True
    """Session notes kept by a side call at turn ends (and used by session-memory compaction)."""
    memory: bool = True
    """Long-term memory extraction at session end (one side call)."""
    clearing: bool = True
    """Microcompact: old tool results cleared on idle and under pressure."""
    snip: bool = True
    """Snip: past 200 live messages the middle is cut out."""
    cc_threshold: bool = False
    """Auto-compact where Claude Code does (a 20,000 reply reserve) instead of ctx_magic's window/4."""
    late: bool = False
    """No early compaction below a standard window's size: only the threshold compacts (the rule
    before early compaction was weighed from Claude Code's trigger)."""
    tools_from_start: bool = False
    """The context tools offered from the first request (before they waited for a first cut)."""
    edit: bool = False
    """Append-only forced off on a model that checks the prefix of the thinking sent back: the
    client edits what it sent as on a model without the check (`ctx_magic-edit`)."""
    keep_idle_thinking: bool = False
    """No thinking cleared after an idle gap (the cache is cold, but what stays valid stays)."""
    server: bool = False
    """The 'server' strategy: the API clears old tool results and compacts where the model takes it."""
    drop_block: bool = False
    """Every call asks the API to drop the thinking blocks an edit invalidated instead of refusing
    the request (`thinking.block_binding` and its beta header)."""
    budget_by_density: bool = False
    """The tool-result budget's characters scaled by how much text the model's token holds against
    Claude 4's as well as by the window (a trial: fewer characters on the denser tokenizers)."""

    @classmethod
    def parse(cls, name: str) -> CtxOptions:
        """`ctx_magic` or `ctx_magic+no-notes+no-memory+no-clearing+no-snip` with any of the switches
        `+cc-threshold`, `+late`, `+tools-from-start`, `+keep-idle-thinking`, `+server`, `+budget-by-density`
        (any subset);
        `ctx_magic-edit` (append-only off, drop_block sent) and `ctx_magic-edit-refused` (append-only off, nothing
        sent: the prefix check refuses) take the same switches."""
        base = name.split("+")[0]
        if base not in EDIT_VARIANTS:
            raise ValueError(f"unknown ctx_magic variant {base!r} in {name!r}")
        options = cls(**EDIT_VARIANTS[base])
        for flag in name.split("+")[1:]:
            field_name = {"no-notes": "notes", "no-memory": "memory", "no-clearing": "clearing",
                          "no-snip": "snip"}.get(flag)
            switch = {"cc-threshold": "cc_threshold", "late": "late", "tools-from-start": "tools_from_start",
                      "keep-idle-thinking": "keep_idle_thinking", "server": "server",
                      "budget-by-density": "budget_by_density"}.get(flag)
            if field_name:
                options = dataclasses.replace(options, **{field_name: False})
            elif switch:
                options = dataclasses.replace(options, **{switch: True})
            else:
                raise ValueError(f"unknown ctx_magic option {flag!r} in {name!r}")
        return options


# -- the scripted executor --------------------------------------------------------------------------


class ScriptedExecutor(Executor):
    """Answers every tool call the loop hands over with the next recorded output."""

    def __init__(self, replay: Replay, clock: ManualClock) -> None:
        self.replay = replay
        self.runs = replay.tool_runs()
        self.clock = clock
        self.used = 0

    def tools(self) -> list[Tool]:
        """The recorded session's tools (their outputs can be read again: clearable), and the
        notebook cells it replays, recorded as ctx_magic records them."""
        return [*(Tool(dict(t), self.run) for t in self.replay.tools),
                Tool({"name": "notebook_cell"}, self.run, offered=False)]

    def run(self, call: ToolCall, _context: ToolContext | None = None) -> ToolOutput:
        if self.used >= len(self.runs):
            raise ReplayDesync(f"{self.replay.name}: a tool call past the recording: {call.name}")
        recorded = self.runs[self.used]
        if call.name != recorded.name or dict(call.input) != dict(recorded.input):
            raise ReplayDesync(f"{self.replay.name}: call {self.used} is {call.name} {dict(call.input)!r}, "
                               f"the recording has {recorded.name} {dict(recorded.input)!r}")
        self.used += 1
        self.clock.advance(TOOL_SECONDS)
        return ToolOutput(recorded.output, is_error=recorded.is_error)


# -- the run -------------------------------------------------------------------------------------


@contextlib.contextmanager
def lifted_call_limit() -> Iterator[None]:
    """A whole trajectory is one turn: the loop's per-turn call limit does not apply."""
    saved = loop_module.MAX_MODEL_CALLS_PER_TURN
    loop_module.MAX_MODEL_CALLS_PER_TURN = UNBOUNDED_CALLS
    try:
        yield
    finally:
        loop_module.MAX_MODEL_CALLS_PER_TURN = saved


@contextlib.contextmanager
def late_compaction(late: bool) -> Iterator[None]:
    """`+late`: an early compaction is weighed only past a standard window's size."""
    saved = decide_module.early_compaction_from
    if late:
        decide_module.early_compaction_from = lambda _thresholds: decide_module.EARLY_COMPACTION_FROM
    try:
        yield
    finally:
        decide_module.early_compaction_from = saved


@contextlib.contextmanager
def budget_by_density(on: bool, model: str) -> Iterator[None]:
    """`+budget-by-density`: the tool-result budget also scaled by the tokenizer's text density."""
    saved = engine_module.scaled_budget
    if on:
        density = CLAUDE_4.text_factor / family_of(model).text_factor
        engine_module.scaled_budget = lambda scale: saved(scale * density)
    try:
        yield
    finally:
        engine_module.scaled_budget = saved


@contextlib.contextmanager
def idle_thinking_kept(kept: bool) -> Iterator[None]:
    """`+keep-idle-thinking`: the engine clears no thinking after an idle gap."""
    saved = engine_module._clear_thinking
    if kept:
        engine_module._clear_thinking = lambda messages, state, _settings, _now: (messages, state, [])
    try:
        yield
    finally:
        engine_module._clear_thinking = saved


@contextlib.contextmanager
def storage_folder() -> Iterator[Path]:
    """A session folder at a fixed path (slot 0 unless another run holds it): the paths that end
    up in prompts (persisted outputs, the transcript) then count the same on every run."""
    base = Path(tempfile.gettempdir()) / f"ctx_magic-replay-{os.getuid()}"
    base.mkdir(exist_ok=True)
    slot = 0
    while True:
        path = base / f"s{slot}"
        try:
            path.mkdir()
            break
        except FileExistsError:
            slot += 1
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def agent_config(window: int, model: str, options: CtxOptions) -> Settings:
    config = Settings(model=model, context_window=window)
    if not options.clearing:
        config = dataclasses.replace(config, clear_at_least=NEVER, idle_minutes=NEVER)
    if not options.snip:
        config = dataclasses.replace(config, snip_max_messages=NEVER)
    if options.edit:
        config = dataclasses.replace(config, append_only="off")
    if options.server:
        config = dataclasses.replace(config, strategy="server")
    if options.cc_threshold:
        max_output = max(256, min(MAX_OUTPUT, window // 4))  # Session.max_output with a 64,000 cap
        effective = window - min(max_output, CC_RESERVE)
        cc_trigger = window - CC_RESERVE - round(AUTOCOMPACT_BUFFER * min(1.0, window / REFERENCE_WINDOW))
        config = dataclasses.replace(config, autocompact_pct=100.0 * cc_trigger / effective)
    return config


def thresholds_at(window: int, model: str, options: CtxOptions | None = None) -> Thresholds:
    """ctx_magic's thresholds at `window` on `model`, as a replayed session resolves them against the stand-in."""
    config = agent_config(window, model, options or CtxOptions())
    api = AnthropicModel(offline_client(OfflineAPI(OfflineConfig(window=window)), max_retries=0), name=model)
    resolved = config.resolve(api.limits())
    return compute_thresholds(resolved.tokens, resolved.reply_cap, autocompact_pct=config.autocompact_pct or None,
                              env={}, thinking_budget=resolved.thinking_budget)


class DropBlockModel(AnthropicModel):
    """ctx_magic's model, every call asking the API to drop thinking whose prefix changed
    (`thinking.block_binding.prefix_mismatch_behavior: "drop_block"`, with its beta header) where
    it would otherwise refuse the request. No thinking parameter means adaptive thinking on these
    models, so that is what the parameter says when the call sent none."""

    def stream(self, request: ModelRequest, on_text: Callable[[str], None] | None = None, *,
               on_thinking: Callable[[str], None] | None = None) -> ModelReply:
        return super().stream(with_drop_block(request), on_text, on_thinking=on_thinking)

    def count_tokens(self, request: ModelRequest) -> int:
        return super().count_tokens(with_drop_block(request))


def with_drop_block(request: ModelRequest) -> ModelRequest:
    if request.thinking is not None and request.thinking.get("type") == "disabled":  # no thinking: nothing to drop
        return request
    return request.dropping_invalid_thinking()


def count_event(events: Counter[str], event: Event) -> None:
    if isinstance(event, Compacted):
        events[event.trigger] += 1
    elif isinstance(event, Cleared):
        events["clear"] += 1
    elif isinstance(event, Persisted):
        events["persist"] += 1
    elif isinstance(event, Snipped):
        events["fold" if event.trigger == FOLD_TRIGGER else "snip"] += 1
    elif isinstance(event, CompactionFailedEvent):
        events["compaction-failed"] += 1


def count_thinking_cleared(cleared: Counter[str], event: Event) -> None:
    """Thinking ctx_magic took out of messages it still sends (after an idle gap, an edit, a
    compaction's kept turns), kept apart from the rewrites column."""
    if isinstance(event, ThinkingCleared):
        cleared["blocks"] += event.blocks
        cleared["tokens"] += event.tokens_freed


def absorb_cells(session: Session, cells: list[Any], now: float) -> None:
    """The controller's way: cells recorded since the last turn enter before the next one."""
    if cells and not any(m.sent for m in session.live.messages):
        session.append(user_text(CELLS_INTRO, timestamp=now))
    for cell in cells:
        cell_id = notebook_cell_id(cell.execution_count, f"{len(session.live.messages):012x}")  # same ids every run
        record = cell_record(cell.source, cell.execution_count, cell.outputs)
        for message in cell_messages(record, cell_id, DEFAULTS.image_max_bytes, now):
            session.append(message)


def play_session(session: Session, bench: Bench, keeper: NotesKeeper | None) -> Outcome:
    outcome = Outcome()
    for turn in bench.replay.turns:
        pending = []
        for cell in turn.cells:
            bench.clock.advance(cell.gap)
            if any(m.sent for m in session.live.messages):
                session.prepare()  # the controller's idle check when a cell runs
            pending.append(cell)
        bench.clock.advance(turn.gap)
        absorb_cells(session, pending, bench.clock())
        result = run_turn(session, turn.prompt)
        if keeper is not None:
            keeper.wait(NOTES_WAIT_SECONDS)
        if result.error:
            outcome.overflow, outcome.error = True, result.error
            break
    return outcome


def run_ctx_magic(bench: Bench, options: CtxOptions | None = None) -> Outcome:
    options = options or CtxOptions()
    events: Counter[str] = Counter()
    cleared: Counter[str] = Counter()
    with storage_folder() as root, lifted_call_limit(), late_compaction(options.late), \
            idle_thinking_kept(options.keep_idle_thinking), budget_by_density(options.budget_by_density, bench.model):
        model_class = DropBlockModel if options.drop_block else AnthropicModel
        model = model_class(offline_client(bench.meter, max_retries=0), name=bench.model,  # type: ignore[arg-type]
                            backend="offline")
        executor = ScriptedExecutor(bench.replay, bench.clock)
        config = dataclasses.replace(agent_config(bench.window, bench.model, options), thinking=bench.thinking_setting)
        session, _ = open_session(model, executor, root / ".ctx_magic", config, session_id="replay",
                                  system_prompt=bench.replay.system, root=root, clock=bench.clock)
        session.listeners.append(lambda event: count_event(events, event))
        session.listeners.append(lambda event: count_thinking_cleared(cleared, event))
        if options.tools_from_start:
            session.frame.offer_context_tools()
        keeper = NotesKeeper(session) if options.notes else None
        try:
            outcome = play_session(session, bench, keeper)
            if options.memory and not outcome.overflow:
                manager = MemoryManager(root / ".ctx_magic", root / "user-memory", clock=lambda: MEMORY_NOW)
                if extraction_due(session.live, session.compaction, session.tokens):
                    manager.extraction.run(SessionSource.of(session))
        finally:
            if keeper is not None:
                keeper.wait(NOTES_WAIT_SECONDS)
            session.recorder.close()
    outcome.events = events
    outcome.thinking_cleared = cleared
    if keeper is not None and keeper.last_error:
        events["notes-failed"] += 1
    return outcome
