"""What the agent, `%ctx tasks` and the panel are told of the background runs, in words: the
mechanics (run.py, board.py) keep states and offsets, and this module says them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctx_magic.images import human_size
from ctx_magic.notebook.runs.log import RunInfo
from ctx_magic.notebook.runs.stall import last_line

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
    the runs of this kernel still live in other sessions (`RunBoard.elsewhere`)."""
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
