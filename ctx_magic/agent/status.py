"""The session's status as one typed value: the cell's Done line, `%ctx status` (text and
JSON) and the context panel all render a `StatusSnapshot`, and nothing else. Scripts and the
PreCompact hooks get its figures as a smaller read-only `ContextReport`. `StatusReader` reads
it from the session's parts."""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass, field
from typing import Any

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.request import CallSetup, RequestFrame
from ctx_magic.agent.usage import UsageMeter, UsageTotals
from ctx_magic.context import api_count
from ctx_magic.context.ahead import CompactionAhead, compaction_ahead
from ctx_magic.context.cache_outlook import CacheOutlook, cache_outlook
from ctx_magic.context.compaction_state import MAX_CONSECUTIVE_FAILURES, Boundary, CompactionState
from ctx_magic.context.decide import SessionFacts
from ctx_magic.context.engine import figures, prepare, situation
from ctx_magic.figures import Composition, ContextFigures
from ctx_magic.prices import UNKNOWN_PRICES, Prices, format_usd
from ctx_magic.store.session import SessionDir


@dataclass(frozen=True)
class StatusSnapshot:
    session_id: str
    model: str
    backend: str
    window_source: str
    """Where the window came from: config, models-api or table."""
    max_output: int
    """The reply cap in force."""
    context: ContextFigures
    boundaries: tuple[Boundary, ...]
    consecutive_failures: int
    turns: int
    usage: UsageTotals
    cache_breaks: tuple[dict[str, Any], ...]
    transcript: str
    thinking: str = "off"
    """The thinking type sent (off, enabled, adaptive)."""
    thinking_off: str = ""
    """With thinking off, what turns down the model's own (Window.thinking_off)."""
    thinking_budget: int = 0
    prices: Prices = UNKNOWN_PRICES
    """The prices in force, USD per million tokens (source: table, config or unknown)."""
    provider: str = "anthropic"
    strategy: str = "client"
    token_counter: str = ""
    """What counts text where no usage has measured it (Claude's tokenizer, or o200k scaled)."""
    cache: CacheOutlook | None = None
    """The prompt cache as the next call will find it, judged at the moment the status was read."""
    ahead: CompactionAhead | None = None
    """The automatic compaction the next turn is expected to make (None: none expected)."""

    def cost_json(self) -> dict[str, Any]:
        """The dollar figures: spent, saved by each kind of change, and the rates used."""
        saved = self.usage.saved_usd
        return {"session_usd": round(self.usage.cost_usd, 6), "saved_usd": round(sum(saved.values()), 6),
                "saved_by": {k: round(v, 6) for k, v in sorted(saved.items())},
                "prices_per_mtok": self.prices.figures(), "prices_source": self.prices.source}

    @property
    def composition(self) -> Composition:
        """What the next request carries, part by part (the panel's composition bar)."""
        return self.context.composition or Composition(window=self.context.window)

    @property
    def breaker_open(self) -> bool:
        return self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES

    @property
    def compactions(self) -> tuple[Boundary, ...]:
        """The compactions that stand: the undone ones are listed in `boundaries`, never counted."""
        return tuple(b for b in self.boundaries if not b.undone)

    @property
    def undone_compactions(self) -> int:
        return len(self.boundaries) - len(self.compactions)

    def to_json(self) -> dict[str, Any]:
        """The status as `%ctx status --json` prints it."""
        c = self.context
        return {
            "session_id": self.session_id, "model": self.model, "backend": self.backend,
            "window": c.window, "window_source": self.window_source, "max_output": self.max_output,
            "threshold": c.threshold, "warning": c.warning, "blocking": c.blocking, "tokens": c.tokens,
            "zone": c.zone, "percent_left": c.percent_left, "messages": c.messages,
            "tool_results": {"live": c.live_results, "cleared": c.cleared_results, "persisted": c.persisted_results},
            "plan": c.plan, "composition": self.composition.to_json(),
            "boundaries": [b.figures() for b in self.boundaries],
            "breaker_open": self.breaker_open, "consecutive_failures": self.consecutive_failures,
            "turns": self.turns,
            "usage": {**dataclasses.asdict(self.usage), "cache_hit_ratio": round(self.usage.cache_hit_ratio, 4)},
            "cache_breaks": list(self.cache_breaks),
            "transcript": self.transcript,
            "thinking": {"type": self.thinking, "budget_tokens": self.thinking_budget,
                         "unasked": self.thinking_off or None},
            "provider": self.provider, "strategy": self.strategy, "token_counter": self.token_counter,
            "cost": self.cost_json(),
            "cache": self.cache.to_json() if self.cache is not None else None,
            "compaction_ahead": self.ahead.to_json() if self.ahead is not None else None,
        }

    def report(self) -> ContextReport:
        """The figures scripts and hooks read (`ctx_magic.context()`)."""
        c = self.context
        known = self.prices.source != "unknown"
        return ContextReport(
            session_id=self.session_id, model=self.model, tokens=c.tokens, window=c.window,
            thresholds=Limits(c.warning, c.threshold, c.blocking), zone=c.zone, percent_left=c.percent_left,
            compactions=len(self.compactions), last_compaction=self.compactions[-1] if self.compactions else None,
            undone_compactions=self.undone_compactions, cache=self.cache,
            spent_usd=round(self.usage.cost_usd, 6) if known else None, compaction_ahead=self.ahead)


