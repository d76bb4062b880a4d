"""The member's review of what extraction found: their own memories waiting (with
`memory_review = 'ask'`) and the team memories it proposed, kept, edited or dropped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ctx_magic.errors import CtxMagicError
from ctx_magic.memory.store import Memory, MemoryStore, Scope

if TYPE_CHECKING:
    from ctx_magic.memory.manager import MemoryManager


class PendingReview:
    """The pending folders of one manager's storage folder, and what the member does with them."""

    def __init__(self, manager: MemoryManager) -> None:
        self._manager = manager

    def pending(self, scope: Scope | None = None) -> list[Memory]:
        """The memories waiting for this member's review, oldest first; each one's `scope` is where
        it goes once kept (`scope`: only those)."""
        waiting = [m for store in self._manager.pending_stores() if scope in (None, store.scope) for m in store.all()]
        return sorted(waiting, key=lambda m: (m.created, m.id))

    def proposed(self) -> list[Memory]:
        """The team memories waiting for this member's review, oldest first."""
        return self.pending("team") if self._manager.team_on else []

    def _pick(self, ids: Sequence[str], scope: Scope | None) -> list[Memory]:
        waiting = self.pending(scope)
        if list(ids) == ["all"]:
            return waiting
        by_id = {m.id: m for m in waiting}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            if scope == "team":
                raise CtxMagicError(f"No proposed team memory with id {unknown[0]!r} (see %memory review).")
            raise CtxMagicError(f"No pending memory with id {unknown[0]!r} (see %memory pending).")
        return [by_id[i] for i in dict.fromkeys(ids)]

    def _pending_store(self, memory: Memory) -> MemoryStore:
        proposals = self._manager.proposals
        if memory.scope == "team" and proposals is not None:
            return proposals
        return self._manager.own_pending

    def _keep_one(self, memory: Memory, text: str | None = None) -> Memory:
        """One pending memory into where it goes (the team's, signed by this member), then out of
        the pending folder."""
        manager = self._manager
        text = memory.text if text is None else text
        if memory.scope == "team":
            kept = manager.require_team().add(text, now=manager.clock(), type=memory.type, decay=memory.decay,
                                              source_session=memory.source_session, author=manager.member)
        else:
            kept = manager.project.add(text, now=manager.clock(), type=memory.type, decay=memory.decay,
                                       source_session=memory.source_session)
        self._pending_store(memory).forget(memory.id)
        return kept

    def keep(self, ids: Sequence[str], *, scope: Scope | None = None) -> list[Memory]:
        """Pending memories (or "all"; `scope`: only those going there) into their stores."""
        if scope == "team":
            self._manager.require_team()
        return [self._keep_one(memory) for memory in self._pick(ids, scope)]

    def edit(self, memory_id: str, text: str) -> Memory:
        """A pending memory kept with the member's words instead of extraction's (checked for
        secrets like any other)."""
        text = " ".join(text.split())
        if not text:
            raise CtxMagicError("%memory edit needs the id of a pending memory and its new text.")
        [memory] = self._pick([memory_id], None)
        return self._keep_one(memory, text)

    def discard(self, ids: Sequence[str], *, scope: Scope | None = None) -> list[Memory]:
        """Pending memories (or "all") dropped: they never reach any store."""
        if scope == "team":
            self._manager.require_team()
        dropped = self._pick(ids, scope)
        for store in self._manager.pending_stores():
            gone = [m.id for m in dropped if m.scope == store.scope]
            if gone:
                store.apply(remove=gone)
        return dropped

    def accept(self, ids: Sequence[str]) -> list[Memory]:
        """Proposed team memories (or "all") into the team's folder, signed by this member."""
        return self.keep(ids, scope="team")

    def reject(self, ids: Sequence[str]) -> list[Memory]:
        """Proposed team memories (or "all") dropped: they never reach the team."""
        return self.discard(ids, scope="team")
