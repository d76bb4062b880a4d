"""What the notebook says to its user: remedies in the notebook's own commands, the turn's
closing line and `%ctx status`, all rendered from typed values (errors, StatusSnapshot)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ctx_magic.context.pins import pins_tokens
from ctx_magic.errors import CtxMagicError, Remedy
from ctx_magic.prices import format_saving, format_usd
from ctx_magic.settings import ALWAYS_THINKS, MODEL_DEFAULT
from ctx_magic.ui.cards import count

if TYPE_CHECKING:
    from ctx_magic.agent.loop import TurnResult
    from ctx_magic.agent.status import StatusSnapshot
    from ctx_magic.agent.undo import UndoResult
    from ctx_magic.context.ahead import CompactionAhead
    from ctx_magic.context.cache_outlook import CacheOutlook
    from ctx_magic.context.pins import Pin

REMEDIES: dict[str, str] = {
    Remedy.COMPACT: "Run %compact to compact by hand.",
    Remedy.COMPACT_OR_NEW: "Run %compact, or start over with %agent --new.",
    Remedy.COMPACT_WITH_INSTRUCTIONS_OR_NEW: "Run %compact with instructions, or %agent --new.",
    Remedy.SNIP_OR_NEW: "Use %compact --snip, or %agent --new to start over.",
    Remedy.NEW_SESSION: "Start a new session with %agent --new.",
    Remedy.RUN_AGAIN: "Run %%agent again to go on.",
    Remedy.UNPIN_OR_RAISE_PIN_BUDGET: ("Remove a pin with %pin --remove ID (%pin --list shows them), or raise "
                                       "%config CtxMagic.pin_budget_tokens."),
}


def with_remedy(text: str, remedy: str = "") -> str:
    """A line and what to do about it, in this frontend's commands."""
    advice = REMEDIES.get(remedy, "")
    return f"{text} {advice}" if advice else text


def error_line(error: CtxMagicError) -> str:
    return with_remedy(str(error), error.remedy)


def summary_line(status: StatusSnapshot, result: TurnResult) -> str:
    """The turn's closing line in the cell (and what the next turn will compact, when it will)."""
    state = "Interrupted" if result.interrupted else ("Stopped" if result.error else "Done")
    line = (f"{state} · {count(result.model_calls, 'model call')} · {status.context.tokens:,} tokens in context · "
            f"{status.context.percent_left}% left before compaction · {turn_cost(status, result.cost_usd)}")
    return line + (f" · {ahead_line(status.ahead)}" if status.ahead is not None else "")


def _about(amount: float | None) -> str:
    return "cost unknown" if amount is None else f"about {format_usd(amount)}"


def ahead_line(ahead: CompactionAhead) -> str:
    """The notice before an automatic compaction: its size, its price, and how to put it off."""
    if ahead.deferred:
        return (f"the next turn goes on uncompacted (%compact --not-now), up to the blocking limit "
                f"{ahead.blocking:,}; the turn after compacts")
    said = (f"the next turn compacts: {ahead.tokens:,} tokens now, about {ahead.growth:,} more a turn, threshold "
            f"{ahead.threshold:,} ({_about(ahead.cost_usd)})")
    if ahead.fits_one_more_turn:
        return said + f": %compact --not-now lets one more turn through under the blocking limit {ahead.blocking:,}"
    return said + f": one more turn would pass the blocking limit {ahead.blocking:,}, so it cannot wait"


def deferred_line(ahead: CompactionAhead) -> str:
    """What `%compact --not-now` did."""
    if not ahead.fits_one_more_turn:
        return (f"Put off by one turn, but the context ({ahead.tokens:,} tokens, about {ahead.growth:,} more a turn) "
                f"will pass the blocking limit {ahead.blocking:,}: it compacts there anyway.")
    return (f"The next turn goes on without compacting ({ahead.tokens:,} tokens; the blocking limit is "
            f"{ahead.blocking:,}); the turn after it compacts as usual.")


def not_due_line() -> str:
    return "No automatic compaction is due at the next turn: nothing to put off."


def cache_line(cache: CacheOutlook) -> str:
    """The prompt cache as the next call finds it, and what that call writes when it is cold."""
    if cache.write_tokens:
        return (f"next call: cache {cache.state} ({cache.reason}): it writes {cache.write_tokens:,} tokens to the "
                f"cache, {_about(cache.write_usd)} ({cache.ttl} lifetime)")
    return f"next call: cache warm ({cache.reason}), {cache.seconds_left / 60:.1f} min left of its {cache.ttl} lifetime"


def turn_cost(status: StatusSnapshot, amount: float) -> str:
    if status.prices.source == "unknown":
        return f"cost unknown (no price for {status.model}; set CtxMagic.prices)"
    return f"{format_usd(amount)} this turn"