@dataclass(frozen=True)
class Limits:
    """Where the context changes zone, in tokens."""

    warning: int
    autocompact: int
    blocking: int


@dataclass(frozen=True)
class ContextReport:
    """The agent's context as it stands, read-only: what `ctx_magic.context()` and `%ctx status`
    return and what PreCompact hooks receive."""

    session_id: str
    model: str
    tokens: int
    """The next request's size, system prompt and tools included (the local count)."""
    window: int
    thresholds: Limits
    zone: str
    """ok, warning, compacting or blocked."""
    percent_left: float
    """Room left before automatic compaction, as a share of its threshold."""
    compactions: int
    """The compactions that stand (an undone one is not counted)."""
    last_compaction: Boundary | None
    cache: CacheOutlook | None
    spent_usd: float | None
    """Dollars spent by the session so far (None: the model's prices are unknown)."""
    compaction_ahead: CompactionAhead | None = None
    undone_compactions: int = 0
    """Compactions the user undid (not in `compactions`)."""
    details: str = field(default="", compare=False, repr=False)
    """The lines `%ctx status` shows with the figures (its value is what the cell shows, once);
    empty in `ctx_magic.context()`'s value, which shows the figures alone."""

    def to_json(self) -> dict[str, Any]:
        last = self.last_compaction
        return {"session_id": self.session_id, "model": self.model, "tokens": self.tokens, "window": self.window,
                "thresholds": dataclasses.asdict(self.thresholds), "zone": self.zone,
                "percent_left": self.percent_left, "compactions": self.compactions,
                "undone_compactions": self.undone_compactions,
                "last_compaction": last.figures() if last is not None else None,
                "cache": self.cache.to_json() if self.cache is not None else None, "spent_usd": self.spent_usd,
                "compaction_ahead": self.compaction_ahead.to_json() if self.compaction_ahead is not None else None}

    def rows(self) -> list[tuple[str, str]]:
        """The figures as (name, value) lines, for both reprs."""
        t, last, cache = self.thresholds, self.last_compaction, self.cache
        rows = [("tokens", f"{self.tokens:,} of {self.window:,} ({self.zone}, {self.percent_left:g}% left)"),
                ("thresholds", f"warning {t.warning:,} · autocompact {t.autocompact:,} · blocking {t.blocking:,}"),
                ("compactions", f"{self.compactions}" + (
                    f" (last: {last.trigger}, {last.tokens_before:,} → {last.tokens_after:,} tokens)" if last else "")
                 + (f"; {self.undone_compactions} undone, not counted" if self.undone_compactions else ""))]
        if cache is not None:
            state = f"{cache.state}, {cache.ttl} TTL ({cache.reason})"
            if cache.write_tokens:
                price = "" if cache.write_usd is None else f", {format_usd(cache.write_usd)}"
                state += f"; next call writes {cache.write_tokens:,} tokens{price}"
            elif cache.expires_at is not None:
                state += f"; expires in {cache.seconds_left / 60:.1f} min"
            rows.append(("cache", state))
        rows.append(("spent", "unknown" if self.spent_usd is None else format_usd(self.spent_usd)))
        ahead = self.compaction_ahead
        if ahead is not None:
            price = "" if ahead.cost_usd is None else f", about {format_usd(ahead.cost_usd)}"
            rows.append(("next turn", f"compacts {ahead.tokens:,} tokens{price}"
                                      + (" (deferred once)" if ahead.deferred else "")))
        return rows

    def __repr__(self) -> str:
        if self.details:
            return self.details
        return "ContextReport(" + "; ".join(f"{name}: {value}" for name, value in self.rows()) + ")"

    def _repr_html_(self) -> str:
        cells = "".join(f"<tr><th style='text-align:left'>{html.escape(name)}</th>"
                        f"<td style='text-align:left'>{html.escape(value)}</td></tr>" for name, value in self.rows())
        caption = f"<caption>Agent context · {html.escape(self.model)}</caption>"
        details = f"<pre class='ctx-magic-context-details'>{html.escape(self.details)}</pre>" if self.details else ""
        return f"<table class='ctx-magic-context'>{caption}{cells}</table>{details}"


