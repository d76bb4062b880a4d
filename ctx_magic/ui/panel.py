"""The context panel: an ipywidgets VBox fed only by the engine's events and the
session's `StatusSnapshot`.

Its synced traits hold the figures (tokens, thresholds, zone, the composition of the next
request, the changes to the context with their summaries, the outputs saved to disk, memory,
cell marks; every model call's size and cache use stays in the kernel), set from what
`ui/fold.py` says each event changes; its children render them as plain HTML and standard
widgets, so every frontend shows the same panel. Updates are throttled while the agent streams
(a few a second at most) and flushed at each turn end. The JupyterLab extension reads the same
traits for the status bar and the cell badges, and opens a change's card when its chart marker
or a cell's badge is clicked.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

import ipywidgets as widgets
from traitlets import Bool, Dict, Float, Int, List, Unicode

from ctx_magic.agent.status import StatusSnapshot
from ctx_magic.events import Compacted, Event, ServerCompacted, Status
from ctx_magic.ui.cards import ChangeCards, UndoAction, counts_html, markdown_outputs, memories_html, persisted_html
from ctx_magic.ui.fold import EventFold, context_traits
from ctx_magic.ui.marks import CellIndex
from ctx_magic.ui.pending import PendingRows, ReviewAction
from ctx_magic.ui.picture import chart_html, composition_html, headline_html, next_call_html
from ctx_magic.ui.runs import RunRows

FLUSH_INTERVAL = 0.25  # seconds: four updates a second at most while a turn streams
# Everything that describes one session (all synced traits but the status line).
PER_SESSION_TRAITS = ("tokens", "threshold", "warning", "blocking", "window", "zone", "percent_left", "messages",
                      "live_results", "cleared_results", "persisted_results", "cache_hit_ratio", "cache_breaks",
                      "spend", "timeline", "persisted", "session_notes", "memories", "cell_marks", "breaker_open",
                      "session_id", "model", "calls", "composition", "cost", "next_call")
STATE_WORDS = {"thinking": "thinking…", "running": "running code…", "compacting": "compacting…"}


@functools.cache
def panel_style() -> str:
    """panel.css beside this file, shipped inside the panel as a `<style>` element so that every
    frontend (the JupyterLab sidebar, Notebook 7, VS Code, a cell inline) shows the same panel.
    Every rule is scoped to `.ctx-magic-panel`; colours come from JupyterLab's theme variables
    (with fallbacks for frontends that define none)."""
    css = resources.files("ctx_magic.ui").joinpath("panel.css").read_text(encoding="utf-8")
    return f'<style class="ctx-magic-style">{css}</style>'


class ContextPanel(widgets.VBox):
    """What the agent can still see, as the engine reports it."""

    tokens = Int(0).tag(sync=True)
    threshold = Int(0).tag(sync=True)
    warning = Int(0).tag(sync=True)
    blocking = Int(0).tag(sync=True)
    window = Int(0).tag(sync=True)
    zone = Unicode("ok").tag(sync=True)
    percent_left = Float(100.0).tag(sync=True)
    messages = Int(0).tag(sync=True)
    live_results = Int(0).tag(sync=True)
    cleared_results = Int(0).tag(sync=True)
    persisted_results = Int(0).tag(sync=True)
    cache_hit_ratio = Float(0.0).tag(sync=True)
    cache_breaks = List().tag(sync=True)
    """Prompt-cache breaks, oldest first: cache read before and after, and the reason."""
    spend = Dict().tag(sync=True)
    cost = Dict().tag(sync=True)
    """Dollars: the session's spend, the savings by kind of change, the prices used (StatusSnapshot.cost_json)."""
    composition = Dict().tag(sync=True)
    """What the next request carries, part by part, in tokens (events.Composition)."""
    calls = List()
    """Every model call of the session, oldest first: tokens sent, read from and written to the
    prompt cache, generated. Kept in the kernel, not synced: the chart is drawn from it here, and a
    long session's list (5,000 calls: 400 KB of JSON) would go to the browser at every flush."""
    timeline = List().tag(sync=True)
    """Changes to the context, oldest first: compactions, clearings, snips. Each has a `key` (its
    card) and `at`, the number of model calls made before it."""
    persisted = List().tag(sync=True)
    session_notes = Unicode("").tag(sync=True)
    memories = List().tag(sync=True)
    pending_memories = List().tag(sync=True)
    """Memories extraction found that wait for the person's Keep or Discard (`memory_review = 'ask'`,
    and those proposed for the team): id, text, type, and scope (where each goes once kept)."""
    cell_marks = Dict().tag(sync=True)
    """Cells whose output the agent no longer sees in full: key (the cell's id, or `count:N` for a
    cell of this kernel without one) -> count, kind (persisted, cleared, summarized), why, what
    the agent still has, and the key of the card that tells more (ui/marks.py)."""
    next_call = Dict().tag(sync=True)
    """The prompt cache as the next call finds it and the compaction the next turn makes (`cache`,
    `ahead`: CacheOutlook and CompactionAhead as JSON), judged when the status was last read. The
    status bar shows a cold cache's price from it."""
    status = Unicode("idle").tag(sync=True)
    breaker_open = Bool(False).tag(sync=True)
    session_id = Unicode("").tag(sync=True)
    model = Unicode("").tag(sync=True)

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 load_originals: Callable[[Sequence[str]], str] | None = None,
                 cells: CellIndex | None = None, kernel: str | None = None,
                 stop_run: Callable[[str], Any] | None = None, answer_pending: ReviewAction | None = None,
                 undo: UndoAction | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clock = clock
        self._pending: dict[str, Any] = {}
        self.fold = EventFold(self._now, cells or CellIndex(), kernel)
        """What each event changes in the traits (`kernel`: marks of cells without an id are kept
        for this kernel process's cells only)."""
        self._last_flush = -FLUSH_INTERVAL
        self.header = widgets.HTML()
        self.headline = widgets.HTML()
        self.next_line = widgets.HTML()
        self.bar = widgets.HTML()
        self.chart = widgets.HTML()
        self.counts = widgets.HTML()
        self.runs = RunRows(stop_run)
        """The background runs: state, last line, a Stop button (rows updated from the run watch)."""
        self.cards = ChangeCards(load_originals, undo)
        self.persisted_html = widgets.HTML()
        self.notes = widgets.Output()
        self.notes.add_class("ctx-magic-markdown")
        self.notes_card = widgets.Accordion(children=[self.notes], selected_index=None,
                                            layout=widgets.Layout(width="100%", display="none"))
        self.notes_card.add_class("ctx-magic-card")
        self.memory_html = widgets.HTML()
        self.pending = PendingRows(answer_pending)
        """The memories waiting for review, each with Keep and Discard buttons."""
        self._notes_shown = ""
        title = widgets.HTML('<div class="ctx-magic-section-title">What happened to the context</div>')
        self.children = (widgets.HTML(panel_style()), self.header, self.headline, self.next_line, self.bar, self.chart,
                         self.counts, self.runs.box, title, self.cards.box, self.persisted_html, self.notes_card,
                         self.pending.box, self.memory_html)
        for child in self.children:
            if isinstance(child, (widgets.HTML, widgets.Output)):
                child.layout.width = "100%"
        self.add_class("ctx-magic-panel")
        self.layout.width = "100%"
        self._render()

    # -- events in -----------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Fold one event into the pending figures; flush when the throttle allows."""
        changes = self.fold.changes(event)
        if not changes:
            return
        self._pending.update(changes)
        # A state change (thinking, running, compacting) and a compaction show at once: a few a
        # turn, and the next event may be long in coming (the agent's code runs, ask waits).
        if self.clock() - self._last_flush >= FLUSH_INTERVAL or isinstance(event, (Compacted, ServerCompacted, Status)):
            self.flush()

    __call__ = handle

    def _now(self, name: str) -> Any:
        """A trait as it will be after the pending changes."""
        return self._pending.get(name, getattr(self, name))

    def load(self, status: StatusSnapshot, *, notes: str = "",
             memories: Sequence[Mapping[str, Any]] = (), pending: Sequence[Mapping[str, Any]] = ()) -> None:
        """Set every figure at once from the session's status (turn ends, a resumed session)."""
        usage = dataclasses.asdict(status.usage)
        self._pending.update({
            **context_traits(status.context), "session_id": status.session_id, "breaker_open": status.breaker_open,
            "model": f"{status.model} · {status.backend}", "spend": usage,
            "cache_hit_ratio": round(status.usage.cache_hit_ratio, 4), "cache_breaks": list(status.cache_breaks),
            "session_notes": notes, "memories": list(memories), "pending_memories": list(pending),
            "composition": status.composition.to_json(), "cost": status.cost_json(),
            "next_call": {"cache": status.cache.to_json() if status.cache is not None else None,
                          "ahead": status.ahead.to_json() if status.ahead is not None else None},
        })
        self.flush()

    def reset(self) -> None:
        """Forget the figures and the changes of the previous session (a new or resumed one follows)."""
        self._pending = {name: self.trait_defaults(name) for name in PER_SESSION_TRAITS}
        self.cards.clear()
        self.fold.cells.clear()
        self.flush()

    def flush(self) -> None:
        if self._pending:
            with self.hold_sync():
                for name, value in self._pending.items():
                    setattr(self, name, value)
            changed, self._pending = set(self._pending), {}
            self._render(changed)
        self._last_flush = self.clock()

    # -- rendering -----------------------------------------------------------------------------

    def _render(self, changed: set[str] | None = None) -> None:
        """Every part of the panel; with `changed`, the chart, the cards and the persisted outputs
        (each as long as the session) only when a trait they read is among those."""
        def touched(*names: str) -> bool:
            return changed is None or not changed.isdisjoint(names)

        state = STATE_WORDS.get(self.status, "idle")
        self.header.value = (
            '<div class="ctx-magic-header"><div class="ctx-magic-title">Agent context</div>'
            f'<div class="ctx-magic-sub"><span class="ctx-magic-session">{html.escape(self.session_id or "no session")}'
            f'</span> · <span class="ctx-magic-state">{html.escape(state)}</span>'
            + (f' · {html.escape(self.model)}' if self.model else "") + "</div></div>")
        figures = {name: getattr(self, name) for name in PER_SESSION_TRAITS}
        self.headline.value = headline_html(figures)
        self.next_line.value = next_call_html(self.next_call)
        self.bar.value = composition_html(self.composition, self.tokens, self.window)
        if touched("calls", "timeline", "warning", "threshold", "blocking"):
            self.chart.value = chart_html(self.calls, self.timeline, {"warning": self.warning,
                                                                      "threshold": self.threshold,
                                                                      "blocking": self.blocking})
        self.counts.value = counts_html(figures)
        if touched("timeline"):
            self.cards.render(self.timeline)
        if touched("persisted"):
            self.persisted_html.value = persisted_html(self.persisted)
        self._render_notes()
        self.memory_html.value = memories_html(self.memories)
        self.pending.show(self.pending_memories)

    def _render_notes(self) -> None:
        if self.session_notes == self._notes_shown:
            return
        self._notes_shown = self.session_notes
        self.notes_card.layout.display = None if self.session_notes else "none"
        self.notes_card.set_title(0, f"Session notes ({len(self.session_notes):,} characters)")
        self.notes.outputs = markdown_outputs(self.session_notes) if self.session_notes else ()

