"""The strategies a replay is run with, by name. Each takes a `Bench` (the replay, the window,
the billing meter and the clock) and returns an `Outcome`; the meter holds the bill.

`floor` sends nothing: it is computed from raw's requests (results.floor_of). `ctx_magic` runs
ctx_magic's own loop (benchmarks/replay/ctx_strategy.py); `ctx_magic+no-notes`,
`+no-memory`, `+no-clearing`, `+no-snip`, `+seeds-threshold` (combinable) are its ablations.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.replay.billing import Bench
from benchmarks.replay.harness import Outcome
from benchmarks.replay.strategies.cc_default import run_cc_default
from benchmarks.replay.strategies.masking import run_masking
from benchmarks.replay.strategies.raw import run_raw, run_raw_uncached
from benchmarks.replay.strategies.s08 import run_s08

Strategy = Callable[[Bench], Outcome]

BASELINES: dict[str, Strategy] = {
    "raw": run_raw,
    "raw-uncached": run_raw_uncached,
    "masking": run_masking,
    "s08": run_s08,
    "cc-default": run_cc_default,
}
FLOOR = "floor"
DEFAULT = ("raw", "raw-uncached", FLOOR, "masking", "s08", "cc-default", "ctx_magic")
ABLATIONS = ("ctx_magic+no-notes", "ctx_magic+no-memory", "ctx_magic+no-clearing", "ctx_magic+no-snip",
             "ctx_magic+seeds-threshold", "ctx_magic+no-notes+no-memory+no-clearing+no-snip+seeds-threshold")


def strategy(name: str) -> Strategy:
    """The runner for a strategy name (raises ValueError for an unknown one)."""
    if name in BASELINES:
        return BASELINES[name]
    if name == "ctx_magic" or name.startswith("ctx_magic+"):
        from benchmarks.replay.ctx_strategy import CtxOptions, run_ctx_magic

        options = CtxOptions.parse(name)
        return lambda bench: run_ctx_magic(bench, options)
    raise ValueError(f"unknown strategy {name!r}; known: {', '.join([*BASELINES, FLOOR, 'ctx_magic[+...]'])}")
