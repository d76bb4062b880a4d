"""A memory folder's index, MEMORY.md: one line per memory, most relevant first, and the files
that could not be read. Rebuilt from the files after every change; no reader trusts it."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ctx_magic.memory.record import Memory, added_by, first_line, shown_text, sort_by_relevance
from ctx_magic.memory.shared_folder import SHARED_FILE_MODE, index_lock, lock_support, read_regular_file
from ctx_magic.store.files import atomic_write_text

if TYPE_CHECKING:
    from ctx_magic.memory.store import MemoryStore, Scan, Unreadable

INDEX_NAME = "MEMORY.md"
MAX_INDEX_BYTES = 4 * 1024 * 1024  # the index: a line per memory; past this it is not a ctx_magic index
INDEX_FIRST_LINE_CHARS = 100  # the index shows this much of each memory's first line
INDEX_REBUILD_ROUNDS = 3  # rebuilt again while files came or went meanwhile (a folder without locks)


def render_index(memories: Iterable[Memory], problems: Iterable[Unreadable], now: datetime) -> str:
    lines = ["# Memory index", "", "One line per memory: file, type, current relevance, first line.", ""]
    for memory in sort_by_relevance(memories, now):
        head = first_line(shown_text(memory))
        if len(head) > INDEX_FIRST_LINE_CHARS:
            head = head[: INDEX_FIRST_LINE_CHARS - 1] + "…"
        score = memory.current_relevance(now)
        by = f" · {added_by(memory)}" if added_by(memory) else ""
        lines.append(f"- [{memory.id}]({memory.id}.md) · {memory.type} · {score:.2f}{by} · {head}")
    skipped = [f"- {p.path.name}: {p.reason}" for p in problems]
    if skipped:
        lines += ["", "## Unreadable files (skipped)", "", *skipped]
    return "\n".join(lines) + "\n"


class MemoryIndex:
    """The index of one store's folder."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.path: Path = store.folder / INDEX_NAME

    def rebuild(self, now: datetime | None = None) -> Scan:
        """MEMORY.md from the files. In a shared folder, under the index lock (the last rebuild then
        saw every file written before it), and again while files came or went meanwhile (where the
        filesystem gives no lock)."""
        if not self._store.shared:
            return self._write(now)
        folder = self._store.folder
        with index_lock(folder, lock_support(folder)):
            for _ in range(INDEX_REBUILD_ROUNDS):
                scan = self._write(now)
                if self._names() == {m.id for m in scan.memories} | {p.path.stem for p in scan.problems}:
                    break
        return scan

    def _write(self, now: datetime | None) -> Scan:
        store = self._store
        scan = store.scan()
        mode = SHARED_FILE_MODE if store.shared else None
        atomic_write_text(self.path, render_index(scan.memories, scan.problems, now or store.clock()), mode=mode)
        return scan

    def _names(self) -> set[str]:
        folder = self._store.folder
        if not folder.is_dir():
            return set()
        return {p.stem for p in folder.glob("*.md") if p.name != INDEX_NAME and not p.name.startswith(".")}

    def text(self) -> str:
        try:
            return read_regular_file(self.path, MAX_INDEX_BYTES).data.decode("utf-8", errors="replace")
        except OSError:
            return ""
