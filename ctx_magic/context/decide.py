"""The one place that decides what happens to the context before a model call.

`decide(situation)` looks at the count, the thresholds, the idle gap, what clearing would
free, the circuit breaker and what compaction can use, and returns a `Plan` with its reason:
clear old results, compact (from the session's notes first, else with a summary), ask the API
for the exact count first, or say the context is blocked. The engine carries out the
clearing and a snip, the loop the compaction, the panel shows the reason. The tool-result budget
(persist) is a fixed rule applied before it (engine.py); a snip past the message limit is an option
priced here like a clearing (snip_price.py).

The rules, in order:
- after an idle gap longer than the prompt-cache TTL the cache is cold: every token is written
  again anyway, so clearing old results only makes that cheaper (idle clearing);
- at the compaction threshold something must give: the cheapest way under it over the calls
  expected to follow (a clearing that frees enough, the notes, a summary; costs.py prices them);
- below it, a clearing (past the warning level and `clear_at_least`: pressure clearing) or an early
  compaction happens only when it pays back twice what it costs now, so that a session ending
  soon never pays more than doing nothing. An early compaction (a summary: the notes only
  stand in for one the threshold forces) is weighed from where Claude Code's design compacts
  (the window less its 20,000-token summary reserve and its buffer) or once the context is
  larger than a standard window holds, whichever comes first: whether to compact that early or
  wait for the threshold is the price's answer, not a constant's.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from ctx_magic.context.costs import Outlook, RelativePrices, Start, call_cost, outlook_cost, summary_start
from ctx_magic.context.snip_price import SNIP, SnipPrice
from ctx_magic.context.thresholds import AUTOCOMPACT_BUFFER_TOKENS, MAX_OUTPUT_TOKENS_FOR_SUMMARY, Thresholds

COMPACT_FROM_NOTES = "notes"
COMPACT_WITH_SUMMARY = "summary"
NOTHING = "nothing to do"
PAYBACK_FACTOR = 2.0  # a choice nothing forces must save twice what it costs now
EARLY_COMPACTION_FROM = 200_000  # a context past a standard window is where carrying it costs most
# A first summary's expected output (analysis and summary): Claude Code's real compaction replies
# in the shared transcripts, counted as the API counts, run to 4,235-5,670 tokens for
# 140,000-170,000-token conversations (median 4,822), so a summary's length hardly follows the
# conversation's; a short context is not summarized at more than a quarter of its own size.
EXPECTED_SUMMARY_TOKENS = 4_800
SUMMARY_SHARE_CAP = 0.25
NEVER = 10**12  # the threshold of an outlook in which no compaction can happen


@dataclass(frozen=True)
class SessionFacts:
    """What the session knows that the engine cannot measure from the messages."""

    auto_compaction: bool = True
    """False inside a side call (the recursion guard: a summary never compacts) or when auto-compaction is off."""
    breaker_open: bool = False
    """Auto-compaction failed too many times in a row (the circuit breaker)."""
    notes_tokens: int = 0
    """The session's notes, when it keeps them: a compaction can use them instead of a summary."""
    calls: int = 0
    """Main calls made in this session so far: as many more are expected (capped in costs.py)."""
    growth: int = 0
    """Tokens a call adds to the context, lately (0: not known yet)."""
    summary_tokens: int = 0
    """The last compaction's summary output (0: none yet; estimated from the context)."""
    after_compaction: int = 0
    """The context's size right after the last compaction (0: none yet; estimated)."""
    prices: RelativePrices = RelativePrices()
    deferred: bool = False
    """The user let this turn through uncompacted: no automatic compaction below the blocking limit."""
    summary_by_api: bool = False
    """A summary is the API's, on demand (agent/on_demand.py): priced alike (the conversation read
    from the cache as the main call's prefix, the summary's output, the new context written), the
    whole reply staying in the context, and the plan says who writes it."""


NO_FACTS = SessionFacts()
"""A session about which nothing is known (a first call, or the engine on its own)."""


