"""Everything ctx_magic keeps in one kernel, put together: the settings, the session host, the
cell capture, the idle watch, the panel and memory links, the agent's executor, and the
commands (commands.py) that carry out the magics' turns and context commands.

The magics are thin: they parse options and call this controller for sessions, and its
`commands` for turns and the context commands.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctx_magic.agent.session import Session
from ctx_magic.events import Event, ToolOutputDelta, notify
from ctx_magic.notebook.backend import Backend
from ctx_magic.notebook.capture import OutputRecorder
from ctx_magic.notebook.cells import CellCapture
from ctx_magic.notebook.commands import Commands
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.display import notice
from ctx_magic.notebook.executor import KernelExecutor, find_notebook_path
from ctx_magic.notebook.host import SessionHost
from ctx_magic.notebook.idle import IdleWatch
from ctx_magic.notebook.memory_link import MemoryLink
from ctx_magic.notebook.panel_link import PanelLink, in_jupyter_server


class Controller:
    """One per kernel: created by %load_ext ctx_magic."""

    def __init__(self, shell: Any, *, env: dict[str, str] | None = None, clock: Callable[[], float] = time.time,
                 backend: Backend | None = None) -> None:
        self.shell = shell
        self.env = dict(os.environ) if env is None else env
        self.clock = clock
        self.settings = CtxMagic(parent=shell)
        self.lock = threading.RLock()
        self.listeners: list[Callable[[Event], None]] = []
        """Hear every event of the current session (the panel, and tests)."""
        output = OutputRecorder(shell, image_max_bytes=lambda: self.settings.image_max_bytes)
        self.executor = KernelExecutor(shell, output, permission=lambda: self.settings.permission,
                                       image_max_bytes=lambda: self.settings.image_max_bytes,
                                       notebook_path=self.notebook_path,
                                       show_code=lambda code: self.commands.ask_to_run(code),
                                       inventory_tokens=lambda: self.settings.kernel_inventory_tokens,
                                       on_output=self._tool_output)
        self.cells = CellCapture(output, image_max_bytes=lambda: self.settings.image_max_bytes, clock=self.now)
        self.memory = MemoryLink(self.settings.to_settings, self.storage_dir)
        self.panel = PanelLink(session_memory=self.memory.notes_text, memories=self.memory.rows)
        self.listeners.append(self.panel.handle)
        self.host = SessionHost(settings=self.settings.to_settings, env=self.env, clock=self.now,
                                executor=self.executor, root=self.root, storage_dir=self.storage_dir,
                                opened=self._opened, closing=self._closing, backend=backend)
        self.idle = IdleWatch(self.lock, lambda: self.host.session)
        self.settings.observe(lambda change: self.host.retries_changed(change["new"]), names="max_retries")
        self.commands = Commands(shell=shell, lock=self.lock, host=self.host, cells=self.cells, idle=self.idle,
                                 memory=self.memory, panel=self.panel, executor=self.executor,
                                 show_tool_output=lambda: self.settings.show_tool_output,
                                 show_panel=self.show_panel_once)
        """Turns and the context commands (%%agent's message, %compact, %pin, %ctx count)."""

    @property
    def session(self) -> Session | None:
        return self.host.session

    def now(self) -> float:
        return self.clock()

    # -- where things live ---------------------------------------------------------------------

    def notebook_path(self) -> Path | None:
        return find_notebook_path(self.shell.user_ns, self.env)

    def storage_dir(self) -> Path:
        if self.settings.storage_dir:
            return Path(self.settings.storage_dir).expanduser().resolve()
        notebook = self.notebook_path()
        return (notebook.parent if notebook else Path.cwd()) / ".ctx_magic"

    def root(self) -> Path:
        notebook = self.notebook_path()
        return notebook.parent if notebook else Path.cwd()

    def in_jupyter_server(self) -> bool:
        return in_jupyter_server(self.env, self.shell.user_ns)

    # -- IPython's cell hooks (SPEC N2, L3's idle check) ------------------------------------------

    def pre_run_cell(self, info: Any) -> None:
        if self.executor.running:
            return
        try:
            if self.idle.check():
                self.panel.refresh()
            self.cells.start(info)
        except Exception as error:  # noqa: BLE001 - a hook must never put our traceback in a user's cell
            self.cells.abandon()
            self.report_internal_error(error)

    def post_run_cell(self, result: Any) -> None:
        if self.executor.running or not self.cells.recording:
            return
        try:
            self.cells.finish(result)
        except Exception as error:  # noqa: BLE001 - as above: one line, the cell is left out
            self.cells.abandon()
            self.report_internal_error(error)

    def _tool_output(self, text: str) -> None:
        if self.session is not None:
            self.session.emit(ToolOutputDelta(text))

    def report_internal_error(self, error: BaseException) -> None:
        """A bug of ours: one line in the cell, the traceback in errors.log when it can be written."""
        where = "it could not be saved"
        try:
            path = self.storage_dir() / "errors.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as log:
                log.write("".join(traceback.format_exception(error)) + "\n")
            where = f"details in {path}"
        except Exception:  # noqa: BLE001 - the storage folder itself may be the problem
            pass
        notice(f"ctx_magic hit an internal error ({type(error).__name__}: {error}); {where}.", "error")

    # -- sessions ----------------------------------------------------------------------------------

    def ensure_session(self, *, new: bool = False, resume: str | None = None,
                       model: str | None = None) -> tuple[Session, list[str]]:
        """The current session, a new one, or a stored one resumed; `model` switches the model
        for the next turns (after checking the API knows it) and the conversation goes on."""
        if model:
            self.host.check_model(model)
            self.settings.model = model
        session, notes = self.host.ensure(new=new, resume=resume)
        self.show_panel_once()
        return session, notes

    def show_panel_once(self) -> None:
        """In JupyterLab or Notebook 7, the sidebar's anchor once per kernel (after a restart, the
        first %agent or %%agent of the new kernel shows it again)."""
        if not self.panel.anchor_shown and self.in_jupyter_server():
            self.panel.show(sidebar=True)

    def carry_on(self, session_id: str | None, pending: list[Any]) -> None:
        """After `%reload_ext`: resume this session at the next turn, with the cells recorded before."""
        self.host.carry(session_id)
        self.cells.carry(pending)

    def _opened(self, session: Session) -> None:
        session.listeners.append(lambda event: notify(self.listeners, event))
        self.cells.attach(session.store)  # cells run from now on survive a kernel restart
        self.memory.attach(session)
        self.panel.attach(session)

    def _closing(self, session: Session, extract: bool) -> None:
        self.memory.session_ended(session, extract=extract)

    def show_sidebar(self, *, inline: bool = False) -> None:
        self.host.require()
        self.panel.show(sidebar=not inline and self.in_jupyter_server())

    def memory_command(self, args: Any) -> None:
        args.session_id = self.session.session_id if self.session is not None else ""
        self.memory.command(args, self.host.require)
        self.panel.refresh()

    def close(self) -> None:
        """Unload or kernel exit: the session ends and its memories are extracted (bounded wait)."""
        self.idle.cancel()
        self.cells.abandon()
        self.host.end()
        self.memory.wait()
