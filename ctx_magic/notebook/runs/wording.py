"""What the agent, `%ctx tasks` and the panel are told of the background runs, in words: the
mechanics (run.py, board.py) keep states and offsets, and this module says them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctx_magic.images import human_size
from ctx_magic.notebook.runs.log import RunInfo
from ctx_magic.notebook.runs.stall import last_line

if TYPE_CHECKING:
    from ctx_magic.notebook.runs.run import Run

LAST_LINE_CHARS = 120
OTHER_SESSIONS_RUNS = ("Still running from other sessions of this kernel "
                       "(%agent --resume ID reads, answers or stops them):")
STALLED = "stalled: waiting for input after"
"""How the `python` tool's result says a foreground run waits for an answer (and went on in the background)."""


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def words(info: RunInfo, now: float) -> str:
    """A run's state in a few words: 'running for 2 min', 'stalled: waiting for input after ...'."""
    elapsed = duration((info.ended_at or now) - info.started_at)
    if info.state == "running":
        return f"running for {elapsed}"
    if info.state == "stalled":
        silence = f" (no output for {duration(info.silent_for)})" if info.silent_for else ""
        return f"stalled: waiting for input after '{info.detail}'{silence}"
    if info.state == "failed":
        return f"failed after {elapsed}: {info.detail}"
    if info.state == "ended":
        return "ended with the kernel (its log is kept)"
    return f"{info.state} after {elapsed}"


def news_line(info: RunInfo, now: float, *, unread: int) -> str:
    """The one line the agent gets when a run's state changed."""
    if info.state == "stalled":
        line = (f"Background run {info.id} is {words(info, now)}: answer it (task, action 'answer'), stop it, "
                "or ask the user")
    elif info.state == "running":
        line = f"Background run {info.id} is running again (its output resumed)"
    else:
        line = f"Background run {info.id} {words(info, now)}"
    if unread and info.state != "stalled":
        line += f"; {human_size(unread)} of its output not read yet (task, action 'read')"
    return line + "."


def runs_listing(rows: list[dict[str, Any]], elsewhere: Sequence[str] = ()) -> str:
    """`%ctx tasks`: one line per run, then its last printed line and its log; then `elsewhere`,
    the runs of this kernel still live in other sessions (`news.elsewhere`)."""
    lines = [] if rows else ["No background runs in this session."]
    for row in rows:
        lines.append(f"{row['id']}  {row['words']}  ({human_size(row['size'])} of output)")
        if row["last_line"]:
            lines.append(f"    last line: {row['last_line']}")
        lines.append(f"    log: {row['log']}")
    return "\n".join([*lines, *elsewhere])


def last_printed_line(tail: str) -> str:
    line = last_line(tail).strip()
    return line if len(line) <= LAST_LINE_CHARS else line[: LAST_LINE_CHARS - 1] + "…"


def elsewhere_line(session: str, info: RunInfo, now: float) -> str:
    """A live run of another session of this kernel (read, answered and stopped from that session)."""
    return f"{info.id} of session {session}: {words(info, now)}"


def unknown_text(run_id: str, known: list[str], elsewhere: str | None) -> str:
    """The error for an id that is none of this session's runs (`elsewhere`: its line when it is
    another session's)."""
    where = f"; {elsewhere}: resume that session to reach it" if elsewhere else ""
    return f"There is no background run {run_id!r} in this session (its runs: {', '.join(known) or 'none yet'}){where}."


def read_text(run_id: str, info: RunInfo, now: float, *, start: int, end: int, size: int, text: str) -> str:
    """A `task` read: the run's state, then its log from `start` to `end` and where to read on."""
    head = f"Run {run_id}: {words(info, now)}; its log has {human_size(size)}"
    if start > size:
        return f"{head}; offset {start:,} is past its end: nothing there."
    if end == start:
        return f"{head}; no new output since offset {start:,}."
    more = f"\n[more follows: read from offset {end:,}]" if end < size else f"\n[next offset: {end:,}]"
    return f"{head}. Output from offset {start:,} to {end:,}:\n{text.rstrip()}{more}"


def not_running_text(run_id: str, info: RunInfo, now: float) -> str:
    return f"Run {run_id} is not running: {words(info, now)}."


def stop_text(run_id: str, *, ended: bool) -> str:
    return (f"Run {run_id} stopped." if ended else
            f"Run {run_id} is stopping: it is inside a call Python cannot interrupt and stops when it returns.")


def answer_text(run_id: str, where: str | None) -> str:
    """Where an answer went (`where`: None when the run waits on nothing it can be given)."""
    if where is None:
        return (f"Run {run_id} is not waiting for an answer it can be given: no input() or getpass() of its "
                "code waits, and no subprocess of it reads its stdin.")
    return f"Sent to {where} of run {run_id}."


def started_text(run: Run) -> str:
    """The `python` tool's result for a background run."""
    return (f"Started background run {run.id} (its log: {run.log_path}). It runs beside your next steps and the "
            "user's cells; read its output with the task tool. You will be told when it ends or stalls.")


def stalled_text(run: Run) -> str:
    """The `python` tool's result for a foreground run that stalled: what it printed, then why."""
    info = run.info()
    so_far = run.record.text()
    silence = f" (no output for {duration(info.silent_for)})" if info.silent_for else ""
    stall = (f"{STALLED} '{info.detail}'{silence}. The run goes on in the background as "
             f"{run.id}: answer it (task, action 'answer'), stop it (action 'stop'), or ask the user (they can "
             f"answer with %ctx answer {run.id}).")
    return stall if so_far == "(no output)" else f"{so_far}\n\n{stall}"
