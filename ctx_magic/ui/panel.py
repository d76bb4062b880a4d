"""The context panel (SPEC U1, U3): an ipywidgets VBox fed only by the engine's events.

Its synced traits hold the figures (tokens, thresholds, zone, counts, cache, boundaries,
persisted outputs, memory); its children render them. Updates are throttled while the agent
streams (a few a second at most) and flushed at each turn end. The JupyterLab extension reads
the same traits for the status bar and the notebook's cell marks.
"""

from __future__ import annotations

import dataclasses
import html
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
from traitlets import Bool, Dict, Float, Int, List, Unicode

from ctx_magic.agent.status import StatusSnapshot
from ctx_magic.context.compaction_state import MAX_CONSECUTIVE_FAILURES
from ctx_magic.events import (
    BreakerReset,
    CacheBroke,
    Cleared,
    Compacted,
    CompactionFailedEvent,
    ContextFigures,
    ContextMeasured,
    Event,
    Persisted,
    ServerCompacted,
    ServerEdited,
    Snipped,
    Status,
    ThinkingCleared,
    UsageUpdated,
)
from ctx_magic.messages import cell_of
from ctx_magic.prices import format_usd

FLUSH_INTERVAL = 0.25  # seconds: four updates a second at most while a turn streams
ZONE_COLOURS = {"ok": "#2e7d32", "warning": "#f9a825", "compacting": "#ef6c00", "blocked": "#c62828"}
# Everything that describes one session (all synced traits but the status line).
PER_SESSION_TRAITS = ("tokens", "threshold", "warning", "blocking", "window", "zone", "percent_left", "messages",
                      "live_results", "cleared_results", "persisted_results", "cache_hit_ratio", "cache_breaks",
                      "spend", "timeline", "persisted", "session_memory", "memories", "cell_marks", "breaker_open",
                      "session_id", "cost")
