"""What a session remembers about its compactions: the boundaries so far, the turns between
them and the circuit breaker. A frozen value: each change returns a new one."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.context.tokens import count_text
from ctx_magic.events import Compacted

# Claude Code: 1,279 sessions once failed 50+ times in a row; three failures stop the attempts.
MAX_CONSECUTIVE_FAILURES = 3


@dataclass(frozen=True)
class Boundary:
    """One compaction, as the status and the panel list it."""

    trigger: str
    tokens_before: int
    tokens_after: int
    messages_summarized: int
    summary: str = ""
    boundary_uuid: str | None = None
    summary_tokens: int = 0
    undone: bool = False
    """Taken back by an undo: listed, marked so, and left out of every figure."""

    @classmethod
    def of(cls, event: Compacted) -> Boundary:
        return cls(event.trigger, event.tokens_before, event.tokens_after, event.messages_summarized, event.summary,
                   event.boundary_uuid, count_text(event.summary))

    def figures(self) -> dict[str, Any]:
        """The boundary without its summary text (for the status JSON)."""
        return {"trigger": self.trigger, "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
                "messages_summarized": self.messages_summarized, "undone": self.undone}


@dataclass(frozen=True)
class CompactionState:
    failures: int = 0
    """Auto-compactions failed in a row; at MAX_CONSECUTIVE_FAILURES the breaker opens."""
    boundaries: tuple[Boundary, ...] = ()
    turns: int = 0
    turns_at_boundary: int = 0
    deferred_turn: int | None = None
    """The turn the user let through uncompacted (`deferred`), until the blocking limit."""

    @property
    def breaker_open(self) -> bool:
        return self.failures >= MAX_CONSECUTIVE_FAILURES

    @property
    def standing(self) -> tuple[Boundary, ...]:
        """The compactions that stand (not undone): the ones every count and figure reads."""
        return tuple(b for b in self.boundaries if not b.undone)

    @property
    def last(self) -> Boundary | None:
        """The last compaction that stands."""
        standing = self.standing
        return standing[-1] if standing else None

    @property
    def previous_boundary(self) -> str | None:
        last = self.last
        return last.boundary_uuid if last is not None else None

    @property
    def turns_since_boundary(self) -> int:
        return self.turns - self.turns_at_boundary

    def turn_started(self) -> CompactionState:
        return dataclasses.replace(self, turns=self.turns + 1)

    def compacted(self, event: Compacted) -> CompactionState:
        """A compaction succeeded: a new boundary, and the circuit breaker closes."""
        return dataclasses.replace(self, failures=0, boundaries=(*self.boundaries, Boundary.of(event)),
                                   turns_at_boundary=self.turns)

    def undone(self, boundary_uuid: str) -> CompactionState:
        """The compaction of that boundary was undone: still listed, no longer counted."""
        return dataclasses.replace(self, boundaries=tuple(
            dataclasses.replace(b, undone=True) if b.boundary_uuid == boundary_uuid else b for b in self.boundaries))

    def deferred(self) -> CompactionState:
        """The next turn goes through without an automatic compaction (that turn only)."""
        return dataclasses.replace(self, deferred_turn=self.turns + 1)

    def failed(self) -> CompactionState:
        return dataclasses.replace(self, failures=self.failures + 1)

    def to_json(self) -> dict[str, int]:
        return {"failures": self.failures, "turns": self.turns, "turns_at_boundary": self.turns_at_boundary}

    @classmethod
    def from_json(cls, saved: Mapping[str, Any], compactions: Iterable[Compacted] = (),
                  undone: Collection[str] = ()) -> CompactionState:
        """The state saved in state.json, with the boundaries found in the transcript (`undone`:
        those of the compactions undone since)."""
        return cls(int(saved.get("failures", 0)), tuple(
            dataclasses.replace(Boundary.of(e), undone=e.boundary_uuid in undone) for e in compactions),
                   int(saved.get("turns", 0)), int(saved.get("turns_at_boundary", 0)))
