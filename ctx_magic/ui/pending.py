"""The panel's section of memories waiting for review: each with its text, where it goes once kept,
and Keep and Discard buttons (Edit is `%memory edit ID NEW TEXT`: a text box in a sidebar is easy to
lose while a cell runs).

A button's click reaches the kernel on the shell channel, which the kernel reads between cells:
clicked while a cell runs, it is carried out when that cell ends. The section is refilled from the
pending folders whenever the panel refreshes (turn ends, `%memory`, a click).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets

ReviewAction = Callable[[str, str], Any]
"""What a click does: (the memory's id, "keep" or "discard")."""


def pending_html(row: Mapping[str, Any]) -> str:
    """One pending memory: its text, its kind and where it goes once kept."""
    where = "for the team" if row.get("scope") == "team" else "yours"
    return (f'<div class="ctx-magic-pending-memory" data-memory-id="{html.escape(str(row.get("id", "")))}">'
            f'{html.escape(str(row.get("text", "")))} <span class="ctx-magic-memory-scope">'
            f'{html.escape(str(row.get("type", "")))} · {where}</span></div>')


class PendingRows:
    """A VBox with a row per pending memory and its buttons; rows are made once per memory."""

    def __init__(self, answer: ReviewAction | None = None) -> None:
        self._answer = answer
        self.title = widgets.HTML()
        self.box = widgets.VBox(layout=widgets.Layout(width="100%", display="none"))
        self.box.add_class("ctx-magic-pending")
        self._rows: dict[str, widgets.HBox] = {}

    def show(self, rows: Sequence[Mapping[str, Any]]) -> None:
        ids = [str(row["id"]) for row in rows]
        if ids != list(self._rows):
            self._rows = {row_id: self._rows.get(row_id) or self._make(row) for row_id, row in zip(ids, rows)}
            self.box.children = (self.title, *self._rows.values())
        self.title.value = (f'<div class="ctx-magic-section-title">Memories waiting for review ({len(rows):,}: '
                            'in no prompt until kept)</div>')
        self.box.layout.display = None if rows else "none"

    def _make(self, row: Mapping[str, Any]) -> widgets.HBox:
        memory_id = str(row["id"])
        text = widgets.HTML(pending_html(row), layout=widgets.Layout(width="100%"))
        buttons = []
        for action, label in (("keep", "Keep"), ("discard", "Discard")):
            button = widgets.Button(description=label, tooltip=f"{label} memory {memory_id}",
                                    layout=widgets.Layout(width="auto", flex="0 0 auto"))
            button.add_class(f"ctx-magic-pending-{action}")
            button.on_click(lambda _button, action=action: self._clicked(memory_id, action))
            buttons.append(button)
        return widgets.HBox([text, *buttons])

    def _clicked(self, memory_id: str, action: str) -> None:
        if self._answer is not None:
            self._answer(memory_id, action)
