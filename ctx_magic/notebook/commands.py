"""The magics' commands carried out on the current session: a turn, compact, snip, pin, unpin, the exact count."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ctx_magic.agent import compaction
from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.loop import TurnResult, run_turn
from ctx_magic.agent.pin_board import PinBoard
from ctx_magic.agent.request import RequestFrame
from ctx_magic.agent.session import Session
from ctx_magic.agent.status import StatusSnapshot
from ctx_magic.agent.undo import undo_last
from ctx_magic.context.pins import Pin
from ctx_magic.errors import CtxMagicError, NoSession
from ctx_magic.events import Event, Notice, Status, ThinkingCleared, listening
from ctx_magic.notebook.agent_cells import AgentCells
from ctx_magic.notebook.cells import CellCapture
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.display import TurnDisplay
from ctx_magic.notebook.executor import KernelExecutor
from ctx_magic.notebook.host import SessionHost
from ctx_magic.notebook.idle import IdleWatch
from ctx_magic.notebook.memory_link import MemoryLink
from ctx_magic.notebook.notices import thinking_cleared_line
from ctx_magic.notebook.outputs import pinned_source
from ctx_magic.notebook.panel_link import PanelLink
from ctx_magic.notebook.wording import (
    compacted_line,
    deferred_line,
    not_due_line,
    pins_listing,
    summary_line,
    undone_line,
)
from ctx_magic.store.session import SessionDir


def cell_source(shell: Any, execution_count: int) -> str:
    """What the user typed in cell In[n] (a `# ctx: pin` marker line left out)."""
    history = getattr(shell, "history_manager", None)
    raw = getattr(history, "input_hist_raw", None) or shell.user_ns.get("In") or []
    if not 0 < execution_count < len(raw) or not str(raw[execution_count]).strip():
        raise CtxMagicError(f"There is no cell In[{execution_count}] in this kernel to pin.")
    source = str(raw[execution_count])
    return pinned_source(source) if pinned_source(source) is not None else source.strip("\n")


@dataclass(frozen=True)
class SessionParts:
    """The parts of the current session the commands act on beside the session itself, handed
    over by the controller when the session opens."""

    live: LiveContext
    """The live context: its messages bound `%compact --from/--up-to`, `%snip` cuts it."""
    pins: PinBoard
    store: SessionDir
    """Where the agent's saved outputs are (the turn's display links them)."""
    frame: RequestFrame
    """The model `%ctx count` asks for the exact count."""


@dataclass(eq=False)
class Commands:
    """Runs turns and the context commands under one lock, and renders what happened."""

    shell: Any
    """The IPython shell: its input history is where `%pin --cell N` finds a cell's source."""
    lock: threading.RLock
    """Shared with the idle watch: a turn, a command and an idle clearing never overlap."""
    host: SessionHost
    cells: CellCapture
    idle: IdleWatch
    memory: MemoryLink
    panel: PanelLink
    executor: KernelExecutor
    settings: CtxMagic
    """The settings in force (`show_tool_output` is read at each turn)."""
    agent_cells: AgentCells
    """Offers each block of the agent's code as a notebook cell."""
    turn_running: bool = field(default=False, init=False)
    """True while an agent turn runs: the agent's own code must not start another, or compact."""
    _parts: SessionParts | None = field(default=None, init=False)

    def attach(self, parts: SessionParts) -> None:
        """A session opened: the commands act on its parts from now on."""
        self._parts = parts

    def _current(self) -> tuple[Session, SessionParts]:
        """The current session and its parts (NoSession, in one line, when there is none)."""
        session = self.host.require()
        if self._parts is None:
            raise NoSession("There is no agent session yet: run a %%agent cell first.")
        return session, self._parts

    def refuse_inside_turn(self, what: str) -> None:
        """The agent's code calling %%agent or %compact would edit the context mid-turn (the loop
        owns it until the turn ends), or, from a background run, beside the user's own turns."""
        if self.turn_running:
            raise CtxMagicError(f"An agent turn is running: {what} cannot be used from inside it.")
        if self.executor.runs.io.current() is not None:
            raise CtxMagicError(f"The agent's running code cannot use {what}.")

    def _before_command(self, session: Session) -> None:
        """What every turn and context command starts with: settings, deferred writes, new cells."""
        self.host.apply_settings(session)
        self.idle.flush()
        self.cells.absorb()

    def run(self, prompt: str, *, display: TurnDisplay | None = None) -> TurnResult:
        with self.lock:
            self.idle.cancel()
            session, parts = self._current()
            before: list[Event] = []  # what the settings did (a model switch drops thinking blocks)
            with listening(session.listeners, before.append):
                self._before_command(session)
            self.memory.before_turn(session.plugins, parts.frame)
            self.agent_cells.begin_turn()
            store = parts.store
            display = display or TurnDisplay(show_tools=self.settings.current.show_tool_output,
                                             record_for=self._record_of,
                                             output_path=lambda tool_use_id: str(store.tool_result_path(tool_use_id)),
                                             offer=lambda call_id, code, record, ran: self.agent_cells.offer(
                                                 session.session_id, call_id, code, record, ran=ran))
            for event in [*self.idle.take_unshown(), *before]:
                display(event)
            self.panel.show_once()  # a turn may be the panel's first use in this kernel
            self.turn_running = True
            try:
                with listening(session.listeners, display):
                    result = run_turn(session, prompt)
            finally:
                self.turn_running = False
                self.panel.refresh()
            display.finish(summary_line(self._settled_status(session), result))
            problem = self.memory.after_turn(session)
            if problem:
                display(Notice("warning", problem))
            self.idle.schedule()
            return result

    def _settled_status(self, session: Session) -> StatusSnapshot:
        """The status a turn's Done line shows, which the panel shows too. A compaction the next turn
        makes stands on the session's notes written now at the turn's end (a compaction waits for
        them as long): priced once they are in, the Done line and the panel name the same price."""
        status = self.host.status(session)
        if status.ahead is not None:  # read again once settled: notes may also end between the two reads
            session.settle_notes()
            status = self.host.status(session)
            self.panel.refresh()
        return status

    def _record_of(self, tool_use_id: str) -> Any:
        """What the agent's code printed and showed, when that call is the one that ran last."""
        return self.executor.last_record if self.executor.last_call == tool_use_id else None

    def compact(self, instructions: str | None, *, direction: str = "full", index: int | None = None) -> Any:
        with self.lock:
            session, parts = self._current()
            self._before_command(session)
            held = len(parts.live.messages)
            if index is not None and not 0 <= index <= held:
                option = "--from" if direction == "from" else "--up-to"
                raise CtxMagicError(f"{option} {index} is outside the live context, which has "
                                    f"{held} messages (numbered from 0).")
            session.prepare()
            display = TurnDisplay()
            try:
                with listening(session.listeners, display):
                    try:
                        result = compaction.manual_compact(session, instructions, direction=direction, index=index)
                    finally:
                        session.emit(Status("idle"))
            finally:
                session.end_turn()
            display.finish(compacted_line(session.status()))
            self.panel.refresh()
            return result

    def defer_compaction(self) -> str:
        """`%compact --not-now`: the next turn goes through without the automatic compaction the
        last Done line announced, while the context fits under the blocking limit."""
        with self.lock:
            session = self.host.require()
            ahead = session.status().ahead
            if ahead is None:
                return not_due_line()
            session.defer_compaction()
            return deferred_line(ahead)

    def undo(self, key: str | None = None) -> str:
        """`%compact --undo` (or the Undo on a compaction's card, which names it by `key`): the last
        compaction, snip or clearing taken back; the line saying what came back."""
        with self.lock:
            session = self.host.require()
            self._before_command(session)
            try:
                result = undo_last(session, key)
            finally:
                session.end_turn()
                self.panel.refresh()
            return undone_line(result)

    def snip(self, keep_last: int) -> tuple[int, list[str]]:
        """The messages snipped, and a line for each drop of the thinking the snip invalidated."""
        with self.lock:
            session, parts = self._current()
            dropped: list[Event] = []
            with listening(session.listeners, dropped.append):
                count = parts.live.snip(keep_last, session.clock(), session.setup())
            session.end_turn()
            self.panel.refresh()
            return count, [thinking_cleared_line(e) for e in dropped if isinstance(e, ThinkingCleared)]

    def pin(self, text: str | None = None, *, cell: int | None = None) -> Pin:
        """Pin an instruction, or the source of the cell with execution count `cell`."""
        with self.lock:
            session, parts = self._current()
            self._before_command(session)
            if cell is not None:
                text = cell_source(self.shell, cell)
            pin = parts.pins.pin(text or "", cell=cell)
            session.end_turn()
            self.panel.refresh()
            return pin

    def unpin(self, pin_id: str) -> Pin | None:
        with self.lock:
            session, parts = self._current()
            removed = parts.pins.unpin(pin_id)
            session.end_turn()
            self.panel.refresh()
            return removed

    def pins_listing(self) -> str:
        """`%pin --list`, against the budget in force."""
        _, parts = self._current()
        return pins_listing(parts.pins.pins, parts.frame.settings.pin_budget_tokens)

    def count_line(self) -> str:
        """The exact size from the API's count_tokens beside the estimate; the estimate alone
        when the endpoint fails."""
        session, parts = self._current()
        self.cells.absorb()
        setup = session.setup()
        estimate = session.prepare(setup)[0].count.tokens
        try:
            exact = parts.frame.model.count_tokens(session.request(setup))
        except CtxMagicError as error:
            return f"Estimated context: {estimate:,} tokens (count_tokens unavailable: {error})"
        drift = (estimate - exact) / exact * 100 if exact else 0.0
        return (f"Exact context: {exact:,} tokens (count_tokens API); the estimate was {estimate:,} "
                f"({drift:+.1f}%).")
