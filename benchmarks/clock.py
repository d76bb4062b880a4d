"""The benchmarks' clock: time that moves only when told, shared by a session and the stand-in
(its cache TTL, the idle gaps), from a fixed start so every run sees the same timestamps."""

from __future__ import annotations

T0 = 1_767_225_600.0  # 2026-01-01T00:00Z


class ManualClock:
    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)  # a recorded gap can be negative (clock skew in a log): time never runs back
