"""What the user pinned (pins.json, context/pins.py): kept across resume, re-injected after
every summary, shown to the model the moment it is pinned."""

from __future__ import annotations

from collections.abc import Callable

from ctx_magic.agent.request import RequestFrame
from ctx_magic.context.pins import Pin, add_pin, pins_from_json, pins_message, remove_pin
from ctx_magic.messages import Message, user_text
from ctx_magic.store.session import SessionDir


class PinBoard:
    """The pins of one session: `pin` and `unpin` store them and tell the model at once (through
    `append`, the session's); the budget is the setting in force (`frame`'s)."""

    def __init__(self, store: SessionDir, frame: RequestFrame, append: Callable[[Message], None],
                 clock: Callable[[], float]) -> None:
        self._store = store
        self._frame = frame
        self._append = append
        self._clock = clock
        self.pins: tuple[Pin, ...] = pins_from_json(store.load_pins())

    def pin(self, text: str, *, cell: int | None = None) -> Pin:
        """Pin `text` (a cell's source when `cell` is its execution count): stored, and shown to the
        model at once. PinRefused past the budget."""
        budget = self._frame.settings.pin_budget_tokens
        pins, pin = add_pin(self.pins, text, budget=budget, cell=cell, now=self._clock())
        self._store.save_pins([p.to_json() for p in pins])
        self.pins = pins
        self._append(pins_message([pin], self._clock(), intro="The user pinned this; it stays in view after every "
                                                            "summary:"))
        return pin

    def unpin(self, pin_id: str) -> Pin | None:
        """Remove a pin (not re-injected from the next compaction on); None when there is no such pin."""
        pins, removed = remove_pin(self.pins, pin_id)
        if removed is not None:
            self._store.save_pins([p.to_json() for p in pins])
            self.pins = pins
            self._append(user_text(f"[The user removed {removed.label}; it no longer applies.]", kind="attachment",
                                  timestamp=self._clock(), unpinned=removed.id))
        return removed
