"""The dream's lock: one process dreams a memory folder at a time, across processes
and, for a folder on a network drive (the team's), across machines.

Two locks, taken together:

- an OS lock (`filelock` on `.dream.flock`) where the folder's filesystem gives one that every
  process reaching the folder sees (`shared_folder.lock_support`): it dies with its process, so
  a dreamer that crashed never blocks the others;
- a lock file (`dream.lock`, created with O_EXCL: atomic on a local disk, NFSv3+ and SMB) that
  says who dreams (name, machine, pid, since), and is the only lock where OS locks stay on each
  machine. A lock file over an hour old belongs to a dead process and is broken safely, even when
  two processes try at once; one whose holder also held the OS lock is broken at once by whoever
  gets the OS lock next (the OS lock died with its holder).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ctx_magic.memory.record import format_time, parse_time
from ctx_magic.memory.shared_folder import LOCK_FILE_MODE, LockSupport, lock_support, read_regular_file

LOCK_STALE_AFTER = timedelta(hours=1)  # a dream lock older than an hour belongs to a dead process
GUARD_TIMEOUT_SECONDS = 10.0  # breaking a stale lock takes milliseconds; past this, give up as "locked"
LOCK_NAME = "dream.lock"
GUARD_NAME = ".dream.lock.guard"
OS_LOCK_NAME = ".dream.flock"
HOLDER_WAIT_SECONDS = 2.0  # the holder writes its lock file milliseconds after taking the OS lock
HOLDER_POLL_SECONDS = 0.01


@dataclass(frozen=True)
class Held:
    """The lock belongs to someone else."""

    reason: str


@dataclass
class DreamLock:
    """The lock, held: the lock file's token (proof of ownership) and the OS lock, if one was taken."""

    folder: Path
    token: str
    os_lock: Any = None
    """The held `filelock.FileLock`, or None where the filesystem gives no lock every machine sees."""

    def release(self) -> None:
        """Remove the lock file if it is still ours (never one that replaced a stale one of ours)."""
        try:
            info = _read_lock(self.folder / LOCK_NAME)
            if info is not None and info.get("token") == self.token:
                (self.folder / LOCK_NAME).unlink(missing_ok=True)
        finally:
            if self.os_lock is not None:
                self.os_lock.release()
                self.os_lock = None


def _lock_body(now: datetime, token: str, holder: str, os_lock: bool) -> bytes:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "holder": holder,
                       "time": format_time(now), "token": token, "os_lock": os_lock}).encode()


def _create_lock(path: Path, now: datetime, holder: str = "", os_lock: bool = False) -> str | None:
    """O_CREAT|O_EXCL: exactly one creator wins. The token proves ownership at release."""
    token = secrets.token_hex(8)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return None
    with os.fdopen(fd, "wb") as handle:
        handle.write(_lock_body(now, token, holder, os_lock))
        handle.flush()
        os.fsync(handle.fileno())
    return token


