"""When the dream runs: its gates, cheapest first, and the state they keep in the memory folder.

At least 24 hours since the last dream, the session folders scanned at most every 10 minutes, at
least 5 sessions since the last dream (after Claude Code's dreaming). The state file records the
last dream and the last scan; a missing or broken one is the empty state, so the gates open.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ctx_magic.memory.record import format_time, parse_time
from ctx_magic.memory.shared_folder import SHARED_FILE_MODE, read_regular_file
from ctx_magic.store.files import atomic_write_json
from ctx_magic.store.session import SessionDir, list_sessions

MIN_HOURS_SINCE_DREAM = 24  # Claude Code: time gate, minHours = 24
MIN_SESSIONS_SINCE_DREAM = 5  # Claude Code: session gate, minSessions = 5 new transcripts
CHECK_INTERVAL = timedelta(minutes=10)  # the session scan runs at most every 10 minutes

STATE_NAME = "dream-state.json"
_SESSION_STAMP = "%Y%m%d-%H%M%S"  # the prefix of session ids (ctx_magic.store.session)


@dataclass(frozen=True)
class DreamState:
    last_dream: datetime | None = None
    last_check: datetime | None = None

    def to_json(self) -> dict[str, str | None]:
        return {k: format_time(v) if v else None for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: Any) -> DreamState:
        if not isinstance(data, Mapping):
            return cls()
        found: dict[str, datetime | None] = {}
        for name in ("last_dream", "last_check"):
            value = data.get(name)
            try:  # a time we wrote is a string; a number or a list is someone else's edit
                found[name] = parse_time(value) if isinstance(value, str) and value else None
            except ValueError:
                found[name] = None
        return cls(**found)


def time_gate(state: DreamState, now: datetime) -> str | None:
    """Why the time gate is closed, or None when at least 24 hours passed since the last dream."""
    if state.last_dream is None:
        return None
    hours = max(0.0, (now - state.last_dream).total_seconds() / 3600)  # a clock ahead of ours stamped it: just now
    if hours >= MIN_HOURS_SINCE_DREAM:
        return None
    return f"the last dream was {hours:.1f} hours ago ({MIN_HOURS_SINCE_DREAM} needed)"


def check_interval_gate(state: DreamState, now: datetime) -> str | None:
    """Why the sessions are not scanned now, or None when the last scan is 10 minutes old."""
    if state.last_check is None or now - state.last_check >= CHECK_INTERVAL:
        return None
    minutes = (now - state.last_check).total_seconds() / 60
    return f"sessions were checked {minutes:.0f} minutes ago (every {CHECK_INTERVAL.seconds // 60} at most)"


def sessions_gate(count: int) -> str | None:
    if count >= MIN_SESSIONS_SINCE_DREAM:
        return None
    return f"{count} sessions since the last dream ({MIN_SESSIONS_SINCE_DREAM} needed)"


def session_created(folder: SessionDir) -> datetime:
    """When a session began: its id's time stamp, else its folder's modification time."""
    try:
        stamp = datetime.strptime(folder.session_id[:15], _SESSION_STAMP)
        return stamp.replace(tzinfo=timezone.utc)
    except ValueError:
        return datetime.fromtimestamp(folder.root.stat().st_mtime, timezone.utc)


def sessions_since(storage_dir: Path, since: datetime | None, exclude: str | None = None) -> list[SessionDir]:
    """Session folders created after `since` (all of them if None), oldest first."""
    return [
        s
        for s in list_sessions(Path(storage_dir))
        if s.session_id != exclude and (since is None or session_created(s) > since)
    ]


def load_state(folder: Path) -> DreamState:
    """The folder's dream state; the empty state when it is missing, unreadable or not a small regular
    file (a FIFO planted there would otherwise hold every member's dream check for good)."""
    try:
        return DreamState.from_json(json.loads(read_regular_file(folder / STATE_NAME).data))
    except (OSError, ValueError):
        return DreamState.from_json({})


def save_state(folder: Path, state: DreamState, *, shared: bool = False) -> None:
    atomic_write_json(folder / STATE_NAME, state.to_json(), mode=SHARED_FILE_MODE if shared else None)


def open_gates(folder: Path, now: datetime, *, shared: bool = False) -> tuple[DreamState, str | None]:
    """The cheapest gates (the time since the last dream, then the interval between checks): the
    folder's state and why they are closed, or None; a check that passes them is recorded."""
    state = load_state(folder)
    closed = time_gate(state, now) or check_interval_gate(state, now)
    if closed:
        return state, closed
    state = dataclasses.replace(state, last_check=now)
    save_state(folder, state, shared=shared)
    return state, None