class StatusReader:
    """Reads the session as it stands from its parts (counted locally, never by an API call)."""

    def __init__(self, frame: RequestFrame, live: LiveContext, meter: UsageMeter, store: SessionDir) -> None:
        self._frame = frame
        self._live = live
        self._meter = meter
        self._store = store

    def read(self, setup: CallSetup, compaction: CompactionState, facts: SessionFacts, now: float) -> StatusSnapshot:
        """The status before the next turn, whose call the engine would decide with `facts`; the
        cache judged by the clock at `now`."""
        live, prices = self._live, self._meter.prices()
        tokens = live.tokens(setup.overhead_tokens)
        context = figures(live.messages, live.state, setup.context, tokens, live.plan.reason,
                          counts=live.result_counts())
        context = dataclasses.replace(context, composition=setup.composition(live.messages, live.state, tokens))
        window, settings = setup.window, setup.settings
        cache = self._cache_outlook(setup, tokens, now)
        if cache.cold:  # the next call writes what the engine leaves: an idle gap clears old results and thinking first
            cache = self._cache_outlook(setup, self._tokens_next_call(setup, facts, now), now)
        seen, _ = situation(live.messages, live.state, now, setup.context, overhead_tokens=setup.overhead_tokens,
                            facts=facts)
        ahead = compaction_ahead(seen, self.turn_growth(compaction), warm=cache.state == "warm", prices=prices,
                                 ttl=settings.cache_ttl, deferred=facts.deferred)
        return StatusSnapshot(
            session_id=self._store.session_id, model=settings.model, backend=self._frame.model.backend,
            window_source=window.source, max_output=window.reply_cap, context=context,
            thinking=window.thinking, thinking_off=window.thinking_off, thinking_budget=window.thinking_budget,
            prices=prices,
            provider=settings.provider, strategy=settings.strategy, token_counter=api_count.counter_name(),
            boundaries=compaction.boundaries, consecutive_failures=compaction.failures,
            turns=compaction.turns, usage=self._meter.snapshot(),
            cache_breaks=tuple(b.summary() for b in self._meter.breaks), transcript=str(self._store.transcript_path),
            cache=cache, ahead=ahead)

    def turn_growth(self, compaction: CompactionState) -> int:
        """Tokens a turn has been adding lately: a call's recent growth times the calls a turn
        makes on average (0 before two calls)."""
        calls_per_turn = self._meter.totals.main_calls / max(1, compaction.turns)
        return round(self._meter.growth() * max(1.0, calls_per_turn))

    def _tokens_next_call(self, setup: CallSetup, facts: SessionFacts, now: float) -> int:
        """What the next call would send if it were made now: the engine's zero-call layers run on
        the live context at this moment, nothing adopted or written."""
        live = self._live
        prepared = prepare(live.messages, live.state, now, setup.context, overhead_tokens=setup.overhead_tokens,
                           facts=facts, may_clear=not setup.server_clears)
        return prepared.situation.tokens

    def _cache_outlook(self, setup: CallSetup, tokens: int, now: float) -> CacheOutlook:
        """The cache the next call finds: cold past its lifetime, or once what the last call sent
        has changed (the system prompt or tools, the model, the messages rewritten)."""
        messages, frame = self._live.messages, self._frame
        last_answer = next((m for m in reversed(messages) if m.role == "assistant" and m.sent and m.api_id), None)
        rewritten = ""
        if frame.sent_signature is not None and frame.sent_signature != setup.signature:
            rewritten = "the system prompt or the tools changed since the last call"
        elif last_answer is not None and last_answer.meta.get("model", frame.model.name) != frame.model.name:
            rewritten = f"the model changed since the last call (now {frame.model.name})"
        elif frame.cached_tail is not None and all(m.uuid != frame.cached_tail for m in messages):
            rewritten = "the conversation was rewritten since the last call (compacted or snipped)"
        settings = setup.settings
        return cache_outlook(tokens=tokens, last_call_at=last_answer.timestamp if last_answer is not None else None,
                             now=now, ttl=settings.cache_ttl, ttl_seconds=settings.cache_ttl_seconds,
                             rewritten=rewritten, prices=self._meter.prices())
