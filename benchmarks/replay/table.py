"""The benchmark's tables: per window and strategy, what it cost against the reference and what
it kept.

Every ratio divides by the reference: `raw` replayed at an unlimited window (results.REFERENCE),
with ctx_magic's breakpoints and the same prices, so a session raw cannot finish at the window
still counts in full, and a session ctx_magic manages is compared with doing nothing at all.

Columns of the main table:
- billed vs raw: the strategy's total bill over all sessions / the reference's total; a run that
  overflowed counts what it was billed up to the overflow;
- median, p90: of the per-session ratios;
- overflow runs: sessions the strategy could not finish (a request stayed over the window);
- compactions: summaries that replaced conversation, by trigger;
- zero-call rewrites: results cleared, snips, outputs persisted to disk;
- side calls: calls beside the main loop by the stand-in rule that answered them, with what they
  cost as a share of the reference's total;
- cache read: cache-read tokens / all prompt tokens billed;
- identifiers kept: of the paths, names and error lines each recorded action uses (learned from
  earlier results), the share its request still held (identifiers.py);
- user msgs kept: user messages found verbatim in the final request (live or quoted in a
  summary or notes); last 5 intact: the session's last five tool outputs whole in it.

A second table says where the identifier pairs not kept went (identifiers.Sightings), a third
splits bill and identifiers by source.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from benchmarks.replay.identifiers import LOSSES
from benchmarks.replay.results import REFERENCE, REWRITE_KINDS, SIZES_MARK, SUMMARY_KINDS, RunResult

SOURCES = ("swe", "claude-code", "notebook")
HEADER = ("strategy", "billed vs raw", "median", "p90", "overflow runs", "compactions", "zero-call rewrites",
          "side calls (cost × raw)", "cache read", "identifiers kept", "user msgs kept", "last 5 intact", "run time")
MEMORY_RULE = "memory-longterm"  # the end-of-session extraction: a feature the user asked for, shown apart
SUMMARY_RULES = ("compaction",)
NOTES_RULE = "session-notes"
NEAR_SHARE_TOLERANCE = 1.01  # a session that never nears its threshold bills at most this much of raw

Runs = dict[str, RunResult]  # session -> result
Grouped = dict[int, dict[str, Runs]]  # window -> strategy -> session -> result


def markdown(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header)))
             + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def counts(counter: Counter[str], kinds: Sequence[str] | None = None) -> str:
    items = [(k, v) for k, v in counter.items() if v and (kinds is None or k in kinds)]
    return ", ".join(f"{k} {v}" for k, v in sorted(items, key=lambda kv: (-kv[1], kv[0]))) or "-"


def share(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f} %" if whole else "-"


def ids_share(runs: Iterable[RunResult]) -> str:
    runs = list(runs)
    return share(sum(r.ids_kept for r in runs), sum(r.ids_used for r in runs))


def ratios(runs: Runs, reference: Runs) -> list[float]:
    return [runs[k].cost / reference[k].cost for k in runs if k in reference and reference[k].cost > 0]


def side_costs(run: RunResult) -> Counter[str]:
    """A run's side calls' bill by the rule that answered them."""
    out: Counter[str] = Counter()
    for c in run.calls:
        if c.side:
            out[c.rule or c.kind] += c.cost
    return out


def row(name: str, runs: Runs, reference: Runs) -> list[str]:
    reference_total = sum(reference[k].cost for k in runs if k in reference)
    results = list(runs.values())
    per_run = ratios(runs, reference)
    events: Counter[str] = Counter()
    side: Counter[str] = Counter()
    side_cost: Counter[str] = Counter()
    for r in results:
        events.update(r.events)
        for c in r.calls:
            if c.side and c.status == 200:
                side[c.rule or c.kind] += 1
                side_cost[c.rule or c.kind] += c.cost
    prompt = sum(c.prompt_tokens for r in results for c in r.calls)
    read = sum(c.read for r in results for c in r.calls)
    side_text = ", ".join(f"{k} {v} ({side_cost[k] / reference_total:.3f})" for k, v in side.most_common()) or "-"
    return [
        name,
        f"{sum(r.cost for r in results) / reference_total:.2f}" if reference_total else "-",
        f"{statistics.median(per_run):.2f}" if per_run else "-",
        f"{p90(per_run):.2f}" if per_run else "-",
        f"{sum(r.overflow for r in results)} of {len(results)}",
        counts(events, SUMMARY_KINDS),
        counts(events, REWRITE_KINDS),
        side_text,
        share(read, prompt),
        ids_share(results),
        share(sum(r.users_kept for r in results), sum(r.users for r in results)),
        share(sum(r.tail_kept for r in results), sum(r.tail for r in results)),
        f"{sum(r.seconds for r in results):.0f} s",
    ]


def grouped(results: Iterable[RunResult]) -> Grouped:
    """window -> strategy -> session -> result (under every window, the reference of the sessions
    run at that window: a session left out there is left out of every ratio)."""
    results = list(results)
    out: Grouped = defaultdict(lambda: defaultdict(dict))
    references = [r for r in results if r.strategy == REFERENCE]
    for r in results:
        if r.strategy != REFERENCE:
            out[r.window][r.strategy][r.replay] = r
    for by_strategy in out.values():
        run = {k for runs in by_strategy.values() for k in runs}
        by_strategy[REFERENCE] = {r.replay: r for r in references if r.replay in run}
    return out


def source_table(by_strategy: dict[str, Runs]) -> str:
    """Billed vs raw and identifiers kept, per source."""
    reference = by_strategy[REFERENCE]
    sources = [s for s in SOURCES if any(r.source == s for r in reference.values())]
    rows = []
    for name, runs in by_strategy.items():
        if name == REFERENCE:
            continue
        cells = [name]
        for source in sources:
            mine = {k: r for k, r in runs.items() if r.source == source}
            total = sum(reference[k].cost for k in mine)
            overflows = sum(r.overflow for r in mine.values())
            bill = f"{sum(r.cost for r in mine.values()) / total:.2f}" if total else "-"
            cells.append(f"{bill} · {ids_share(mine.values())}" + (f" ({overflows} overflow)" if overflows else ""))
        rows.append(cells)
    sessions = Counter(r.source for r in reference.values())
    return markdown(["strategy", *(f"{s} ({sessions[s]})" for s in sources)], rows)


def losses_table(by_strategy: dict[str, Runs]) -> str:
    """Of the (action, identifier) pairs, how many each strategy's requests held and where the others went."""
    rows = []
    for name, runs in by_strategy.items():
        if name == REFERENCE:
            continue
        lost: Counter[str] = sum((r.ids_lost for r in runs.values()), Counter())
        rows.append([name, f"{sum(r.ids_kept for r in runs.values()):,}", *(f"{lost[k]:,}" for k in LOSSES)])
    return markdown(["strategy", "kept", *LOSSES], rows)