def cost_line(status: StatusSnapshot) -> str:
    """The session's spend, what the context changes saved, and the rates used."""
    if status.prices.source == "unknown":
        return f"cost unknown: no price for {status.model} (set CtxMagic.prices = 'input=... output=...')"
    saved = status.usage.saved_usd
    by = ", ".join(f"{kind} {format_usd(v)}" for kind, v in sorted(saved.items()) if v)
    p = status.prices
    total = format_saving(sum(saved.values()))
    return (f"spent {format_usd(status.usage.cost_usd)} this session"
            + (f" · saved at least {total}" + (f" ({by})" if by else "") if total else "")
            + f" · prices per million tokens: input ${p.input:g}, cache write ${p.cache_write_5m:g} (5m) / "
              f"${p.cache_write_1h:g} (1h), cache read ${p.cache_read:g}, output ${p.output:g} ({p.source})")


def compacted_line(status: StatusSnapshot) -> str:
    return f"Context now {status.context.tokens:,} tokens · {status.context.percent_left}% left before compaction"


def _thinking(status: StatusSnapshot) -> str:
    """The thinking in force: the type and budget, or off, and how far off a model that thinks unasked goes."""
    if status.thinking != "off":
        return f"{status.thinking} ({status.thinking_budget:,} tokens reserved)"
    unasked = {"between_tools": "off (notes between tool calls only: the least this model takes)",
               MODEL_DEFAULT: "adaptive (the model's own default; 'off' turns it down)",
               ALWAYS_THINKS: "adaptive (this model always thinks; 'off' cannot turn it off)"}
    return unasked.get(status.thinking_off, "off")


def status_text(status: StatusSnapshot) -> str:
    """`%ctx status` in a few lines."""
    c = status.context
    breaks = ""
    if status.cache_breaks:
        unexplained = sum(1 for b in status.cache_breaks if not b["expected"])
        breaks = f" · {count(len(status.cache_breaks), 'cache break')}, {unexplained} unexplained"
    thinking = _thinking(status)
    lines = [
        f"session {status.session_id} · {status.model} ({status.backend}) · thinking {thinking} · "
        f"context management: {status.strategy}",
        f"context {c.tokens:,} tokens · zone {c.zone} · {c.percent_left}% left before compaction at "
        f"{c.threshold:,} (window {c.window:,}, from {status.window_source}) · estimates counted with "
        f"{status.token_counter}",
        f"{count(c.messages, 'message')} · tool results {c.live_results} live, {c.cleared_results} cleared, "
        f"{c.persisted_results} persisted",
        f"{count(len(status.compactions), 'compaction')}"
        + (f" ({status.undone_compactions} more undone, not counted)" if status.undone_compactions else "")
        + f" · breaker {'OPEN' if status.breaker_open else 'closed'} · "
        f"cache hit ratio {status.usage.cache_hit_ratio:.0%}" + breaks,
        cost_line(status),
    ]
    parts = status.composition
    if parts.used:
        lines.append(f"the next request carries: system prompt {parts.system:,} · tools {parts.tools:,} · memory "
                     f"and pins {parts.memory:,} · messages {parts.messages:,} · tool results {parts.tool_results:,}"
                     f" · saved-output previews {parts.persisted:,}")
    if status.cache is not None:
        lines.append(cache_line(status.cache))
    if status.ahead is not None:
        lines.append(ahead_line(status.ahead))
    if c.plan:
        lines.append(f"last decision: {c.plan}")
    return "\n".join(lines)


def pins_listing(pins: Sequence[Pin], budget: int) -> str:
    """`%pin --list`: each pin with its id, then what they take of their `budget`."""
    if not pins:
        return "No pins yet: %pin TEXT, %pin --cell N, or a cell starting with # ctx: pin."
    lines = []
    for pin in pins:
        first = pin.text.strip().splitlines()[0] if pin.text.strip() else ""
        more = " …" if len(pin.text.strip().splitlines()) > 1 or len(first) > 100 else ""
        lines.append(f"{pin.id}{f' (cell {pin.cell})' if pin.cell is not None else ''}: {first[:100]}{more}")
    used = pins_tokens(pins)
    lines.append(f"{count(len(pins), 'pin')} · {used:,} of {budget:,} tokens "
                 "(CtxMagic.pin_budget_tokens)")
    return "\n".join(lines)


def undone_line(result: UndoResult) -> str:
    """What `%compact --undo` (or a card's Undo) brought back, and that a summary's cost stays spent."""
    point, event = result.point, result.event
    what = {"clearing": f"the {point.returning:,} tool results it cleared are whole again",
            "snip": f"the {point.returning:,} messages it removed are back"}.get(
        point.kind, f"the {point.returning:,} messages it replaced are back")
    line = f"Undid {point.describe()}: {what} ({event.tokens_before:,} → {event.tokens_after:,} tokens)."
    if point.kind == "compaction" and point.from_notes:
        line += " It made no model call: the session's notes were its summary."
    elif point.kind == "compaction":
        line += f" Its summary's ${event.spent_usd:,.4f} stays spent."
    if result.dropped_thinking:
        line += (f" {result.dropped_thinking} thinking block{'' if result.dropped_thinking == 1 else 's'} written "
                 "since went with it (their prefix changed).")
    return line
