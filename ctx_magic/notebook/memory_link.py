"""Memory for this kernel's sessions: the session notes keeper of the current session, and
long-term memories (the project's, the user's and the team's): put in a session's system prompt
at its first turn, extracted when it ends, consolidated when the dream's gates open, and what
`%memory` does with them (with the review of what extraction found: with `memory_review = 'ask'`
all of it, else what it proposes for the team)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctx_magic.agent.notes import NotesKeeper
from ctx_magic.agent.plugins import Plugins
from ctx_magic.agent.request import RequestFrame
from ctx_magic.agent.session import Session
from ctx_magic.errors import CtxMagicError
from ctx_magic.memory.extraction import READ_THROUGH_KEY, SessionSource, SessionTextModel, extraction_due
from ctx_magic.memory.manager import MemoryManager
from ctx_magic.memory.record import Memory, added_by
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.review_replies import ReviewReplies
from ctx_magic.notebook.workspace import Workspace
from ctx_magic.ui.cards import count

INJECTED_KEY = "memory_injected"


class MemoryLink:
    def __init__(self, settings: CtxMagic, workspace: Workspace) -> None:
        self._settings = settings
        self._workspace = workspace
        self._manager: MemoryManager | None = None
        self.notes: NotesKeeper | None = None
        self._told: set[str] = set()
        """Team notices already shown in this kernel (each once)."""
        self.review = ReviewReplies(self)
        """`%memory pending, keep, edit, discard, review, accept, reject` and the panel's list."""
        settings.observe(self._settings_changed, names="current")

    def _settings_changed(self, change: Mapping[str, Any]) -> None:
        """A `%config` change: the manager works with the new settings from now on."""
        if self._manager is not None:
            self._manager.configure(change["new"])

    @property
    def manager(self) -> MemoryManager:
        """The memories of this storage folder and user folder (rebuilt when either changes)."""
        settings = self._settings.current
        user_dir = Path(settings.user_memory_dir).expanduser() if settings.user_memory_dir else None
        storage = self._workspace.storage_dir()
        if self._manager is None or self._manager.storage_dir != storage or self._manager.user_dir != user_dir:
            self._manager = MemoryManager(storage, user_dir, settings=settings)
        return self._manager

    def attach(self, session: Session) -> None:
        """A session opened: its notes are kept from now on."""
        self.notes = NotesKeeper(session)

    def before_turn(self, plugins: Plugins, frame: RequestFrame) -> None:
        """Once per session, at its first turn: the most relevant memories join the system prompt
        (`frame`'s), after the last session's extraction if one is still running; the session's
        `plugins` keep that it was done."""
        if plugins.recalled(INJECTED_KEY):
            return
        self.manager.background.wait()
        frame.set_memory_section(self.manager.prompt_section())
        plugins.remember(INJECTED_KEY, True)

    def after_turn(self, session: Session) -> str | None:
        """A dream if its gates open; a background failure to report, if one happened, and (once
        per kernel) a word on a team folder that cannot be read or locked across machines, and a
        line for each memory file the prompt skipped (a FIFO, a link, a huge file, a broken one)."""
        manager = self.manager
        error = manager.background.take_report()
        manager.maybe_dream_in_background(SessionTextModel(session.side_calls), session.session_id)
        notices = [manager.team_notice(),
                   *(f"Memory file skipped: {p.path}: {p.reason}." for p in manager.skipped)]
        lines = [error] if error else []
        for notice in notices:
            if notice is not None and notice not in self._told:
                self._told.add(notice)
                lines.append(notice)
        return "\n".join(lines) or None

    def session_ended(self, session: Session) -> None:
        """Memories extracted in the background (not from a short session: extraction_due).
        A session whose size cannot be measured (its model is unknown) ends without them: the
        reason is said at the next chance, and the session still ends (an unload, a new session)."""
        source = SessionSource.of(session)  # what an extraction reads, its plug-in state among it
        try:
            due = extraction_due(source.live, session.compaction, session.tokens,
                                 read_through=source.plugins.recalled(READ_THROUGH_KEY))
        except CtxMagicError as error:
            self.manager.background.report(f"memories were not extracted from session {session.session_id}: {error}")
            return
        if due:
            self.manager.extraction.in_background(source)

    def notes_text(self) -> str:
        return self.notes.text() if self.notes is not None else ""

    # -- %memory -------------------------------------------------------------------------------------

    def add(self, text: str, *, decay: bool, session_id: str, team: bool = False) -> str:
        added = self.manager.add(text, decay=decay, session_id=session_id, team=team)
        where = f" for the team ({added_by(added)})" if added.scope == "team" else ""
        return f"Remembered {added.id}{where}{' (no decay)' if not added.decay else ''}: {added.text}"

    def forget(self, memory_id: str, *, team: bool = False) -> str:
        found = self.manager.forget(memory_id, team=team)
        if found is None:
            where = "the team's memories" if team else "any scope"
            return f"No memory with id {memory_id!r} in {where} (see %memory show)."
        scope, memory = found
        if scope != "team":
            return f"Forgot {memory_id}."
        by = f", {added_by(memory)}" if memory is not None and added_by(memory) else ""
        return f"Forgot {memory_id} from the team's memories{by}: no member's next session will see it."

    def extract(self, session: Session) -> str:
        manager = self.manager
        added = manager.extraction.run(SessionSource.of(session))
        lines = "\n".join(f"- {m.text}{self._review_mark(m)}" for m in added) or "(nothing new)"
        refused = f"\n{manager.extraction.last_refused}" if manager.extraction.last_refused else ""
        return f"Extracted {count(len(added), 'memory', 'memories')} from this session:\n{lines}{refused}"

    def _review_mark(self, memory: Memory) -> str:
        manager = self.manager
        if memory.scope != "team":
            return f" (waiting for your review: %memory keep {memory.id})" if manager.asks else ""
        if manager.settings.team_review or manager.asks:
            return f" (proposed for the team: %memory accept {memory.id})"
        return " (for the team)"

    def dream(self, session: Session) -> str:
        model = SessionTextModel(session.side_calls)
        mine = self.manager.dream(model, session.session_id, force=True).summary()
        team = self.manager.dream_team(model, force=True)
        return mine if team is None else f"{mine}\nTeam memory: {team.summary()}"

    def listing(self) -> str:
        rows = self.manager.rows()
        if not rows:
            lines = ["No long-term memories yet (%memory add TEXT stores one)."]
        else:
            lines = [f"{len(rows)} long-term {'memory' if len(rows) == 1 else 'memories'} (most relevant first):"]
        for row in rows:
            decay = "" if row["decay"] else ", no decay"
            by = f", {row['added_by']}" if row["added_by"] else ""
            lines.append(f"- {row['id']} [{row['type']}, {row['scope']}{by}{decay}] relevance {row['relevance']:.2f}, "
                         f"{row['age_days']} days old: {row['text']}")
        lines += self._unreadable_lines()
        own = len(self.manager.review.pending("project"))
        if own:
            lines.append(f"{count(own, 'memory', 'memories')} found by extraction {'waits' if own == 1 else 'wait'} "
                         "for your review: %memory pending.")
        waiting = len(self.manager.review.proposed()) if self.manager.team_on else 0
        if waiting:
            lines.append(f"{count(waiting, 'team memory', 'team memories')} proposed by extraction "
                         f"{'waits' if waiting == 1 else 'wait'} for your review: %memory review.")
        team = self.team_line()
        if team:
            lines.append(team)
        if self.notes is not None and self.notes.text():
            lines.append(f"Session notes: {self.notes.path} ({len(self.notes.text()):,} characters)")
        return "\n".join(lines)

    def _unreadable_lines(self) -> list[str]:
        """The memory files skipped as unreadable (a hand edit gone wrong): otherwise a memory
        would vanish from every prompt without a word."""
        problems = self.manager.problems()
        if len(problems) == 1:
            return [f"Skipped 1 memory file that could not be read (fix or delete it): {problems[0].path}: "
                    f"{problems[0].reason}"]
        if not problems:
            return []
        return [f"Skipped {len(problems)} memory files that could not be read (fix or delete them):",
                *(f"- {problem.path}: {problem.reason}" for problem in problems)]

    def team_line(self) -> str | None:
        """Where the team's memories are, or why they are not read; "" without team memory."""
        manager = self.manager
        if not manager.team_on:
            return ""
        team = manager.team
        if team is None:
            return f"Team memory is not read: {manager.team_problem()}."
        notice = manager.team_notice()
        return (f"Team memory: team {manager.settings.team!r} in {team.folder}, you add as {manager.member!r}."
                + (f"\n{notice}" if notice else ""))

    def wait(self) -> None:
        if self._manager is not None:
            self._manager.background.wait()