def window_tables(window: int, by_strategy: dict[str, Runs], left_out: str = "") -> str:
    """The window's tables, after the line saying which sessions it left out (if any)."""
    reference = by_strategy[REFERENCE]
    main = markdown(HEADER, [row(name, runs, reference) for name, runs in by_strategy.items() if name != REFERENCE])
    intro = f"{left_out}.\n\n" if left_out else ""
    return (f"## Window {window:,}\n\n{intro}{main}\n\nThe identifiers the recorded actions use (action, identifier "
            f"pairs): kept, or where they went (never shown: no earlier request held one, its result went out as a "
            f"preview or cut; compacted away: an earlier request held it, a compaction since; edited away: an earlier "
            f"request held it, the same opening since; not served: the run overflowed first):\n\n"
            f"{losses_table(by_strategy)}\n\nBilled vs raw · identifiers kept, by source:\n\n"
            f"{source_table(by_strategy)}")


# -- where ctx_magic's bill goes on sessions that need nothing -------------------------------------


@dataclass(frozen=True)
class Overhead:
    """One session's bill against the reference's, split by what it paid for."""

    session: str
    largest: int
    reference: float
    total: float
    memory: float
    notes: float
    summaries: float

    @property
    def without_memory(self) -> float:
        return self.total - self.memory

    @property
    def main_and_rest(self) -> float:
        """Main calls and any other side call, less the reference's bill."""
        return self.total - self.memory - self.notes - self.summaries - self.reference


def overheads(runs: Runs, reference: Runs, quiet: Callable[[RunResult], bool]) -> list[Overhead]:
    """The overhead of every session `quiet` says never nears the threshold."""
    out = []
    for key, run in runs.items():
        base = reference.get(key)
        if base is None or base.cost <= 0 or not quiet(base):
            continue
        side = side_costs(run)
        out.append(Overhead(key, base.largest_request, base.cost, run.cost, side[MEMORY_RULE], side[NOTES_RULE],
                            sum(side[r] for r in SUMMARY_RULES)))
    return out


