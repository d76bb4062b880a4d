"""The live context in figures: its size against its limits, and the window part by part.
Carried by events (ctx_magic.events) and by the status snapshot."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# The parts of the window, in the order a bar draws them (used first, then what stays free).
USED_PARTS = ("system", "tools", "memory", "messages", "tool_results", "persisted")
FREE_PARTS = ("free", "buffer", "reserve")


@dataclass(frozen=True)
class Composition:
    """The window as the next request fills it, in tokens (context/composition.py computes it);
    the parts add up to `window`, or to more once the context has eaten into the buffers."""

    system: int = 0
    """The system prompt without its memory section."""
    tools: int = 0
    """The tool definitions sent with every request."""
    memory: int = 0
    """Long-term memories in the system prompt, and what is attached to the conversation rather
    than said in it: pins, files re-read after a compaction, the notes pointer."""
    messages: int = 0
    """What was said: user and agent text, tool calls, summaries, stubs of cleared results."""
    tool_results: int = 0
    """Tool results (the agent's and the user's cells) the agent still sees in full."""
    persisted: int = 0
    """Previews of the results saved to disk (the tool-result budget)."""
    free: int = 0
    """Room left before auto-compaction."""
    buffer: int = 0
    """Between the compaction threshold and the effective window: kept free so a compaction can
    run before the window fills (auto-compaction)."""
    reserve: int = 0
    """The room kept for the reply."""
    window: int = 0

    @property
    def used(self) -> int:
        return sum(getattr(self, name) for name in USED_PARTS)

    def parts(self) -> list[tuple[str, int]]:
        """(name, tokens) for every part, used ones first."""
        return [(name, getattr(self, name)) for name in (*USED_PARTS, *FREE_PARTS)]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ContextFigures:
    """The live context as the engine measured it: size, limits, zone and its tool results."""

    tokens: int
    threshold: int
    warning: int
    blocking: int
    window: int
    zone: str
    percent_left: float
    messages: int
    live_results: int
    cleared_results: int
    persisted_results: int
    plan: str = ""
    """Why the last decision did what it did (context/decide.py)."""
    composition: Composition | None = None
    """What the next request carries, part by part (the session adds it; the engine alone cannot
    tell the system prompt from the tools)."""
