"""The strategies a replay is run with, by name. Each takes a `Bench` (the replay, the window,
the billing meter and the clock) and returns an `Outcome`; the meter holds the bill.

`raw` (ctx_magic's breakpoints), `raw-1h` (the same with the 1-hour cache), `raw-1bp` (one
message breakpoint, Claude Code's layout), `raw-uncached`; `floor` sends nothing: it is computed
from raw's requests (results.floor_of). `ctx_magic` runs ctx_magic's own loop
(benchmarks/replay/ctx_strategy.py), with switches (combinable): `+no-notes`, `+no-memory`,
`+no-clearing`, `+no-snip` turn a mechanism off; `+cc-threshold` compacts where Claude Code
does; `+late` weighs no early compaction below 200,000 tokens; `+tools-from-start` offers the
context tools from the first request. `ctx_magic-edit` is ctx_magic with append-only forced off
on a model that checks the prefix of the thinking sent back, asking the API to drop the thinking
its edits invalidate (drop_block); `ctx_magic-edit-refused` the same without asking (the check
refuses). Any name with `@p99.99` runs with p99.99-long summaries.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.replay.billing import Bench
from benchmarks.replay.harness import Outcome
from benchmarks.replay.strategies.cc_default import run_cc_default
from benchmarks.replay.strategies.masking import run_masking
from benchmarks.replay.strategies.raw import run_raw, run_raw_1bp, run_raw_1h, run_raw_uncached
from benchmarks.replay.strategies.s08 import run_s08

Strategy = Callable[[Bench], Outcome]

BASELINES: dict[str, Strategy] = {
    "raw": run_raw,
    "raw-1h": run_raw_1h,
    "raw-1bp": run_raw_1bp,
    "raw-uncached": run_raw_uncached,
    "masking": run_masking,
    "s08": run_s08,
    "cc-default": run_cc_default,
}
FLOOR = "floor"
DEFAULT = ("raw", "raw-1h", "raw-1bp", "raw-uncached", FLOOR, "masking", "s08", "cc-default", "cc-default@p99.99",
           "ctx_magic", "ctx_magic@p99.99", "ctx_magic+cc-threshold", "ctx_magic+late", "ctx_magic+tools-from-start")
ABLATIONS = ("ctx_magic+no-notes", "ctx_magic+no-memory", "ctx_magic+no-clearing", "ctx_magic+no-snip",
             "ctx_magic+no-notes+no-memory+no-clearing+no-snip+cc-threshold")
THINKING = ("raw", "cc-default", "ctx_magic", "ctx_magic-edit")
"""`--thinking`: the strategies compared on the thinking each sends back (append-only ctx_magic,
ctx_magic editing with drop_block), with the prefix check's own table."""
CTX_MAGIC_VARIANTS = ("ctx_magic", "ctx_magic-edit", "ctx_magic-edit-refused")
COMPACTION_SWITCHES = ("cc-threshold", "late")
"""Switches that change only where a compaction may happen: a window where no session comes near
any compaction repeats ctx_magic's run for them."""


def strategy(name: str) -> Strategy:
    """The runner for a strategy name (raises ValueError for an unknown one)."""
    if name in BASELINES:
        return BASELINES[name]
    if name.split("+")[0] in CTX_MAGIC_VARIANTS:
        from benchmarks.replay.ctx_strategy import CtxOptions, run_ctx_magic

        options = CtxOptions.parse(name)
        return lambda bench: run_ctx_magic(bench, options)
    known = ", ".join([*BASELINES, FLOOR, *(f"{v}[+...]" for v in CTX_MAGIC_VARIANTS)])
    raise ValueError(f"unknown strategy {name!r}; known: {known}")