def overhead_table(rows: Sequence[Overhead], count: int, name: str = "ctx_magic") -> str:
    """The `count` sessions `name` bills most above raw (memory extraction apart), each split."""
    worst = sorted(rows, key=lambda o: (o.without_memory / o.reference, o.total / o.reference), reverse=True)[:count]
    lines = [[o.session, f"{o.largest:,}", f"{o.total / o.reference:.3f}", f"{o.without_memory / o.reference:.3f}",
              f"{o.memory / o.reference:.3f}", f"{o.notes / o.reference:.3f}", f"{o.summaries / o.reference:.3f}",
              f"{o.main_and_rest / o.reference:+.3f}"] for o in worst]
    header = ("session", "raw's largest request", f"{name} vs raw", "without memory extraction",
              "memory extraction", "session notes", "summaries", "main calls and the rest")
    return markdown(header, lines)


def overhead_summary(name: str, rows: Sequence[Overhead]) -> str:
    if not rows:
        return f"{name}: no session stays below its threshold's warning level."
    reference = sum(o.reference for o in rows)
    above = sum(o.without_memory > NEAR_SHARE_TOLERANCE * o.reference for o in rows)
    total, without = sum(o.total for o in rows) / reference, sum(o.without_memory for o in rows) / reference
    memory = sum(o.memory for o in rows) / reference
    return (f"{name} over the {len(rows)} sessions that never near its threshold: {total:.3f} of raw, "
            f"{without:.3f} without the end-of-session memory extraction (which is {memory:.3f}); "
            f"above {NEAR_SHARE_TOLERANCE:.2f}× raw without it: {above} of {len(rows)} sessions.")


# -- the targets -----------------------------------------------------------------------------------


CACHE_TTL_SECONDS = 300.0
KEPT_PREFIX = 0.9  # a call "kept the cached conversation" when it read at least this much of the last request


def warm_misses(runs: Iterable[RunResult]) -> tuple[int, int]:
    """(main calls that repeat the whole previous main request, sent under 5 minutes after it,
    and still read less than 90 % of it from the cache; main calls that repeat a cached previous
    one): the cached conversation lost to the block lookback, not to a rewrite the strategy
    chose, nor to a prompt under the minimum cacheable length (which caches nothing), nor to the
    first image after none (the API then invalidates every cached message block)."""
    misses = total = 0
    for run in runs:
        calls = [c for c in run.calls if c.kind == "normal" and c.status == 200]
        for before, after in zip(calls, calls[1:]):
            if not after.extends or before.read + before.write_5m + before.write_1h == 0 or \
                    before.images != after.images:
                continue
            total += 1
            warm = after.at - before.at < CACHE_TTL_SECONDS
            misses += warm and after.read < KEPT_PREFIX * before.prompt_tokens
    return misses, total


def _bill(runs: Runs, keys: Iterable[str]) -> float:
    return sum(runs[k].cost for k in keys if k in runs)


def target_lines(tables: Grouped, quiet_at: Callable[[int], Callable[[RunResult], bool]],
                 name: str = "ctx_magic", default: str = "cc-default") -> list[str]:
    """The bars, as measured (bars, not timed tests)."""
    lines: list[str] = []
    for window, by_strategy in sorted(tables.items()):
        runs, reference = by_strategy.get(name), by_strategy[REFERENCE]
        if not runs:
            continue
        if window <= 100_000 and default in by_strategy:
            cc = by_strategy[default]
            for source in ("swe", "notebook", "claude-code"):
                keys = [k for k, r in runs.items() if r.source == source]
                if not keys:  # a corpus without this source
                    continue
                ours, theirs, base = _bill(runs, keys), _bill(cc, keys), _bill(reference, keys)
                ids_ours, ids_theirs = (ids_share(runs[k] for k in keys), ids_share(cc[k] for k in keys))
                kept_ok = sum(runs[k].ids_kept for k in keys) * sum(cc[k].ids_used for k in keys) >= \
                    sum(cc[k].ids_kept for k in keys) * sum(runs[k].ids_used for k in keys)
                met = "met" if ours <= theirs and kept_ok else "not met"
                lines.append(f"- {window:,}, {source} ({len(keys)}): {name} {ours / base:.2f} vs {default} "
                             f"{theirs / base:.2f} of raw; identifiers kept {ids_ours} vs {ids_theirs} "
                             f"(bar: no more bill, at least as much kept): {met}")
        else:
            total = _bill(runs, runs) / _bill(reference, runs)
            quiet = overheads(runs, reference, quiet_at(window))
            above = [o for o in quiet if o.without_memory > NEAR_SHARE_TOLERANCE * o.reference]
            met = "met" if total <= 1.0 and not above else "not met"
            lines.append(f"- {window:,}: {name} total {total:.2f} of raw (bar ≤ 1.00); sessions that never near "
                         f"the threshold above {NEAR_SHARE_TOLERANCE:.2f}× raw, memory extraction apart: {len(above)} "
                         f"of {len(quiet)} (bar 0): {met}")
            notebooks = [k for k, r in runs.items() if r.source == "notebook"]
            if notebooks:
                ratio = _bill(runs, notebooks) / _bill(reference, notebooks)
                lines.append(f"  - notebooks with breaks: {ratio:.3f} of raw (bar ≤ 0.55): "
                             f"{'met' if ratio <= 0.55 else 'not met'}")
        notebooks_runs = [r for r in runs.values() if r.source == "notebook"]
        if notebooks_runs:
            misses, total_calls = warm_misses(notebooks_runs)
            lines.append(f"  - notebook replays: {misses} of {total_calls} main calls that only added to the previous "
                         "request lost its cached conversation while it was warm (bar 0: the 20-block lookback)")
    return lines


