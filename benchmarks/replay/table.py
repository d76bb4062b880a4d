"""The benchmark's tables: per window and strategy, what it cost against raw and what it kept.

Columns:
- billed vs raw: the strategy's total bill over all sessions / raw's total (raw = 1.00); a run
  that overflowed counts what it was billed up to the overflow (raw's too);
- where raw finishes: the same ratio over the sessions raw completes (raw's bill on the others
  stops at its overflow, which flatters raw);
- median, p90: of the per-session ratios (strategy / raw on the same session);
- overflow runs: sessions the strategy could not finish (a request stayed over the window);
- compactions: summaries that replaced conversation, by trigger;
- zero-call rewrites: results cleared, snips, outputs persisted to disk;
- side calls: calls beside the main loop by the stand-in rule that answered them, with what they
  cost as a share of raw's total;
- cache read: cache-read tokens / all prompt tokens billed;
- user msgs kept: user messages found verbatim in the final request (live or quoted in a
  summary or notes); last 5 intact: the session's last five tool outputs whole in it.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from benchmarks.replay.results import REWRITE_KINDS, SUMMARY_KINDS, RunResult

SOURCES = ("swe", "claude-code", "notebook")
HEADER = ("strategy", "billed vs raw", "where raw finishes", "median", "p90", "overflow runs", "compactions",
          "zero-call rewrites", "side calls (cost × raw)", "cache read", "user msgs kept", "last 5 intact", "run time")


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


def ratios(runs: dict[str, RunResult], raw: dict[str, RunResult]) -> list[float]:
    return [runs[k].cost / raw[k].cost for k in runs if k in raw and raw[k].cost > 0]


def row(name: str, runs: dict[str, RunResult], raw: dict[str, RunResult]) -> list[str]:
    raw_total = sum(raw[k].cost for k in runs if k in raw)
    results = list(runs.values())
    per_run = ratios(runs, raw)
    finished = [k for k in runs if k in raw and not raw[k].overflow]
    finished_raw = sum(raw[k].cost for k in finished)
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
    side_text = ", ".join(f"{k} {v} ({side_cost[k] / raw_total:.2f})" for k, v in side.most_common()) or "-"
    return [
        name,
        f"{sum(r.cost for r in results) / raw_total:.2f}" if raw_total else "-",
        f"{sum(runs[k].cost for k in finished) / finished_raw:.2f}" if finished_raw else "-",
        f"{statistics.median(per_run):.2f}" if per_run else "-",
        f"{p90(per_run):.2f}" if per_run else "-",
        f"{sum(r.overflow for r in results)} of {len(results)}",
        counts(events, SUMMARY_KINDS),
        counts(events, REWRITE_KINDS),
        side_text,
        share(read, prompt),
        share(sum(r.users_kept for r in results), sum(r.users for r in results)),
        share(sum(r.tail_kept for r in results), sum(r.tail for r in results)),
        f"{sum(r.seconds for r in results):.0f} s",
    ]


def grouped(results: Iterable[RunResult]) -> dict[int, dict[str, dict[str, RunResult]]]:
    """window -> strategy -> session -> result."""
    out: dict[int, dict[str, dict[str, RunResult]]] = defaultdict(lambda: defaultdict(dict))
    for r in results:
        out[r.window][r.strategy][r.replay] = r
    return out


def window_tables(window: int, by_strategy: dict[str, dict[str, RunResult]]) -> str:
    raw = by_strategy["raw"]
    main = markdown(HEADER, [row(name, runs, raw) for name, runs in by_strategy.items()])
    sources = [s for s in SOURCES if any(r.source == s for r in raw.values())]
    source_rows = []
    for name, runs in by_strategy.items():
        cells = [name]
        for source in sources:
            mine = {k: r for k, r in runs.items() if r.source == source}
            total = sum(raw[k].cost for k in mine)
            overflows = sum(r.overflow for r in mine.values())
            cell = f"{sum(r.cost for r in mine.values()) / total:.2f}" if total else "-"
            cells.append(cell + (f" ({overflows} overflow)" if overflows else ""))
        source_rows.append(cells)
    counts_by_source = Counter(r.source for r in raw.values())
    header = ["strategy", *(f"{s} ({counts_by_source[s]})" for s in sources)]
    return (f"## Window {window:,}\n\n{main}\n\nBilled vs raw by source:\n\n{markdown(header, source_rows)}")


def costliest(by_strategy: dict[str, dict[str, RunResult]], name: str = "ctx_magic", count: int = 10) -> str:
    """The `count` sessions raw finishes on which `name` bills most above raw, with what its side
    calls and rewrites were on each: where the money beyond raw goes, session by session."""
    runs, raw = by_strategy.get(name, {}), by_strategy["raw"]
    finished = [k for k in runs if k in raw and not raw[k].overflow and raw[k].cost > 0]
    worst = sorted(finished, key=lambda k: runs[k].cost / raw[k].cost, reverse=True)[:count]
    rows = []
    for key in worst:
        run, base = runs[key], raw[key].cost
        side: Counter[str] = Counter()
        for c in run.calls:
            if c.side:
                side[c.rule or c.kind] += c.cost
        rows.append([key, f"{raw[key].largest_request:,}", f"{run.cost / base:.2f}",
                     ", ".join(f"{k} {v / base:.3f}" for k, v in side.most_common()) or "-",
                     counts(run.events)])
    header = ("session", "raw's largest request", f"{name} vs raw", "side calls (cost × raw)", "events")
    return markdown(header, rows)


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


def target_lines(grouped_results: dict[int, dict[str, dict[str, RunResult]]], name: str = "ctx_magic") -> list[str]:
    """Issue 10's bars for `name`, as measured (the bars, not timed tests)."""
    lines: list[str] = []
    for window, by_strategy in sorted(grouped_results.items()):
        runs, raw = by_strategy.get(name), by_strategy.get("raw")
        if not runs or not raw:
            continue
        total = sum(r.cost for r in runs.values()) / sum(raw[k].cost for k in runs)
        overflows = sum(r.overflow for r in runs.values())
        above = [k for k, r in runs.items() if not raw[k].overflow and r.cost > raw[k].cost]
        grown = [k for k in runs if raw[k].largest_request > 200_000]
        if window <= 32_000:
            bar = f"total {total:.2f} (bar ≤ 0.70, goal 0.65), overflow runs {overflows} (bar 0)"
        elif window <= 200_000:
            bar = (f"total {total:.2f} (bar ≤ 1.00); sessions raw finishes that cost more than raw: {len(above)} of "
                   f"{sum(not raw[k].overflow for k in runs)} (bar 0)")
        else:
            below = sum(runs[k].cost < raw[k].cost for k in grown)
            bar = (f"total {total:.2f} (bar ≤ 1.00); sessions past 200k tokens below raw: {below} of {len(grown)} "
                   "(bar: all)")
        lines.append(f"- {window:,}: {name} {bar}")
        notebooks = [r for r in runs.values() if r.source == "notebook"]
        if notebooks:
            misses, total = warm_misses(notebooks)
            lines.append(f"  - notebook replays: {misses} of {total} main calls that only added to the previous "
                         "request lost its cached conversation while it was warm (bar 0: the 20-block lookback)")
    return lines
