"""Everything ctx_magic keeps in one kernel: settings, the session, the cells waiting to enter
the context, the idle check, and the listeners (display, panel) of the session's events.

The magics are thin: they parse options and call this controller.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctx_magic.agent import compaction
from ctx_magic.agent.loop import TurnResult, run_turn
from ctx_magic.agent.model import AnthropicModel, Backend, choose_backend
from ctx_magic.agent.session import Session, open_session
from ctx_magic.context.engine import snip_now
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import Cleared, Event, Notice, Persisted, Snipped, Status, ToolOutputDelta, notify
from ctx_magic.memory.manager import MemoryManager
from ctx_magic.memory.session_notes import NotesKeeper
from ctx_magic.messages import Message, notebook_cell_id, user_text
from ctx_magic.notebook.capture import CellRecord, OutputRecorder, cell_messages, is_own_or_skipped
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.display import TurnDisplay, notice
from ctx_magic.notebook.executor import KernelExecutor, find_notebook_path
from ctx_magic.notebook.memory_commands import run_memory_command
from ctx_magic.notebook.panel_link import build_panel, in_jupyter_server, panel_figures, sidebar_widget
from ctx_magic.store.session import latest_session
from ctx_magic.ui.originals import originals_html
from ctx_magic.ui.panel import ContextPanel

CELLS_INTRO = "(Notebook cells the user ran before this conversation started follow.)"
IDLE_TIMER_SLACK = 1.0  # seconds after the TTL before the timer looks


class Controller:
    """One per kernel: created by %load_ext ctx_magic."""

    def __init__(self, shell: Any, *, env: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.shell = shell
        self.env = dict(os.environ) if env is None else env
        self.clock = clock
        self.settings = CtxMagic(parent=shell)
        self.settings.observe(self._retries_changed, names="max_retries")
        self.recorder = OutputRecorder(shell)
        self.executor = KernelExecutor(
            shell, self.recorder,
            permission=lambda: self.settings.permission,
            image_max_bytes=lambda: self.settings.image_max_bytes,
            notebook_path=self.notebook_path,
        )
        self.executor.on_output = self._tool_output
        self.session: Session | None = None
        self.backend: Backend | None = None
        self.turn_running = False
        """True while an agent turn runs: the agent's own code must not start another, or compact."""
        self.carried_session: str | None = None
        """The session of this kernel before the extension was reloaded: the next turn resumes it."""
        self.pending_cells: list[CellRecord] = []
        self.listeners: list[Callable[[Event], None]] = []
        self.lock = threading.RLock()
        self.timer: threading.Timer | None = None
        self.deferred: list[Message | Event] = []
        self.unshown: list[Event] = []
        """Context changes made between turns (idle clearing), shown at the next agent turn."""
        self._cell: CellRecord | None = None
        self.panel: ContextPanel | None = None
        self.anchor_shown = False
        self.shown_widget: Any = None
        self.notes: NotesKeeper | None = None
        self._memory: MemoryManager | None = None

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

    # -- cell capture (SPEC N2) ----------------------------------------------------------------

    def pre_run_cell(self, info: Any) -> None:
        if self.executor.running:
            return
        try:
            self.check_idle()
            source = getattr(info, "raw_cell", "") or ""
            self._cell = None if is_own_or_skipped(source) else self.recorder.start(source)
        except Exception as error:  # noqa: BLE001 - a hook must never put our traceback in a user's cell
            self.recorder.stop()
            self._cell = None
            self.report_internal_error(error)

    def post_run_cell(self, result: Any) -> None:
        if self.executor.running or self._cell is None:
            return
        record, self._cell = self._cell, None
        try:
            self.recorder.stop()
            self.pending_cells.append(self.recorder.finish(record, result))
        except Exception as error:  # noqa: BLE001 - as above: one line, the cell is left out
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

    def _absorb_cells(self, session: Session) -> None:
        """Recorded cells enter the context as notebook_cell pairs before the next turn."""
        if not self.pending_cells:
            return
        if not any(m.sent for m in session.messages):
            session.append(user_text(CELLS_INTRO, timestamp=self.clock()))
        for record in self.pending_cells:
            cell_id = notebook_cell_id(record.execution_count, len(session.messages))
            for message in cell_messages(record, cell_id, self.settings.image_max_bytes, self.clock()):
                session.append(message)
        self.pending_cells = []

    # -- the session -----------------------------------------------------------------------------

    def _backend(self) -> Backend:
        if self.backend is None:
            self.backend = choose_backend(self.env, max_retries=self.settings.max_retries)
        return self.backend

    def _retries_changed(self, change: dict[str, Any]) -> None:
        """A new retry count applies at once, to the backend and the live session's client."""
        if self.backend is None:
            return
        self.backend = dataclasses.replace(self.backend, client=self.backend.client.with_options(
            max_retries=change["new"]))
        model = getattr(self.session, "model", None)
        if isinstance(model, AnthropicModel):
            model.client = self.backend.client

    def ensure_session(self, *, new: bool = False, resume: str | None = None,
                       model: str | None = None) -> tuple[Session, list[str]]:
        """The current session; a new one, or a stored one resumed (`resume` = id or 'latest').

        `model` switches the model for the next turns (after checking the API knows it); the
        conversation stays the same.
        """
        notes: list[str] = []
        backend = self._backend()
        if model:
            self._model_client(model).limits()  # an unknown model says so now, in one line
            self.settings.model = model
        if self.session is not None and not new and resume is None:
            return self.session, notes
        if self.session is None and backend.offline and not self.carried_session:
            notes.append(backend.notice)
        sid = self._resume_target(resume) if resume is not None else None
        carried, self.carried_session = self.carried_session, None
        if sid is None and not new and carried and (self.storage_dir() / "sessions" / carried).is_dir():
            sid = carried  # the extension was reloaded in this kernel: the same conversation goes on
        model_client = self._model_client(self.settings.model)
        model_client.limits()
        if self.session is not None:
            self.end_session(extract=sid != self.session.session_id)
            self.session = None
        session, problems = open_session(model_client, self.executor, self.storage_dir(),
                                         self.settings.agent_config(), session_id=sid, resume=sid is not None,
                                         root=self.root(), clock=self.clock, offline=backend.offline)
        session.listeners.append(self._broadcast)
        self.notes = NotesKeeper(session)
        self.session = session
        self._attach_panel(session)
        notes += problems
        if sid is not None:
            notes.append(f"Resumed session {sid}: {sum(1 for m in session.messages if m.sent)} live messages.")
        return session, notes

    def carry_on(self, session_id: str | None, pending: Sequence[CellRecord]) -> None:
        """After `%reload_ext`: resume this session at the next turn, with the cells recorded
        before the reload."""
        self.carried_session = session_id
        self.pending_cells = [*pending, *self.pending_cells]

    def _model_client(self, name: str) -> AnthropicModel:
        backend = self._backend()
        return AnthropicModel(backend.client, name=name, window_override=self.settings.context_window,
                              offline=backend.offline)

    def _resume_target(self, resume: str) -> str:
        if resume == "latest":
            found = latest_session(self.storage_dir())
            if found is None:
                raise CtxMagicError(f"No stored session to resume in {self.storage_dir()}.")
            return found.session_id
        if not (self.storage_dir() / "sessions" / resume).is_dir():
            raise CtxMagicError(f"No session {resume!r} in {self.storage_dir() / 'sessions'}.")
        return resume

    def apply_settings(self, session: Session) -> None:
        """%config changes take effect at the next turn."""
        session.config = dataclasses.replace(self.settings.agent_config(session.config.system_prompt))
        if session.model.name != self.settings.model or (
                getattr(session.model, "window_override", 0) != self.settings.context_window):
            session.model = self._model_client(self.settings.model)
            session._limits = None

    def _broadcast(self, event: Event) -> None:
        notify(self.listeners, event)

    # -- long-term memory (SPEC X1-X4) -----------------------------------------------------------

    @property
    def memory(self) -> MemoryManager:
        user_dir = Path(self.settings.user_memory_dir).expanduser() if self.settings.user_memory_dir else None
        if self._memory is None or self._memory.storage_dir != self.storage_dir() or self._memory.user_dir != user_dir:
            self._memory = MemoryManager(self.storage_dir(), user_dir)
        self._memory.budget_tokens = self.settings.memory_budget_tokens
        return self._memory

    def _inject_memories(self, session: Session) -> None:
        """Once per session, at its first turn: the most relevant memories join the system prompt
        (after the last session's extraction, if one is still running)."""
        if session.extra_state.get("memory_injected"):
            return
        self.memory.wait()
        session.system_extra = self.memory.prompt_section()
        session.extra_state["memory_injected"] = True

    def end_session(self, *, extract: bool = True) -> None:
        """The current session ends (a new one, a resume, unload): its files are saved and closed,
        then its memories are extracted in the background (not when it is about to be resumed)."""
        session = self.session
        if session is None:
            return
        session.end_turn()
        session.transcript.close()
        session.store.release()
        if extract and any(m.role == "user" and m.sent for m in session.messages):
            self.memory.extract_in_background(session)

    def memory_command(self, args: Any) -> None:
        run_memory_command(self, args)
        self.refresh_panel()

    # -- turns -----------------------------------------------------------------------------------

    def run(self, prompt: str, *, display: TurnDisplay | None = None) -> TurnResult:
        with self.lock:
            self.cancel_timer()
            session = self.session
            assert session is not None
            self.apply_settings(session)
            self._flush_deferred(session)
            self._absorb_cells(session)
            self._inject_memories(session)
            display = display or TurnDisplay(show_tools=self.settings.show_tool_output,
                                             record_for=lambda _id: self.executor.last_record)
            unshown, self.unshown = self.unshown, []
            for event in unshown:
                display(event)
            if not self.anchor_shown and self.in_jupyter_server() and self.panel is not None:
                self.show_sidebar()
            session.listeners.append(display)
            self.turn_running = True
            try:
                result = run_turn(session, prompt)
            finally:
                self.turn_running = False
                session.listeners.remove(display)
                self.refresh_panel()
            display.finish(self.summary_line(session, result))
            if self.memory.last_error:
                display(Notice("warning", self.memory.last_error))
                self.memory.last_error = None
            self.memory.maybe_dream_in_background(session)
            self.schedule_timer()
            return result

    def summary_line(self, session: Session, result: TurnResult) -> str:
        status = session.status()
        state = "Interrupted" if result.interrupted else ("Stopped" if result.error else "Done")
        return (f"{state} · {result.model_calls} model call(s) · {status['tokens']:,} tokens in context · "
                f"{status['percent_left']}% left before compaction")

    def compact(self, instructions: str | None, *, direction: str = "full", index: int | None = None) -> Any:
        with self.lock:
            session = self.require_session()
            self._absorb_cells(session)
            session.prepare()
            display = TurnDisplay()
            session.listeners.append(display)
            try:
                result = compaction.manual_compact(session, instructions, direction=direction, index=index)
            finally:
                session.emit(Status("idle"))
                session.listeners.remove(display)
                session.end_turn()
            status = session.status()
            display.finish(f"Context now {status['tokens']:,} tokens · {status['percent_left']}% left before "
                           "compaction")
            self.refresh_panel()
            return result

    def snip(self, keep_last: int) -> int:
        with self.lock:
            session = self.require_session()
            messages, state, events = snip_now(session.messages, session.state, self.clock(),
                                               session.engine_settings(), keep_last)
            session.apply_change(messages, state, events)
            session.end_turn()
            self.refresh_panel()
            return sum(e.count for e in events)

    def refuse_inside_turn(self, what: str) -> None:
        """The agent's code calling %%agent or %compact would edit the context mid-turn (M5)."""
        if self.turn_running:
            raise CtxMagicError(f"An agent turn is running: {what} cannot be used from inside it.")

    def require_session(self) -> Session:
        if self.session is None and self.carried_session:
            raise CtxMagicError(f"Session {self.carried_session} goes on at the next %%agent (the extension was "
                                "reloaded).")
        if self.session is None:
            raise CtxMagicError("There is no agent session yet: run a %%agent cell first.")
        return self.session

    # -- idle (SPEC L3): lazily at the next cell, optionally from a timer thread -----------------

    def check_idle(self) -> None:
        """At the next cell: if the idle gap passed, the zero-call layers run (writes included)."""
        session = self.session
        if session is None or not self.lock.acquire(blocking=False):
            return
        try:
            self._flush_deferred(session)
            if any(m.sent for m in session.messages):
                self._between_turns(session, session.prepare)
                self.refresh_panel()
        except CtxMagicError:
            pass
        finally:
            self.lock.release()

    def schedule_timer(self) -> None:
        session = self.session
        if session is None or not self.settings.idle_timer:
            return
        delay = session.engine_settings().idle_minutes * 60 + IDLE_TIMER_SLACK
        self.timer = threading.Timer(delay, self._timer_fired)
        self.timer.daemon = True
        self.timer.start()

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timer_fired(self) -> None:
        """From the timer thread: clear in memory only; the transcript is written at the next cell."""
        session = self.session
        if session is None or not self.lock.acquire(blocking=False):
            return
        try:
            if any(m.sent for m in session.messages):
                self._between_turns(session, lambda: self.deferred.extend(session.prepare_in_memory()))
        except Exception:  # noqa: BLE001 - a timer must never raise into the kernel
            pass
        finally:
            self.lock.release()

    def _between_turns(self, session: Session, act: Callable[[], object]) -> None:
        """Run `act`, keeping the context changes it makes to show at the next agent turn."""
        seen: list[Event] = []
        session.listeners.append(seen.append)
        try:
            act()
        finally:
            session.listeners.remove(seen.append)
        self.unshown += [e for e in seen if isinstance(e, (Cleared, Snipped, Persisted, Notice))]

    def _flush_deferred(self, session: Session) -> None:
        if self.deferred:
            session.write_deferred(self.deferred)
            self.deferred = []

    # -- the panel (SPEC U1-U3) -----------------------------------------------------------------

    def _attach_panel(self, session: Session) -> None:
        """A panel for this session, filled from its transcript's events, then fed live."""
        if self.panel is not None:
            self.listeners = [fn for fn in self.listeners if fn != self.panel.handle]
        self.panel = build_panel(session, self._figures(session), self._originals)
        self.listeners.append(self.panel.handle)

    def refresh_panel(self) -> None:
        """The engine's current figures into the panel (turn ends, %compact, idle checks)."""
        if self.panel is not None and self.session is not None:
            self.panel.load(self._figures(self.session))

    def _figures(self, session: Session) -> dict[str, object]:
        return panel_figures(session, session_memory=self.notes.text() if self.notes is not None else "",
                             memories=self.memory.rows())

    def _originals(self, uuids: Sequence[str]) -> str:
        return originals_html(self.require_session().store.load_transcript().records, uuids)

    def in_jupyter_server(self) -> bool:
        return in_jupyter_server(self.env, self.shell.user_ns)

    # -- %ctx count and sidebar ------------------------------------------------------------------

    def count_line(self) -> str:
        """The exact size from the API's count_tokens (T3) beside the estimate; the estimate alone
        when the endpoint fails."""
        session = self.require_session()
        self._absorb_cells(session)
        prepared = session.prepare()
        estimate = prepared.tokens
        try:
            exact = session.model.count_tokens(session.request())
        except CtxMagicError as error:
            return f"Estimated context: {estimate:,} tokens (count_tokens unavailable: {error})"
        drift = (estimate - exact) / exact * 100 if exact else 0.0
        return (f"Exact context: {exact:,} tokens (count_tokens API); the estimate was {estimate:,} "
                f"({drift:+.1f}%).")

    def show_sidebar(self, *, inline: bool = False) -> None:
        from IPython.display import display

        self.require_session()
        if self.panel is None:
            raise CtxMagicError("There is no agent session yet: run a %%agent cell first.")
        self.shown_widget = sidebar_widget(self.panel, sidebar=not inline and self.in_jupyter_server())
        display(self.shown_widget)
        self.anchor_shown = True

    # -- teardown --------------------------------------------------------------------------------

    def close(self) -> None:
        """Unload or kernel exit: the session ends and its memories are extracted (bounded wait)."""
        self.cancel_timer()
        self.recorder.stop()
        self.end_session()
        self.session = None
        if self._memory is not None:
            self._memory.wait()


