"""Undo: take back the last compaction, snip or clearing.

Each of those changes leaves an `UndoPoint`: the live context just before it, the messages it
left, and the results it stubbed. Undoing puts the messages from before back and keeps what came
after the change (the turns since), in order. What was sent before is restored as it was sent,
thinking and signatures included, so an append-only model finds the prefix it wrote them after;
only the thinking of the turns since goes, as after any edit (their prefix was the summary).

The transcript records the undo as one `Undone` event; `replay_undo` folds it at resume. Each point
is kept there too (`UndoKept`, by the uuids of the messages as first written), so that
`points_from_transcript` gives a resumed session the undo it had: only an unbroken run of kept
points up to the last change counts, since undoing an older change past one the transcript holds
no point for would restore the wrong context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.context.autocompact import without_usage
from ctx_magic.context.thinking import drop_thinking_from, has_thinking, without_thinking
from ctx_magic.events import (
    Cleared,
    Compacted,
    Event,
    ServerCompacted,
    Snipped,
    ThinkingCleared,
    UndoKept,
    Undone,
    event_from_json,
)
from ctx_magic.messages import Message

SESSION_MEMORY = "session-memory"  # a compaction from the notes records this trigger, automatic or asked for
USER_ASKED = "the user asked for it"  # ...and says who asked in its reason
UNDO_TRIGGER = "undo"
"""The trigger of the thinking an undo drops (the turns since the change were written after it)."""
MAX_UNDO_POINTS = 20
"""How many changes back an undo can go: each point holds a live context (shared messages, so cheap)."""


@dataclass(frozen=True)
class UndoPoint:
    """One change an undo can take back, and the live context it replaced."""

    kind: str
    """compaction | snip | clearing."""
    key: str
    """The change's own id (see `Undone.key`)."""
    trigger: str
    """Who made it: auto, manual, model, idle, pressure, ..."""
    before: tuple[Message, ...]
    after_uuids: frozenset[str]
    """The live context's messages right after the change (what the change made, and what it kept)."""
    uncleared: frozenset[str] = frozenset()
    """The results a clearing stubbed: whole again after the undo."""
    spent_usd: float = 0.0
    from_notes: bool = False
    """A compaction whose summary was the session's notes (no model call)."""
    prefix: tuple[str, tuple[dict[str, Any], ...]] | None = None
    """The system prompt and tools an append-only conversation was bound to before a compaction:
    the thinking the undo brings back was written after them, so they are sent again."""
    changes: tuple[str, ...] = ()
    """The keys of the changes it takes back (two for a snip and a clearing made in one step)."""

    @property
    def returning(self) -> int:
        """How many messages (or, for a clearing, results) the undo brings back."""
        if self.kind == "clearing":
            return len(self.uncleared)
        return sum(1 for m in self.before if m.uuid not in self.after_uuids)

    def describe(self) -> str:
        """The change in a few words: 'the automatic compaction', 'your snip', ..."""
        if self.trigger == "user":
            return f"your {self.kind}"
        who = {"auto": "automatic ", "manual": "manual ", "model": "agent's ", "reactive": "reactive ",
               "idle": "idle ", "pressure": "pressure "}.get(self.trigger, "")
        return f"the {who}{self.kind}"


def point_of(event: Event, before: Sequence[Message], after: Sequence[Message], spent_usd: float = 0.0
             ) -> UndoPoint | None:
    """The undo point a change leaves (None for an event that is not an undoable change).
    `before` and `after`: the live context just before and just after it."""
    after_uuids = frozenset(m.uuid for m in after)
    if isinstance(event, Compacted):
        from_notes = event.trigger == SESSION_MEMORY
        trigger = ("manual" if event.reason.startswith(USER_ASKED) else "auto") if from_notes else event.trigger
        return UndoPoint("compaction", event.boundary_uuid, trigger, tuple(before),
                         frozenset(event.live_uuids) | after_uuids, spent_usd=spent_usd, from_notes=from_notes,
                         changes=(event.boundary_uuid,))
    key = change_key(event)
    if isinstance(event, Snipped) and key is not None:
        return UndoPoint("snip", key, event.trigger, tuple(before), after_uuids, changes=(key,))
    if isinstance(event, Cleared) and key is not None:
        return UndoPoint("clearing", key, event.trigger, tuple(before), after_uuids,
                         uncleared=frozenset(event.replacements), changes=(key,))
    return None


def change_key(event: Event) -> str | None:
    """The key of a change an undo can take back (None for any other event)."""
    if isinstance(event, Compacted):
        return event.boundary_uuid
    if isinstance(event, Snipped):
        return event.marker_uuid
    if isinstance(event, Cleared) and event.replacements:
        return next(iter(event.replacements))
    return None


def merged(earlier: UndoPoint, later: UndoPoint) -> UndoPoint:
    """Two changes made in one step (a snip and a clearing before one call): undone together."""
    return dataclasses.replace(earlier, after_uuids=later.after_uuids, uncleared=earlier.uncleared | later.uncleared,
                               spent_usd=earlier.spent_usd + later.spent_usd, changes=earlier.changes + later.changes)


@dataclass(frozen=True)
class Restored:
    """The live context an undo leaves."""

    messages: tuple[Message, ...]
    cleared: Mapping[str, str]
    since: tuple[str, ...]
    """The messages added after the change, kept after the restored ones."""
    thinking: ThinkingCleared | None
    """The thinking of the turns since the change, dropped (append-only)."""


