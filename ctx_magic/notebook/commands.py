"""The magics' commands carried out on the current session: a turn, compact, snip, pin, unpin, the exact count."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ctx_magic.agent import compaction
from ctx_magic.agent.loop import TurnResult, run_turn
from ctx_magic.agent.session import Session
from ctx_magic.agent.undo import undo_last
from ctx_magic.context.pins import Pin
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import Event, Notice, Status, ThinkingCleared
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
from ctx_magic.notebook.wording import compacted_line, deferred_line, not_due_line, summary_line, undone_line


def cell_source(shell: Any, execution_count: int) -> str:
    """What the user typed in cell In[n] (a `# ctx: pin` marker line left out)."""
    history = getattr(shell, "history_manager", None)
    raw = getattr(history, "input_hist_raw", None) or shell.user_ns.get("In") or []
    if not 0 < execution_count < len(raw) or not str(raw[execution_count]).strip():
        raise CtxMagicError(f"There is no cell In[{execution_count}] in this kernel to pin.")
    source = str(raw[execution_count])
    return pinned_source(source) if pinned_source(source) is not None else source.strip("\n")


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
        self.idle.flush(session)
        self.cells.absorb(session)

    def run(self, prompt: str, *, display: TurnDisplay | None = None) -> TurnResult:
        with self.lock:
            self.idle.cancel()
            session = self.host.require()
            before: list[Event] = []  # what the settings did (a model switch drops thinking blocks)
            session.listeners.append(before.append)
            try:
                self._before_command(session)
            finally:
                session.listeners.remove(before.append)
            self.memory.before_turn(session)
            self.agent_cells.begin_turn()
            display = display or TurnDisplay(show_tools=self.settings.current.show_tool_output,
                                             record_for=self._record_of,
                                             output_path=lambda tool_use_id: str(session.store.tool_result_path(
                                                 tool_use_id)),
                                             offer=lambda call_id, code, record, ran: self.agent_cells.offer(
                                                 session.session_id, call_id, code, record, ran=ran))
            for event in [*self.idle.take_unshown(), *before]:
                display(event)
            self.panel.show_once()  # a turn may be the panel's first use in this kernel
            session.listeners.append(display)
            self.turn_running = True
            try:
                result = run_turn(session, prompt)
            finally:
                self.turn_running = False
                session.listeners.remove(display)
                self.panel.refresh()
            display.finish(summary_line(self.host.status(session), result))
            problem = self.memory.after_turn(session)
            if problem:
                display(Notice("warning", problem))
            self.idle.schedule(session)
            return result

    def _record_of(self, tool_use_id: str) -> Any:
        """What the agent's code printed and showed, when that call is the one that ran last."""
        return self.executor.last_record if self.executor.last_call == tool_use_id else None

    def compact(self, instructions: str | None, *, direction: str = "full", index: int | None = None) -> Any:
        with self.lock:
            session = self.host.require()
            self._before_command(session)
            if index is not None and not 0 <= index <= len(session.live.messages):
                option = "--from" if direction == "from" else "--up-to"
                raise CtxMagicError(f"{option} {index} is outside the live context, which has "
                                    f"{len(session.live.messages)} messages (numbered from 0).")
            session.prepare()
            display = TurnDisplay()
            session.listeners.append(display)
            try:
                result = compaction.manual_compact(session, instructions, direction=direction, index=index)
            finally:
                session.emit(Status("idle"))
                session.listeners.remove(display)
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
            session = self.host.require()
            dropped: list[Event] = []
            session.listeners.append(dropped.append)
            try:
                count = session.live.snip(keep_last, session.clock(), session.setup())
            finally:
                session.listeners.remove(dropped.append)
            session.end_turn()
            self.panel.refresh()
            return count, [thinking_cleared_line(e) for e in dropped if isinstance(e, ThinkingCleared)]

    def pin(self, text: str | None = None, *, cell: int | None = None) -> Pin:
        """Pin an instruction, or the source of the cell with execution count `cell`."""
        with self.lock:
            session = self.host.require()
            self._before_command(session)
            if cell is not None:
                text = cell_source(self.shell, cell)
            pin = session.pin_board.pin(text or "", cell=cell)
            session.end_turn()
            self.panel.refresh()
            return pin

    def unpin(self, pin_id: str) -> Pin | None:
        with self.lock:
            session = self.host.require()
            removed = session.pin_board.unpin(pin_id)
            session.end_turn()
            self.panel.refresh()
            return removed

    def count_line(self) -> str:
        """The exact size from the API's count_tokens beside the estimate; the estimate alone
        when the endpoint fails."""
        session = self.host.require()
        self.cells.absorb(session)
        setup = session.setup()
        estimate = session.prepare(setup)[0].count.tokens
        try:
            exact = session.frame.model.count_tokens(session.request(setup))
        except CtxMagicError as error:
            return f"Estimated context: {estimate:,} tokens (count_tokens unavailable: {error})"
        drift = (estimate - exact) / exact * 100 if exact else 0.0
        return (f"Exact context: {exact:,} tokens (count_tokens API); the estimate was {estimate:,} "
                f"({drift:+.1f}%).")
