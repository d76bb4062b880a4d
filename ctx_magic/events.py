"""Events: every change to the context, and every step of a turn, is one of these values.

The engine returns them, the transcript records them, the display and the panel render them.
Nothing upstream computes context state on its own: it folds these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctx_magic.figures import ContextFigures
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


# -- context changes (durable: replayed on resume) ----------------------------------------


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


# -- observations (not needed to rebuild, recorded for the panel and benchmarks) ----------


@dataclass(frozen=True)
class ContextMeasured(Event):
    """The engine's view of the context before a call."""

    name: ClassVar[str] = "measured"
    figures: ContextFigures


@dataclass(frozen=True)
class UsageUpdated(Event):
    """One response's usage, and the session's totals after it (for the spend figures)."""

    name: ClassVar[str] = "usage"
    usage: Usage
    estimated_prompt_tokens: int
    correction: float
    totals: Mapping[str, Any] = field(default_factory=dict)
    cache_hit_ratio: float = 0.0
    cost_usd: float = 0.0
    """What this response cost (with the server's compaction iterations), at the model's prices."""


@dataclass(frozen=True)
class CacheBroke(Event):
    """The prompt cache read fell sharply against the previous response (the prefix was lost)."""

    name: ClassVar[str] = "cache_break"
    previous_read: int
    cache_read: int
    cache_written: int
    expected: bool  # explained (expiry after an idle gap, a new system prompt or tool list), not a surprise
    reason: str

    def summary(self) -> dict[str, Any]:
        """What the status JSON and the panel show of it."""
        return {"previous_read": self.previous_read, "cache_read": self.cache_read, "reason": self.reason,
                "expected": self.expected}


@dataclass(frozen=True)
class CompactionFailedEvent(Event):
    name: ClassVar[str] = "compaction_failed"
    trigger: str
    reason: str
    consecutive_failures: int
    breaker_open: bool


@dataclass(frozen=True)
class BreakerReset(Event):
    name: ClassVar[str] = "breaker_reset"
    reason: str


# -- the turn as it streams (for the display; not written to the transcript) --------------


@dataclass(frozen=True)
class Status(Event):
    """What the agent is doing now: thinking, running, compacting, waiting, idle."""

    name: ClassVar[str] = "status"
    state: str
    detail: str = ""


@dataclass(frozen=True)
class TextDelta(Event):
    name: ClassVar[str] = "text"
    text: str


@dataclass(frozen=True)
class ThinkingDelta(Event):
    """A piece of the model's thinking as it streams (shown collapsed in the cell)."""

    name: ClassVar[str] = "thinking"
    text: str


@dataclass(frozen=True)
class ToolStarted(Event):
    name: ClassVar[str] = "tool_started"
    tool_use_id: str
    tool: str
    input: Mapping[str, Any]


@dataclass(frozen=True)
class ToolFinished(Event):
    name: ClassVar[str] = "tool_finished"
    tool_use_id: str
    tool: str
    output: str
    is_error: bool


@dataclass(frozen=True)
class ToolOutputDelta(Event):
    """Text a running tool just printed (progress while it runs; the result comes at the end)."""

    name: ClassVar[str] = "tool_output_delta"
    text: str


@dataclass(frozen=True)
class ApprovalAsked(Event):
    """The agent's code waits for the person's approval (`ask` mode): shown before the question."""

    name: ClassVar[str] = "approval_asked"
    code: str


@dataclass(frozen=True)
class Notice(Event):
    """A line for the user: backend chosen, a retry, an error that ended the turn."""

    name: ClassVar[str] = "notice"
    level: str  # info | warning | error
    text: str
    remedy: str = ""
    """A `Remedy` value: what to do next, worded by the frontend."""


@dataclass(frozen=True)
class ReplyRestarted(Event):
    """A reply's stream broke off; what it had streamed is void and the call is made again."""

    name: ClassVar[str] = "reply_restarted"
    attempt: int  # the attempt about to start, from 2
    attempts: int
    reason: str


@dataclass(frozen=True)
class ReplyWithdrawn(Event):
    """A reply failed for good (its last attempt broke too): what it streamed is void, and the
    cell must not go on showing it as if the model had said it."""

    name: ClassVar[str] = "reply_withdrawn"
    reason: str


@dataclass(frozen=True)
class ThinkingCleared(Event):
    """Thinking blocks left the live context: old turns after an idle gap (as in Claude Code: only the last
    thinking turn is kept once the cache has expired), blocks another model made (a switch), in an
    append-only conversation the blocks after an edit or a compaction (their prefix changed), or blocks
    the API's prefix check refused and every thinking block after them."""

    name: ClassVar[str] = "thinking_cleared"
    durable: ClassVar[bool] = True
    trigger: str  # idle | model-switch | edit | compaction | prefix-check
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


DURABLE_EVENTS: dict[str, type[Event]] = {
    cls.name: cls for cls in (Persisted, Snipped, Cleared, Compacted, ImagesStripped, ThinkingCleared, ServerEdited,
                               ServerCompacted, Undone)
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
