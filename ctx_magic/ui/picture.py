"""The picture at the top of the panel: where the context stands (one line), what the next
request carries (a composition bar over the whole window, like Claude Code's `/context`), and
the context size of every model call of the session with the warning, compaction and blocking
lines, a marker for every compaction, clearing and snip, and each call's cache reads and writes.

Pure functions from the panel's figures to HTML (and inline SVG): plain HTML so that every
frontend shows the same panel, styled by panel.css with JupyterLab's theme variables.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from ctx_magic.prices import format_usd

# Names, in the order the bar draws them, and what each means (the legend's tooltip).
PARTS: dict[str, tuple[str, str]] = {
    "system": ("System prompt", "the instructions every request starts with"),
    "tools": ("Tools", "the definitions of the tools the agent may call"),
    "memory": ("Memory & pins", "long-term memories in the system prompt, and what is attached to the "
                                "conversation (pins, files re-read after a compaction)"),
    "messages": ("Messages", "what was said: your messages, the agent's replies and tool calls, summaries, "
                             "stubs of cleared results"),
    "tool_results": ("Tool results", "outputs the agent still sees in full: its own runs and your cells"),
    "persisted": ("Saved-output previews", "previews of outputs saved to disk"),
    "free": ("Free", "room left before the context is compacted"),
    "buffer": ("Compaction buffer", "kept free so that a compaction can run before the window fills"),
    "reserve": ("Reply reserve", "kept for the agent's reply"),
}
CHANGE_GLYPHS = {"compaction": "◆", "clearing": "○", "snip": "✂"}
CHART_HEIGHT = 84  # px: the plot; labels sit outside it in HTML, readable at any width
ZONE_WORDS = {"ok": "ok", "warning": "warning", "compacting": "compacting next", "blocked": "blocked"}
# A threshold line further above the largest call than this would flatten every bar to a sliver:
# it is named under the chart instead of drawn.
LINE_HEADROOM = 1.6


def pct(part: int, whole: int) -> str:
    """A share as people read it: '<1%' for a sliver, never '0%' for something that is there."""
    if whole <= 0 or part <= 0:
        return "0%"
    share = 100 * part / whole
    if share < 1:
        return "<1%"
    return f"{share:.0f}%"


def short(tokens: int) -> str:
    """12,345 -> '12.3k', 200,000 -> '200k' (axis labels)."""
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:.1f}M".replace(".0M", "M")
    if tokens >= 1_000:
        return f"{tokens / 1_000:.1f}k".replace(".0k", "k")
    return str(tokens)


def headline_html(f: Mapping[str, Any]) -> str:
    """One line a person reads first: the size against the window, and how far compaction is."""
    tokens, window, threshold = f.get("tokens", 0), f.get("window", 0), f.get("threshold", 0)
    zone = str(f.get("zone", "ok"))
    left = f.get("percent_left", 100.0)
    return (
        f'<div class="ctx-magic-headline" data-zone="{html.escape(zone)}">'
        f'<span class="ctx-magic-big">{tokens:,}</span> tokens of a {window:,}-token window '
        f"({html.escape(pct(tokens, window))})"
        f'<div class="ctx-magic-sub"><span class="ctx-magic-zone-dot"></span>'
        f"{html.escape(ZONE_WORDS.get(zone, zone))} · compaction at {threshold:,} · {left:g}% left before it</div>"
        "</div>"
    )


def next_call_html(next_call: Mapping[str, Any]) -> str:
    """What the next call will find and pay before the user sends it: the prompt cache (a cold one
    writes the whole context again, priced) and an automatic compaction the next turn makes."""
    cache, ahead = next_call.get("cache") or {}, next_call.get("ahead") or {}
    lines = []
    if cache.get("state") == "cold":
        usd = cache.get("write_usd")
        price = f", {format_usd(usd)}" if usd is not None else ""
        lines.append(f"Next call: the prompt cache is cold ({cache.get('reason', '')}): it writes "
                     f"{cache.get('write_tokens', 0):,} tokens{price}")
    elif cache.get("state") == "warm":
        lines.append(f"Next call: the prompt cache is warm for {cache.get('seconds_left', 0) / 60:.1f} min more "
                     f"({cache.get('ttl', '')} lifetime)")
    if ahead:
        usd = ahead.get("cost_usd")
        price = f", about {format_usd(usd)}" if usd is not None else ""
        lines.append("The next turn goes on uncompacted (deferred) until the blocking limit" if ahead.get("deferred")
                     else f"The next turn compacts {ahead.get('tokens', 0):,} tokens{price}")
    if not lines:
        return ""
    state = "cold" if cache.get("state") == "cold" else ("compacting" if ahead else "warm")
    body = "".join(f"<div>{html.escape(line)}</div>" for line in lines)
    return f'<div class="ctx-magic-next" data-state="{state}">{body}</div>'


def composition_html(composition: Mapping[str, int], tokens: int, window: int) -> str:
    """The window as the next request fills it: a bar and a legend in tokens and percent."""
    if not composition:
        composition = {"messages": tokens, "free": max(0, window - tokens)}
    whole = max(window, sum(int(composition.get(name, 0)) for name in PARTS)) or 1
    segments, legend = [], []
    for name, (label, meaning) in PARTS.items():
        size = int(composition.get(name, 0))
        title = html.escape(f"{label}: {size:,} tokens ({pct(size, whole)}) — {meaning}")
        if size > 0:
            segments.append(f'<span class="ctx-magic-seg" data-part="{name}" style="flex-grow:{size}" '
                            f'title="{title}"></span>')
        legend.append(f'<li data-part="{name}" title="{title}"><span class="ctx-magic-swatch"></span>'
                      f'<span class="ctx-magic-legend-name">{label}</span>'
                      f'<span class="ctx-magic-legend-num">{size:,} · {html.escape(pct(size, whole))}</span></li>')
    return (f'<div class="ctx-magic-composition"><div class="ctx-magic-bar" role="img" '
            f'aria-label="What the next request carries">{"".join(segments)}</div>'
            f'<ul class="ctx-magic-legend">{"".join(legend)}</ul></div>')


MARKER_ROW_PX = 20  # a change marker is 18 px round: one row of them
MARKER_GAP_PCT = 6.0  # markers closer than this share of the chart's width would cover each other


def marker_rows(positions: Sequence[float]) -> list[int]:
    """For each marker (its position in % of the chart's width), the first row where no earlier
    marker sits close enough to cover it: changes at one call stack instead of hiding each other."""
    placed: list[tuple[float, int]] = []
    rows = []
    for at in positions:
        taken = {row for other, row in placed if abs(other - at) < MARKER_GAP_PCT}
        row = next(r for r in range(len(placed) + 1) if r not in taken)
        placed.append((at, row))
        rows.append(row)
    return rows


MAX_BARS = 240  # past this many calls a bar stands for several: a sidebar is a few hundred pixels wide


def _price(usd: float, what: str = "") -> str:
    return f", {what}{format_usd(usd)}" if usd else ""


def _bars(calls: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[str, Mapping[str, Any], str]], int]:
    """One (label, call, price) per bar and how many calls a bar stands for: every call while they
    fit, past MAX_BARS each run of `per_bar` calls drawn as its largest request, priced together."""
    per_bar = max(1, -(-len(calls) // MAX_BARS))
    if per_bar == 1:
        return [(f"call {i + 1}", c, _price(c.get("usd", 0.0))) for i, c in enumerate(calls)], 1
    bars = []
    for start in range(0, len(calls), per_bar):
        run = calls[start:start + per_bar]
        peak = max(run, key=lambda c: c.get("prompt", 0))
        price = _price(sum(c.get("usd", 0.0) for c in run), f"the {len(run)} calls cost ")
        bars.append((f"calls {start + 1}-{start + len(run)}, the largest", peak, price))
    return bars, per_bar


def chart_html(calls: Sequence[Mapping[str, Any]], changes: Sequence[Mapping[str, Any]],
               lines: Mapping[str, int]) -> str:
    """Context size per model call (bars: cache read, cache write, uncached input; a call's price
    on hover, their sum under the chart), the warning / compaction / blocking lines, and one
    marker per context change that opens its card. A long session's calls share bars (`_bars`)."""
    if not calls and not changes:
        return ('<div class="ctx-magic-chart ctx-magic-empty">The context size of every model call will show '
                "here.</div>")
    shown, per_bar = _bars(calls)
    n = max(len(shown), 1)
    top = max([c.get("prompt", 0) for c in calls] or [1]) * 1.1 or 1
    drawn, named = {}, {}
    for name, value in lines.items():
        if value <= 0:
            continue
        if value <= top * LINE_HEADROOM:
            drawn[name] = value
            top = max(top, value * 1.04)
        else:
            named[name] = value
    spent = sum(c.get("usd", 0.0) for c in calls)
    bars = []
    for i, (label, c, usd) in enumerate(shown):
        prompt, read, write = c.get("prompt", 0), c.get("read", 0), c.get("write", 0)
        uncached = max(0, prompt - read - write)
        y = 0.0
        title = html.escape(f"{label}: {prompt:,} tokens sent — {read:,} read from the cache, "
                            f"{write:,} written to it, {uncached:,} uncached; {c.get('output', 0):,} generated{usd}")
        parts = []
        for part, size in (("read", read), ("write", write), ("uncached", uncached)):
            if size <= 0:
                continue
            h = size / top * 100
            parts.append(f'<rect class="ctx-magic-bar-{part}" x="{i + 0.12:.2f}" width="0.76" '
                         f'y="{100 - y - h:.3f}" height="{h:.3f}"/>')
            y += h
        bars.append(f'<g class="ctx-magic-call"><title>{title}</title>{"".join(parts)}</g>')
    changes = [{**c, "at": round(c["at"] / per_bar, 3)} for c in changes] if per_bar > 1 else changes
    rules = "".join(
        f'<line class="ctx-magic-line" data-line="{name}" x1="0" x2="{n}" y1="{100 - v / top * 100:.3f}" '
        f'y2="{100 - v / top * 100:.3f}" vector-effect="non-scaling-stroke"/>' for name, v in drawn.items())
    ticks = "".join(
        f'<line class="ctx-magic-change-line" data-kind="{html.escape(str(c["kind"]))}" x1="{c["at"]}" '
        f'x2="{c["at"]}" y1="0" y2="100" vector-effect="non-scaling-stroke"/>' for c in changes)
    rows = marker_rows([100 * c["at"] / n for c in changes])
    markers = "".join(
        f'<button class="ctx-magic-marker" type="button" data-kind="{html.escape(str(c["kind"]))}" '
        f'data-ctx-card="{html.escape(str(c["key"]))}" style="left:clamp(0.6em, {100 * c["at"] / n:.2f}%, '
        f'calc(100% - 0.6em)); top:{row * MARKER_ROW_PX}px" '
        f'title="{html.escape(str(c["label"]))}{" (undone)" if c.get("undone") else ""} (click for details)"'
        f'>{CHANGE_GLYPHS.get(str(c["kind"]), "•")}'
        "</button>" for c, row in zip(changes, rows))
    svg = (f'<svg class="ctx-magic-plot" viewBox="0 0 {n} 100" preserveAspectRatio="none" '
           f'height="{CHART_HEIGHT}" width="100%" role="img" aria-label="Context size per model call">'
           f"{''.join(bars)}{rules}{ticks}</svg>")
    line_legend = "".join(
        f'<li data-line="{name}"><span class="ctx-magic-swatch"></span>{LINE_NAMES[name]} {short(v)}</li>'
        for name, v in drawn.items())
    off = " · ".join(f"{LINE_NAMES[name]} at {v:,}" for name, v in named.items())
    return (
        '<div class="ctx-magic-chart">'
        f'<div class="ctx-magic-markers" style="height:{(max(rows, default=0) + 1) * MARKER_ROW_PX}px">{markers}</div>'
        f'<div class="ctx-magic-plot-box"><span class="ctx-magic-axis-top">{short(round(top))}</span>{svg}</div>'
        f'<div class="ctx-magic-axis"><span>call 1</span><span>{len(calls):,} model '
        f'{"call" if len(calls) == 1 else "calls"}{f", {format_usd(spent)}" if spent else ""}</span></div>'
        '<ul class="ctx-magic-legend ctx-magic-chart-legend">'
        '<li data-part="read"><span class="ctx-magic-swatch"></span>cache read</li>'
        '<li data-part="write"><span class="ctx-magic-swatch"></span>cache write</li>'
        '<li data-part="uncached"><span class="ctx-magic-swatch"></span>uncached</li>'
        f"{line_legend}</ul>"
        + (f'<div class="ctx-magic-note">Off the chart: {off}.</div>' if off else "")
        + "</div>"
    )


LINE_NAMES = {"warning": "warning", "threshold": "compaction", "blocking": "blocking"}
