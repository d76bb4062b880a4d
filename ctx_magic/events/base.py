"""What every event is: a frozen value that writes itself as JSON (its transient fields left out),
and how listeners hear them (`notify`, `listening`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctx_magic.messages import Usage


@dataclass(frozen=True)
class Event:
    name: ClassVar[str] = "event"
    # Events the transcript must keep to rebuild the live context (resume).
    durable: ClassVar[bool] = False

    def to_json(self) -> dict[str, Any]:
        data = {"event": self.name}
        for f in dataclasses.fields(self):
            if f.metadata.get("transient"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, Usage):
                value = value.to_json()
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                value = dataclasses.asdict(value)
            elif isinstance(value, (tuple, frozenset)):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            data[f.name] = value
        return data


def transient(**kwargs: Any) -> Any:
    """A field kept in memory for the acting code but not written to the transcript."""
    return field(metadata={"transient": True}, repr=False, compare=False, **kwargs)


def notify(listeners: list, event: Event) -> None:  # type: ignore[type-arg]
    """Give an event to each listener; one that fails never breaks the sender (a turn, a panel)."""
    for listener in list(listeners):
        try:
            listener(event)
        except Exception:  # noqa: BLE001 - a broken display or panel must not break the session
            pass


@contextmanager
def listening(listeners: list[Callable[[Event], None]], listener: Callable[[Event], None]) -> Iterator[None]:
    """`listener` hears the events sent to `listeners` while the block runs (a turn's display)."""
    listeners.append(listener)
    try:
        yield
    finally:
        listeners.remove(listener)
