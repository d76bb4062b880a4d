"""The changes to the live context: durable events, which the transcript keeps and resume replays
to rebuild it (`event_from_json`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctx_magic.events.base import Event, transient


@dataclass(frozen=True)
class Persisted(Event):
    """The tool-result budget wrote a tool result to disk and left a preview in its place."""

    name: ClassVar[str] = "persisted"
    durable: ClassVar[bool] = True
    tool_use_id: str
    path: str
    original_chars: int
    tokens_freed: int
    replacement: str
    content: str = transient(default="")


FOLD_TRIGGER = "cells"
"""The trigger of a snip that folded old notebook cells to a line each (not the middle cut)."""


@dataclass(frozen=True)
class Snipped(Event):
    """Snip removed a middle run of messages and put one marker in their place."""

    name: ClassVar[str] = "snipped"
    durable: ClassVar[bool] = True
    count: int
    removed_uuids: tuple[str, ...]
    marker_uuid: str
    tokens_freed: int
    trigger: str = "auto"

    @property
    def cells(self) -> int:
        """The notebook cells a fold of cells stands for (each a call and its result)."""
        return self.count // 2 if self.trigger == FOLD_TRIGGER else 0


@dataclass(frozen=True)
class Cleared(Event):
    """Microcompact (or the model's snip tool, or the user) replaced old tool results by a stub."""

    name: ClassVar[str] = "cleared"
    durable: ClassVar[bool] = True
    trigger: str  # idle | pressure | model | user
    replacements: Mapping[str, str]
    tokens_freed: int

    @property
    def tool_use_ids(self) -> list[str]:
        return list(self.replacements)


@dataclass(frozen=True)
class AuditReport:
    """What the coverage audit (context/audit.py) found missing from a summary and appended after it.

    The panel shows it beside the summary; `text` is exactly what was appended (also in the
    summary message of the transcript).
    """

    user_messages: tuple[str, ...] = ()
    """Uuids of the user's messages the summary left out, appended word for word."""
    cut_messages: tuple[str, ...] = ()
    """Of those, the long ones appended as their first lines and where to read the rest."""
    paths: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    """Variables, functions and classes the summarized code defined."""
    user_messages_checked: int = 0
    paths_checked: int = 0
    errors_checked: int = 0
    names_checked: int = 0
    tokens: int = 0
    """What the appended text costs in the context."""
    text: str = ""

    @property
    def added(self) -> bool:
        return bool(self.text)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> AuditReport | None:
        if not data:
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Compacted(Event):
    """A compaction replaced the live context: boundary, summary, kept messages, attachments."""

    name: ClassVar[str] = "compacted"
    durable: ClassVar[bool] = True
    trigger: str  # auto | manual | reactive | session-memory
    tokens_before: int
    tokens_after: int
    messages_summarized: int
    boundary_uuid: str
    live_uuids: tuple[str, ...]
    summary: str
    rebound: bool = False  # the new context is already over the threshold
    summarized_uuids: tuple[str, ...] = ()  # the live messages the summary replaced
    reason: str = ""
    """Why it happened: the decision's reason for an automatic one, who asked for the others."""
    audit: AuditReport | None = field(default=None, metadata={"decode": AuditReport.from_json})
    """What the coverage audit appended after the summary (None for a compaction made before it)."""
    pins: tuple[str, ...] = ()  # ids of the user's pins re-injected after the summary


@dataclass(frozen=True)
class Undone(Event):
    """The last compaction, snip or clearing was taken back (context/undo.py): the live context is
    the one it replaced, with what came after it, and the results a clearing stubbed are whole again."""

    name: ClassVar[str] = "undone"
    durable: ClassVar[bool] = True
    kind: str  # compaction | snip | clearing
    key: str
    """Which change: a compaction's boundary uuid, a snip's marker uuid, a clearing's first result id."""
    live_uuids: tuple[str, ...]
    cleared: Mapping[str, str]
    """Every result still cleared after the undo (tool_use_id -> its stub)."""
    thinned_uuids: tuple[str, ...]
    """The restored answers held without their thinking blocks."""
    since_uuids: tuple[str, ...]
    """The messages added after the change (their usage no longer anchors the count)."""
    tokens_before: int
    tokens_after: int
    spent_usd: float = 0.0
    """What the undone change cost (a summary's call): spent all the same."""


@dataclass(frozen=True)
class UndoKept(Event):
    """An undo point (context/undo.py) as the transcript keeps it, so `%compact --undo` still works
    after a resume: the live context before the change, named by its messages as first written."""

    name: ClassVar[str] = "undo_point"
    durable: ClassVar[bool] = True  # not needed to rebuild the live context: to rebuild what an undo restores
    kind: str  # compaction | snip | clearing
    key: str
    changes: tuple[str, ...]
    """The keys of the changes it takes back (a snip and a clearing made in one step: two)."""
    trigger: str
    before_uuids: tuple[str, ...]
    thinned_uuids: tuple[str, ...]
    """The answers before the change held without their thinking blocks."""
    unanchored_uuids: tuple[str, ...]
    """The answers before the change held without their usage (it no longer anchored the count)."""
    after_uuids: tuple[str, ...]
    uncleared: tuple[str, ...] = ()
    spent_usd: float = 0.0
    from_notes: bool = False
    prefix: Mapping[str, Any] | None = None
    """The system prompt and tools an append-only conversation was bound to ({system, tools})."""


@dataclass(frozen=True)
class ThinkingCleared(Event):
    """Thinking blocks left the live context: old turns after an idle gap (as in Claude Code: only the last
    thinking turn is kept once the cache has expired), blocks another model made (a switch), in an
    append-only conversation the blocks after an edit or a compaction (their prefix changed), or blocks
    the API's prefix check refused and every thinking block after them."""

    name: ClassVar[str] = "thinking_cleared"
    durable: ClassVar[bool] = True
    trigger: str  # idle | model-switch | edit | images | compaction | prefix-check | tools
    message_uuids: tuple[str, ...]
    blocks: int
    tokens_freed: int


@dataclass(frozen=True)
class ServerEdited(Event):
    """The API's own context editing changed this request before the model saw it (the
    'server' strategy): what each edit cleared, as `context_management.applied_edits` says."""

    name: ClassVar[str] = "server_edited"
    durable: ClassVar[bool] = True  # not needed to rebuild (the live context keeps everything): for the timeline
    applied_edits: tuple[Mapping[str, Any], ...]
    tokens_cleared: int
    api_id: str = ""


@dataclass(frozen=True)
class ServerCompacted(Event):
    """The API compacted the conversation itself (a `compaction` block in its answer): the live
    context now starts at that block, which is sent back unchanged from then on."""

    name: ClassVar[str] = "server_compacted"
    durable: ClassVar[bool] = True
    message_uuid: str  # the assistant message whose first block is the compaction block
    live_uuids: tuple[str, ...]
    summary: str
    tokens_before: int
    tokens_after: int
    messages_summarized: int
    summarized_uuids: tuple[str, ...] = ()
    audit: AuditReport | None = field(default=None, metadata={"decode": AuditReport.from_json})
    """What the coverage audit appended after the API's summary (as after ctx_magic's own)."""
    pins: tuple[str, ...] = ()  # ids of the user's pins re-injected after it


@dataclass(frozen=True)
class ImagesStripped(Event):
    """A request-too-large (413) answer: images and documents in these messages were removed."""

    name: ClassVar[str] = "images_stripped"
    durable: ClassVar[bool] = True
    message_uuids: tuple[str, ...]


DURABLE_EVENTS: dict[str, type[Event]] = {
    cls.name: cls for cls in (Persisted, Snipped, Cleared, Compacted, ImagesStripped, ThinkingCleared, ServerEdited,
                               ServerCompacted, Undone, UndoKept)
}


def event_from_json(data: Mapping[str, Any]) -> Event:
    """Rebuild a durable event from its transcript record."""
    cls = DURABLE_EVENTS[data["event"]]
    kwargs = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
    for f in dataclasses.fields(cls):
        if f.name in kwargs and "decode" in f.metadata:
            kwargs[f.name] = f.metadata["decode"](kwargs[f.name])
        elif f.name in kwargs and "tuple" in str(f.type):
            kwargs[f.name] = tuple(kwargs[f.name])
    return cls(**kwargs)
