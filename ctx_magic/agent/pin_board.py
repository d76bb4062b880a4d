"""What the user pinned (pins.json, context/pins.py): kept across resume, re-injected after
every summary, shown to the model the moment it is pinned."""

from __future__ import annotations

from collections.abc import Callable

from ctx_magic.context.pins import Pin, add_pin, pins_from_json, pins_message, remove_pin
from ctx_magic.messages import Message, user_text
from ctx_magic.store.session import SessionDir


class PinBoard:
    def __init__(self, store: SessionDir, append: Callable[[Message], None], clock: Callable[[], float],
                 budget: Callable[[], int]) -> None:
        self.store = store
        self.budget = budget
        """The pins' token budget in force (a setting: it may change during the session)."""
        self.append = append
        self.clock = clock
        self.pins: tuple[Pin, ...] = pins_from_json(store.load_pins())

    def pin(self, text: str, *, cell: int | None = None) -> Pin:
        """Pin `text` (a cell's source when `cell` is its execution count): stored, and shown to the
        model at once. PinRefused past the budget."""
        pins, pin = add_pin(self.pins, text, budget=self.budget(), cell=cell, now=self.clock())
        self.store.save_pins([p.to_json() for p in pins])
        self.pins = pins
        self.append(pins_message([pin], self.clock(), intro="The user pinned this; it stays in view after every "
                                                            "summary:"))
        return pin

    def unpin(self, pin_id: str) -> Pin | None:
        """Remove a pin (not re-injected from the next compaction on); None when there is no such pin."""
        pins, removed = remove_pin(self.pins, pin_id)
        if removed is not None:
            self.store.save_pins([p.to_json() for p in pins])
            self.pins = pins
            self.append(user_text(f"[The user removed {removed.label}; it no longer applies.]", kind="attachment",
                                  timestamp=self.clock(), unpinned=removed.id))
        return removed
