"""`%memory`: show, add [--no-decay] TEXT, forget ID, extract, dream (SPEC X1-X4)."""

from __future__ import annotations

from typing import Any

from ctx_magic.errors import CtxMagicError
from ctx_magic.memory.manager import MemoryManager
from ctx_magic.memory.session_notes import NotesKeeper
from ctx_magic.notebook.display import notice


def run_memory_command(controller: Any, args: Any) -> None:
    memory: MemoryManager = controller.memory
    if args.command == "show":
        notice(memory_listing(memory, controller.notes))
    elif args.command == "add":
        text = " ".join(args.rest).strip()
        if not text:
            raise CtxMagicError("%memory add needs the text to remember.")
        session_id = controller.session.session_id if controller.session else ""
        added = memory.add(text, decay=not args.no_decay, session_id=session_id)
        notice(f"Remembered {added.id}{' (no decay)' if not added.decay else ''}: {added.text}")
    elif args.command == "forget":
        if not args.rest:
            raise CtxMagicError("%memory forget needs the id of a memory (see %memory show).")
        found = memory.forget(args.rest[0])
        notice(f"Forgot {args.rest[0]}." if found else f"No memory with id {args.rest[0]!r}.")
    elif args.command == "extract":
        added = memory.extract(controller.require_session())
        lines = "\n".join(f"- {m.text}" for m in added) or "(nothing new)"
        notice(f"Extracted {len(added)} memories from this session:\n{lines}")
    elif args.command == "dream":
        notice(memory.dream(controller.require_session(), force=True).summary())


def memory_listing(memory: MemoryManager, notes: NotesKeeper | None) -> str:
    rows = memory.rows()
    lines = [f"{len(rows)} long-term memories (most relevant first):"]
    for row in rows:
        decay = "" if row["decay"] else ", no decay"
        lines.append(f"- {row['id']} [{row['type']}, {row['scope']}{decay}] relevance {row['relevance']:.2f}, "
                     f"{row['age_days']} days old: {row['text']}")
    if notes is not None and notes.text():
        lines.append(f"Session notes: {notes.path} ({len(notes.text()):,} characters)")
    return "\n".join(lines)
