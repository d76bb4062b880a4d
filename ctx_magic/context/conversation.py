"""The live context as one value: the messages the next request is built from, and the
engine's state (frozen decisions, index, learned correction) that goes with them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctx_magic.context.state import ContextState, result_counts
from ctx_magic.context.tokens import Correction
from ctx_magic.messages import Message


@dataclass(frozen=True)
class Conversation:
    messages: tuple[Message, ...] = ()
    state: ContextState = field(default_factory=ContextState)

    def appended(self, message: Message) -> Conversation:
        return dataclasses.replace(self, messages=(*self.messages, message))

    def adopted(self, messages: Sequence[Message], state: ContextState) -> Conversation:
        """What the engine returned (a prepare, a clearing, a snip)."""
        return Conversation(tuple(messages), state)

    def replaced(self, messages: Sequence[Message], state: ContextState | None = None) -> Conversation:
        """A compaction (or a 413 shrink) swapped the live messages: the index starts over (C10)."""
        base = state or self.state
        return Conversation(tuple(messages), dataclasses.replace(
            base, indexed=0, indexed_uuid=None, compactable=(), positions={}, freed_anchor=None, freed_tokens=0))

    def learned(self, correction: Correction) -> Conversation:
        return dataclasses.replace(self, state=dataclasses.replace(self.state, correction=correction))

    def is_live_result(self, tool_use_id: str) -> bool:
        return tool_use_id in self.state.positions and tool_use_id not in self.state.cleared

    def result_counts(self) -> tuple[int, int, int]:
        """(live, cleared, persisted) tool results, from the index or, before one, the messages."""
        if self.state.indexed:
            return result_counts(self.state)
        ids = [i for m in self.messages for i in m.tool_result_ids]
        cleared = sum(1 for i in ids if i in self.state.cleared)
        persisted = sum(1 for i in ids if i in self.state.persisted and i not in self.state.cleared)
        return len(ids) - cleared - persisted, cleared, persisted
