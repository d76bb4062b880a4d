"""Long-term memories on disk: the folder of each scope, its memory files and its index.

A scope is a folder: the project scope is `<storage>/memory/` beside the notebook, the user
scope `platformdirs.user_data_dir("ctx_magic")/memory/`, the team scope `<team_memory_dir>/<team>/`
on a folder every member reaches. Each memory is `<id>.md` (record.py: its format, relevance and
author); `MEMORY.md` lists them all, one line each, most relevant first.

Files are read only when they are regular files of their own and small
(`shared_folder.read_regular_file`); the scope and the owner of a memory come from the folder and
the file, never from what it says; a file that cannot be read is reported by what is wrong with
it, never by quoting what it holds (it may be a link to someone's private file).

Several people may write a team folder at once, so nothing there is ever read half-written or
lost: each memory is its own file, named by its text, written to a temporary file and renamed
into place; the index is rebuilt from the files under a short lock, and every reader (the
prompt, `%memory show`) reads the files, never the index.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ctx_magic.errors import CtxMagicError, StorageError
from ctx_magic.memory.index import INDEX_NAME, MemoryIndex
from ctx_magic.memory.record import (
    BASE_RELEVANCE,
    MEMORY_TYPES,
    Memory,
    MemoryType,
    Scope,
    is_near_duplicate,
    memory_id,
    utc_now,
)
from ctx_magic.memory.secrets import detect_secret
from ctx_magic.memory.shared_folder import (
    MAX_FILE_BYTES,
    SHARED_FILE_MODE,
    RefusedFile,
    read_regular_file,
)
from ctx_magic.store.files import atomic_write_text, describe_os_error, make_storage_folder

# Memories waiting for the member's review, in their own memory folder: <storage>/memory/pending/project/ for
# their own, <storage>/memory/pending/team/<team>/ for a team's. Subfolders, so no scope's scan ever reads them.
PENDING_DIR = "pending"

_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
_TEAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class SecretRefused(CtxMagicError, ValueError):
    """A memory was refused because it looks like it holds a credential."""


@dataclass(frozen=True)
class Unreadable:
    """A memory file that could not be read: skipped, and reported here."""

    path: Path
    reason: str


@dataclass(frozen=True)
class Scan:
    memories: tuple[Memory, ...]
    problems: tuple[Unreadable, ...]


def project_memory_dir(storage_dir: Path) -> Path:
    return Path(storage_dir) / "memory"


def check_team_name(name: str) -> str:
    """A team's name as one folder name (letters, digits, `._-`); ValueError says what is wrong."""
    if not _TEAM_NAME.match(name):
        raise ValueError(f"a team name is letters, digits, '.', '_' and '-' (up to 64, not starting with "
                         f"'.', '_' or '-'), not {name!r}")
    return name


def team_memory_dir(root: Path, team: str) -> Path:
    """The team's folder: one folder per team under the shared root, so teams never mix."""
    return Path(root).expanduser() / check_team_name(team)


def user_memory_dir(data_dir: Path | None = None) -> Path:
    """The user scope's folder; `data_dir` replaces platformdirs' user data folder (tests)."""
    if data_dir is None:
        import platformdirs

        data_dir = Path(platformdirs.user_data_dir("ctx_magic"))
    return Path(data_dir) / "memory"


@functools.lru_cache(maxsize=256)
def account_name(uid: int) -> str:
    """The OS account of `uid` ("uid 1234" when it has no name here); "" where there are no accounts."""
    try:
        import pwd
    except ImportError:  # Windows
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # an account of another machine, or of a container's image only
        return f"uid {uid}"


