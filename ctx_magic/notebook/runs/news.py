"""What the agent, `%ctx tasks` and the panel are told of the board's runs.

The agent hears of a background run through its tools (the `python` call that started it, a
`task` read) and, when a run's state changed since it was last told, through one short line
before its next request (`news`): never the log itself, and nothing at all while nothing
changed, so the requests' cached prefix is never disturbed by a run going on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctx_magic.notebook.runs.board import RunBoard
from ctx_magic.notebook.runs.log import LIVE, log_tail
from ctx_magic.notebook.runs.wording import OTHER_SESSIONS_RUNS, elsewhere_line, last_printed_line, news_line, words


def news(board: RunBoard) -> list[str]:
    """One line per run whose state changed since the agent was last told; telling it counts."""
    lines = []
    now = board.now()
    for info in board.infos():
        if info.state == info.reported:
            continue
        run, _info, path = board.find(info.id)
        lines.append(news_line(info, now, unread=max(0, _size(path) - info.read_to)))
        board.told(run, info)
    return lines


def rows(board: RunBoard) -> list[dict[str, Any]]:
    """The runs as `%ctx tasks` and the panel show them."""
    found = []
    now = board.now()
    for info in board.infos():
        run, _info, path = board.find(info.id)
        tail = run.tail if run is not None else log_tail(path)
        found.append({"id": info.id, "state": info.state, "words": words(info, now), "size": _size(path),
                      "last_line": last_printed_line(tail), "log": str(path) if path is not None else "",
                      "can_stop": run is not None and run.live})
    return found


def live_lines(board: RunBoard) -> list[str]:
    """The live runs in one line each (said again after a compaction, which summarizes the news)."""
    now = board.now()
    return [f"Background run {info.id}: {words(info, now)}." for info in board.infos() if info.state in LIVE]


def elsewhere(board: RunBoard) -> list[str]:
    """What `%ctx tasks` and a switch of session say of the runs still live in other sessions:
    a heading and a line each, or nothing."""
    now = board.now()
    lines = [elsewhere_line(session, run.info(), now) for session, run in board.others()]
    return [OTHER_SESSIONS_RUNS, *(f"  {line}" for line in lines)] if lines else []


def _size(path: Path | None) -> int:
    return path.stat().st_size if path is not None and path.exists() else 0
