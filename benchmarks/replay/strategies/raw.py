"""Doing nothing: the whole conversation at every step.

- `raw`: the fair reference. Cache breakpoints where ctx_magic puts them: on the system prompt,
  on the last block, and on the block the previous request ended with (which finds the cached
  conversation however many blocks were added since: the API looks back only about 20 blocks
  from a breakpoint). What ctx_magic saves against it is context management, not breakpoints.
- `raw-1h`: the same with the 1-hour cache lifetime (writes cost 2 instead of 1.25, a break of
  under an hour no longer writes the conversation again).
- `raw-1bp`: one message breakpoint, on the last block only (Claude Code's layout; the first
  raw baseline of this benchmark, kept as a labelled extra).
- `raw-uncached`: no breakpoints, every token billed as plain input.

None recovers from a prompt-too-long: a session that outgrows the window overflows there. The
table divides every bill by `raw` replayed at an unlimited window (results.REFERENCE), so a
session raw cannot finish still counts in full. The floor (every new token written once,
everything else read) is computed from raw's own requests in `results.floor_of`; it sends
nothing.
"""

from __future__ import annotations

from benchmarks.replay.billing import Bench
from benchmarks.replay.harness import Context, Outcome, play


class Raw(Context):
    name = "raw"


class RawOneHour(Context):
    name = "raw-1h"
    ttl = "1h"


class RawOneBreakpoint(Context):
    name = "raw-1bp"
    previous_breakpoint = False


class RawUncached(Context):
    name = "raw-uncached"
    cached = False


def run_raw(bench: Bench) -> Outcome:
    return play(bench, Raw())


def run_raw_1h(bench: Bench) -> Outcome:
    return play(bench, RawOneHour())


def run_raw_1bp(bench: Bench) -> Outcome:
    return play(bench, RawOneBreakpoint())


def run_raw_uncached(bench: Bench) -> Outcome:
    return play(bench, RawUncached())
