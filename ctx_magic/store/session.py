"""A session's folder (SPEC M3): sessions/<id>/{transcript.jsonl, state.json,
session-memory.md, pins.json, tool-results/} under the storage folder."""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctx_magic.errors import Remedy, SessionInUse, StorageError
from ctx_magic.store.files import atomic_write_json, atomic_write_text, describe_os_error, read_json
from ctx_magic.store.transcript import LoadedTranscript, Transcript

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def new_session_id(now: float | None = None) -> str:
    """Sortable by creation time, unique enough for one person's storage folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(3)}"


def safe_name(name: str) -> str:
    return _UNSAFE.sub("_", name)[:120] or "_"


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
    def session_memory_path(self) -> Path:
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

    def create(self) -> SessionDir:
        try:
            self.tool_results_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file where a folder should be, no permission, a full disk
            raise StorageError(f"ctx_magic cannot use {self.storage} for its sessions: "
                               f"{describe_os_error(error, self.tool_results_dir)}") from error
        return self

    def transcript(self) -> Transcript:
        return Transcript(self.transcript_path)

    def load_transcript(self) -> LoadedTranscript:
        return Transcript.load(self.transcript_path)

    def write_tool_result(self, tool_use_id: str, content: str) -> Path:
        path = self.tool_result_path(tool_use_id)
        atomic_write_text(path, content)
        return path

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

    def claim(self) -> None:
        """Mark the session as open in this process. Two kernels appending to one transcript
        would interleave two conversations: a session another live process holds is refused;
        one left by a process that died is taken over."""
        owner = read_json(self.owner_path, {})
        pid = owner.get("pid") if isinstance(owner, dict) else None
        if (isinstance(pid, int) and pid != os.getpid() and owner.get("host") == socket.gethostname()
                and _alive(pid)):
            raise SessionInUse(f"Session {self.session_id} is open in another kernel (process {pid}). Close that "
                               "kernel first.", remedy=Remedy.NEW_SESSION)
        atomic_write_json(self.owner_path, {"pid": os.getpid(), "host": socket.gethostname()})

    def release(self) -> None:
        """The session is closed here: another kernel may resume it."""
        owner = read_json(self.owner_path, {})
        if isinstance(owner, dict) and owner.get("pid") == os.getpid():
            try:
                self.owner_path.unlink()
            except OSError:
                pass


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


def latest_session(storage: Path) -> SessionDir | None:
    sessions = [s for s in list_sessions(storage) if s.transcript_path.exists()]
    if not sessions:
        return None
    return max(sessions, key=lambda s: (s.transcript_path.stat().st_mtime, s.session_id))
