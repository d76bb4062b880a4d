"""A session's folder: sessions/<id>/{transcript.jsonl, state.json,
session-memory.md, pins.json, tool-results/} under the storage folder."""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from ctx_magic.errors import Remedy, SessionInUse, StorageError
from ctx_magic.store.files import (
    PRIVATE_FILE_MODE,
    atomic_write_json,
    describe_os_error,
    make_private_folder,
    make_storage_folder,
    read_json,
    safe_name,
    write_once,
)
from ctx_magic.store.pending import PendingCells
from ctx_magic.store.transcript import LoadedTranscript, Transcript

OWNER_LOCK = "owner.lock"  # never deleted: unlinking a lock file others may hold would split the lock
_HELD: dict[str, filelock.BaseFileLock] = {}  # the sessions this process holds, by lock file
_HELD_GUARD = threading.Lock()


def new_session_id(now: float | None = None) -> str:
    """Sortable by creation time, unique enough for one person's storage folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(3)}"


@dataclass
class SessionDir:
    """Paths and writers of one session's folder."""

    storage: Path
    session_id: str

    @property
    def root(self) -> Path:
        return self.storage / "sessions" / self.session_id

    @property
    def transcript_path(self) -> Path:
        return self.root / "transcript.jsonl"

    @property
    def state_path(self) -> Path:
        return self.root / "state.json"

    @property
    def notes_path(self) -> Path:
        return self.root / "session-memory.md"

    @property
    def pins_path(self) -> Path:
        return self.root / "pins.json"

    def save_pins(self, pins: list[dict[str, Any]]) -> None:
        atomic_write_json(self.pins_path, pins)

    def load_pins(self) -> list[dict[str, Any]]:
        data = read_json(self.pins_path, [])
        return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []

    @property
    def tool_results_dir(self) -> Path:
        return self.root / "tool-results"

    def tool_result_path(self, tool_use_id: str) -> Path:
        return self.tool_results_dir / f"{safe_name(tool_use_id)}.txt"

    @property
    def tasks_dir(self) -> Path:
        """The background runs' logs (`<id>.log`) and states (`<id>.json`)."""
        return self.root / "tasks"

    def create(self) -> SessionDir:
        try:
            make_storage_folder(self.storage)
            make_private_folder(self.tool_results_dir)
        except OSError as error:  # a file where a folder should be, no permission, a full disk
            raise StorageError(f"ctx_magic cannot use {self.storage} for its sessions: "
                               f"{describe_os_error(error, self.tool_results_dir)}") from error
        return self

    def transcript(self) -> Transcript:
        """The writer; outputs over EXTERNAL_MIN_CHARS are kept once, in their tool-results file."""
        return Transcript(self.transcript_path, output_path=self.tool_result_path)

    def load_transcript(self) -> LoadedTranscript:
        return Transcript.load(self.transcript_path)

    def write_tool_result(self, tool_use_id: str, content: str) -> Path:
        """The output's file; writing the same content again (the transcript stored it already)
        does nothing."""
        return write_once(self.tool_result_path(tool_use_id), content.encode("utf-8"))

    @property
    def pending_cells_path(self) -> Path:
        return self.root / "pending-cells.jsonl"

    def pending_cells(self) -> PendingCells:
        """The user's cells recorded since the last agent turn, kept across a kernel restart."""
        return PendingCells(self.pending_cells_path)

    def save_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.state_path, state)

    def load_state(self) -> dict[str, Any]:
        data = read_json(self.state_path, {})
        return data if isinstance(data, dict) else {}

    @property
    def exists(self) -> bool:
        return self.transcript_path.exists() or self.state_path.exists()

    # -- one kernel at a time --------------------------------------------------------------------

    @property
    def owner_path(self) -> Path:
        return self.root / "owner.json"

    @property
    def lock_path(self) -> Path:
        return self.root / OWNER_LOCK

    def claim(self) -> None:
        """Hold the session in this process until `release()` or the process ends.

        Two kernels appending to one transcript would interleave two conversations. The hold is
        an advisory lock on owner.lock, atomic across processes: of two kernels resuming one
        session at the same moment exactly one gets it, and the other gets SessionInUse. The OS
        drops a dead process's lock, so a killed kernel's session is taken over at once.
        owner.json only names the holder for that message. Claiming again here is a no-op.
        """
        key = str(self.lock_path)
        with _HELD_GUARD:
            if key in _HELD:
                return
            try:
                make_storage_folder(self.storage)
                make_private_folder(self.root)
                lock = filelock.FileLock(key, thread_local=False, mode=PRIVATE_FILE_MODE)
                lock.acquire(timeout=0)
            except filelock.Timeout:
                raise SessionInUse(self._in_use_message(), remedy=Remedy.NEW_SESSION) from None
            except OSError:  # a folder without locks (some network mounts): the pid check alone
                self._claim_by_pid()
                return
            _HELD[key] = lock
        atomic_write_json(self.owner_path, {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})

    def _in_use_message(self) -> str:
        owner = read_json(self.owner_path, {})
        pid = owner.get("pid") if isinstance(owner, dict) else None
        # The winner of a race may not have named itself yet: a dead process's leftover name is not shown.
        who = f" (process {pid})" if isinstance(pid, int) and pid != os.getpid() and _alive(pid) else ""
        return f"Session {self.session_id} is open in another kernel{who}. Close that kernel first."

    def _claim_by_pid(self) -> None:
        owner = read_json(self.owner_path, {})
        pid = owner.get("pid") if isinstance(owner, dict) else None
        if (isinstance(pid, int) and pid != os.getpid() and owner.get("host") == socket.gethostname()
                and _alive(pid)):
            raise SessionInUse(self._in_use_message(), remedy=Remedy.NEW_SESSION)
        atomic_write_json(self.owner_path, {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})

    def release(self) -> None:
        """The session is closed here: another kernel may resume it."""
        with _HELD_GUARD:
            lock = _HELD.pop(str(self.lock_path), None)
            owner = read_json(self.owner_path, {})
            if isinstance(owner, dict) and owner.get("pid") == os.getpid():
                try:  # before the lock goes: a new holder's owner.json must not be removed
                    self.owner_path.unlink()
                except OSError:
                    pass
            if lock is not None:
                lock.release(force=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but belongs to someone else
        pass
    try:  # a killed kernel its parent has not reaped yet is a zombie: dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def list_sessions(storage: Path) -> list[SessionDir]:
    """Sessions under `storage`, oldest first by id (ids sort by creation time)."""
    folder = storage / "sessions"
    if not folder.is_dir():
        return []
    return [SessionDir(storage, p.name) for p in sorted(folder.iterdir()) if p.is_dir()]


def latest_session(storage: Path, *, skip: str | None = None) -> SessionDir | None:
    """The session whose transcript was written last (`skip`: an id to leave out)."""
    sessions = [s for s in list_sessions(storage) if s.transcript_path.exists() and s.session_id != skip]
    if not sessions:
        return None
    return max(sessions, key=lambda s: (s.transcript_path.stat().st_mtime, s.session_id))