@dataclass(frozen=True)
class MemoryStore:
    """The memories of one scope, in `folder`."""

    folder: Path
    scope: Scope = "project"
    clock: Callable[[], datetime] = utc_now
    """Used only where an action takes no `now` (forget, rebuilding the index)."""
    pending: bool = False
    """A member's own folder of memories that extraction found and nobody kept yet (their own, or
    proposed for a team; `scope` is where they go once kept): private like the member's other
    files, and never read into a prompt."""

    @classmethod
    def for_project(cls, storage_dir: Path, **kwargs: object) -> MemoryStore:
        return cls(project_memory_dir(storage_dir), "project", **kwargs)  # type: ignore[arg-type]

    @classmethod
    def for_user(cls, data_dir: Path | None = None, **kwargs: object) -> MemoryStore:
        return cls(user_memory_dir(data_dir), "user", **kwargs)  # type: ignore[arg-type]

    @classmethod
    def for_team(cls, root: Path, team: str, **kwargs: object) -> MemoryStore:
        return cls(team_memory_dir(root, team), "team", **kwargs)  # type: ignore[arg-type]

    @classmethod
    def for_pending(cls, storage_dir: Path, team: str = "", **kwargs: object) -> MemoryStore:
        """What extraction found, waiting in the member's storage folder for review: their own
        memories, or with `team` those proposed for that team."""
        pending = project_memory_dir(storage_dir) / PENDING_DIR
        if team:
            return cls(pending / "team" / check_team_name(team), "team", pending=True, **kwargs)  # type: ignore[arg-type]
        return cls(pending / "project", "project", pending=True, **kwargs)  # type: ignore[arg-type]

    @property
    def shared(self) -> bool:
        """Other people write here too: files readable by the folder's group, the index under a lock."""
        return self.scope == "team" and not self.pending

    @property
    def storage_folder(self) -> Path | None:
        """The storage folder beside the notebook this folder lives in (the project scope's, and
        every pending one's: `<storage>/memory/pending/...`), or None (the user's, a team's)."""
        if self.pending:
            return self.folder.parents[2 if self.scope == "project" else 3]
        return self.folder.parent if self.scope == "project" else None

    @property
    def index(self) -> MemoryIndex:
        """The folder's MEMORY.md, rebuilt from its files."""
        return MemoryIndex(self)

    def path_of(self, memory_id: str) -> Path:
        if not _ID.match(memory_id):
            raise ValueError(f"not a memory id: {memory_id!r}")
        return self.folder / f"{memory_id}.md"

    def scan(self) -> Scan:
        """Every readable memory (oldest first) and every file that could not be read."""
        memories: list[Memory] = []
        problems: list[Unreadable] = []
        if not self.folder.is_dir():
            return Scan((), ())
        for path in sorted(self.folder.glob("*.md")):
            if path.name == INDEX_NAME or path.name.startswith("."):
                continue
            found = self.read(path)
            if isinstance(found, Unreadable):
                problems.append(found)
            else:
                memories.append(found)
        memories.sort(key=lambda m: (m.created, m.id))
        return Scan(tuple(memories), tuple(problems))

    def read(self, path: Path) -> Memory | Unreadable:
        """One memory file of this folder, or why it is skipped (what the file is, never what it holds)."""
        try:
            read = read_regular_file(path, MAX_FILE_BYTES)
            memory = Memory.from_markdown(read.data.decode("utf-8"), scope=self.scope,
                                          owner=account_name(read.owner_uid))
        except RefusedFile as error:
            return Unreadable(path, str(error))
        except UnicodeDecodeError:
            return Unreadable(path, "not UTF-8 text")
        except OSError as error:
            return Unreadable(path, f"could not be read: {error.strerror or type(error).__name__}")
        except ValueError as error:
            return Unreadable(path, str(error))
        if memory.id != path.stem:
            return Unreadable(path, "the id in its front matter does not match the file name")
        return memory

    def all(self) -> list[Memory]:
        return list(self.scan().memories)

    def problems(self) -> list[Unreadable]:
        return list(self.scan().problems)

    def get(self, memory_id: str) -> Memory | None:
        return next((m for m in self.all() if m.id == memory_id), None)

    def find_duplicate(self, text: str, memories: Iterable[Memory] | None = None) -> Memory | None:
        """A stored memory saying the same as `text` (equal once normalized, or nearly so)."""
        pool = self.all() if memories is None else memories
        return next((m for m in pool if is_near_duplicate(m.text, text)), None)

    def add(
        self,
        text: str,
        *,
        now: datetime,
        type: MemoryType = "user",
        decay: bool = True,
        source_session: str = "",
        base_relevance: float = BASE_RELEVANCE,
        author: str = "",
    ) -> Memory:
        """Store a new memory, or return the stored one that already says the same.

        Raises SecretRefused for anything that looks like a credential, ValueError for an
        empty text or an unknown type.
        """
        text = text.strip()
        if not text:
            raise ValueError("a memory needs some text")
        if type not in MEMORY_TYPES:
            raise ValueError(f"unknown memory type {type!r}: use one of {', '.join(MEMORY_TYPES)}")
        found = detect_secret(text)
        if found is not None:
            raise SecretRefused(
                f"Refused to store this memory: {found.masked} looks like {found.kind}. "
                "Memories are never secrets; keep credentials in environment variables or a secrets manager."
            )
        existing = self.find_duplicate(text)
        if existing is not None:
            return existing
        memory = Memory(memory_id(text), text, type, now, now, base_relevance, decay, self.scope, source_session,
                        author)
        self.apply(write=[memory], now=now)
        written = self.read(self.path_of(memory.id))  # as every reader sees it: with its file's owner
        return written if isinstance(written, Memory) else memory

    def forget(self, memory_id: str, *, now: datetime | None = None) -> bool:
        """Remove a memory; False when there is no such memory."""
        try:
            path = self.path_of(memory_id)
        except ValueError:
            return False
        if not path.exists():
            return False
        self.apply(remove=[memory_id], now=now)
        return True

    def apply(
        self, *, write: Iterable[Memory] = (), remove: Iterable[str] = (), now: datetime | None = None
    ) -> None:
        """Write and delete memory files, then rebuild the index once."""
        mode = SHARED_FILE_MODE if self.shared else None
        storage = self.storage_folder
        if storage is not None:  # a first memory may come before the first session: its storage folder
            try:
                make_storage_folder(storage)
            except OSError as error:
                raise StorageError(describe_os_error(error, storage)) from error
        for memory in write:
            atomic_write_text(self.path_of(memory.id), memory.to_markdown(), mode=mode)
        for removed in remove:
            path = self.path_of(removed)
            try:
                path.unlink(missing_ok=True)
            except OSError as error:  # a team folder of a Unix group this member is not in
                raise StorageError(describe_os_error(error, path)) from error
        self.index.rebuild(now)
