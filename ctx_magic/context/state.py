"""What the engine remembers between calls (budget, clearing, anchored count, estimate): the frozen decisions on
tool results (persisted, cleared) that are re-applied byte for byte, the index of what was
already checked, and the learned estimate correction. A frozen value, saved in state.json."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ctx_magic.context.budget import replace_result
from ctx_magic.context.tokens import STARTING_RATIO, Correction
from ctx_magic.events import Persisted
from ctx_magic.messages import Message, result_text


@dataclass(frozen=True)
class ContextState:
    """What the engine remembers between calls: frozen decisions and its index."""

    decided: frozenset[str] = frozenset()
    """tool_use_ids whose budget decision is made (kept or persisted), never revisited."""
    persisted: Mapping[str, str] = field(default_factory=dict)
    """tool_use_id -> the persisted-output block that replaced it, byte for byte."""
    persisted_paths: Mapping[str, str] = field(default_factory=dict)
    cleared: Mapping[str, str] = field(default_factory=dict)
    """tool_use_id -> the stub that replaced it (microcompact, snip tool, user)."""
    tool_names: Mapping[str, str] = field(default_factory=dict)
    compactable: tuple[str, ...] = ()
    """Live compactable results not cleared yet, oldest first."""
    positions: Mapping[str, int] = field(default_factory=dict)
    """tool_use_id -> index of the message holding its result."""
    indexed: int = 0
    indexed_uuid: str | None = None
    sent_messages: int = 0
    """How many of the indexed messages go to the API."""
    freed_anchor: str | None = None
    freed_tokens: int = 0
    """Tokens removed before the anchoring response since it was billed (the anchored count's correction)."""
    correction: Correction = Correction()
    left_out_images: Mapping[str, int] = field(default_factory=dict)
    """message uuid -> images the last request left out of it (past the API's count): what the thinking
    written since was written after, in an append-only conversation."""

    def with_persisted(self, events: Sequence[Persisted]) -> ContextState:
        """These results' decisions made and frozen: persisted, with their stand-ins and paths."""
        if not events:
            return self
        return dataclasses.replace(
            self,
            decided=self.decided | {e.tool_use_id for e in events},
            persisted={**self.persisted, **{e.tool_use_id: e.replacement for e in events}},
            persisted_paths={**self.persisted_paths, **{e.tool_use_id: e.path for e in events}},
        )

    def to_json(self) -> dict[str, object]:
        return {
            "persisted": dict(self.persisted),
            "persisted_paths": dict(self.persisted_paths),
            "cleared": dict(self.cleared),
            "freed_anchor": self.freed_anchor,
            "freed_tokens": self.freed_tokens,
            "left_out_images": dict(self.left_out_images),
            "correction": {"ratio": self.correction.ratio, "observations": self.correction.observations,
                           "recent": list(self.correction.recent)},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ContextState:
        corr = data.get("correction") or {}
        return cls(
            persisted=dict(data.get("persisted") or {}),  # type: ignore[arg-type]
            persisted_paths=dict(data.get("persisted_paths") or {}),  # type: ignore[arg-type]
            cleared=dict(data.get("cleared") or {}),  # type: ignore[arg-type]
            freed_anchor=data.get("freed_anchor"),  # type: ignore[arg-type]
            freed_tokens=int(data.get("freed_tokens") or 0),  # type: ignore[arg-type]
            left_out_images=dict(data.get("left_out_images") or {}),  # type: ignore[arg-type]
            # A ratio nothing was learned for is the starting one (older files stored a padding).
            correction=Correction(float(corr.get("ratio", STARTING_RATIO)), int(corr.get("observations", 0)),  # type: ignore[union-attr]
                                  tuple(float(x) for x in corr.get("recent") or ()))  # type: ignore[union-attr]
            if int(corr.get("observations", 0)) else Correction(),  # type: ignore[union-attr]
        )


def apply_decisions(message: Message, state: ContextState) -> Message:
    """The message with every frozen decision on its results re-applied, byte for byte."""
    if message.role != "user" or not (state.cleared or state.persisted):
        return message
    changed = False
    blocks = []
    for block in message.content:
        tool_use_id = block.get("tool_use_id")
        if block.get("type") == "tool_result":
            if tool_use_id in state.cleared:
                stub = state.cleared[tool_use_id]
                if block.get("content") != stub:
                    block, changed = {**block, "content": stub}, True
            elif tool_use_id in state.persisted:
                replacement = state.persisted[tool_use_id]
                if result_text(block) != replacement:
                    block, changed = replace_result(block, replacement), True
        blocks.append(block)
    return message.with_content(blocks) if changed else message


def result_counts(state: ContextState, ids: Collection[str] | None = None) -> tuple[int, int, int]:
    """(live, cleared, persisted) tool results in the live context: `ids`, else the indexed ones."""
    ids = state.positions if ids is None else ids
    cleared = sum(1 for i in ids if i in state.cleared)
    persisted = sum(1 for i in ids if i in state.persisted and i not in state.cleared)
    return len(ids) - cleared - persisted, cleared, persisted
