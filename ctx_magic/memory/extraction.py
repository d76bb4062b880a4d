"""Extraction: the durable facts of a session into long-term memories, on demand and at the end
of a session with something to carry over (in a thread that reads a snapshot only)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.plugins import Plugins
from ctx_magic.agent.side_calls import SIDE_CALL_MAX_OUTPUT, SideCalls
from ctx_magic.context.compaction_state import CompactionState
from ctx_magic.memory.longterm import MemoryTargets, TeamShare, extract_memories
from ctx_magic.memory.secrets import refusal_line
from ctx_magic.memory.store import Memory
from ctx_magic.messages import Message
from ctx_magic.store.session import SessionDir

if TYPE_CHECKING:
    from ctx_magic.agent.session import Session
    from ctx_magic.memory.manager import MemoryManager

EXTRACTED_KEY = "memories_extracted"  # per-session count, kept in state.json (at most 20 per session)
# The last message an extraction read, kept in state.json: a session that ends (or ends again,
# resumed) with nothing sent after it has taught nothing the call could find, and is not asked again.
READ_THROUGH_KEY = "memories_read_through"
# 20 memories of a sentence or two each (the extraction's cap): output is billed at five times input, so no more.
EXTRACTION_MAX_OUTPUT = 2_000
# Extraction at session end, for a session with something to carry over: one that compacted, or whose
# conversation reached the size at which Claude Code starts keeping session notes (10,000 tokens).
# A shorter one holds little a person has not said through %memory add (or %memory extract), and
# the call (the conversation read, the prompt written, up to 2,000 output tokens at five times
# input) was 5-8 % of a short session's bill in the replay benchmark. `%memory extract` always runs.
EXTRACT_FROM_TOKENS = 10_000


class SessionTextModel:
    """A session's side calls as the memory package's TextModel."""

    def __init__(self, side_calls: SideCalls, max_tokens: int = SIDE_CALL_MAX_OUTPUT) -> None:
        self.side_calls = side_calls
        self.max_tokens = max_tokens

    def complete(self, messages: Sequence[Message], prompt: str) -> str:
        return self.side_calls.text(messages, prompt, purpose="memory", max_tokens=self.max_tokens)


@dataclass(frozen=True)
class SessionSource:
    """The parts of a session an extraction reads and writes: its conversation, its side calls
    (the model that extracts), its plug-in state (how many memories it gave so far) and the save
    of its state.json."""

    session_id: str
    live: LiveContext
    side_calls: SideCalls
    plugins: Plugins
    store: SessionDir
    state: Callable[[], dict[str, Any]]
    """What state.json keeps of the session, saved once a background extraction has counted."""

    @classmethod
    def of(cls, session: Session) -> SessionSource:
        return cls(session.session_id, session.live, session.side_calls, session.plugins, session.store,
                   session.state_json)


def extraction_due(live: LiveContext, compaction: CompactionState, tokens: Callable[[], int], *,
                   read_through: str | None = None) -> bool:
    """Whether the end of a session calls for an extraction (see EXTRACT_FROM_TOKENS): its live
    context, its compactions, and its size (`tokens`, asked last: it may fail). Never when an
    earlier extraction read the conversation up to its last message (`read_through`): nothing
    was said or done since, and the call would cost its whole price to find nothing new."""
    sent = [m for m in live.messages if m.sent]
    if not any(m.role == "user" for m in sent) or (read_through is not None and sent[-1].uuid == read_through):
        return False
    return bool(compaction.standing) or tokens() >= EXTRACT_FROM_TOKENS


class Extraction:
    """One manager's extractions: where they store, what waits for review, what they refused."""

    def __init__(self, manager: MemoryManager) -> None:
        self._manager = manager
        self.last_refused: str | None = None
        """The last extraction's line about the memories it refused as secrets, or None."""

    def run(self, source: SessionSource, messages: Sequence[Message] | None = None) -> list[Memory]:
        """Store the session's durable facts now; counts toward its 20."""
        snapshot = [m for m in (messages if messages is not None else source.live.messages) if m.sent]
        if not any(m.role == "user" for m in snapshot):
            return []
        already = int(source.plugins.recalled(EXTRACTED_KEY, 0))
        refused: list[str] = []
        manager = self._manager
        team = manager.team
        review_team = manager.settings.team_review or manager.asks
        share = None if team is None else TeamShare(team, manager.member, manager.proposals if review_team else None)
        targets = MemoryTargets(manager.project, manager.own_pending if manager.asks else None, share)
        added = extract_memories(SessionTextModel(source.side_calls, EXTRACTION_MAX_OUTPUT), snapshot, targets,
                                 now=manager.clock(), session_id=source.session_id, already_extracted=already,
                                 refused=refused)
        source.plugins.remember(EXTRACTED_KEY, already + len(added))
        source.plugins.remember(READ_THROUGH_KEY, snapshot[-1].uuid)
        self.last_refused = refusal_line(refused, "extracted memory")
        return added

    def waiting_lines(self, added: Sequence[Memory]) -> list[str]:
        """What an extraction left waiting for review, in a line for the user (none when nothing waits)."""
        manager = self._manager
        team = sum(1 for m in added if m.scope == "team") if manager.settings.team_review or manager.asks else 0
        own = sum(1 for m in added if m.scope != "team") if manager.asks else 0
        waits = "memory waits" if own == 1 else "memories wait"
        return ([f"{own} {waits} for your review: %memory pending."] if own else []) + (
            [f"{team} proposed for the team, waiting for your review: %memory review."] if team else [])

    def in_background(self, source: SessionSource) -> threading.Thread:
        """At session end: extraction in a thread that reads a snapshot only."""
        snapshot = list(source.live.messages)
        background = self._manager.background

        def work() -> None:
            try:
                added = self.run(source, snapshot)
                lines = [*([self.last_refused] if self.last_refused else []), *self.waiting_lines(added)]
                if lines:
                    background.report("\n".join(f"From session {source.session_id}: {line}" for line in lines))
                source.store.save_state(source.state())
            except Exception as error:  # noqa: BLE001 - reported at the next chance, never raised
                background.report(f"memories were not extracted from session {source.session_id}: {error}")

        return background.start(work, "ctx-magic-memory-extract")