def _read_lock(path: Path) -> dict[str, Any] | None:
    """The lock's content; {} while it is being written, if garbled or if it is not a small regular
    file (a FIFO there would hold the reader for good); None if there is no lock."""
    try:
        data = json.loads(read_regular_file(path).data or b"{}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _lock_time(info: Mapping[str, Any], path: Path) -> datetime | None:
    try:
        return parse_time(str(info["time"]))
    except (KeyError, ValueError):
        pass
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except OSError:
        return None


def lock_is_stale(taken: datetime | None, now: datetime) -> bool:
    return taken is not None and now - taken >= LOCK_STALE_AFTER


def _breakable(info: Mapping[str, Any], path: Path, now: datetime, holding_os_lock: bool,
               support: LockSupport) -> bool:
    """A lock file whose holder is gone: over an hour old, or its holder held the OS lock we now
    hold. The OS lock proves that only where it reaches every process that reaches the folder: a
    filesystem known to pass locks on, or a holder on this machine (where there is no mount table
    to tell, macOS or Windows)."""
    if lock_is_stale(_lock_time(info, path), now):
        return True
    reaches = support.trust == "shared" or info.get("host") == socket.gethostname()
    return holding_os_lock and reaches and info.get("os_lock") is True


def _take_os_lock(folder: Path, support: LockSupport) -> Any:
    """The OS lock without waiting: the held lock; None where the filesystem gives none every
    process sees (or refuses the call); Held when another process has it."""
    if not support.os_locks:
        return None
    import filelock

    lock = filelock.FileLock(str(folder / OS_LOCK_NAME), timeout=0, mode=LOCK_FILE_MODE)
    try:
        lock.acquire()
    except filelock.Timeout:
        return Held(_held_reason(_holder_info(folder / LOCK_NAME)))
    except OSError:
        return None  # ENOLCK, ENOSYS: a share without locks; the lock file alone decides
    return lock


def _holder_info(path: Path) -> dict[str, Any]:
    """The lock file of the process that holds the OS lock: it writes it just after taking that lock,
    so it may take a moment to appear (at most HOLDER_WAIT_SECONDS, polled)."""
    deadline = time.monotonic() + HOLDER_WAIT_SECONDS
    while True:
        info = _read_lock(path)
        if info or time.monotonic() >= deadline:
            return info or {}
        time.sleep(HOLDER_POLL_SECONDS)


def acquire_lock(folder: Path, now: datetime, *, holder: str = "",
                 support: LockSupport | None = None) -> DreamLock | Held:
    """Take the dream lock of `folder`: the held lock, or Held (with who holds it) when another
    process is dreaming. Never waits: a second dreamer skips and says so."""
    folder.mkdir(parents=True, exist_ok=True)
    support = support or lock_support(folder)
    os_lock = _take_os_lock(folder, support)
    if isinstance(os_lock, Held):
        return os_lock
    try:
        token = _take_lock_file(folder, now, holder, os_lock is not None, support)
    except BaseException:
        if os_lock is not None:
            os_lock.release()
        raise
    if isinstance(token, Held):
        if os_lock is not None:
            os_lock.release()
        return token
    return DreamLock(folder, token, os_lock)


def _take_lock_file(folder: Path, now: datetime, holder: str, holding_os_lock: bool,
                    support: LockSupport) -> str | Held:
    """The lock file: a token on success, Held when its holder is alive.

    A lock file whose holder is gone is broken under a guard (an OS file lock that dies with its
    process): the breaker re-reads the lock under the guard, renames it away only if it is still
    breakable, and only then creates its own, so a fresh lock is never broken.
    """
    path = folder / LOCK_NAME
    token = _create_lock(path, now, holder, holding_os_lock)
    if token is not None:
        return token
    info = _read_lock(path)
    if info is not None and not _breakable(info, path, now, holding_os_lock, support):
        return Held(_held_reason(info))
    import filelock

    try:
        with filelock.FileLock(str(folder / GUARD_NAME), timeout=GUARD_TIMEOUT_SECONDS, mode=LOCK_FILE_MODE):
            info = _read_lock(path)
            if info is not None and _breakable(info, path, now, holding_os_lock, support):
                tomb = path.with_name(f"{LOCK_NAME}.stale-{secrets.token_hex(4)}")
                os.replace(path, tomb)
                tomb.unlink(missing_ok=True)
            token = _create_lock(path, now, holder, holding_os_lock)
    except filelock.Timeout:
        return Held("another process is breaking a stale dream lock")
    if token is not None:
        return token
    return Held(_held_reason(_read_lock(path) or {}))


def _held_reason(info: Mapping[str, Any]) -> str:
    who = " on ".join(str(info[key]) for key in ("holder", "host") if info.get(key))
    pid = f"pid {info.get('pid', '?')}"
    since = f" since {info['time']}" if info.get("time") else ""
    return f"another dream is running ({who + ', ' if who else ''}{pid}{since})"
