"""What each engine event changes in the context panel's synced traits (the figures, the model
calls, the timeline of changes to the context, the saved outputs, the cell marks).

A plain object, no widget: `EventFold.changes` returns trait name -> new value, built on the
traits as they will be once the panel's pending changes are set (`now`); the panel holds,
throttles and renders them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ctx_magic.events import (
    FOLD_TRIGGER,
    BreakerReset,
    CacheBroke,
    Cleared,
    Compacted,
    CompactionFailedEvent,
    ContextMeasured,
    Event,
    Persisted,
    ServerCompacted,
    ServerEdited,
    Snipped,
    Status,
    ThinkingCleared,
    Undone,
    UsageUpdated,
)
from ctx_magic.figures import ContextFigures
from ctx_magic.ui.cards import count
from ctx_magic.ui.marks import CellIndex, CellRef, with_marks

CLEARING_TRIGGERS = ("idle", "pressure")  # a Cleared of the model or the user is a snip of results
TRIGGER_MARK_WORDS = {"auto": "an automatic", "manual": "a", "model": "the agent's", "reactive": "a recovery",
                      "session-memory": "a", "server": "the API's own"}
CLEARED_WHY = {"idle": "it was cleared after an idle gap", "pressure": "it was cleared to make room",
               "model": "the agent snipped it", "user": "it was cleared at your request"}


def context_traits(c: ContextFigures) -> dict[str, Any]:
    """The engine's figures under the panel's trait names."""
    traits = {"tokens": c.tokens, "threshold": c.threshold, "warning": c.warning, "blocking": c.blocking,
              "window": c.window, "zone": c.zone, "percent_left": c.percent_left, "messages": c.messages,
              "live_results": c.live_results, "cleared_results": c.cleared_results,
              "persisted_results": c.persisted_results}
    if c.composition is not None:
        traits["composition"] = c.composition.to_json()
    return traits


class EventFold:
    """Turns one event into the changes of the panel's traits."""

    def __init__(self, now: Callable[[str], Any], cells: CellIndex, kernel: str | None) -> None:
        self._now = now
        """A trait as it will be after the panel's pending changes."""
        self.cells = cells
        """Which notebook cells an event's tool results or messages stand for."""
        self.kernel = kernel
        """This kernel process: marks of cells without an id are kept for its cells only."""

    def changes(self, event: Event) -> dict[str, Any]:
        """Trait name -> new value for `event`; empty when the panel does not show it."""
        if isinstance(event, ContextMeasured):
            return context_traits(event.figures)
        if isinstance(event, UsageUpdated):
            return self._usage(event)
        if isinstance(event, Status):
            return {"status": event.state}
        if isinstance(event, CacheBroke):
            return {"cache_breaks": [*self._now("cache_breaks"), event.summary()]}
        if isinstance(event, (Compacted, ServerCompacted)):
            return self._compacted(event)
        if isinstance(event, Undone):
            return {"timeline": undone_timeline(self._now("timeline"), event)}
        if isinstance(event, ServerEdited):
            cleared = sum(int(e.get("cleared_tool_uses", 0) or 0) for e in event.applied_edits)
            thinking = sum(int(e.get("cleared_thinking_turns", 0) or 0) for e in event.applied_edits)
            return self._change({"kind": "clearing", "trigger": "server", "results": cleared, "thinking": thinking,
                                 "tokens_freed": event.tokens_cleared},
                                f"the API cleared {event.tokens_cleared:,} tokens from the request")
        if isinstance(event, ThinkingCleared):
            return self._change({"kind": "clearing", "trigger": f"thinking-{event.trigger}", "results": 0,
                                 "thinking": event.blocks, "tokens_freed": event.tokens_freed},
                                f"cleared {event.blocks} thinking block{'' if event.blocks == 1 else 's'}")
        if isinstance(event, Cleared):
            return self._cleared(event)
        if isinstance(event, Snipped) and event.cells:
            return self._folded(event)
        if isinstance(event, Snipped):
            return self._change({"kind": "snip", "trigger": event.trigger, "messages": event.count,
                                 "tokens_freed": event.tokens_freed}, f"snipped {event.count:,} messages")
        if isinstance(event, Persisted):
            return self._persisted(event)
        if isinstance(event, CompactionFailedEvent):
            return {"breaker_open": event.breaker_open}
        if isinstance(event, BreakerReset):
            return {"breaker_open": False}
        return {}

    def _usage(self, event: UsageUpdated) -> dict[str, Any]:
        usage = event.usage
        call = {"prompt": usage.prompt_tokens, "read": usage.cache_read_input_tokens,
                "write": usage.cache_creation_input_tokens, "output": usage.output_tokens, "usd": event.cost_usd}
        changes: dict[str, Any] = {"calls": [*self._now("calls"), call]}
        if event.totals:  # a replayed call (from the transcript) has no totals: the status has them
            cost = {**self._now("cost"), "session_usd": event.totals.get("cost_usd", 0.0)}
            changes.update(spend=dict(event.totals), cache_hit_ratio=event.cache_hit_ratio, cost=cost)
        return changes

    def _change(self, entry: dict[str, Any], label: str, timeline: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
        """The timeline (the panel's, unless given) with one more change, at the current call."""
        timeline = self._now("timeline") if timeline is None else timeline
        entry = {**entry, "key": f"{entry['kind']}-{len(timeline)}", "at": len(self._now("calls")),
                 "label": label}
        return {"timeline": [*timeline, entry]}

    def _folded(self, event: Snipped) -> dict[str, Any]:
        """Cells folded at one idle break come as a fold per run of cells: one change shows them all."""
        timeline = self._now("timeline")
        cells, messages, freed = event.cells, event.count, event.tokens_freed
        last = timeline[-1] if timeline else {}
        if last.get("folded_cells") and last.get("at") == len(self._now("calls")):
            cells, messages = cells + last["folded_cells"], messages + last["messages"]
            freed, timeline = freed + last["tokens_freed"], timeline[:-1]
        return self._change({"kind": "snip", "trigger": FOLD_TRIGGER, "folded_cells": cells, "messages": messages,
                             "tokens_freed": freed}, f"folded {count(cells, 'old cell')}", timeline)

    def _compacted(self, event: Compacted | ServerCompacted) -> dict[str, Any]:
        if isinstance(event, ServerCompacted):
            trigger, boundary, reason, rebound = ("server", event.message_uuid,
                                                  "the API compacted the conversation itself", False)
        else:
            trigger, boundary, reason, rebound = event.trigger, event.boundary_uuid, event.reason, event.rebound
        entry = {"kind": "compaction", "key": f"compaction-{boundary}", "at": len(self._now("calls")),
                 "label": f"{trigger} compaction: {event.tokens_before:,} → {event.tokens_after:,} tokens",
                 "trigger": trigger, "reason": reason, "tokens_before": event.tokens_before,
                 "tokens_after": event.tokens_after, "messages": event.messages_summarized, "summary": event.summary,
                 "boundary_uuid": boundary, "replaced": list(event.summarized_uuids),
                 "rebound": rebound, "audit": event.audit.text if event.audit is not None else ""}
        refs = self.cells.in_messages(event.summarized_uuids)
        why = f"it was summarized by {TRIGGER_MARK_WORDS.get(trigger, 'a')} compaction"
        return {"timeline": [*self._now("timeline"), entry], "tokens": event.tokens_after, "breaker_open": False,
                "cell_marks": self._marks(refs, "summarized", why, entry["key"])}

    def _cleared(self, event: Cleared) -> dict[str, Any]:
        refs = self.cells.results(event.tool_use_ids)
        kind = "clearing" if event.trigger in CLEARING_TRIGGERS else "snip"
        n = len(event.replacements)
        changes = self._change({"kind": kind, "trigger": event.trigger, "results": n,
                                "tokens_freed": event.tokens_freed, "cells": sorted(r.count for r in refs.values())},
                               f"cleared {n} tool result{'' if n == 1 else 's'}")
        key = changes["timeline"][-1]["key"]
        why = CLEARED_WHY.get(event.trigger, "it was cleared")
        changes["cell_marks"] = self._marks(refs.values(), "cleared", why, key)
        return changes

    def _persisted(self, event: Persisted) -> dict[str, Any]:
        key = f"saved-{event.tool_use_id}"
        persisted = [*self._now("persisted"), {"key": key, "tool_use_id": event.tool_use_id, "path": event.path,
                                                "chars": event.original_chars, "preview": event.replacement}]
        refs = self.cells.results([event.tool_use_id]).values()
        why = f"its output ({event.original_chars:,} characters) was saved to disk"
        return {"persisted": persisted, "cell_marks": self._marks(refs, "persisted", why, key)}

    def _marks(self, refs: Iterable[CellRef], kind: str, why: str, card: str) -> dict[str, Any]:
        return with_marks(self._now("cell_marks"), refs, kind=kind, why=why, card=card, current_kernel=self.kernel)


def undone_timeline(timeline: Sequence[dict[str, Any]], event: Undone) -> list[dict[str, Any]]:
    """The timeline with the change an undo took back marked undone: a compaction by its boundary,
    a snip or a clearing as the newest of its kind not undone yet."""
    if event.kind == "compaction":
        at = next((i for i, e in enumerate(timeline) if e.get("key") == f"compaction-{event.key}"), None)
    else:
        at = next((i for i in range(len(timeline) - 1, -1, -1) if timeline[i].get("kind") in ("snip", "clearing")
                   and not str(timeline[i].get("trigger", "")).startswith(("thinking", "server"))
                   and not timeline[i].get("undone")), None)
    if at is None:
        return list(timeline)
    return [*timeline[:at], {**timeline[at], "undone": True}, *timeline[at + 1:]]
