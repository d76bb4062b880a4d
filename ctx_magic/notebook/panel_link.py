"""The context panel's link to this kernel's sessions: one panel per kernel,
refilled from the transcript when a session opens (new, resumed, after a reload), refreshed from
the session's status at turn ends, shown in JupyterLab's (or Notebook 7's) sidebar or inline."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.request import RequestFrame
from ctx_magic.agent.session import Session
from ctx_magic.agent.status import StatusSnapshot
from ctx_magic.agent.usage import answer_cost
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import DURABLE_EVENTS, Event, UsageUpdated, event_from_json
from ctx_magic.messages import Message
from ctx_magic.notebook.memory_link import MemoryLink
from ctx_magic.notebook.outputs import KERNEL_RUN
from ctx_magic.notebook.runs.board import RunBoard
from ctx_magic.notebook.runs.news import rows
from ctx_magic.notebook.workspace import Workspace
from ctx_magic.prices import UNKNOWN_PRICES, Prices, model_prices
from ctx_magic.store.session import SessionDir
from ctx_magic.ui.cards import close_tree
from ctx_magic.ui.marks import CellIndex
from ctx_magic.ui.originals import originals_html
from ctx_magic.ui.panel import ContextPanel
from ctx_magic.ui.sidebar import MODULE, SidebarAnchor

NO_SIDEBAR = ("The context panel is shown here because this Python has no ctx_magic JupyterLab extension "
              "(pip builds it only where Node.js is installed): install Node.js 18 or newer, then reinstall "
              "ctx_magic and reload the page to get it in the sidebar.")


def labextension_installed(paths: Iterable[str] | None = None) -> bool:
    """Whether the sidebar's JupyterLab extension is installed where Jupyter looks for one
    (`pip install .` without Node.js installs the package without it)."""
    if paths is None:
        from jupyter_core.paths import jupyter_path

        paths = jupyter_path("labextensions")
    return any((Path(p) / MODULE / "package.json").is_file() for p in paths)


def replayed(records: Iterable[Mapping[str, Any]], index: CellIndex,
             prices: Callable[[str | None], Prices] = lambda _model: UNKNOWN_PRICES) -> Iterable[Event]:
    """The panel's events from a transcript: every durable event, and one model call for each
    response recorded with its usage, priced at `prices` of the model that wrote it; the
    messages teach `index` which cells they hold."""
    calls: set[str] = set()
    for record in records:
        kind = record.get("type")
        if kind == "message":
            try:
                message = Message.from_json(record)
            except (KeyError, TypeError, ValueError):
                continue
            index.learn(message)
            response = message.api_id or message.uuid
            if message.role == "assistant" and message.usage is not None and response not in calls:
                calls.add(response)  # parallel tool calls split one response over several messages
                cost = answer_cost(message.usage, message.meta, prices(message.meta.get("model")))
                yield UsageUpdated(message.usage, 0, 0.0, cost_usd=round(cost, 6))
        elif kind == "event" and record.get("event") in DURABLE_EVENTS:
            try:
                yield event_from_json(record)
            except (KeyError, TypeError, ValueError):
                continue


class PanelLink:
    def __init__(self, memory: MemoryLink, workspace: Workspace,
                 sidebar_available: Callable[[], bool] = labextension_installed, *,
                 runs: RunBoard | None = None, status: Callable[[Session], StatusSnapshot] = Session.status) -> None:
        self._memory = memory
        self._status = status
        """The session's status as the panel shows it (with the settings waiting for the next turn)."""
        self._runs = runs
        """The background runs the panel lists (and stops)."""
        """Where the panel's notes and memories come from."""
        self._workspace = workspace
        self._sidebar_available = sidebar_available
        self._session: Session | None = None
        self._store: SessionDir | None = None
        """The session's folder: its transcript (the history replayed, the originals shown)."""
        self._live: LiveContext | None = None
        """The session's live context: which cells it holds."""
        self.widget: ContextPanel | None = None
        """The one panel of this kernel; it follows whichever session is current."""
        self.shown_widget: Any = None
        """The widget last displayed (the sidebar anchor, or the panel inline)."""
        self.undo: Callable[[str], str] | None = None
        """What a compaction card's Undo runs (the commands' undo, set by the controller)."""

    @property
    def anchor_shown(self) -> bool:
        return self.shown_widget is not None

    def attach(self, session: Session, store: SessionDir, live: LiveContext, frame: RequestFrame) -> None:
        """Follow `session` (its folder `store`, its `live` context, its request `frame`): the same
        panel, its history replayed from the transcript at the prices of `frame`'s settings."""
        self._session, self._store, self._live = session, store, live
        if self.widget is None:
            index = CellIndex(live=lambda: self._live.messages if self._live is not None else ())
            self.widget = ContextPanel(clock=time.monotonic, load_originals=self._originals, cells=index,
                                       kernel=KERNEL_RUN, stop_run=self._runs.stop if self._runs is not None else None,
                                       answer_pending=self.answer_pending, undo=self.undo_clicked)
        self.widget.reset()
        settings = frame.settings

        def prices(model: str | None) -> Prices:
            return model_prices(model or settings.model, settings.prices)

        for event in replayed(store.load_transcript().records, self.widget.fold.cells, prices):
            self.widget.handle(event)
        self.refresh()

    def handle(self, event: Event) -> None:
        if self.widget is not None:
            self.widget.handle(event)

    def refresh(self) -> None:
        """The session's current status into the panel (turn ends, %compact, idle checks, the idle
        timer once the cache has gone cold)."""
        if self.widget is not None and self._session is not None:
            self.widget.load(self._status(self._session), notes=self._memory.notes_text(),
                             memories=self._memory.manager.rows(), pending=self._memory.review.pending_rows())
        self.runs_changed()

    def answer_pending(self, memory_id: str, action: str) -> None:
        """The panel's Keep or Discard of a pending memory (clicked between cells, when the kernel reads
        widget messages), shown in the panel's refreshed lists; a failure (a secret, the team folder gone)
        is said after the next turn, and the memory still waits."""
        manager = self._memory.manager
        try:
            (manager.review.keep if action == "keep" else manager.review.discard)([memory_id])
        except CtxMagicError as error:
            manager.background.report(str(error))  # said after the next turn, like the background's failures
        self.refresh()

    def undo_with(self, undo: Callable[[str], str]) -> None:
        """What a compaction card's Undo runs from now on (the commands' undo, made after the panel)."""
        self.undo = undo

    def undo_clicked(self, boundary_uuid: str) -> str:
        """A compaction card's Undo (clicked between cells, when the kernel reads widget messages):
        the line to show under it, what came back or why nothing did."""
        if self.undo is None:
            return "Undo is not available in this kernel."
        try:
            return self.undo(boundary_uuid)
        except CtxMagicError as error:
            return str(error)

    def runs_changed(self) -> None:
        """The background runs' rows (from the run watch's thread as they change, and at refreshes)."""
        if self.widget is not None and self._runs is not None:
            self.widget.runs.show(rows(self._runs))

    def show_once(self) -> None:
        """In JupyterLab or Notebook 7, the sidebar's anchor once per kernel (after a restart, the
        first %agent or %%agent of the new kernel shows it again)."""
        if not self.anchor_shown and self._workspace.in_jupyter_server():
            self.show(sidebar=True)

    def show(self, *, sidebar: bool) -> Any:
        """The anchor that puts the panel in the sidebar, or the panel itself (with a line saying
        how to get the sidebar when its extension is missing)."""
        from IPython.display import display

        from ctx_magic.notebook.display import notice

        if self.widget is None:
            raise CtxMagicError("There is no agent session yet: run a %%agent cell first.")
        if sidebar and not self._sidebar_available():
            notice(NO_SIDEBAR)
            sidebar = False
        self.shown_widget = SidebarAnchor(panel=self.widget) if sidebar else self.widget
        display(self.shown_widget)
        return self.shown_widget

    def close(self) -> None:
        """The extension is unloaded: the panel goes (the sidebar shows its hint until a new one)."""
        if self.shown_widget is not None and self.shown_widget is not self.widget:
            self.shown_widget.close()
        if self.widget is not None:
            self.widget.cards.clear()
            close_tree(self.widget)
        self.widget = self.shown_widget = None

    def _originals(self, uuids: Sequence[str]) -> str:
        if self._store is None:
            return ""
        return originals_html(self._store.load_transcript().records, uuids)