def variant_base(name: str) -> str:
    """`cc-default@p99.99` -> `cc-default`."""
    return name.split(SIZES_MARK)[0]


# -- the thinking sent back (the prefix check of the models with preserved thinking) ---------------

THINKING_HEADER = ("strategy", "billed vs raw", "overflow runs", "refused requests", "thinking written",
                   "thinking dropped by the client", "thinking dropped by the API", "identifiers kept")
THINKING_BARS = {32_000: (0.95, 0.92), 200_000: (0.99, 1.00)}
"""The append-only bars: no more bill, no fewer identifiers kept, than ctx_magic on a model without
the check (bill as measured at these windows, identifiers kept as in this file's tables)."""


def thinking_row(name: str, runs: Runs, reference: Runs) -> list[str]:
    results = list(runs.values())
    total = sum(reference[k].cost for k in runs if k in reference)
    blocks = sum(r.thinking_dropped()[0] for r in results)
    tokens = sum(r.thinking_dropped()[1] for r in results)
    cleared = Counter[str]()
    for r in results:
        cleared.update(r.thinking_cleared)
    return [name, f"{sum(r.cost for r in results) / total:.2f}" if total else "-",
            f"{sum(r.overflow for r in results)} of {len(results)}", f"{sum(r.refused_thinking for r in results):,}",
            f"{sum(c.thinking_written for r in results for c in r.calls):,} tokens",
            f"{cleared['tokens']:,} tokens ({cleared['blocks']:,} blocks)", f"{tokens:,} tokens ({blocks:,} blocks)",
            ids_share(results)]


def thinking_table(by_strategy: dict[str, Runs]) -> str:
    """Per strategy: the bill against raw (append-only by construction), the requests the prefix
    check refused, the thinking the main calls' replies carried, the thinking lost from messages
    still sent (taken out by the client after an idle gap, an edit or a compaction's kept turns;
    or dropped by the API, each block once), and the identifiers kept. A summary that replaces
    whole turns, thinking included, is not counted here: it is a compaction."""
    reference = by_strategy[REFERENCE]
    return markdown(THINKING_HEADER, [thinking_row(name, runs, reference) for name, runs in by_strategy.items()
                                      if name != REFERENCE])


def thinking_targets(tables: Grouped, name: str = "ctx_magic") -> list[str]:
    """The append-only bars at the windows that have them: no refused request, bill and identifiers
    kept no worse than on a model without the check."""
    lines = []
    for window, by_strategy in sorted(tables.items()):
        runs, bars = by_strategy.get(name), THINKING_BARS.get(window)
        if not runs or bars is None:
            continue
        reference = by_strategy[REFERENCE]
        bill = _bill(runs, runs) / _bill(reference, runs)
        kept = sum(r.ids_kept for r in runs.values()) / max(1, sum(r.ids_used for r in runs.values()))
        refused = sum(r.refused_thinking for r in runs.values())
        met = "met" if bill <= bars[0] and kept >= bars[1] and refused == 0 else "not met"
        lines.append(f"- {window:,}: {name} {bill:.2f} of raw (bar ≤ {bars[0]:.2f}), identifiers kept "
                     f"{100 * kept:.0f} % (bar ≥ {100 * bars[1]:.0f} %), refused requests {refused} (bar 0): {met}")
    return lines
