"""Reading a stored session back: the transcript folded into the live context, and what
state.json kept beside it (engine decisions, compaction state, usage, plug-in state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctx_magic.agent.files import FileRead
from ctx_magic.context.compaction_state import CompactionState
from ctx_magic.context.resume import fold_transcript
from ctx_magic.context.state import ContextState
from ctx_magic.events import Compacted, event_from_json
from ctx_magic.messages import Message
from ctx_magic.store.session import SessionDir


@dataclass(frozen=True)
class SavedSession:
    messages: list[Message]
    state: ContextState
    compaction: CompactionState
    usage: dict[str, int]
    memory_section: str
    plugin_state: dict[str, Any]
    cached_tail: str | None = None
    reads: list[FileRead] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load_saved(store: SessionDir) -> SavedSession:
    loaded = store.load_transcript()
    saved = store.load_state()
    engine = ContextState.from_json(saved.get("engine") or {})
    messages, state, problems = fold_transcript(loaded.records, engine)
    compactions = [e for e in (_compacted(r) for r in loaded.records) if e is not None]
    return SavedSession(
        messages=messages,
        state=state,
        compaction=CompactionState.from_json(saved, compactions),
        usage=dict(saved.get("usage") or {}),
        memory_section=str(saved.get("system_extra") or ""),
        plugin_state=dict(saved.get("extra") or {}),
        cached_tail=saved.get("cached_tail"),
        reads=[FileRead(**read) for read in saved.get("reads") or []],
        problems=loaded.problems + problems,
    )


def _compacted(record: dict[str, Any]) -> Compacted | None:
    if record.get("type") != "event" or record.get("event") != "compacted":
        return None
    try:
        event = event_from_json(record)
    except (KeyError, TypeError, ValueError):
        return None
    return event if isinstance(event, Compacted) else None
