"""Pins: what the user wants in view whatever is summarized or cleared.

A pin is an instruction or a cell's source, kept word for word in the session folder and
re-injected right after the summary by every compaction path. Pins count against a token
budget: a pin that would pass it is refused with one clear line (a pin that may be dropped
would not be one). Pure values and text; the session stores them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.context.tokens import count_text
from ctx_magic.errors import CtxMagicError, Remedy
from ctx_magic.messages import Message, user_text

PINNED_TAG = "pinned"


class PinRefused(CtxMagicError):
    """A pin that would pass the budget, or one that says nothing."""


@dataclass(frozen=True)
class Pin:
    id: str
    text: str
    cell: int | None = None
    """The execution count of a pinned cell (its source is the text)."""
    created: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "cell": self.cell, "created": self.created}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Pin:
        cell = data.get("cell")
        return cls(str(data["id"]), str(data["text"]), int(cell) if cell is not None else None,
                   float(data.get("created") or 0.0))

    @property
    def label(self) -> str:
        return f"pin {self.id}" + (f" · cell {self.cell}" if self.cell is not None else "")


def pins_from_json(data: Iterable[Any]) -> tuple[Pin, ...]:
    pins = []
    for item in data:
        try:
            pins.append(Pin.from_json(item))
        except (KeyError, TypeError, ValueError):
            continue  # a hand-edited file: keep the pins that can be read
    return tuple(pins)


def pins_text(pins: Sequence[Pin], intro: str = "The user pinned these; they hold whatever a summary says:") -> str:
    """The block the model sees: each pin word for word under its label."""
    body = "\n\n".join(f"[{pin.label}]\n{pin.text}" for pin in pins)
    return f"<{PINNED_TAG}>\n{intro}\n\n{body}\n</{PINNED_TAG}>"


def pins_tokens(pins: Sequence[Pin]) -> int:
    return count_text(pins_text(pins)) if pins else 0


def next_id(pins: Sequence[Pin]) -> str:
    numbers = [int(p.id[1:]) for p in pins if p.id[1:].isdigit()]
    return f"p{max(numbers, default=0) + 1}"


def add_pin(pins: Sequence[Pin], text: str, *, budget: int, cell: int | None = None,
            now: float = 0.0) -> tuple[tuple[Pin, ...], Pin]:
    """The pins with a new one; PinRefused when it is empty or all of them would pass `budget` tokens."""
    if not text.strip():
        raise PinRefused("A pin needs some text (or a cell with source).")
    pin = Pin(next_id(pins), text.strip("\n"), cell, now)
    new = (*pins, pin)
    needed = pins_tokens(new)
    if needed > budget:
        raise PinRefused(f"Pinning this would bring the pins to {needed:,} tokens, over their budget of "
                         f"{budget:,}: nothing was pinned.", remedy=Remedy.UNPIN_OR_RAISE_PIN_BUDGET)
    return new, pin


def remove_pin(pins: Sequence[Pin], pin_id: str) -> tuple[tuple[Pin, ...], Pin | None]:
    kept = tuple(p for p in pins if p.id != pin_id)
    removed = next((p for p in pins if p.id == pin_id), None)
    return kept, removed


def pins_message(pins: Sequence[Pin], now: float, *, intro: str | None = None) -> Message:
    """The pins as one user message placed after a summary (or when a pin is made)."""
    text = pins_text(pins, intro) if intro else pins_text(pins)
    return user_text(text, kind="attachment", timestamp=now, pins=[p.id for p in pins])
