"""Rebuild the live context from a transcript (resume).

The transcript is a log: every message as first written, and the durable events that changed
the live context. Folding it gives back exactly the live list the session had: compactions
replace it, snips cut it, and every persisted or cleared result gets the very bytes it had.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ctx_magic.context.autocompact import without_usage
from ctx_magic.context.invariants import without_empty
from ctx_magic.context.reactive import strip_images
from ctx_magic.context.state import ContextState, apply_decisions
from ctx_magic.context.thinking import without_thinking
from ctx_magic.context.undo import replay_undo
from ctx_magic.events import (
    DURABLE_EVENTS,
    Cleared,
    Compacted,
    ImagesStripped,
    Persisted,
    ServerCompacted,
    Snipped,
    ThinkingCleared,
    Undone,
    event_from_json,
)
from ctx_magic.messages import Message


def fold_transcript(
    records: Iterable[Mapping[str, Any]], saved: ContextState | None = None
) -> tuple[list[Message], ContextState, list[str]]:
    """Replay transcript records into (live messages, engine state, problems found).

    `saved` is the state.json snapshot: it brings back what the log does not carry (the
    learned correction, tokens freed since the last response). Records that refer to unknown
    messages are reported, never fatal: the live list is rebuilt from what can be trusted.
    """
    by_uuid: dict[str, Message] = {}
    written: dict[str, Message] = {}  # as first written: what an undo restores
    live: list[Message] = []
    persisted: dict[str, str] = {}
    persisted_paths: dict[str, str] = {}
    cleared: dict[str, str] = {}
    problems: list[str] = []
    for record in records:
        kind = record.get("type")
        if kind == "message":
            message = Message.from_json(record)
            by_uuid[message.uuid] = written[message.uuid] = message
            live.append(message)
        elif kind == "event" and record.get("event") in DURABLE_EVENTS:
            try:
                event = event_from_json(record)
            except (KeyError, TypeError, ValueError) as error:
                problems.append(f"unreadable {record.get('event')} event skipped ({error})")
                continue
            if isinstance(event, Persisted):
                persisted[event.tool_use_id] = event.replacement
                persisted_paths[event.tool_use_id] = event.path
            elif isinstance(event, Cleared):
                cleared.update(event.replacements)
            elif isinstance(event, Snipped):
                live = _apply_snip(live, event, by_uuid, problems)
            elif isinstance(event, ImagesStripped):
                touched = set(event.message_uuids)
                stripped, _ = strip_images([m for m in live if m.uuid in touched])
                replaced = {m.uuid: m for m in stripped}
                live = [replaced.get(m.uuid, m) for m in live]
                by_uuid.update(replaced)
            elif isinstance(event, ThinkingCleared):
                touched = set(event.message_uuids)
                thinned = {m.uuid: without_thinking(m) for m in live if m.uuid in touched}
                live = [thinned.get(m.uuid, m) for m in live]
                by_uuid.update(thinned)
            elif isinstance(event, (Compacted, ServerCompacted)):
                missing = [u for u in event.live_uuids if u not in by_uuid]
                if missing:
                    problems.append(f"compaction refers to {len(missing)} unknown messages")
                keep_usage = isinstance(event, ServerCompacted)  # the server's answer still anchors the count
                live = [by_uuid[u] if keep_usage else without_usage(by_uuid[u]) for u in event.live_uuids
                        if u in by_uuid]
            elif isinstance(event, Undone):
                live, missing_count = replay_undo(event, written)
                if missing_count:
                    problems.append(f"an undo refers to {missing_count} unknown messages")
                by_uuid.update({m.uuid: m for m in live})
                cleared = dict(event.cleared)
    state = dataclasses.replace(
        saved or ContextState(),
        decided=frozenset(persisted),
        persisted=persisted,
        persisted_paths=persisted_paths,
        cleared=cleared,
    )
    live, dropped = without_empty(live)
    if dropped:
        problems.append(f"{dropped} empty {'reply was' if dropped == 1 else 'replies were'} left out of the live "
                        "context (an earlier version stored them; the API refuses empty messages)")
    return [apply_decisions(m, state) for m in live], state, problems


def _apply_snip(
    live: list[Message], event: Snipped, by_uuid: Mapping[str, Message], problems: list[str]
) -> list[Message]:
    removed = set(event.removed_uuids)
    marker = by_uuid.get(event.marker_uuid)
    positions = [i for i, m in enumerate(live) if m.uuid in removed]
    if marker is None or not positions:
        problems.append("a snip refers to messages that are not live; ignored")
        return live
    first = positions[0]
    kept = [m for m in live if m.uuid not in removed and m.uuid != marker.uuid]
    head = [m for m in live[:first] if m.uuid != marker.uuid]
    return [*head, marker, *kept[len(head):]]


def compactions(records: Iterable[Mapping[str, Any]]) -> tuple[list[Compacted], set[str]]:
    """The compactions a transcript records (the boundaries the status lists, at resume), and
    the boundaries of those undone since."""
    found, undone = [], set()
    for record in records:
        if record.get("type") != "event" or record.get("event") not in ("compacted", Undone.name):
            continue
        try:
            event = event_from_json(record)
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(event, Compacted):
            found.append(event)
        elif isinstance(event, Undone) and event.kind == "compaction":
            undone.add(event.key)
    return found, undone
