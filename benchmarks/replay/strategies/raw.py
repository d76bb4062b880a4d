"""Doing nothing: the whole conversation at every step.

- `raw`: cache breakpoints on the system prompt and on the last block, so each request reads
  the previous one's prefix (the reference every other figure is divided by);
- `raw-uncached`: no breakpoints, every token billed as plain input.

Neither recovers from a prompt-too-long: a session that outgrows the window overflows there.
The floor (every new token written once, everything else read) is computed from raw's own
requests in `figures.floor_of`; it sends nothing.
"""

from __future__ import annotations

from benchmarks.replay.billing import Bench
from benchmarks.replay.harness import Context, Outcome, play


class Raw(Context):
    name = "raw"
    cached = True


class RawUncached(Context):
    name = "raw-uncached"
    cached = False


def run_raw(bench: Bench) -> Outcome:
    return play(bench, Raw())


def run_raw_uncached(bench: Bench) -> Outcome:
    return play(bench, RawUncached())
