"""A shell with ctx_magic loaded whose run board is on a manual clock, and waits on a run's own
condition (never on time): what the background-run tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from builders import ManualClock
from notebook_rig import controller, offline_shell, run

WAIT = 20.0  # seconds a test waits for a run's thread at most (a bound, never a pace)


@contextmanager
def board_shell(tmp_path: Any, monkeypatch: Any) -> Iterator[tuple[Any, Any, ManualClock]]:
    """(shell, run board, its manual clock) with a session open; user_ns has `_runs` and `_clock`."""
    with offline_shell(tmp_path, monkeypatch) as shell:
        board = controller(shell).runs
        clock = ManualClock(1_800_000_000.0)
        board.clock = clock
        shell.user_ns.update(_runs=board, _clock=clock)
        run(shell, "%%agent\nhello")
        yield shell, board, clock


def wait_for(target: Any, condition: Callable[[], bool], what: str = "the run") -> None:
    """Until `condition` holds, woken by the run's own notifications; fails after WAIT seconds."""
    with target.changed:
        if not target.changed.wait_for(condition, WAIT):
            raise AssertionError(f"{what} did not get there in {WAIT:.0f} s")


def only_run(board: Any) -> Any:
    (found,) = board.runs.values()
    return found


def log_text(board: Any, run_id: str) -> str:
    _run, _info, path = board.find(run_id)
    return path.read_text(encoding="utf-8")
