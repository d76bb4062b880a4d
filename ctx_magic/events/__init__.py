"""Events: every change to the context, and every step of a turn, is one of these values.

The engine returns them, the transcript records them, the display and the panel render them.
Nothing upstream computes context state on its own: it folds these. By area: `changes` (durable,
replayed on resume), `observations` (for the panel and the benchmarks), `stream` (the turn as it
streams); `base` holds `Event` itself and how listeners hear them.
"""

from ctx_magic.events.base import Event, listening, notify, transient
from ctx_magic.events.changes import (
    DURABLE_EVENTS,
    FOLD_TRIGGER,
    AuditReport,
    Cleared,
    Compacted,
    ImagesStripped,
    Persisted,
    ServerCompacted,
    ServerEdited,
    Snipped,
    ThinkingCleared,
    UndoKept,
    Undone,
    event_from_json,
)
from ctx_magic.events.observations import BreakerReset, CacheBroke, CompactionFailedEvent, ContextMeasured, UsageUpdated
from ctx_magic.events.stream import (
    ApprovalAsked,
    Notice,
    ReplyRestarted,
    ReplyWithdrawn,
    Status,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolOutputDelta,
    ToolStarted,
)

__all__ = [
    "DURABLE_EVENTS", "FOLD_TRIGGER", "ApprovalAsked", "AuditReport", "BreakerReset", "CacheBroke", "Cleared",
    "Compacted", "CompactionFailedEvent", "ContextMeasured", "Event", "ImagesStripped", "Notice", "Persisted",
    "ReplyRestarted", "ReplyWithdrawn", "ServerCompacted", "ServerEdited", "Snipped", "Status", "TextDelta",
    "ThinkingCleared", "ThinkingDelta", "ToolFinished", "ToolOutputDelta", "ToolStarted", "UndoKept", "Undone",
    "UsageUpdated", "event_from_json", "listening", "notify", "transient",
]
