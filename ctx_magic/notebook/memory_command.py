"""What `%memory` does, once its line is parsed: each subcommand's checks of its words, then the
memory link's answer as a notice."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctx_magic.errors import CtxMagicError
from ctx_magic.notebook.display import notice

if TYPE_CHECKING:
    from ctx_magic.notebook.controller import Controller


class MemoryCommand:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def run(self, command: str, words: list[str], *, no_decay: bool, team: bool) -> None:
        """One `%memory` subcommand with the words after it (the flags taken out)."""
        memory, host = self.controller.memory, self.controller.host
        if command == "show":
            notice(memory.listing())
        elif command == "add":
            text = " ".join(words).strip()
            if not text:
                raise CtxMagicError("%memory add needs the text to remember.")
            session_id = host.session.session_id if host.session is not None else ""
            notice(memory.add(text, decay=not no_decay, session_id=session_id, team=team))
        elif command == "forget":
            if not words:
                raise CtxMagicError("%memory forget needs the id of a memory (see %memory show).")
            notice(memory.forget(words[0], team=team))
        elif command == "extract":
            notice(memory.extract(host.require()))
        elif command == "review":
            notice(memory.review.review())
        elif command == "pending":
            notice(memory.review.pending())
        elif command in ("keep", "discard"):
            if not words:
                raise CtxMagicError(f"%memory {command} needs the ids of pending memories, or all "
                                    "(see %memory pending).")
            notice(memory.review.keep(words) if command == "keep" else memory.review.discard(words))
        elif command == "edit":
            if len(words) < 2:
                raise CtxMagicError("%memory edit needs the id of a pending memory and the text to keep instead "
                                    "(see %memory pending).")
            notice(memory.review.edit(words[0], " ".join(words[1:])))
        elif command in ("accept", "reject"):
            if not words:
                raise CtxMagicError(f"%memory {command} needs the ids of proposed team memories, or all "
                                    "(see %memory review).")
            notice(memory.review.accept(words) if command == "accept" else memory.review.reject(words))
        else:
            notice(memory.dream(host.require()))
