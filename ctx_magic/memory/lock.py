"""The dream's lock file: one process dreams at a time; a lock older than an hour
belongs to a dead process and is broken safely, even when two processes try at once."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ctx_magic.memory.store import format_time, parse_time

LOCK_STALE_AFTER = timedelta(hours=1)  # a dream lock older than an hour belongs to a dead process
GUARD_TIMEOUT_SECONDS = 10.0  # breaking a stale lock takes milliseconds; past this, give up as "locked"
LOCK_NAME = "dream.lock"
GUARD_NAME = ".dream.lock.guard"


@dataclass(frozen=True)
class Held:
    """The lock belongs to someone else."""

    reason: str


def _lock_body(now: datetime, token: str) -> bytes:
    return json.dumps({"pid": os.getpid(), "time": format_time(now), "token": token}).encode()


def _create_lock(path: Path, now: datetime) -> str | None:
    """O_CREAT|O_EXCL: exactly one creator wins. The token proves ownership at release."""
    token = secrets.token_hex(8)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return None
    with os.fdopen(fd, "wb") as handle:
        handle.write(_lock_body(now, token))
        handle.flush()
        os.fsync(handle.fileno())
    return token


def _read_lock(path: Path) -> dict[str, Any] | None:
    """The lock's content; {} while it is being written or if garbled; None if there is no lock."""
    try:
        data = json.loads(path.read_bytes() or b"{}")
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


def acquire_lock(folder: Path, now: datetime) -> str | Held:
    """Take the dream lock: a token on success, Held when another process is dreaming.

    A stale lock (over an hour old) is broken under a guard (an OS file lock that dies with
    its process): the breaker re-reads the lock under the guard, renames it away only if it is
    still stale, and only then creates its own, so a fresh lock is never broken.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    token = _create_lock(path, now)
    if token is not None:
        return token
    info = _read_lock(path)
    if info is not None and not lock_is_stale(_lock_time(info, path), now):
        return Held(_held_reason(info))
    import filelock

    try:
        with filelock.FileLock(str(folder / GUARD_NAME), timeout=GUARD_TIMEOUT_SECONDS):
            info = _read_lock(path)
            if info is not None and lock_is_stale(_lock_time(info, path), now):
                tomb = path.with_name(f"{LOCK_NAME}.stale-{secrets.token_hex(4)}")
                os.replace(path, tomb)
                tomb.unlink(missing_ok=True)
            token = _create_lock(path, now)
    except filelock.Timeout:
        return Held("another process is breaking a stale dream lock")
    if token is not None:
        return token
    return Held(_held_reason(_read_lock(path) or {}))


def _held_reason(info: Mapping[str, Any]) -> str:
    since = f" since {info['time']}" if info.get("time") else ""
    return f"another dream is running (pid {info.get('pid', '?')}{since})"


def release_lock(folder: Path, token: str) -> None:
    """Remove the lock if it is still ours (never someone else's that replaced a stale one)."""
    path = folder / LOCK_NAME
    info = _read_lock(path)
    if info is not None and info.get("token") == token:
        path.unlink(missing_ok=True)