CLEARED_WHY = {"idle": "after an idle gap", "pressure": "to make room", "model": "at the agent's request",
               "user": "at your request"}


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
    timeline = List().tag(sync=True)
    """Context changes, oldest first: compactions with their summaries, microcompacts, snips."""
    persisted = List().tag(sync=True)
    session_memory = Unicode("").tag(sync=True)
    memories = List().tag(sync=True)
    cell_marks = Dict().tag(sync=True)
    """execution count (as text) -> why the agent no longer sees that cell's output in full."""
    status = Unicode("idle").tag(sync=True)
    breaker_open = Bool(False).tag(sync=True)
    session_id = Unicode("").tag(sync=True)

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 load_originals: Callable[[Sequence[str]], str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clock = clock
        self.load_originals = load_originals
        self._pending: dict[str, Any] = {}
        self._last_flush = -FLUSH_INTERVAL
        self.header = widgets.HTML()
        self.gauge = widgets.HTML()
        self.counts = widgets.HTML()
        self.timeline_box = widgets.VBox()
        self.persisted_html = widgets.HTML()
        self.memory_html = widgets.HTML()
        self.children = (self.header, self.gauge, self.counts, widgets.HTML("<b>Timeline</b>"),
                         self.timeline_box, self.persisted_html, self.memory_html)
        self.add_class("ctx-magic-panel")
        self.layout.padding = "6px"
        self._render()

    # -- events in -----------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Fold one event into the pending figures; flush when the throttle allows."""
        changes = self._changes(event)
        if not changes:
            return
        self._pending.update(changes)
        if self.clock() - self._last_flush >= FLUSH_INTERVAL or isinstance(event, Compacted):
            self.flush()

    __call__ = handle

    def _changes(self, event: Event) -> dict[str, Any]:
        timeline = list(self._pending.get("timeline", self.timeline))
        if isinstance(event, ContextMeasured):
            return context_traits(event.figures)
        if isinstance(event, UsageUpdated):
            cost = {**dict(self._pending.get("cost", self.cost)), "session_usd": event.totals.get("cost_usd", 0.0)}
            return {"spend": dict(event.totals), "cache_hit_ratio": event.cache_hit_ratio, "cost": cost}
        if isinstance(event, ServerEdited):
            timeline.append({"kind": "server-edit", "edits": [dict(e) for e in event.applied_edits],
                             "tokens_freed": event.tokens_cleared})
            return {"timeline": timeline}
        if isinstance(event, ServerCompacted):
            timeline.append({"kind": "server", "tokens_before": event.tokens_before,
                             "tokens_after": event.tokens_after, "messages": event.messages_summarized,
                             "summary": event.summary, "boundary_uuid": event.message_uuid,
                             "replaced": list(event.summarized_uuids)})
            return {"timeline": timeline, "tokens": event.tokens_after}
        if isinstance(event, ThinkingCleared):
            timeline.append({"kind": "thinking", "trigger": event.trigger, "results": event.blocks,
                             "tokens_freed": event.tokens_freed})
            return {"timeline": timeline}
        if isinstance(event, Status):
            return {"status": event.state}
        if isinstance(event, CacheBroke):
            return {"cache_breaks": [*self._pending.get("cache_breaks", self.cache_breaks), event.summary()]}
        if isinstance(event, Compacted):
            timeline.append({"kind": event.trigger, "tokens_before": event.tokens_before,
                             "tokens_after": event.tokens_after, "messages": event.messages_summarized,
                             "summary": event.summary, "boundary_uuid": event.boundary_uuid,
                             "replaced": list(event.summarized_uuids)})
            return {"timeline": timeline, "tokens": event.tokens_after, "breaker_open": False}
        if isinstance(event, Cleared):
            timeline.append({"kind": "microcompact" if event.trigger in ("idle", "pressure") else "snip",
                             "trigger": event.trigger, "results": len(event.replacements),
                             "tokens_freed": event.tokens_freed})
            marks = self._marks(event.replacements, f"cleared from the agent's context "
                                                    f"{CLEARED_WHY.get(event.trigger, event.trigger)}")
            return {"timeline": timeline, "cell_marks": marks}
        if isinstance(event, Snipped):
            timeline.append({"kind": "snip", "messages": event.count, "tokens_freed": event.tokens_freed})
            return {"timeline": timeline}
        if isinstance(event, Persisted):
            persisted = [*self._pending.get("persisted", self.persisted),
                         {"tool_use_id": event.tool_use_id, "path": event.path, "chars": event.original_chars,
                          "preview": event.replacement}]
            marks = self._marks([event.tool_use_id], f"saved to {event.path}; the agent sees a preview")
            return {"persisted": persisted, "cell_marks": marks}
        if isinstance(event, CompactionFailedEvent):
            return {"breaker_open": event.breaker_open}
        if isinstance(event, BreakerReset):
            return {"breaker_open": False}
        return {}

    def _marks(self, tool_use_ids: Sequence[str], why: str) -> dict[str, str]:
        marks = dict(self._pending.get("cell_marks", self.cell_marks))
        for tool_use_id in tool_use_ids:
            cell = cell_of(tool_use_id)
            if cell is not None:
                marks[str(cell)] = f"The agent no longer sees this cell's output in full: {why}."
        return marks

    def load(self, status: StatusSnapshot, *, session_memory: str = "",
             memories: Sequence[Mapping[str, Any]] = ()) -> None:
        """Set every figure at once from the session's status (turn ends, a resumed session)."""
        usage = dataclasses.asdict(status.usage)
        self._pending.update({
            **context_traits(status.context), "session_id": status.session_id, "breaker_open": status.breaker_open,
            "spend": usage, "cache_hit_ratio": round(status.usage.cache_hit_ratio, 4),
            "cache_breaks": list(status.cache_breaks), "session_memory": session_memory, "memories": list(memories),
            "cost": status.cost_json(),
        })
        self.flush()

    def reset(self) -> None:
        """Forget the figures and the timeline of the previous session (a new or resumed one follows)."""
        self._pending = {name: self.trait_defaults(name) for name in PER_SESSION_TRAITS}
        self.flush()

    def flush(self) -> None:
        if self._pending:
            with self.hold_sync():
                for name, value in self._pending.items():
                    setattr(self, name, value)
            self._pending = {}
            self._render()
        self._last_flush = self.clock()

    # -- rendering -----------------------------------------------------------------------------

    def _render(self) -> None:
        state = {"thinking": "thinking…", "running": "running code…", "compacting": "compacting…"}.get(
            self.status, "idle")
        self.header.value = (f'<div style="font-weight:bold">Agent context</div>'
                             f'<div style="color:#777;font-size:90%">{html.escape(self.session_id)} · {state}</div>')
        self.gauge.value = gauge_html(self)
        spend = self.spend or {}
        self.counts.value = (
            f"<div>{self.messages:,} messages · tool results: {self.live_results} live, "
            f"{self.cleared_results} cleared, {self.persisted_results} persisted</div>"
            f"<div>cache hits {self.cache_hit_ratio:.0%} · {spend.get('calls', 0)} calls · "
            f"{spend.get('input_tokens', 0) + spend.get('cache_creation_input_tokens', 0):,} tokens written, "
            f"{spend.get('cache_read_input_tokens', 0):,} read from cache, "
            f"{spend.get('output_tokens', 0):,} generated</div>"
            + cost_html(self.cost)
            + cache_breaks_html(self.cache_breaks)
            + ('<div style="color:#c62828">auto-compaction is off after '
               f'{MAX_CONSECUTIVE_FAILURES} failures in a row: run %compact</div>' if self.breaker_open else ""))
        self._render_timeline()
        self.persisted_html.value = persisted_html(self.persisted)
        self.memory_html.value = memory_html(self.session_memory, self.memories)

    def _render_timeline(self) -> None:
        entries = []
        for index, entry in enumerate(self.timeline):
            if entry["kind"] in ("microcompact", "snip", "server-edit", "thinking"):
                entries.append(widgets.HTML(f'<div class="ctx-magic-timeline-entry">{html.escape(entry_title(entry))}'
                                            "</div>"))
                continue
            entries.append(self._boundary_widget(index, entry))
        self.timeline_box.children = tuple(entries) or (widgets.HTML("<i>no context changes yet</i>"),)

    def _boundary_widget(self, index: int, entry: Mapping[str, Any]) -> widgets.Widget:
        summary = widgets.HTML(f'<pre class="ctx-magic-summary" style="white-space:pre-wrap">'
                               f'{html.escape(entry.get("summary", ""))}</pre>')
        originals = widgets.HTML()
        button = widgets.Button(description="Show the original messages", layout=widgets.Layout(width="auto"))

        def show(_: Any) -> None:
            if self.load_originals is not None:
                originals.value = self.load_originals(entry.get("replaced", []))

        button.on_click(show)
        box = widgets.VBox([summary, button, originals])
        accordion = widgets.Accordion(children=[box], selected_index=None)
        accordion.set_title(0, entry_title(entry))
        accordion.add_class("ctx-magic-boundary")
        return accordion


def context_traits(c: ContextFigures) -> dict[str, Any]:
    """The engine's figures under the panel's trait names."""
    return {"tokens": c.tokens, "threshold": c.threshold, "warning": c.warning, "blocking": c.blocking,
            "window": c.window, "zone": c.zone, "percent_left": c.percent_left, "messages": c.messages,
            "live_results": c.live_results, "cleared_results": c.cleared_results,
            "persisted_results": c.persisted_results}


def entry_title(entry: Mapping[str, Any]) -> str:
    kind = entry["kind"]
    if kind == "microcompact":
        return (f"microcompact ({entry.get('trigger')}): {entry.get('results')} results cleared, "
                f"~{entry.get('tokens_freed', 0):,} tokens freed")
    if kind == "server-edit":
        return f"server edit: ~{entry.get('tokens_freed', 0):,} tokens cleared from the request by the API"
    if kind == "thinking":
        return (f"thinking cleared ({entry.get('trigger')}): {entry.get('results')} blocks, "
                f"~{entry.get('tokens_freed', 0):,} tokens freed")
    if kind == "snip":
        if "messages" in entry:
            return f"snip: {entry['messages']:,} messages, ~{entry.get('tokens_freed', 0):,} tokens freed"
        return f"snip (by the agent): {entry.get('results')} results cleared"
    return (f"{kind} compaction: {entry.get('messages', 0):,} messages, "
            f"{entry.get('tokens_before', 0):,} → {entry.get('tokens_after', 0):,} tokens")


def cost_html(cost: Mapping[str, Any]) -> str:
    """The dollar line: spent, and saved (a lower bound) by the context changes."""
    if not cost or cost.get("prices_source") == "unknown":
        return ""
    saved = cost.get("saved_usd", 0.0)
    return (f'<div class="ctx-magic-cost">{format_usd(cost.get("session_usd", 0.0))} spent · '
            f'saved at least {format_usd(saved)}</div>')


def cache_breaks_html(breaks: Sequence[Mapping[str, Any]]) -> str:
    if not breaks:
        return ""
    last = breaks[-1]
    unexplained = sum(1 for b in breaks if not b["expected"])
    color = "#c62828" if unexplained else "#777"
    return (f'<div style="color:{color}">prompt cache broke {len(breaks)}x ({unexplained} unexplained); last: '
            f'{last["previous_read"]:,} -> {last["cache_read"]:,} tokens read, {html.escape(last["reason"])}</div>')


def gauge_html(panel: ContextPanel) -> str:
    window = max(panel.window, 1)
    fill = min(100.0, 100.0 * panel.tokens / window)
    colour = ZONE_COLOURS.get(panel.zone, "#555")
    marks = "".join(
        f'<div title="{name} at {value:,}" style="position:absolute;left:{100.0 * value / window:.2f}%;top:0;'
        f'bottom:0;width:2px;background:{mark_colour}"></div>'
        for name, value, mark_colour in (("warning", panel.warning, "#f9a825"),
                                         ("auto-compact", panel.threshold, "#ef6c00"),
                                         ("blocking", panel.blocking, "#c62828")) if value)
    return (
        f'<div class="ctx-magic-gauge" data-zone="{panel.zone}" style="position:relative;height:14px;'
        f'background:#eee;border-radius:3px;margin:4px 0">'
        f'<div style="width:{fill:.2f}%;height:100%;background:{colour};border-radius:3px"></div>{marks}</div>'
        f'<div>{panel.tokens:,} / {panel.threshold:,} tokens (window {panel.window:,}) · zone '
        f'<b style="color:{colour}">{panel.zone}</b> · {panel.percent_left}% left</div>'
    )


def persisted_html(items: Sequence[Mapping[str, Any]]) -> str:
    if not items:
        return ""
    rows = "".join(
        f'<details><summary>{html.escape(item["path"])} ({item["chars"]:,} characters)</summary>'
        f'<pre style="white-space:pre-wrap;max-height:12em;overflow:auto">{html.escape(item["preview"][:2_500])}'
        "</pre></details>" for item in items)
    return f"<b>Persisted outputs</b>{rows}"


def memory_html(session_memory: str, memories: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    if session_memory:
        parts.append(f'<details><summary><b>Session memory</b></summary><pre style="white-space:pre-wrap">'
                     f"{html.escape(session_memory)}</pre></details>")
    if memories:
        rows = "".join(f"<tr><td>{m.get('relevance', 0):.2f}</td><td>{html.escape(str(m.get('text', '')))}</td></tr>"
                       for m in memories)
        parts.append(f"<b>Long-term memories</b><table><tr><th>relevance</th><th>memory</th></tr>{rows}</table>")
    return "".join(parts)
