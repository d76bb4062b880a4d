"""The context panel's link to this kernel's sessions (SPEC U1-U3): one panel per kernel,
refilled from the transcript's events when a session opens (new, resumed, after a reload),
refreshed from the session's status at turn ends, shown in JupyterLab's sidebar or inline."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctx_magic.agent.session import Session
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import DURABLE_EVENTS, Event, event_from_json
from ctx_magic.ui.originals import originals_html
from ctx_magic.ui.panel import ContextPanel
from ctx_magic.ui.sidebar import SidebarAnchor


def in_jupyter_server(env: Mapping[str, str], user_ns: Mapping[str, Any]) -> bool:
    """JupyterLab (and Notebook 7) start kernels with JPY_SESSION_NAME; VS Code does not."""
    return bool(env.get("JPY_SESSION_NAME")) and "__vsc_ipynb_file__" not in user_ns


class PanelLink:
    def __init__(self, *, session_memory: Callable[[], str], memories: Callable[[], list[dict[str, Any]]]) -> None:
        self._session_memory = session_memory
        self._memories = memories
        self._session: Session | None = None
        self.widget: ContextPanel | None = None
        """The one panel of this kernel; it follows whichever session is current."""
        self.shown_widget: Any = None
        """The widget last displayed (the sidebar anchor, or the panel inline)."""

    @property
    def anchor_shown(self) -> bool:
        return self.shown_widget is not None

    def attach(self, session: Session) -> None:
        """Follow `session`: the same panel, its timeline replayed from the transcript's events."""
        self._session = session
        if self.widget is None:
            self.widget = ContextPanel(clock=time.monotonic, load_originals=self._originals)
        self.widget.reset()
        for record in session.store.load_transcript().records:
            if record.get("type") == "event" and record.get("event") in DURABLE_EVENTS:
                try:
                    self.widget.handle(event_from_json(record))
                except (KeyError, TypeError, ValueError):
                    continue
        self.refresh()

    def handle(self, event: Event) -> None:
        if self.widget is not None:
            self.widget.handle(event)

    def refresh(self) -> None:
        """The session's current status into the panel (turn ends, %compact, idle checks)."""
        if self.widget is not None and self._session is not None:
            self.widget.load(self._session.status(), session_memory=self._session_memory(),
                            memories=self._memories())

    def show(self, *, sidebar: bool) -> Any:
        """The anchor that puts the panel in JupyterLab's right sidebar, or the panel itself."""
        from IPython.display import display

        if self.widget is None:
            raise CtxMagicError("There is no agent session yet: run a %%agent cell first.")
        self.shown_widget = SidebarAnchor(panel=self.widget) if sidebar else self.widget
        display(self.shown_widget)
        return self.shown_widget

    def _originals(self, uuids: Sequence[str]) -> str:
        if self._session is None:
            return ""
        return originals_html(self._session.store.load_transcript().records, uuids)
