"""What the member reads about the memories waiting for their review: `%memory pending, keep,
edit, discard` (their own, with `memory_review = 'ask'`) and `review, accept, reject` (those
extraction proposed for the team), and the panel's list of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctx_magic.memory.record import shown_text
from ctx_magic.ui.cards import count

if TYPE_CHECKING:
    from ctx_magic.notebook.memory_link import MemoryLink


class ReviewReplies:
    def __init__(self, link: MemoryLink) -> None:
        self._link = link

    def pending(self) -> str:
        """Every memory extraction found that waits for this member: their own and the team's."""
        waiting = self._link.manager.review.pending()
        if not waiting:
            return ("No memories wait for review (with CtxMagic.memory_review = 'ask', what extraction finds "
                    "waits here).")
        lines = [f"{count(len(waiting), 'memory', 'memories')} found by extraction, waiting for you (in no prompt "
                 "until kept): %memory keep ID (or all), %memory edit ID NEW TEXT, %memory discard ID (or all)."]
        lines += [f"- {m.id} [{m.type}{', for the team' if m.scope == 'team' else ''}"
                  f"{'' if m.decay else ', no decay'}]: {shown_text(m)}" for m in waiting]
        return "\n".join(lines)

    def keep(self, ids: Sequence[str]) -> str:
        kept = self._link.manager.review.keep(ids)
        if not kept:
            return "No memories wait for review."
        lines = "\n".join(f"- {m.id}{' (for the team)' if m.scope == 'team' else ''}: {shown_text(m)}" for m in kept)
        return f"Kept {count(len(kept), 'memory', 'memories')}:\n{lines}"

    def edit(self, memory_id: str, text: str) -> str:
        kept = self._link.manager.review.edit(memory_id, text)
        where = " for the team" if kept.scope == "team" else ""
        return f"Kept{where} as {kept.id}: {shown_text(kept)}"

    def discard(self, ids: Sequence[str]) -> str:
        dropped = self._link.manager.review.discard(ids)
        if not dropped:
            return "No memories wait for review."
        return f"Discarded {count(len(dropped), 'pending memory', 'pending memories')}: " + ", ".join(
            m.id for m in dropped) + "."

    def review(self) -> str:
        """The team memories extraction proposed, waiting for this member's accept."""
        manager = self._link.manager
        if not manager.team_on:
            return f"No team memory: {manager.team_problem()}."
        waiting = manager.review.proposed()
        if not waiting:
            return "No team memories wait for review (extraction proposes them when CtxMagic.team_review is on)."
        lines = [f"{count(len(waiting), 'team memory', 'team memories')} proposed by extraction, waiting for you: "
                 "%memory accept ID (or all) adds one to the team's folder under your name, %memory reject ID "
                 "(or all) drops it."]
        lines += [f"- {m.id} [{m.type}{'' if m.decay else ', no decay'}]: {shown_text(m)}" for m in waiting]
        return "\n".join(lines)

    def accept(self, ids: Sequence[str]) -> str:
        accepted = self._link.manager.review.accept(ids)
        if not accepted:
            return "No team memories wait for review."
        lines = "\n".join(f"- {m.id}: {shown_text(m)}" for m in accepted)
        return (f"Accepted {count(len(accepted), 'memory', 'memories')} into the folder of team "
                f"{self._link.manager.settings.team!r}:\n{lines}")

    def reject(self, ids: Sequence[str]) -> str:
        rejected = self._link.manager.review.reject(ids)
        if not rejected:
            return "No team memories wait for review."
        return f"Rejected {count(len(rejected), 'proposed team memory', 'proposed team memories')}: " + ", ".join(
            m.id for m in rejected) + "."

    def pending_rows(self) -> list[dict[str, Any]]:
        """What the panel lists as waiting for review, each with where it goes once kept."""
        return [{"id": m.id, "text": shown_text(m), "type": m.type, "scope": m.scope}
                for m in self._link.manager.review.pending()]
