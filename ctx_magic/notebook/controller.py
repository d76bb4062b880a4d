"""Everything ctx_magic keeps in one kernel, put together: the settings, the session host, the
cell capture, the idle watch, the panel and memory links, and the agent's executor.

The magics are thin: they parse options and call this controller, which runs turns and the
context commands under one lock, and renders what happened through the display.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctx_magic.agent import compaction
from ctx_magic.agent.loop import TurnResult, run_turn
from ctx_magic.agent.session import Session
from ctx_magic.context.pins import Pin
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import Event, Notice, Status, ToolOutputDelta, notify
from ctx_magic.notebook.backend import Backend
from ctx_magic.notebook.capture import OutputRecorder, pinned_source
from ctx_magic.notebook.cells import CellCapture
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.display import TurnDisplay, notice, show_approval_request
from ctx_magic.notebook.executor import KernelExecutor, find_notebook_path
from ctx_magic.notebook.host import SessionHost
from ctx_magic.notebook.idle import IdleWatch
from ctx_magic.notebook.memory_link import MemoryLink
from ctx_magic.notebook.panel_link import PanelLink, in_jupyter_server
from ctx_magic.notebook.wording import compacted_line, summary_line


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
        self.turn_running = False
        """True while an agent turn runs: the agent's own code must not start another, or compact."""
        self._display: TurnDisplay | None = None
        output = OutputRecorder(shell, image_max_bytes=lambda: self.settings.image_max_bytes)
        self.executor = KernelExecutor(shell, output, permission=lambda: self.settings.permission,
                                       image_max_bytes=lambda: self.settings.image_max_bytes,
                                       notebook_path=self.notebook_path, show_code=self._ask_to_run,
                                       inventory_tokens=lambda: self.settings.kernel_inventory_tokens)
        self.executor.on_output = self._tool_output
        self.cells = CellCapture(output, image_max_bytes=lambda: self.settings.image_max_bytes, clock=self.now)
        self.memory = MemoryLink(self.settings.to_settings, self.storage_dir)
        self.panel = PanelLink(session_memory=self.memory.notes_text, memories=self.memory.rows)
        self.listeners.append(self.panel.handle)
        self.host = SessionHost(settings=self.settings.to_settings, env=self.env, clock=self.now,
                                executor=self.executor, root=self.root, storage_dir=self.storage_dir,
                                opened=self._opened, closing=self._closing, backend=backend)
        self.idle = IdleWatch(self.lock, lambda: self.host.session)
        self.settings.observe(lambda change: self.host.retries_changed(change["new"]), names="max_retries")

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

    def _ask_to_run(self, code: str) -> None:
        """`ask` mode, before the question: the code on screen, and a status that says why we wait."""
        if self._display is not None:
            self._display.awaiting_approval()
        show_approval_request(code)

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
        self.host.carried = session_id
        self.cells.carry(pending)

    def _opened(self, session: Session) -> None:
        session.listeners.append(lambda event: notify(self.listeners, event))
        self.cells.attach(session.store)  # cells run from now on survive a kernel restart
        self.memory.attach(session)
        self.panel.attach(session)

    def _closing(self, session: Session, extract: bool) -> None:
        self.memory.session_ended(session, extract=extract)

    def require_session(self) -> Session:
        if self.session is None and self.host.carried:
            raise CtxMagicError(f"Session {self.host.carried} goes on at the next %%agent (the extension was "
                                "reloaded).")
        if self.session is None:
            raise CtxMagicError("There is no agent session yet: run a %%agent cell first.")
        return self.session

    def refuse_inside_turn(self, what: str) -> None:
        """The agent's code calling %%agent or %compact would edit the context mid-turn (M5)."""
        if self.turn_running:
            raise CtxMagicError(f"An agent turn is running: {what} cannot be used from inside it.")

    def _before_command(self, session: Session) -> None:
        """What every turn and context command starts with: settings, deferred writes, new cells."""
        self.host.apply_settings(session)
        self.idle.flush(session)
        self.cells.absorb(session)

    # -- turns and context commands ------------------------------------------------------------------

    def run(self, prompt: str, *, display: TurnDisplay | None = None) -> TurnResult:
        with self.lock:
            self.idle.cancel()
            session = self.require_session()
            before: list[Event] = []  # what the settings did (a model switch drops thinking blocks)
            session.listeners.append(before.append)
            try:
                self._before_command(session)
            finally:
                session.listeners.remove(before.append)
            self.memory.before_turn(session)
            display = display or TurnDisplay(show_tools=self.settings.show_tool_output,
                                             record_for=lambda _id: self.executor.last_record,
                                             output_path=lambda tool_use_id: str(session.store.tool_result_path(
                                                 tool_use_id)))
            for event in [*self.idle.take_unshown(), *before]:
                display(event)
            self.show_panel_once()
            session.listeners.append(display)
            self.turn_running, self._display = True, display
            try:
                result = run_turn(session, prompt)
            finally:
                self.turn_running, self._display = False, None
                session.listeners.remove(display)
                self.panel.refresh()
            display.finish(summary_line(session.status(), result))
            problem = self.memory.after_turn(session)
            if problem:
                display(Notice("warning", problem))
            self.idle.schedule(session)
            return result

    def compact(self, instructions: str | None, *, direction: str = "full", index: int | None = None) -> Any:
        with self.lock:
            session = self.require_session()
            self._before_command(session)
            if index is not None and not 0 <= index <= len(session.messages):
                option = "--from" if direction == "from" else "--up-to"
                raise CtxMagicError(f"{option} {index} is outside the live context, which has "
                                    f"{len(session.messages)} messages (numbered from 0).")
            session.live.prepare()
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

    def snip(self, keep_last: int) -> int:
        with self.lock:
            session = self.require_session()
            count = session.live.snip(keep_last)
            session.end_turn()
            self.panel.refresh()
            return count

    def pin(self, text: str | None = None, *, cell: int | None = None) -> Pin:
        """Pin an instruction, or the source of the cell with execution count `cell`."""
        with self.lock:
            session = self.require_session()
            self._before_command(session)
            if cell is not None:
                text = self.cell_source(cell)
            pin = session.pin_board.pin(text or "", cell=cell)
            session.end_turn()
            self.panel.refresh()
            return pin

    def unpin(self, pin_id: str) -> Pin | None:
        with self.lock:
            session = self.require_session()
            removed = session.pin_board.unpin(pin_id)
            session.end_turn()
            self.panel.refresh()
            return removed

    def cell_source(self, execution_count: int) -> str:
        """What the user typed in cell In[n] (a `# ctx: pin` marker line left out)."""
        history = getattr(self.shell, "history_manager", None)
        raw = getattr(history, "input_hist_raw", None) or self.shell.user_ns.get("In") or []
        if not 0 < execution_count < len(raw) or not str(raw[execution_count]).strip():
            raise CtxMagicError(f"There is no cell In[{execution_count}] in this kernel to pin.")
        source = str(raw[execution_count])
        return pinned_source(source) if pinned_source(source) is not None else source.strip("\n")

    def count_line(self) -> str:
        """The exact size from the API's count_tokens (T3) beside the estimate; the estimate alone
        when the endpoint fails."""
        session = self.require_session()
        self.cells.absorb(session)
        estimate = session.live.prepare().tokens
        try:
            exact = session.model.count_tokens(session.request())
        except CtxMagicError as error:
            return f"Estimated context: {estimate:,} tokens (count_tokens unavailable: {error})"
        drift = (estimate - exact) / exact * 100 if exact else 0.0
        return (f"Exact context: {exact:,} tokens (count_tokens API); the estimate was {estimate:,} "
                f"({drift:+.1f}%).")

    def show_sidebar(self, *, inline: bool = False) -> None:
        self.require_session()
        self.panel.show(sidebar=not inline and self.in_jupyter_server())

    def memory_command(self, args: Any) -> None:
        args.session_id = self.session.session_id if self.session is not None else ""
        self.memory.command(args, self.require_session)
        self.panel.refresh()

    def close(self) -> None:
        """Unload or kernel exit: the session ends and its memories are extracted (bounded wait)."""
        self.idle.cancel()
        self.cells.abandon()
        self.host.end()
        self.memory.wait()