@dataclass(frozen=True)
class Situation:
    """What the decision looks at, measured by the engine just before a model call."""

    tokens: int
    """The live context's size: the API's last count plus an estimate of what came after."""
    estimated_tokens: int
    """How much of `tokens` is a local estimate (0: the API's own count)."""
    thresholds: Thresholds
    idle_seconds: float | None
    """Seconds since the model last answered (None before its first answer)."""
    idle_limit_seconds: float
    """An idle gap longer than this means the prompt cache has expired (idle clearing)."""
    clearable_tokens: int = 0
    """What clearing every old compactable result would free."""
    clear_prefix: int = 0
    """Tokens before the first result a clearing would change: the cache keeps them."""
    clear_at_least: int = 0
    """A pressure clearing must free this much to be worth the cache break (pressure clearing)."""
    may_clear: bool = True
    """False once the clearing step has run (a second decision only concerns compaction)."""
    overhead: int = 0
    """The system prompt and the tools: what every context carries."""
    notes_tail: int = 0
    """The recent messages a compaction from the notes keeps (its tail)."""
    facts: SessionFacts = NO_FACTS
    thinking_after_clear: int = 0
    """Thinking tokens after the first result a pressure clearing would change, in an append-only
    conversation: the clearing drops them too (their prefix changed). They are not read again, but
    their reasoning is lost: priced as the output it would take to think it again."""
    snip: SnipPrice | None = None
    """The snip the engine could make now (past the message limit), or None."""

    @property
    def notes_ready(self) -> bool:
        return self.facts.notes_tokens > 0

    @property
    def held_back(self) -> bool:
        """An automatic compaction is deferred by the user, and the context still fits under the
        blocking limit (a deferral never lets a request through past it)."""
        return self.facts.deferred and self.tokens < self.thresholds.blocking

    @property
    def idle(self) -> bool:
        return self.idle_seconds is not None and self.idle_seconds > self.idle_limit_seconds

    def with_exact_count(self, tokens: int) -> Situation:
        """The same situation after the API counted the context itself (the exact count)."""
        return dataclasses.replace(self, tokens=tokens, estimated_tokens=0, may_clear=False, snip=None)

    def outlook(self) -> Outlook:
        calls = self.facts.calls
        growth = self.facts.growth or max(1, self.tokens // max(1, calls + 1))
        compacts = self.facts.auto_compaction and not self.facts.breaker_open
        # A compaction the threshold forces later uses the notes when the session keeps them and
        # they leave room (no output to pay, their own tail kept), else a summary.
        from_notes = self.notes_ready and self.after_notes() < self.thresholds.autocompact
        after, output = (self.after_notes(), 0) if from_notes else (self.after_summary(), self.expected_summary())
        return Outlook(calls=max(1, calls), growth=growth,
                       threshold=self.thresholds.autocompact if compacts else NEVER,
                       after_compaction=after, summary_output=output)

    def after_notes(self) -> int:
        """The context a compaction from the notes leaves: the notes and the recent tail they keep."""
        return self.overhead + self.facts.notes_tokens + self.notes_tail

    def after_summary(self) -> int:
        """The context a summary leaves: as large as after the last one, else overhead + summary."""
        return self.facts.after_compaction or self.overhead + self.expected_summary()

    def expected_summary(self) -> int:
        return self.facts.summary_tokens or min(EXPECTED_SUMMARY_TOKENS, int(self.tokens * SUMMARY_SHARE_CAP))


@dataclass(frozen=True)
class Plan:
    """What happens before the next call, and why."""

    clear: str | None = None
    """'idle' or 'pressure' when old tool results are cleared first."""
    compact: tuple[str, ...] = ()
    """Compaction methods to try, in order ('notes', then 'summary'); empty: no compaction."""
    check_exact: bool = False
    """Ask the API's count before compacting: the estimate may be over while the truth is not."""
    tokens_after: int = 0
    """The expected size once the clearing is done."""
    zone: str = "ok"
    """The zone of `tokens_after`: 'blocked' means the call must not be sent unless compacted."""
    why_clear: str = ""
    why_compact: str = ""
    snip: bool = False
    """The middle is snipped first (the situation's `snip`)."""
    why_snip: str = ""

    @property
    def reason(self) -> str:
        return "; ".join(r for r in (self.why_clear, self.why_snip, self.why_compact) if r) or NOTHING

    def after(self, clearing: Plan) -> Plan:
        """This plan, decided once `clearing`'s clearing (or snip) was done, with that one in it."""
        return dataclasses.replace(self, clear=clearing.clear, why_clear=clearing.why_clear,
                                   snip=self.snip or clearing.snip, why_snip=self.why_snip or clearing.why_snip)


@dataclass(frozen=True)
class _Option:
    name: str
    start: Start
    tokens_after: int


def early_compaction_from(th: Thresholds) -> int:
    """Where an early compaction starts to be weighed: Claude Code's trigger (window less the
    20,000-token summary reserve and the scaled buffer, never below a quarter of a small window,
    where that reserve leaves nothing), or a standard window's size."""
    claude_code = th.window - MAX_OUTPUT_TOKENS_FOR_SUMMARY - round(AUTOCOMPACT_BUFFER_TOKENS * th.scale)
    return min(EARLY_COMPACTION_FROM, max(claude_code, th.window // 4))


def _options(s: Situation, cached: int) -> list[_Option]:
    """Every way forward that is allowed now, with where it leaves the next call."""
    th = s.thresholds
    options = [_Option("wait", Start(s.tokens, cached), s.tokens)]
    freed = s.clearable_tokens
    if s.may_clear and freed > 0 and freed >= s.clear_at_least and s.tokens >= th.warning:
        lost = s.thinking_after_clear
        after = max(0, s.tokens - freed - lost)
        options.append(_Option("clear", Start(after, min(cached, s.clear_prefix), s.facts.prices.output * lost), after))
    if s.snip is not None:
        options.append(_Option(SNIP, s.snip.start(s.tokens, cached, s.facts.prices), s.snip.tokens_after(s.tokens)))
    can_compact = s.facts.auto_compaction and not s.facts.breaker_open and not s.held_back
    if can_compact and (s.tokens >= th.autocompact or s.tokens >= early_compaction_from(th)):
        summary = s.expected_summary()
        after = s.after_summary()
        start = summary_start(s.tokens, cached, s.facts.prices, after=after, summary_output=summary)
        options.append(_Option(COMPACT_WITH_SUMMARY, start, after))
        # The notes stand in for a summary the threshold forces. Before it they only look free
        # (their extraction is already paid): compacting from them early made sessions compact
        # again sooner (the replay benchmark at 32,000: 35 compactions instead of 19, a dearer bill).
        if s.notes_ready and s.tokens >= th.autocompact:
            after = s.after_notes()
            options.append(_Option(COMPACT_FROM_NOTES, Start(after, 0), after))
    return options


def _cheapest(s: Situation, options: list[_Option]) -> tuple[_Option, float]:
    """The option that costs least over the outlook, with its cost (the first one on a tie)."""
    outlook = s.outlook()
    cost, index = min((outlook_cost(o.start, outlook, s.facts.prices), n) for n, o in enumerate(options))
    return options[index], cost


def _pays_back(s: Situation, option: _Option, cost: float, wait_cost: float) -> bool:
    """What it saves over the outlook is at least twice what it costs on the next call."""
    now = option.start.spent + call_cost(option.start.tokens, option.start.cached, s.facts.prices)
    extra_now = now - call_cost(s.tokens, 0 if s.idle else s.tokens, s.facts.prices)
    return wait_cost - cost >= PAYBACK_FACTOR * max(0.0, extra_now)


def decide(s: Situation) -> Plan:
    """The plan for the next call (pure: the same situation always gives the same plan)."""
    th = s.thresholds
    cached = 0 if s.idle else s.tokens
    if s.may_clear and s.idle and s.clearable_tokens > 0:
        tokens = s.tokens - s.clearable_tokens
        idle_min = (s.idle_seconds or 0) / 60
        plan = Plan("idle", tokens_after=tokens, zone=th.zone(tokens),
                    why_clear=f"idle {idle_min:.0f} min: the prompt cache has expired, so clearing costs nothing")
        return _compaction(dataclasses.replace(s, tokens=tokens, may_clear=False, clearable_tokens=0)).after(plan)
    forced = s.tokens >= th.autocompact
    if forced and s.held_back:
        return _compaction(s)
    options = _options(s, cached)
    if forced:  # waiting is not a way under the threshold, nor a clearing that stays over it, unless
        # no compaction can run: then any clearing is better than nothing (the blocking limit is near)
        compacting = any(o.name in (COMPACT_WITH_SUMMARY, COMPACT_FROM_NOTES) for o in options)
        options = [o for o in options if o.name != "wait" and (o.tokens_after < th.autocompact or not compacting)]
    if not options:
        return _compaction(s)
    if not forced:
        best, cost = _cheapest(s, options)
        wait_cost = outlook_cost(options[0].start, s.outlook(), s.facts.prices)
        if best.name == "wait" or not _pays_back(s, best, cost, wait_cost):
            return _compaction(s)
        return _plan(s, best, f"it pays back: {wait_cost - cost:,.0f} token-prices saved over the next "
                              f"{s.outlook().calls} calls")
    best, _ = _cheapest(s, options)
    return _plan(s, best, "the cheapest way under the compaction threshold")


def _plan(s: Situation, option: _Option, why: str) -> Plan:
    th = s.thresholds
    if option.name == SNIP and s.snip is not None:
        plan = Plan(snip=True, tokens_after=option.tokens_after, zone=th.zone(option.tokens_after),
                    why_snip=s.snip.reason(s.tokens, why))
        return _compaction(dataclasses.replace(s, tokens=option.tokens_after, snip=None)).after(plan)
    if option.name == "clear":
        freed = s.clearable_tokens
        lost = (f" and drops {s.thinking_after_clear:,} tokens of thinking after the first one"
                if s.thinking_after_clear else "")
        plan = Plan("pressure", tokens_after=option.tokens_after, zone=th.zone(option.tokens_after),
                    why_clear=f"{s.tokens:,} tokens, past the warning level {th.warning:,}: clearing frees "
                              f"{freed:,}{lost} ({why})")
        return _compaction(dataclasses.replace(s, tokens=option.tokens_after, may_clear=False,
                                               clearable_tokens=0)).after(plan)
    methods = (COMPACT_FROM_NOTES, COMPACT_WITH_SUMMARY) if option.name == COMPACT_FROM_NOTES else (
        COMPACT_WITH_SUMMARY,)
    if option.name == COMPACT_WITH_SUMMARY and s.facts.summary_by_api:
        why += "; the API writes the summary"
    forced = s.tokens >= th.autocompact
    check = forced and s.estimated_tokens > 0
    what = f"{s.tokens:,} tokens reach the compaction threshold {th.autocompact:,}" if forced else (
        f"{s.tokens:,} tokens: summarizing now costs less than carrying them")
    why += _deferral_ended(s)
    return Plan(compact=methods, check_exact=check, tokens_after=s.tokens, zone=th.zone(s.tokens),
                why_compact=f"{what}" + (" (by estimate; the API counts first)" if check else "") + f"; {why}")


def _deferral_ended(s: Situation) -> str:
    """Said when a compaction goes ahead on a turn the user let through: the blocking limit ends it."""
    return f"; the user's deferral ends at the blocking limit {s.thresholds.blocking:,}" if s.facts.deferred else ""


def _compaction(s: Situation) -> Plan:
    """No discretionary choice: compaction only where the threshold forces it."""
    th = s.thresholds
    zone = th.zone(s.tokens)
    if s.tokens < th.autocompact:
        return Plan(tokens_after=s.tokens, zone=zone)
    if not s.facts.auto_compaction:
        why = "at the compaction threshold, but auto-compaction cannot run here"
    elif s.facts.breaker_open:
        why = "at the compaction threshold, but auto-compaction is off after repeated failures"
    elif s.held_back:
        why = (f"{s.tokens:,} tokens reach the compaction threshold {th.autocompact:,}, but the user let this turn "
               f"through (until the blocking limit {th.blocking:,})")
    else:
        methods = (COMPACT_FROM_NOTES, COMPACT_WITH_SUMMARY) if s.notes_ready else (COMPACT_WITH_SUMMARY,)
        check = s.estimated_tokens > 0
        return Plan(compact=methods, check_exact=check, tokens_after=s.tokens, zone=zone,
                    why_compact=f"{s.tokens:,} tokens reach the compaction threshold {th.autocompact:,}"
                                + (" (by estimate; the API counts first)" if check else "") + _deferral_ended(s)
                                + ("; the API writes the summary" if s.facts.summary_by_api else ""))
    if zone == "blocked":
        why += f"; past the blocking limit {th.blocking:,} with no compaction possible"
    return Plan(tokens_after=s.tokens, zone=zone, why_compact=why)


def context_tools_from_start(message_tokens: Iterable[int], th: Thresholds) -> bool:
    """Whether an append-only conversation offers the context tools (compact, snip, search) from its
    first request. Its tools can change only where a prefix starts (the first request, a compaction
    of ctx_magic's), and the tools' definitions ride on every call until then, while before a first
    cut they have little to act on (auto-compaction keeps the threshold). So they start with the
    conversation only when its first request is already past the warning level, a cut being near;
    otherwise they join at the first compaction. `message_tokens`: each message's, read only until
    their sum reaches the warning level (a long transcript resumed is not counted whole)."""
    return any(total >= th.warning for total in itertools.accumulate(message_tokens))
