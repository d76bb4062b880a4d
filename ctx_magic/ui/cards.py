"""The panel's sections below the picture: the counts, a card for every change to the context
(compactions with their summaries and originals, clearings, snips), the outputs saved to disk,
and the memory. Cards carry a key (`data-ctx-card`, or the class `ctx-magic-card-<key>` on a
widget) so that a chart marker or a cell's badge can open them."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from ctx_magic.prices import format_saving, format_usd
from ctx_magic.ui.picture import CHANGE_GLYPHS, pct

TRIGGER_WORDS = {
    "auto": "automatic: the context reached the compaction threshold",
    "manual": "by hand",
    "model": "the agent asked for it",
    "reactive": "the API refused a request as too long",
    "session-memory": "from the session's notes",
    "server": "the API compacted the conversation itself (the server strategy)",
}
CLEARED_WHY = {"idle": "after an idle gap (the prompt cache had expired, so clearing cost nothing)",
               "pressure": "to make room (the context was over the warning level)",
               "model": "at the agent's request", "user": "at your request",
               "server": "by the API's own context editing, in this request (the server strategy)",
               "thinking-idle": "after an idle gap: only the last thinking turn is kept once the cache has expired",
               "thinking-model-switch": "the new model cannot take another model's thinking blocks",
               "thinking-prefix-check": "the API refused them: the conversation before them had changed",
               "thinking-tools": "written before the tools or the system prompt changed, which the model checks"}


def count(n: int, one: str, many: str | None = None) -> str:
    """'1 model call', '3 model calls'."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def markdown_outputs(text: str) -> tuple[dict[str, Any], ...]:
    """An Output widget's outputs that show `text` as Markdown, rendered by the frontend itself."""
    return ({"output_type": "display_data", "data": {"text/markdown": text, "text/plain": text}, "metadata": {}},)


def markdown_output(text: str) -> widgets.Output:
    """Markdown rendered by the frontend itself (headings, lists, code), in every frontend."""
    out = widgets.Output(layout=widgets.Layout(width="100%"))
    out.add_class("ctx-magic-markdown")
    out.outputs = markdown_outputs(text)
    return out


def facts_html(rows: Sequence[tuple[str, str]]) -> str:
    return ('<dl class="ctx-magic-facts">'
            + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in rows if v) + "</dl>")


def compaction_title(entry: Mapping[str, Any]) -> str:
    trigger = "from notes" if entry.get("trigger") == "session-memory" else entry.get("trigger", "")
    return (f"{CHANGE_GLYPHS['compaction']} Compaction ({trigger}): {entry.get('tokens_before', 0):,} → "
            f"{entry.get('tokens_after', 0):,} tokens")


def compaction_facts(entry: Mapping[str, Any]) -> str:
    before, after = entry.get("tokens_before", 0), entry.get("tokens_after", 0)
    change = f" ({'+' if after > before else '−'}{pct(abs(before - after), before)})" if before else ""
    kinds = {"session-memory": "the session's notes became the summary (no model call)",
             "server": "a summary the API wrote inside the answer (the server strategy)"}
    rows = [
        ("Kind", kinds.get(entry.get("trigger", ""), "a summary written by one model call")),
        ("Trigger", TRIGGER_WORDS.get(entry.get("trigger", ""), entry.get("trigger", ""))),
        ("Why", entry.get("reason", "")),
        ("Size", f"{before:,} → {after:,} tokens{change}"),
        ("Replaced", count(entry.get("messages", 0), "message")),
        ("Note", "still over the threshold afterwards" if entry.get("rebound") else ""),
    ]
    return facts_html(rows)


UNDONE = " · undone"
"""After a card's title once `%compact --undo` (or its Undo) took the change back."""
UndoAction = Callable[[str], str]
"""What a compaction card's Undo does: (its boundary's uuid) -> the line saying what happened."""