def restore(point: UndoPoint, live: Sequence[Message], cleared: Mapping[str, str], *,
            append_only: bool) -> Restored:
    """The live context from before `point`'s change, then the messages added since, in order;
    the results it cleared are whole again. Append-only, the thinking of the messages added
    since goes: it was written after a prefix the undo takes away."""
    known = point.after_uuids | {m.uuid for m in point.before}
    # What the API billed for the messages since was another prefix: they no longer anchor the count.
    since = [without_usage(m) for m in live if m.uuid not in known]
    messages = [*point.before, *since]
    thinking = None
    if append_only and since:
        messages, thinking = drop_thinking_from(messages, len(point.before), UNDO_TRIGGER)
    return Restored(tuple(messages), {k: v for k, v in cleared.items() if k not in point.uncleared},
                    tuple(m.uuid for m in since), thinking)


def undone_event(point: UndoPoint, restored: Restored, tokens_before: int, tokens_after: int) -> Undone:
    """What the transcript keeps of an undo: enough to rebuild the live context from the messages
    as first written."""
    thinned = tuple(m.uuid for m in restored.messages if m.role == "assistant" and not has_thinking(m))
    return Undone(point.kind, point.key, tuple(m.uuid for m in restored.messages), dict(restored.cleared), thinned,
                  restored.since, tokens_before, tokens_after, round(point.spent_usd, 6))


def replay_undo(event: Undone, written: Mapping[str, Message]) -> tuple[list[Message], int]:
    """The live context an `Undone` record leaves, from the messages as first written; with how
    many it names that the transcript does not hold."""
    thinned, since = set(event.thinned_uuids), set(event.since_uuids)
    live = [without_thinking(written[u]) if u in thinned else written[u] for u in event.live_uuids if u in written]
    live = [without_usage(m) if m.uuid in since else m for m in live]
    return live, len(event.live_uuids) - len(live)


def kept_event(point: UndoPoint) -> UndoKept:
    """What the transcript keeps of an undo point: the messages before the change by uuid (the
    transcript holds them as first written), with which of them had lost their thinking or usage."""
    before = point.before
    prefix = {"system": point.prefix[0], "tools": list(point.prefix[1])} if point.prefix is not None else None
    return UndoKept(point.kind, point.key, point.changes or (point.key,), point.trigger,
                    tuple(m.uuid for m in before),
                    tuple(m.uuid for m in before if m.role == "assistant" and not has_thinking(m)),
                    tuple(m.uuid for m in before if m.role == "assistant" and m.usage is None),
                    tuple(sorted(point.after_uuids)), tuple(sorted(point.uncleared)), round(point.spent_usd, 6),
                    point.from_notes, prefix)


def points_from_transcript(records: Iterable[Mapping[str, Any]]) -> tuple[UndoPoint, ...]:
    """The undo points a resumed session has, oldest first: the changes the transcript records
    (each compaction, snip and clearing, less those undone), each with its kept point, as far
    back as they run unbroken from the last change. A transcript written before points were kept
    has none: nothing to undo."""
    raw: dict[str, Mapping[str, Any]] = {}
    entries: list[str | UndoKept] = []  # a change's key until its point is read
    for record in records:
        if record.get("type") == "message" and isinstance(record.get("uuid"), str):
            raw[record["uuid"]] = record  # as the live context was rebuilt from it (fold_transcript)
            continue
        if record.get("type") != "event" or record.get("event") not in (
                "compacted", "snipped", "cleared", "server_compacted", "undone", UndoKept.name):
            continue
        try:
            event = event_from_json(record)
        except (KeyError, TypeError, ValueError):
            entries.append("")  # a change that cannot be read: nothing before it can be undone
            continue
        if isinstance(event, ServerCompacted):  # the API's own summary replaced what was sent
            entries.clear()
        elif isinstance(event, Undone):
            entries = entries[:-1]
        elif isinstance(event, UndoKept):
            entries = _kept(entries, event)
        elif (key := change_key(event)) is not None:
            entries = [*entries, key][-MAX_UNDO_POINTS:]
    run: list[UndoKept] = []
    for entry in reversed(entries):
        if not isinstance(entry, UndoKept):
            break
        run.insert(0, entry)
    points = []
    for kept in run:
        point = _point_of_kept(kept, raw)
        if point is None:
            return ()
        points.append(point)
    return tuple(points)


def _kept(entries: list[str | UndoKept], kept: UndoKept) -> list[str | UndoKept]:
    """`entries` with the changes `kept` takes back replaced by it (unchanged if one is missing)."""
    at = [i for i, e in enumerate(entries) if isinstance(e, str) and e in kept.changes]
    if len(at) != len(set(kept.changes)):
        return entries
    return [kept if i == at[0] else e for i, e in enumerate(entries) if i == at[0] or i not in at]


def _point_of_kept(kept: UndoKept, raw: Mapping[str, Mapping[str, Any]]) -> UndoPoint | None:
    """The point a kept record stands for, its messages rebuilt as they were before the change
    (None when the transcript lacks one of them)."""
    thinned, unanchored = set(kept.thinned_uuids), set(kept.unanchored_uuids)
    before = []
    for uuid in kept.before_uuids:
        if uuid not in raw:
            return None
        try:
            message = Message.from_json(raw[uuid])
        except (KeyError, TypeError, ValueError):
            return None
        message = without_thinking(message) if uuid in thinned else message
        before.append(without_usage(message) if uuid in unanchored else message)
    prefix = kept.prefix
    bound = (str(prefix["system"]), tuple(prefix["tools"])) if isinstance(prefix, Mapping) else None
    return UndoPoint(kept.kind, kept.key, kept.trigger, tuple(before), frozenset(kept.after_uuids),
                     frozenset(kept.uncleared), kept.spent_usd, kept.from_notes, bound, tuple(kept.changes))
