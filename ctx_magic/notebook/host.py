"""Which session this kernel talks to, and through which backend: a new one, a stored one
resumed, or the same one again after `%reload_ext`; settings and model changes applied before
each turn. What a session is made of: the backend, the model client, the executor, the Jupyter
system prompt."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.model import AnthropicModel
from ctx_magic.agent.pin_board import PinBoard
from ctx_magic.agent.request import RequestFrame
from ctx_magic.agent.session import Session, open_session
from ctx_magic.agent.status import StatusSnapshot
from ctx_magic.agent.tools import Executor
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.pins import PinRefused
from ctx_magic.errors import CtxMagicError, NoSession
from ctx_magic.notebook.backend import Backend, choose_backend
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.memory_link import MemoryLink
from ctx_magic.notebook.prompts import JUPYTER_SYSTEM_PROMPT
from ctx_magic.notebook.workspace import Workspace
from ctx_magic.prices import model_prices
from ctx_magic.store.session import latest_session, list_sessions
from ctx_magic.ui.cards import count


class SessionHost:
    def __init__(self, settings: CtxMagic, workspace: Workspace, executor: Executor, memory: MemoryLink,
                 clock: Callable[[], float], *, backend: Backend | None = None) -> None:
        self._settings = settings
        self._workspace = workspace
        self._executor = executor
        self._memory = memory
        """Extracts a session's memories when it ends."""
        self._clock = clock
        self.backend = backend
        self._given = backend is not None
        """A backend handed in (tests, the demo) stays whatever the provider setting says."""
        self.session: Session | None = None
        self._frame: RequestFrame | None = None
        """The current session's request frame: its model and the settings in force."""
        self._meter: UsageMeter | None = None
        """The current session's usage (a session with no call yet is not the one `latest` means)."""
        self.carried: str | None = None
        """The session of this kernel before the extension was reloaded: the next turn resumes it."""

    def carry(self, session_id: str | None) -> None:
        """After `%reload_ext`: the session this kernel had goes on at the next turn."""
        self.carried = session_id

    def _backend(self) -> Backend:
        """The backend; chosen again when the `provider` setting changed (unless one was given)."""
        settings = self._settings.current
        if self.backend is not None and (self._given or self.backend.provider == settings.provider):
            return self.backend
        self.backend = choose_backend(self._workspace.env, settings, clock=self._clock)
        return self.backend

    def retries_changed(self, change: Mapping[str, Any]) -> None:
        """A new retry count (a traitlets change of `max_retries`) applies at once, to the backend and
        the live session's client."""
        if self.backend is None:
            return
        self.backend = self.backend.with_retries(change["new"])
        frame = self._frame
        if self.session is not None and frame is not None and isinstance(frame.model, AnthropicModel):
            frame.reconfigure(frame.settings, self._model(frame.model.name))

    def _model(self, name: str) -> AnthropicModel:
        backend = self._backend()
        return AnthropicModel(backend.client, name=name, provider=backend.provider, backend=backend.name)

    def check_model(self, name: str) -> None:
        """An unknown model says so now, in one line."""
        self._model(name).limits()

    def ensure(self, *, new: bool = False, resume: str | None = None) -> tuple[Session, list[str]]:
        """The current session; a new one, or a stored one resumed (`resume` = id or 'latest'), with
        the lines to tell the user."""
        notes: list[str] = []
        backend = self._backend()
        if self.session is not None and not new and resume is None:
            return self.session, notes
        if self.session is None and backend.offline and not self.carried:
            notes.append(backend.notice)
        # A session of this kernel with no turn yet (opened by a `%pin`) is not the conversation
        # "latest" means: its pins go on in the session resumed instead.
        started = self._meter is not None and self._meter.totals.main_calls > 0
        unstarted = self.session if self.session is not None and not started else None
        sid = self._resume_target(resume, skip=unstarted) if resume is not None else None
        storage = self._workspace.storage_dir()
        carried = self.carried
        if sid is None and not new and carried and (storage / "sessions" / carried).is_dir():
            sid = carried  # the extension was reloaded in this kernel: the same conversation goes on
        settings = self._settings.current
        model = self._model(settings.model)
        model.limits()
        if self.session is not None and sid == self.session.session_id:
            self.end(extract=False)  # the same session resumed: its hold is let go to be taken again
        # The next session is opened before the current one ends: one that cannot be opened (held by
        # another kernel, an unwritable folder) leaves this kernel's conversation where it was.
        session, problems = open_session(model, self._executor, storage, settings, session_id=sid,
                                         resume=sid is not None, system_prompt=JUPYTER_SYSTEM_PROMPT,
                                         root=self._workspace.root(), clock=self._clock)
        self.carried = None  # taken up, or set aside for a session asked for by name
        self.end()
        self.session, self._frame, self._meter = session, session.frame, session.meter
        if unstarted is not None and sid is not None and sid != unstarted.session_id:
            notes += carry_pins(unstarted.pin_board, session.pin_board)
        notes += problems
        if sid is not None:
            notes.append(resumed_line(sid, session.live))
        return session, notes

    def require(self) -> Session:
        """The current session, or a one-line error that says how to get one."""
        if self.session is None and self.carried:
            raise NoSession(f"Session {self.carried} goes on at the next %%agent (the extension was reloaded).")
        if self.session is None:
            stored = self._stored_latest()
            if stored is not None:  # a restarted kernel, a reopened notebook: a new session would not know it
                raise NoSession(f"There is no agent session in this kernel yet: %agent --resume goes on "
                                f"with the last one ({stored}); a %%agent cell starts a new one.")
            raise NoSession("There is no agent session yet: run a %%agent cell first.")
        return self.session

    def _stored_latest(self) -> str | None:
        """The id of the session last written in the storage folder, if any can be read."""
        try:
            found = latest_session(self._workspace.storage_dir())
        except (OSError, CtxMagicError):
            return None
        return found.session_id if found is not None else None

    def _resume_target(self, resume: str, *, skip: Session | None = None) -> str:
        storage = self._workspace.storage_dir()
        if resume == "latest":
            found = latest_session(storage, skip=skip.session_id if skip is not None else None)
            if found is None:
                raise CtxMagicError(f"No stored session to resume in {storage}.")
            return found.session_id
        if resume not in {stored.session_id for stored in list_sessions(storage)}:  # an id, never a path
            raise CtxMagicError(f"No session {resume!r} in {storage / 'sessions'}.")
        return resume

    def apply_settings(self, session: Session) -> None:
        """`%config` changes take effect at the next turn; a new model (or provider) drops the
        thinking blocks it cannot take from the live context."""
        settings, frame = self._settings.current, self._frame_of(session)
        provider = getattr(frame.model, "provider", settings.provider)
        if frame.model.name != settings.model or (not self._given and provider != settings.provider):
            model = self._model(settings.model)
            model.limits()  # a model the API does not know is said before the session is switched to it
            session.switch_model(settings, model)
        else:
            frame.reconfigure(settings)

    def _frame_of(self, session: Session) -> RequestFrame:
        """The request frame of `session`, which is the current one (the host keeps its frame)."""
        if session is not self.session or self._frame is None:
            raise NoSession("That agent session is no longer the current one.")
        return self._frame

    def status(self, session: Session) -> StatusSnapshot:
        """The session's status as `%ctx status`, the panel and `ctx_magic.context()` show it: a
        setting changed since the last turn, which applies at the next one, counts as rewriting
        the cache (priced at the new model's prices)."""
        status = session.status()
        reason = self.pending_rewrite(session)
        if not reason or status.cache is None:
            return status
        wanted = self._settings.current
        prices = model_prices(wanted.model, wanted.prices)
        return dataclasses.replace(status, cache=status.cache.rewritten(reason, status.context.tokens, prices))

    def pending_rewrite(self, session: Session) -> str:
        """What a `%config` change not yet applied (it applies at the next turn) will rewrite the
        cached prefix with: the model, the provider or the thinking settings; '' when nothing."""
        frame = self._frame
        if session is not self.session or frame is None:  # a session that ended changes nothing more
            return ""
        wanted, now = self._settings.current, frame.settings
        if wanted.model != frame.model.name:
            return f"the model changes to {wanted.model} at the next turn"
        if wanted.provider != now.provider:
            return f"the provider changes to {wanted.provider} at the next turn"
        budget_changed = wanted.thinking in ("enabled", "adaptive") and wanted.thinking_budget != now.thinking_budget
        if wanted.thinking != now.thinking or budget_changed:
            return "the thinking settings change at the next turn"
        return ""

    def end(self, *, extract: bool = True) -> None:
        """The current session ends (a new one, a resume, unload): saved and closed first, then its
        memories extracted in the background."""
        session, self.session, self._frame, self._meter = self.session, None, None, None
        if session is None:
            return
        session.close()
        if extract:
            self._memory.session_ended(session)


def resumed_line(session_id: str, live: LiveContext) -> str:
    """What a resume says: the session, and how many messages its live context holds."""
    held = sum(1 for m in live.messages if m.sent)
    return f"Resumed session {session_id}: {count(held, 'live message')}."


def carry_pins(source: PinBoard, target: PinBoard) -> list[str]:
    """The pins of `source` pinned in `target` too (those it has not already); what to tell the user."""
    held = {pin.text for pin in target.pins}
    carried = []
    for pin in source.pins:
        if pin.text in held:
            continue
        try:
            carried.append(target.pin(pin.text, cell=pin.cell).id)
        except PinRefused as error:
            return [f"Pins made before the resume: {error}"]
    return [f"Pins made before the resume, pinned in it too: {', '.join(carried)}."] if carried else []
