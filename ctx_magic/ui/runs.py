"""The panel's section of background runs: each with its state, its last printed line and a
Stop button while it runs.

A button's click reaches the kernel on the shell channel, which the kernel reads between
cells: clicked while a cell runs, it is carried out when that cell ends. The rows themselves
are refreshed from the run watch's thread (a widget's update travels on the IOPub channel,
which is sent from any thread at any time), so a run's progress shows while the user works.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets

STATE_CLASS = {"running": "ok", "stalled": "warning", "failed": "error"}


def run_html(row: Mapping[str, Any]) -> str:
    """One run: its id and state in words, then its last printed line."""
    state = html.escape(str(row.get("words", row.get("state", ""))))
    line = html.escape(str(row.get("last_line", "")))
    kind = STATE_CLASS.get(str(row.get("state")), "done")
    return (f'<div class="ctx-magic-run ctx-magic-run-{kind}"><b>{html.escape(str(row.get("id", "")))}</b> '
            f'<span class="ctx-magic-run-state">{state}</span>'
            + (f'<div class="ctx-magic-run-line"><code>{line}</code></div>' if line else "") + "</div>")


class RunRows:
    """A VBox with a row per run; rows are made once per run and updated in place."""

    def __init__(self, stop: Callable[[str], Any] | None = None) -> None:
        self._stop = stop
        self.title = widgets.HTML('<div class="ctx-magic-section-title">Background runs</div>')
        self.box = widgets.VBox(layout=widgets.Layout(width="100%", display="none"))
        self.box.add_class("ctx-magic-runs")
        self._rows: dict[str, tuple[widgets.HTML, widgets.Button]] = {}
        self._lock = threading.Lock()

    def show(self, rows: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            ids = [str(row["id"]) for row in rows]
            if ids != list(self._rows):
                self._rows = {run_id: self._rows.get(run_id) or self._make(run_id) for run_id in ids}
                rows_shown = (widgets.HBox([text, button]) for text, button in self._rows.values())
                self.box.children = (self.title, *rows_shown)
            for row in rows:
                _show_row(*self._rows[str(row["id"])], row)
            self.box.layout.display = None if rows else "none"

    def _make(self, run_id: str) -> tuple[widgets.HTML, widgets.Button]:
        text = widgets.HTML(layout=widgets.Layout(width="100%"))
        button = widgets.Button(description="Stop", tooltip=f"Stop background run {run_id}",
                                layout=widgets.Layout(width="auto", flex="0 0 auto"))
        button.add_class("ctx-magic-run-stop")
        button.on_click(lambda _button: self._stopped(run_id))
        return text, button

    def _stopped(self, run_id: str) -> None:
        if self._stop is None:
            return
        try:
            self._stop(run_id)
        except Exception:  # noqa: BLE001 - a run that ended meanwhile: the next refresh shows it
            pass


def _show_row(text: widgets.HTML, button: widgets.Button, row: Mapping[str, Any]) -> None:
    """A run's row as it stands now: its line, and its Stop button while it can be stopped (each
    widget written only when it changes, so the frontend is not sent the same state again)."""
    shown = run_html(row)
    if text.value != shown:
        text.value = shown
    display = None if row.get("can_stop") else "none"
    if button.layout.display != display:
        button.layout.display = display
