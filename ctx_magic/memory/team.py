"""Team memory: a memory folder the members of a team share (`<team_memory_dir>/<team>/`), who
a member is, whether the folder can be used, and its dream.

What goes there: `%memory add --team`, and what extraction finds about the shared work
(`longterm.belongs_to_team`). Every member's sessions read it within the one memory budget
(`prompts.select_for_prompt`). Its dream consolidates the folder's own memories (a member's
session notes stay theirs) under the dream lock, which holds across machines where the
filesystem lets it (`lock.py`, `shared_folder.py`).
"""

from __future__ import annotations

import getpass
import os
from datetime import datetime
from pathlib import Path

from ctx_magic.memory.dream import DreamResult, run_locked, run_phases
from ctx_magic.memory.dream_gates import MIN_SESSIONS_SINCE_DREAM, open_gates
from ctx_magic.memory.longterm import TextModel
from ctx_magic.memory.shared_folder import lock_support
from ctx_magic.memory.store import MemoryStore, account_name

MIN_TEAM_CHANGES = MIN_SESSIONS_SINCE_DREAM  # the team's folder dreams once 5 memories came or changed
UNKNOWN_AUTHOR = "unknown"


def default_author() -> str:
    """Who a member is when `CtxMagic.author` is empty: JupyterHub's user name where it is set (on a
    hub, every member's container may run as the same OS user, `jovyan`), else the OS account this
    process runs as (the name its files' owner will show, so the name is confirmed on reading)."""
    hub_user = os.environ.get("JUPYTERHUB_USER", "").strip()
    if hub_user:
        return hub_user
    account = account_name(os.getuid()) if hasattr(os, "getuid") else ""  # no accounts on Windows
    if account and not account.startswith("uid "):
        return account
    try:
        return getpass.getuser() or UNKNOWN_AUTHOR
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return UNKNOWN_AUTHOR


def folder_problem(root: Path) -> str | None:
    """Why the shared root cannot hold the team's folder, or None. The root is never created: a
    missing one is usually a volume that is not mounted, and writing to a local folder in its place
    would keep this member's memories from everyone else."""
    if not root.is_dir():
        return f"the team memory folder {root} does not exist (is the shared volume mounted?)"
    if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
        return f"the team memory folder {root} cannot be written by this user"
    return None


def lock_notice(folder: Path) -> str | None:
    """One line where the team folder's filesystem cannot give a lock across machines, or None."""
    support = lock_support(folder)
    if support.os_locks:
        return None
    return (f"Team memory: {support.caveat}. Dreaming it uses a lock file instead (a holder that died is "
            "taken over after an hour); memories are still written safely, each to its own file.")


def changes_gate(count: int) -> str | None:
    if count >= MIN_TEAM_CHANGES:
        return None
    return f"{count} team memories came or changed since the team's last dream ({MIN_TEAM_CHANGES} needed)"


def dream_team(store: MemoryStore, model: TextModel, *, now: datetime, force: bool = False,
               holder: str = "") -> DreamResult:
    """Consolidate the team's folder. Gates, cheapest first: 24 hours since the team's last dream
    (by any member: the state is in the folder), checked at most every 10 minutes, and at least 5
    memories added or changed since. Then the phases run on the folder's memories alone, under the
    dream lock: a second member who tries meanwhile is told who dreams, and skips."""
    if not force:
        state, closed = open_gates(store.folder, now, shared=True)
        if closed:
            return DreamResult("skipped", closed)
        last = state.last_dream
        closed = changes_gate(sum(1 for m in store.all() if last is None or m.updated > last))
        if closed:
            return DreamResult("skipped", closed)
    return run_locked(store, now, holder, lambda touched: run_phases(store, [], model, now, touched, author=holder))
