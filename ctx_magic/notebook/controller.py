"""Everything ctx_magic keeps in one kernel, put together: the settings, where the kernel works,
the session host, the cell capture, the idle watch, the panel and memory links, the agent's
executor, and the commands (commands.py) that carry out the magics' turns and context commands.

This is the composition root: it makes each object once and hands it the objects it uses. The
magics are thin: they parse options and call this controller for sessions, and its `commands`
for turns and the context commands.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ctx_magic.agent.session import Session
from ctx_magic.agent.status import ContextReport
from ctx_magic.events import Event, notify
from ctx_magic.notebook.agent_cells import AgentCells
from ctx_magic.notebook.backend import Backend
from ctx_magic.notebook.capture import OutputRecorder
from ctx_magic.notebook.cells import CellCapture
from ctx_magic.notebook.commands import Commands, SessionParts
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.display import notice
from ctx_magic.notebook.executor import KernelExecutor
from ctx_magic.notebook.history import KernelHistory, cells_held
from ctx_magic.notebook.host import SessionHost
from ctx_magic.notebook.idle import IdleWatch
from ctx_magic.notebook.memory_link import MemoryLink
from ctx_magic.notebook.panel_link import PanelLink
from ctx_magic.notebook.runs.board import RunBoard
from ctx_magic.notebook.runs.news import elsewhere
from ctx_magic.notebook.workspace import Workspace
from ctx_magic.store.files import make_storage_folder, open_private_append
from ctx_magic.store.session import SessionDir


class Controller:
    """One per kernel: created by %load_ext ctx_magic."""

    def __init__(self, shell: Any, *, env: dict[str, str] | None = None, clock: Callable[[], float] = time.time,
                 backend: Backend | None = None) -> None:
        self.shell = shell
        self.clock = clock
        """The kernel's clock (tests put a manual one here: everything below reads it through `now`)."""
        self.settings = CtxMagic(parent=shell)
        self.workspace = Workspace(shell, dict(os.environ) if env is None else env, self.settings)
        self.lock = threading.RLock()
        self.listeners: list[Callable[[Event], None]] = []
        """Hear every event of the current session (the panel, and tests)."""
        self.runs = RunBoard(shell, self.settings, self._tasks_folder, clock)
        """The agent's runs of code: foreground, background, their stalls (its own clock, for tests)."""
        output = OutputRecorder(shell, self.settings, owned_elsewhere=lambda: self.runs.io.current() is not None)
        history = KernelHistory(shell, self._cells_held)
        self.executor = KernelExecutor(shell, output, self.settings, self.workspace, self.runs,
                                       extra_tools=(history.tool(),))
        self.agent_cells = AgentCells(shell, self.settings)
        """The agent's code offered as notebook cells (the labextension's, or next-input)."""
        self.cells = CellCapture(output, self.settings, self.now)
        self.memory = MemoryLink(self.settings, self.workspace)
        self.host = SessionHost(self.settings, self.workspace, self.executor, self.memory, self.now, backend=backend)
        self.panel = PanelLink(self.memory, self.workspace, runs=self.runs, status=self.host.status)
        self.listeners.append(self.panel.handle)
        self.runs.listeners.append(self.panel.runs_changed)
        self.idle = IdleWatch(self.lock, self.host, on_cold=self.panel.refresh)
        self.settings.observe(self.host.retries_changed, names="max_retries")
        self._store: SessionDir | None = None
        """The current session's folder (its `tasks/` keeps the background runs' logs)."""
        self._running_cell: Any = None
        """The ExecutionInfo of the notebook cell the kernel runs now (the cells it runs inside it are its own)."""
        self.commands = Commands(shell, self.lock, self.host, self.cells, self.idle, self.memory, self.panel,
                                 self.executor, self.settings, self.agent_cells)
        """Turns and the context commands (%%agent's message, %compact, %pin, %ctx count)."""
        self.panel.undo_with(self.commands.undo)  # a compaction card's Undo

    def now(self) -> float:
        return self.clock()

    def context_report(self) -> ContextReport:
        """The current session's figures (`ctx_magic.context()`); NoSession when there is none."""
        return self.host.status(self.host.require()).report()

    def _cells_held(self) -> set[int]:
        """The cells of this kernel the current session's live context holds (kernel_history leaves them out)."""
        return cells_held(self.cells.live_messages()) if self.host.session is not None else set()

    def _tasks_folder(self) -> Any:
        """The current session's `tasks/` folder (where background runs keep their logs)."""
        return self._store.tasks_dir if self.host.session is not None and self._store is not None else None

    # -- IPython's cell hooks: the cells the user runs, the idle check ----------------------------

    def pre_run_cell(self, info: Any) -> None:
        if self.executor.running:
            return
        if self._running_cell is not None and not getattr(info, "store_history", True):
            return  # run from inside the running cell (%%capture, get_ipython().run_cell): a part of that cell
        self._running_cell = info
        try:
            self.runs.io.ensure()  # above IPython's own wrapping of this cell's streams: a run's output stays its own
            self.agent_cells.cell_started(info)
            if self.idle.check():
                self.panel.refresh()
            self.cells.start(info)
        except Exception as error:  # noqa: BLE001 - a hook must never put our traceback in a user's cell
            self.cells.abandon()
            self.report_internal_error(error)

    def post_run_cell(self, result: Any) -> None:
        if self.executor.running:
            return
        if self._running_cell is not None and getattr(result, "info", None) is not self._running_cell:
            return  # the end of a cell run from inside the running one
        self._running_cell = None
        try:
            self.agent_cells.cell_finished(getattr(getattr(result, "info", None), "raw_cell", "") or "")
        except Exception as error:  # noqa: BLE001 - as below: one line, never our traceback
            self.report_internal_error(error)
        if not self.cells.recording:
            return
        try:
            self.cells.finish(result)
        except Exception as error:  # noqa: BLE001 - as above: one line, the cell is left out
            self.cells.abandon()
            self.report_internal_error(error)

    def report_internal_error(self, error: BaseException) -> None:
        """A bug of ours: one line in the cell, the traceback in errors.log when it can be written."""
        where = "it could not be saved"
        try:
            path = self.workspace.storage_dir() / "errors.log"
            make_storage_folder(path.parent)
            with open_private_append(path) as log:
                log.write(("".join(traceback.format_exception(error)) + "\n").encode("utf-8"))
            where = f"details in {path}"
        except Exception:  # noqa: BLE001 - the storage folder itself may be the problem
            pass
        notice(f"ctx_magic hit an internal error ({type(error).__name__}: {error}); {where}.", "error")

    # -- sessions ----------------------------------------------------------------------------------

    def ensure_session(self, *, new: bool = False, resume: str | None = None,
                       model: str | None = None, permission: str | None = None) -> tuple[Session, list[str]]:
        """The current session, a new one, or a stored one resumed; `model` switches the model
        for the next turns (after checking the API knows it) and the conversation goes on;
        `permission` is set first, and stays set whatever happens next."""
        if permission:
            self.settings.permission = permission
        current, model_before = self.host.session, self.settings.current.model
        if model:
            self.host.check_model(model)
            self.settings.model = model
        try:
            session, notes = self.host.ensure(new=new, resume=resume)
        except BaseException:
            self.settings.model = model_before  # a session that could not be opened changes no setting
            raise
        if session is not current:
            self._wire(session)
            if current is not None:  # the runs of the sessions before, now that this one's folder is the current
                notes += elsewhere(self.runs)
        self.panel.show_once()
        return session, notes

    def _wire(self, session: Session) -> None:
        """A session opened: the one place the notebook takes it apart, each part handed the
        pieces of it that it uses (no part reaches through the session for another's)."""
        store, live, frame, listeners = session.store, session.live, session.frame, session.listeners
        self._store = store
        self._follow(listeners)
        self.cells.attach(store, live, session.pin_board, session.append, session.notice)  # survive a restart
        self.idle.attach(live, frame, listeners, session.prepare, session.clock)
        self.commands.attach(SessionParts(live, session.pin_board, store, frame))
        self.memory.attach(session)
        self.panel.attach(session, store, live, frame)

    def _follow(self, listeners: list[Callable[[Event], None]]) -> None:
        """Everyone listening to the kernel's sessions hears this session's events (`listeners`)."""
        listeners.append(self._heard)

    def _heard(self, event: Event) -> None:
        """An event of the current session, for everyone listening to the kernel's sessions."""
        notify(self.listeners, event)

    def carry_on(self, session_id: str | None, pending: list[Any]) -> None:
        """After `%reload_ext`: resume this session at the next turn, with the cells recorded before."""
        self.host.carry(session_id)
        self.cells.carry(pending)

    def show_sidebar(self, *, inline: bool = False) -> None:
        self.host.require()
        self.panel.show(sidebar=not inline and self.workspace.in_jupyter_server())

    def close(self) -> None:
        """Unload or kernel exit: the session ends and its memories are extracted (bounded wait)."""
        self.idle.cancel()
        self.cells.abandon()
        self.runs.close()
        self.host.end()
        self.memory.wait()
