"""Long-term memory for a running session: the project, user and team scopes, the
system-prompt section, extraction at session end and on demand, dreaming when its gates open.

Model calls go through the session's side call (same system prompt and tools, tools
forbidden), from background threads that read a snapshot of the conversation only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ctx_magic.errors import CtxMagicError
from ctx_magic.memory.background import BackgroundWork
from ctx_magic.memory.dream import DreamResult, dream
from ctx_magic.memory.extraction import Extraction
from ctx_magic.memory.longterm import TextModel
from ctx_magic.memory.prompts import memory_prompt_section, select_for_prompt
from ctx_magic.memory.record import added_by, shown_text, sort_by_relevance, utc_now
from ctx_magic.memory.review import PendingReview
from ctx_magic.memory.secrets import refusal_line
from ctx_magic.memory.store import (
    Memory,
    MemoryStore,
    Scope,
    Unreadable,
)
from ctx_magic.memory.team import default_author, dream_team, folder_problem, lock_notice
from ctx_magic.settings import DEFAULTS, Settings


@dataclass
class MemoryManager:
    storage_dir: Path
    user_dir: Path | None = None
    """The user scope's data folder; None is platformdirs' per-user folder."""
    settings: Settings = DEFAULTS
    """The settings in force (the prompt's budget, the team, review): set here or by `configure`, never
    from outside."""
    clock: Callable[[], datetime] = utc_now
    background: BackgroundWork = field(default_factory=BackgroundWork)
    """Extraction and dreaming in threads, and the line their failures leave for the user."""
    review: PendingReview = field(init=False)
    """What extraction left waiting for the member's review, and their keep or discard."""
    extraction: Extraction = field(init=False)
    """The session's durable facts into memories: on demand, and in a thread at session end."""
    skipped: list[Unreadable] = field(default_factory=list)
    """The memory files the last prompt section could not read (a FIFO, a link, a huge file, ...)."""

    def __post_init__(self) -> None:
        self.review = PendingReview(self)
        self.extraction = Extraction(self)

    def configure(self, settings: Settings) -> None:
        """A setting changed (a `%config`): from now on these."""
        self.settings = settings

    @property
    def team_root(self) -> Path | None:
        """The folder every member reaches, where team memory is configured; None: no team memory."""
        if not (self.settings.team and self.settings.team_memory_dir):
            return None
        return Path(self.settings.team_memory_dir).expanduser()

    @property
    def project(self) -> MemoryStore:
        return MemoryStore.for_project(self.storage_dir)

    @property
    def user(self) -> MemoryStore:
        return MemoryStore.for_user(self.user_dir)

    @property
    def team_on(self) -> bool:
        return self.team_root is not None

    def team_problem(self) -> str | None:
        """Why team memory cannot be used now (not configured, the folder missing), or None."""
        if not self.team_on:
            return ("team memory is off: set %config CtxMagic.team = 'NAME' and "
                    "%config CtxMagic.team_memory_dir = 'FOLDER' (a folder every member reaches)")
        assert self.team_root is not None
        return folder_problem(self.team_root)

    @property
    def team(self) -> MemoryStore | None:
        """The team's memories, where team memory is on and its folder is reachable."""
        if self.team_problem() is not None:
            return None
        assert self.team_root is not None
        return MemoryStore.for_team(self.team_root, self.settings.team)

    @property
    def asks(self) -> bool:
        """Whether extraction's memories wait for the member's keep."""
        return self.settings.memory_review == "ask"

    @property
    def own_pending(self) -> MemoryStore:
        """The member's own memories extraction found, waiting for review in this storage folder."""
        return MemoryStore.for_pending(self.storage_dir)

    @property
    def proposals(self) -> MemoryStore | None:
        """The team memories extraction proposed in this storage folder, waiting for review."""
        if not self.team_on:
            return None
        return MemoryStore.for_pending(self.storage_dir, self.settings.team)

    def pending_stores(self) -> list[MemoryStore]:
        """Every folder of memories waiting for this member: their own, and the team's proposals."""
        proposals = self.proposals
        return [self.own_pending, *([proposals] if proposals is not None else [])]

    def require_team(self) -> MemoryStore:
        team = self.team
        if team is None:
            raise CtxMagicError(f"No team memory: {self.team_problem()}.")
        return team

    @property
    def member(self) -> str:
        return self.settings.author.strip() or default_author()

    def team_notice(self) -> str | None:
        """One line for the user about the team folder: unreachable, or without locks across machines."""
        if not self.team_on:
            return None
        team = self.team
        if team is None:
            return f"Team memory is not read: {self.team_problem()}."
        return lock_notice(team.folder)

    def stores(self) -> list[MemoryStore]:
        team = self.team
        return [self.project, self.user, *([team] if team is not None else [])]

    def all(self) -> list[Memory]:
        return sort_by_relevance([m for store in self.stores() for m in store.all()], self.clock())

    def problems(self) -> list[Unreadable]:
        """The memory files of every scope that could not be read (and so reach no prompt)."""
        return [problem for store in self.stores() for problem in store.problems()]

    def prompt_section(self) -> str:
        """The most relevant memories of every scope within the one budget, shared fairly between
        the scopes (`select_for_prompt`), for the system prompt."""
        now = self.clock()
        scans = [store.scan() for store in self.stores()]
        self.skipped = [problem for scan in scans for problem in scan.problems]
        memories = sort_by_relevance([m for scan in scans for m in scan.memories], now)
        return memory_prompt_section(select_for_prompt(memories, now, self.settings.memory_budget_tokens), now)

    def rows(self) -> list[dict[str, Any]]:
        """What the panel lists: each memory with its current relevance."""
        now = self.clock()
        return [{"id": m.id, "text": shown_text(m), "type": m.type, "scope": m.scope, "decay": m.decay,
                 "relevance": round(m.current_relevance(now), 3), "age_days": m.age_days(now),
                 "added_by": added_by(m)}
                for m in self.all()]

    def add(self, text: str, *, decay: bool = True, session_id: str = "", team: bool = False) -> Memory:
        """A memory from the person: theirs (project scope), or the team's as a project fact signed
        with their name."""
        if team:
            return self.require_team().add(text, now=self.clock(), type="project", decay=decay,
                                           source_session=session_id, author=self.member)
        return self.project.add(text, now=self.clock(), decay=decay, source_session=session_id)

    def forget(self, memory_id: str, *, team: bool = False) -> tuple[Scope, Memory | None] | None:
        """Remove a memory: the person's own first (project, then user scope), then the team's; only
        the team's with `team`. Any member may forget a team memory. The scope it was removed from
        and the memory (None if its file was unreadable); None when no scope has it."""
        now = self.clock()
        for store in [self.require_team()] if team else self.stores():
            try:
                path = store.path_of(memory_id)
            except ValueError:
                return None  # not an id at all
            if path.exists():
                found = store.get(memory_id)
                store.forget(memory_id, now=now)
                return store.scope, found
        return None

    # -- dreaming ------------------------------------------------------------------------------

    def dream(self, model: TextModel, session_id: str, *, force: bool) -> DreamResult:
        """This storage folder's dream, by `model` (the session `session_id`'s side calls)."""
        return dream(self.storage_dir, model, now=self.clock(), force=force,
                     current_session=session_id, holder=self.member,
                     pending=self.own_pending if self.asks else None)

    def dream_team(self, model: TextModel, *, force: bool) -> DreamResult | None:
        """The team folder's dream (None without team memory): a second member dreaming it at the
        same moment gets "locked" with who holds the lock."""
        team = self.team
        if team is None:
            return None
        return dream_team(team, model, now=self.clock(), force=force, holder=self.member)

    def maybe_dream_in_background(self, model: TextModel, session_id: str) -> None:
        """The gates are cheap (checked at most every 10 minutes); a dream runs in a thread."""
        def run() -> None:
            try:
                for label, result in (("Dreaming", self.dream(model, session_id, force=False)),
                                      ("Dreaming the team's memories", self.dream_team(model, force=False))):
                    if result is not None and result.refused:
                        self.background.report(f"{label}: {refusal_line(result.refused, 'candidate')}")
            except Exception as error:  # noqa: BLE001
                self.background.report(f"dreaming failed: {error}")

        self.background.start(run, "ctx-magic-dream")