def change_title(entry: Mapping[str, Any]) -> str:
    return _change_title(entry) + (UNDONE if entry.get("undone") else "")


def _change_title(entry: Mapping[str, Any]) -> str:
    kind = entry["kind"]
    if kind == "compaction":
        return compaction_title(entry)
    freed = f", about {entry.get('tokens_freed', 0):,} tokens freed"
    if kind == "clearing":
        what = [count(entry[k], one) for k, one in (("results", "tool result"), ("thinking", "thinking block"))
                if entry.get(k)]
        return f"{CHANGE_GLYPHS['clearing']} Cleared {' and '.join(what) or 'nothing'}{freed}"
    if entry.get("folded_cells"):
        return f"{CHANGE_GLYPHS['snip']} Folded {count(entry['folded_cells'], 'old cell')} to a line each{freed}"
    if "messages" in entry:
        return f"{CHANGE_GLYPHS['snip']} Snipped {count(entry['messages'], 'message')}{freed}"
    return f"{CHANGE_GLYPHS['snip']} The agent snipped {count(entry.get('results', 0), 'tool result')}{freed}"


def change_body(entry: Mapping[str, Any]) -> str:
    if entry["kind"] == "clearing" or "results" in entry:
        cells = entry.get("cells") or []
        which = ", ".join(f"cell [{c}]" for c in cells)
        others = entry.get("results", 0) - len(cells)
        if others > 0:
            which = ", ".join(filter(None, [which, count(others, "result of the agent's tools",
                                                          "results of the agent's tools")]))
        if entry.get("thinking"):
            which = ", ".join(filter(None, [which, count(entry["thinking"], "thinking block")]))
        return facts_html([
            ("When", CLEARED_WHY.get(entry.get("trigger", ""), entry.get("trigger", ""))),
            ("Which", which),
            ("Now", "each result is a one-line stub (with the saved file's path when there is one); the "
                    "transcript keeps the full text"),
        ])
    if entry.get("folded_cells"):
        return facts_html([
            ("When", "after an idle gap, when the prompt cache had expired"),
            ("What", "each run of old notebook cells became one message with a line per cell: its number, first "
                     "line, the names it defines and a short output; the transcript keeps every cell whole, and "
                     "the agent can read them back (search_transcript, kernel_history)"),
        ])
    return facts_html([("What", "the middle of the conversation was cut and one marker, naming the transcript, "
                                "stands in its place; the transcript keeps every message")])


def change_html(entry: Mapping[str, Any]) -> str:
    return (f'<details class="ctx-magic-card" data-ctx-card="{html.escape(entry["key"])}" '
            f'data-kind="{html.escape(entry["kind"])}"><summary>{html.escape(change_title(entry))}</summary>'
            f"{change_body(entry)}</details>")


