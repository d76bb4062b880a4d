"""Memory for this kernel's sessions: the session notes keeper of the current session (SPEC
S1-S3), and long-term memories (X1-X4): put in a session's system prompt at its first turn,
extracted when it ends, consolidated when the dream's gates open, and `%memory`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctx_magic.agent.session import Session
from ctx_magic.errors import CtxMagicError
from ctx_magic.memory.manager import MemoryManager
from ctx_magic.memory.session_notes import NotesKeeper
from ctx_magic.notebook.display import notice
from ctx_magic.notebook.wording import count
from ctx_magic.settings import Settings

INJECTED_KEY = "memory_injected"


class MemoryLink:
    def __init__(self, settings: Callable[[], Settings], storage_dir: Callable[[], Path]) -> None:
        self._settings = settings
        self._storage_dir = storage_dir
        self._manager: MemoryManager | None = None
        self.notes: NotesKeeper | None = None

    @property
    def manager(self) -> MemoryManager:
        """The memories of this storage folder and user folder (rebuilt when either changes)."""
        settings = self._settings()
        user_dir = Path(settings.user_memory_dir).expanduser() if settings.user_memory_dir else None
        storage = self._storage_dir()
        if self._manager is None or self._manager.storage_dir != storage or self._manager.user_dir != user_dir:
            self._manager = MemoryManager(storage, user_dir)
        self._manager.budget_tokens = settings.memory_budget_tokens
        return self._manager

    def attach(self, session: Session) -> None:
        """A session opened: its notes are kept from now on."""
        self.notes = NotesKeeper(session)

    def before_turn(self, session: Session) -> None:
        """Once per session, at its first turn: the most relevant memories join the system prompt
        (after the last session's extraction, if one is still running)."""
        if session.plugins.recalled(INJECTED_KEY):
            return
        self.manager.wait()
        session.frame.set_memory_section(self.manager.prompt_section())
        session.plugins.remember(INJECTED_KEY, True)

    def after_turn(self, session: Session) -> str | None:
        """A dream if its gates open; a background failure to report, if one happened."""
        manager = self.manager
        error, manager.last_error = manager.last_error, None
        manager.maybe_dream_in_background(session)
        return error

    def session_ended(self, session: Session, *, extract: bool) -> None:
        """Memories extracted in the background (not when the session is about to be resumed, nor
        from a short session: MemoryManager.extraction_due)."""
        if extract and self.manager.extraction_due(session):
            self.manager.extract_in_background(session)

    def notes_text(self) -> str:
        return self.notes.text() if self.notes is not None else ""

    def rows(self) -> list[dict[str, Any]]:
        return self.manager.rows()

    def command(self, args: Any, session: Callable[[], Session]) -> None:
        """`%memory`: show, add [--no-decay] TEXT, forget ID, extract, dream."""
        manager = self.manager
        if args.command == "show":
            notice(self.listing())
        elif args.command == "add":
            text = " ".join(args.rest).strip()
            if not text:
                raise CtxMagicError("%memory add needs the text to remember.")
            added = manager.add(text, decay=not args.no_decay, session_id=args.session_id)
            notice(f"Remembered {added.id}{' (no decay)' if not added.decay else ''}: {added.text}")
        elif args.command == "forget":
            if not args.rest:
                raise CtxMagicError("%memory forget needs the id of a memory (see %memory show).")
            found = manager.forget(args.rest[0])
            notice(f"Forgot {args.rest[0]}." if found else f"No memory with id {args.rest[0]!r}.")
        elif args.command == "extract":
            added = manager.extract(session())
            lines = "\n".join(f"- {m.text}" for m in added) or "(nothing new)"
            refused = f"\n{manager.last_refused}" if manager.last_refused else ""
            notice(f"Extracted {count(len(added), 'memory', 'memories')} from this session:\n{lines}{refused}")
        elif args.command == "dream":
            notice(manager.dream(session(), force=True).summary())

    def listing(self) -> str:
        rows = self.manager.rows()
        if not rows:
            lines = ["No long-term memories yet (%memory add TEXT stores one)."]
        else:
            lines = [f"{len(rows)} long-term {'memory' if len(rows) == 1 else 'memories'} (most relevant first):"]
        for row in rows:
            decay = "" if row["decay"] else ", no decay"
            lines.append(f"- {row['id']} [{row['type']}, {row['scope']}{decay}] relevance {row['relevance']:.2f}, "
                         f"{row['age_days']} days old: {row['text']}")
        if self.notes is not None and self.notes.text():
            lines.append(f"Session notes: {self.notes.path} ({len(self.notes.text()):,} characters)")
        return "\n".join(lines)

    def wait(self) -> None:
        if self._manager is not None:
            self._manager.wait()
