"""Undo as the session carries it out: the changes it can take back, watched as they happen,
and `undo_last`, which restores the live context from before the last one (context/undo.py
decides what that is) and records it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.request import RequestFrame
from ctx_magic.context.index import measure
from ctx_magic.context.undo import MAX_UNDO_POINTS, UndoPoint, kept_event, merged, point_of, restore, undone_event
from ctx_magic.errors import CtxMagicError, StorageError
from ctx_magic.events import Cleared, Compacted, Event, ServerCompacted, Snipped, Status, UndoKept, Undone

if TYPE_CHECKING:
    from ctx_magic.agent.session import Session


class UndoHistory:
    """The compactions, snips and clearings of this session an undo can take back, newest last.

    It watches the session's events: a compaction's is seen before the live context is swapped
    (the messages it replaces are still live), a snip's or a clearing's after (the live context
    keeps the messages from before the change). What a summary cost is the spend between the
    'compacting' status and the compaction.

    Each point is also kept in the transcript (`keep`, from the main thread: a clearing the idle
    timer made is seen on its thread), so a resumed session can undo what it could before."""

    def __init__(self, live: LiveContext, frame: RequestFrame, spent: Callable[[], float],
                 keep: Callable[[UndoKept], None]) -> None:
        self._live = live
        self._frame = frame
        self._spent = spent
        self._keep = keep
        self._spent_at_start = 0.0
        self.points: list[UndoPoint] = []
        self._unkept: list[UndoPoint] = []
        """Points not yet in the transcript, oldest first."""

    def saw(self, event: Event) -> None:
        if isinstance(event, Status) and event.state == "compacting":
            self._spent_at_start = self._spent()
        elif isinstance(event, Compacted):
            point = point_of(event, self._live.messages, (), self._spent() - self._spent_at_start)
            # Seen before the frame lets go of the prefix the conversation was bound to.
            self._push(point and dataclasses.replace(point, prefix=self._frame.bound), merge=False)
        elif isinstance(event, (Snipped, Cleared)):
            self._push(point_of(event, self._live.previous, self._live.messages), merge=True)
        elif isinstance(event, ServerCompacted):  # the API's own summary replaced what was sent: nothing to restore
            self.points, self._unkept = [], []

    def rebind(self, point: UndoPoint) -> Callable[[], None]:
        """An undone compaction's conversation goes on under the system prompt and tools it was
        bound to: the thinking it brings back was written after them. Returns what puts the
        frame's binding back, for an undo that does not go ahead."""
        bound = self._frame.bound
        if point.kind == "compaction" and point.prefix is not None:
            self._frame.rebind(point.prefix)
        return lambda: self._frame.rebind(bound)

    def _push(self, point: UndoPoint | None, *, merge: bool) -> None:
        if point is None:
            return
        last = self.points[-1] if self.points else None
        if merge and last is not None and last.kind != "compaction" and last.before is point.before:
            self.points[-1] = merged(last, point)  # one step made both (a snip, then a clearing)
            self._unkept = [p for p in self._unkept if p is not last]
            point = self.points[-1]
        else:
            self.points = [*self.points, point][-MAX_UNDO_POINTS:]
        self._unkept = [*self._unkept, point]

    def keep(self) -> None:
        """Write the points not yet kept to the transcript (turn ends, and before an undo is recorded).
        On a full disk they wait for the next time: an undo before a restart still works meanwhile."""
        while self._unkept:
            try:
                self._keep(kept_event(self._unkept[0]))
            except StorageError:
                return
            self._unkept = self._unkept[1:]

    def resumed(self, points: tuple[UndoPoint, ...]) -> None:
        """The points a resumed session's transcript kept (context/undo.py `points_from_transcript`)."""
        self.points, self._unkept = list(points), []

    def forget_last(self) -> None:
        """The newest point was undone: it cannot be taken back twice."""
        self.points = self.points[:-1]


@dataclasses.dataclass(frozen=True)
class UndoResult:
    point: UndoPoint
    event: Undone
    dropped_thinking: int
    """Thinking blocks of the turns since the change, dropped (append-only: their prefix is gone)."""


def undo_last(session: Session, key: str | None = None) -> UndoResult:
    """Take back the last compaction, snip or clearing (`key`: only if it is that change), while the
    context it restores fits the window (under the blocking limit); CtxMagicError in one line when
    there is none, it is another or it does not fit. The next automatic compaction waits one turn,
    so the next request carries exactly the restored messages."""
    history = session.undo
    if not history.points:
        raise CtxMagicError("There is no compaction, snip or clearing to undo in this session.")
    point = history.points[-1]
    if key is not None and all(p.key != key for p in history.points):
        raise CtxMagicError("This change can no longer be undone (it was undone already, or it is older than "
                            "the changes an undo keeps).")
    if key is not None and point.key != key:
        raise CtxMagicError(f"Only the last change can be undone, and it is {point.describe()}: undo that first.")
    put_back = history.rebind(point)  # measured with the tools and system prompt the next request sends
    setup, live = session.setup(), session.live
    restored = restore(point, live.messages, live.state.cleared, append_only=setup.context.append_only)
    state = dataclasses.replace(live.state, cleared=restored.cleared, indexed=0, indexed_uuid=None, compactable=(),
                                positions={}, freed_anchor=None, freed_tokens=0)
    tokens = measure(restored.messages, state, setup.overhead_tokens).tokens
    limit = setup.context.thresholds.blocking
    if tokens >= limit:
        put_back()
        raise CtxMagicError(f"Undoing {point.describe()} does not fit: the context would be {tokens:,} tokens, "
                            f"{tokens - limit + 1:,} over the window's limit of {limit:,}; nothing was changed.")
    event = undone_event(point, restored, live.tokens(setup.overhead_tokens), tokens)
    history.keep()  # the transcript holds every point before the undo that takes one back
    session.record(event)
    live.replace(restored.messages, state)
    history.forget_last()
    if point.kind == "compaction":
        session.compaction_undone(point.key)
    if restored.thinking is not None:
        session.record(restored.thinking)
    if tokens >= setup.context.thresholds.autocompact:
        session.defer_compaction()
    return UndoResult(point, event, restored.thinking.blocks if restored.thinking is not None else 0)