class ChangeCards:
    """One card per change to the context, newest first; widgets are made once per change."""

    def __init__(self, load_originals: Callable[[Sequence[str]], str] | None, undo: UndoAction | None = None) -> None:
        self.load_originals = load_originals
        self.undo = undo
        """A compaction card's Undo (None: the card has no Undo button)."""
        self.box = widgets.VBox(layout=widgets.Layout(width="100%"))
        self.box.add_class("ctx-magic-cards")
        self._cards: dict[str, widgets.Widget] = {}
        self._undo_buttons: dict[str, widgets.Button] = {}
        self._undone: set[str] = set()

    def render(self, timeline: Sequence[Mapping[str, Any]]) -> None:
        children = []
        for entry in reversed(timeline):
            card = self._cards.get(entry["key"])
            if card is None:
                card = self._cards[entry["key"]] = self._make(entry)
            if entry.get("undone") and entry["key"] not in self._undone:
                self._show_undone(card, entry)
            children.append(card)
        if not children:
            children = [self._cards.setdefault("", widgets.HTML(
                '<div class="ctx-magic-note">No compaction, clearing or snip yet.</div>'))]
        if tuple(children) != self.box.children:
            self.box.children = tuple(children)

    def clear(self) -> None:
        """A new session: the old cards go (their widgets closed)."""
        self.box.children = ()
        for card in self._cards.values():
            close_tree(card)
        self._cards, self._undo_buttons, self._undone = {}, {}, set()

    def _show_undone(self, card: widgets.Widget, entry: Mapping[str, Any]) -> None:
        """A change taken back: its title says so, and its Undo goes."""
        self._undone.add(entry["key"])
        card.add_class("ctx-magic-card-undone")
        if isinstance(card, widgets.Accordion):
            card.set_title(0, change_title(entry))
        else:
            card.value = change_html(entry)
        button = self._undo_buttons.get(entry["key"])
        if isinstance(button, widgets.Button):
            button.layout.display = "none"

    def _undo_button(self, entry: Mapping[str, Any], undo: UndoAction) -> list[widgets.Widget]:
        """Undo, and the line that says what it did (or why it did not)."""
        said = widgets.HTML()
        said.add_class("ctx-magic-undo-said")
        button = widgets.Button(description="Undo", tooltip="Bring back the messages this compaction replaced",
                                layout=widgets.Layout(width="auto", height="auto"))
        button.add_class("ctx-magic-undo-button")
        boundary = str(entry.get("boundary_uuid", ""))

        def clicked(_: Any) -> None:
            said.value = f'<div class="ctx-magic-note">{html.escape(undo(boundary))}</div>'

        button.on_click(clicked)
        self._undo_buttons[entry["key"]] = button
        return [button, said]

    def _make(self, entry: Mapping[str, Any]) -> widgets.Widget:
        if entry["kind"] != "compaction":
            return widgets.HTML(change_html(entry), layout=widgets.Layout(width="100%"))
        facts, summary = widgets.HTML(compaction_facts(entry)), markdown_output(entry.get("summary", ""))
        facts.add_class("ctx-magic-part-facts")
        summary.add_class("ctx-magic-part-summary")
        title = widgets.HTML('<div class="ctx-magic-section-title">Summary</div>')
        parts: list[widgets.Widget] = [facts]
        if self.undo is not None and entry.get("trigger") != "server":  # the API's own summary cannot be taken back
            parts += self._undo_button(entry, self.undo)
        parts += [title, summary]
        audit = entry.get("audit", "")
        if audit:
            added = markdown_output(audit)
            added.add_class("ctx-magic-part-audit")
            parts += [widgets.HTML('<div class="ctx-magic-section-title">Added by the coverage audit</div>'), added]
        replaced = list(entry.get("replaced", []))
        if replaced and self.load_originals is not None:
            originals = widgets.HTML()
            originals.add_class("ctx-magic-part-originals")
            button = widgets.Button(description=f"Show the {count(len(replaced), 'original message')}",
                                    tooltip="Read the messages this summary replaced, from the transcript",
                                    layout=widgets.Layout(width="auto", max_width="100%", height="auto"))
            button.add_class("ctx-magic-originals-button")
            load = self.load_originals

            def show(_: Any) -> None:
                originals.value = load(replaced)
                button.layout.display = "none"

            button.on_click(show)
            parts += [button, originals]
        body = widgets.VBox(parts, layout=widgets.Layout(width="100%"))
        card = widgets.Accordion(children=[body], selected_index=None, layout=widgets.Layout(width="100%"))
        card.set_title(0, change_title(entry))
        card.add_class("ctx-magic-card")
        card.add_class(f"ctx-magic-card-{entry['key']}")
        return card


def close_tree(widget: widgets.Widget) -> None:
    for child in getattr(widget, "children", ()):
        close_tree(child)
    widget.close()


def model_calls(total: int, conversation: int) -> str:
    """All calls, and how many were the conversation's own (the chart's bars) and side calls."""
    beside = total - conversation
    if beside <= 0 or conversation <= 0:
        return f"{total:,}"
    return f"{total:,}: {conversation:,} in the conversation, {beside:,} beside it (summaries, notes)"


def counts_html(f: Mapping[str, Any]) -> str:
    spend = f.get("spend") or {}
    written = spend.get("input_tokens", 0) + spend.get("cache_creation_input_tokens", 0)
    rows = [
        ("Messages", f"{f.get('messages', 0):,}"),
        ("Tool results", f"{f.get('live_results', 0):,} in full · {f.get('cleared_results', 0):,} cleared · "
                         f"{f.get('persisted_results', 0):,} as a preview of a saved file"),
        ("Model calls", model_calls(spend.get("calls", 0), len(f.get("calls") or [])) + " · "
                        f"{f.get('cache_hit_ratio', 0.0):.0%} of prompt tokens read from the cache"),
        ("Tokens", f"{written:,} sent uncached or written to the cache · "
                   f"{spend.get('cache_read_input_tokens', 0):,} read from it · "
                   f"{spend.get('output_tokens', 0):,} generated"),
    ]
    breaks = f.get("cache_breaks") or []
    if breaks:
        unexplained = sum(1 for b in breaks if not b.get("expected"))
        last = breaks[-1]
        rows.append(("Cache breaks", f"{len(breaks)}× ({unexplained} unexplained); last: {last['previous_read']:,} "
                                     f"→ {last['cache_read']:,} tokens read, {last['reason']}"))
    cost = f.get("cost") or {}
    if cost and cost.get("prices_source") != "unknown":
        saved = format_saving(cost.get("saved_usd", 0.0))
        rows.append(("Dollars", f"{format_usd(cost.get('session_usd', 0.0))} spent"
                                + (f" · saved at least {saved} by the context changes" if saved else "")))
    alarm = ""
    if f.get("breaker_open"):
        alarm = ('<div class="ctx-magic-alarm">Automatic compaction is off after repeated failures: compact by '
                 "hand to turn it back on.</div>")
    elif breaks and any(not b.get("expected") for b in breaks):
        alarm = '<div class="ctx-magic-alarm" data-level="warning">The prompt cache broke unexpectedly.</div>'
    return facts_html(rows) + alarm


def persisted_html(items: Sequence[Mapping[str, Any]]) -> str:
    if not items:
        return ""
    rows = []
    for item in items:
        path = str(item.get("path", ""))
        name = path.rsplit("/", 1)[-1]
        rows.append(
            f'<details class="ctx-magic-card" data-ctx-card="{html.escape(item["key"])}" data-kind="persisted">'
            f"<summary>{html.escape(name)} · {item.get('chars', 0):,} characters</summary>"
            f'<div class="ctx-magic-path">{html.escape(path)}</div>'
            '<div class="ctx-magic-note">The agent sees this preview and can read the rest with read_file.</div>'
            f'<pre class="ctx-magic-pre">{html.escape(str(item.get("preview", ""))[:2_500])}</pre></details>')
    return (f'<div class="ctx-magic-section-title">Saved to disk this session ({len(items):,})</div>'
            + "".join(rows))


def _team_mark(memory: Mapping[str, Any]) -> str:
    """A team memory says so, and who added it when."""
    if memory.get("scope") != "team":
        return ""
    by = f" · {memory['added_by']}" if memory.get("added_by") else ""
    return f' <span class="ctx-magic-memory-scope">team{html.escape(by)}</span>'


def memories_html(memories: Sequence[Mapping[str, Any]]) -> str:
    if not memories:
        return ""
    rows = "".join(f'<li><span class="ctx-magic-relevance">{m.get("relevance", 0):.2f}</span>'
                   f'{html.escape(str(m.get("text", "")))}{_team_mark(m)}</li>' for m in memories)
    return (f'<div class="ctx-magic-section-title">Long-term memories ({len(memories):,}, most relevant first)</div>'
            f'<ul class="ctx-magic-memories">{rows}</ul>')
