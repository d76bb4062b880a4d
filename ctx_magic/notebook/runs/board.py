"""This kernel's runs of the agent's code, kept by the board: the foreground run a turn waits for,
the background runs that go on beside the user's cells (each with an id and a log in the
session's `tasks/` folder), and what the agent and the user do to them (read, answer, stop).
The watch is watch.py; what the agent, `%ctx tasks` and the panel are told is news.py, in the
words of wording.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ctx_magic.agent.tools import ToolError
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.runs.log import RUN_ID, RunInfo, kept_info, read_log, write_told
from ctx_magic.notebook.runs.routing import RunIO
from ctx_magic.notebook.runs.run import Run
from ctx_magic.notebook.runs.watch import Watch, follow
from ctx_magic.notebook.runs.wording import (
    answer_text,
    elsewhere_line,
    not_running_text,
    read_text,
    stop_text,
    unknown_text,
)
from ctx_magic.store.files import make_private_folder

INTERRUPT_GRACE = 2.0  # seconds an interrupted foreground run gets to stop before it is left in the background


class RunBoard:
    """The runs of this kernel, and the session folder whose `tasks/` they are kept in."""

    def __init__(self, shell: Any, settings: CtxMagic, folder: Callable[[], Path | None],
                 clock: Callable[[], float]) -> None:
        self.shell = shell
        self._settings = settings
        """`stall_seconds`, read at each look."""
        self._folder = folder
        """The current session's `tasks/` folder (None before the first turn)."""
        self.clock = clock
        """What runs are timed by (tests put a manual clock here)."""
        self.io = RunIO(shell)
        self.io.install()  # at load, below any cell's own capture: a run's output never reaches a cell
        self.stop_grace = INTERRUPT_GRACE
        """Seconds a stopped run gets to end before it is said to be still stopping."""
        self.runs: dict[Path, Run] = {}
        """This kernel's runs that have a log, by its path."""
        self.listeners: list[Callable[[], None]] = []
        """Told when a run's state or last line changed (the panel), from the watch's thread."""
        self._lock = threading.RLock()
        self._watch = Watch(self.check)

    def now(self) -> float:
        return self.clock()

    # -- starting and watching ---------------------------------------------------------------------

    def start(self, code: str, *, background: bool, before: Callable[[Run], None] | None = None) -> Run:
        """A run of `code` in a thread of its own; a background one gets its id and log first.
        `before` is called with the run before its thread starts."""
        self.io.install()
        self.io.ensure()
        run = Run(self.shell, self.io, code, self.now, background=background)
        if background:
            self._keep(run)
        if before is not None:
            before(run)
        run.start()
        if background:
            self._watch.ensure()
        return run

    def _keep(self, run: Run) -> None:
        """An id and a log in the session's `tasks/` folder for `run`."""
        folder = self._folder()
        if folder is None:
            raise ToolError("A background run needs a session folder, and there is none yet.")
        with self._lock:
            try:
                make_private_folder(folder)
                taken = [int(m.group(1)) for p in folder.glob("t*.*") if (m := RUN_ID.match(p.stem))]
                run_id = f"t{max(taken, default=0) + 1}"
                path = folder / f"{run_id}.log"
                run.go_background(path, run_id)
            except OSError as error:
                raise ToolError(f"A background run could not start its log in {folder}: {error}") from error
            self.runs[path] = run

    def supervise(self, run: Run, on_output: Callable[[str], None]) -> bool:
        """Wait for a foreground run, passing on what it prints; True when it ended, False when it
        stalled (it goes on as a background run). An interrupt stops it (KeyboardInterrupt)."""
        def stalled() -> bool:
            return run.check(self.now(), self._settings.current.stall_seconds) and run.state == "stalled"

        try:
            if follow(run, on_output, every=self._watch.every, stalled=stalled):
                return True
            run.told("stalled")  # the tool result tells the agent
            try:
                self._keep(run)
            except ToolError:
                run.stop()  # a run that can keep no log is not left waiting unseen
                raise
            self._watch.ensure()
            self._changed()
            return False
        except KeyboardInterrupt:
            run.stop()
            if not run.done.wait(self.stop_grace):
                self._keep(run)  # inside a call Python cannot interrupt: it stops when that call returns
                self._watch.ensure()
            raise

    def check(self) -> bool:
        """Look at every live run once (a stall, a resumed one, an end); True while any lives."""
        live, changed = False, False
        with self._lock:
            runs = list(self.runs.values())
        threshold = self._settings.current.stall_seconds
        for run in runs:
            if run.look(self.now(), threshold):
                changed = True
            live = live or run.live
        if changed:
            self._changed()
        return live

    def _changed(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:  # noqa: BLE001 - a panel's failure must never stop the watch
                pass

    # -- what the agent and the user do ------------------------------------------------------------

    def find(self, run_id: str) -> tuple[Run | None, RunInfo | None, Path | None]:
        """(the live run, its info, its log) for an id of the current session's runs."""
        folder = self._folder()
        if folder is None or not RUN_ID.match(run_id):
            return None, None, None
        path = folder / f"{run_id}.log"
        run = self.runs.get(path)
        if run is not None:
            return run, run.info(), path
        info = kept_info(path.with_suffix(".json"))
        return None, info, path if info is not None else None

    def read(self, run_id: str, offset: int | None = None) -> str:
        run, info, path = self.find(run_id)
        if info is None or path is None:
            return self._unknown(run_id)
        start = info.read_to if offset is None else max(0, offset)
        text, end, size = read_log(path, start)
        # past its end nothing was read: where the agent read to stays where it was
        self.told(run, info, read_to=None if start > size else max(info.read_to, end))
        return read_text(run_id, info, self.now(), start=start, end=end, size=size, text=text)

    def stop(self, run_id: str) -> str:
        run, info, _path = self.find(run_id)
        if info is None:
            return self._unknown(run_id)
        if run is None or not run.stop():
            return not_running_text(run_id, info, self.now())
        run.done.wait(self.stop_grace)
        self.check()
        return stop_text(run_id, ended=run.done.is_set())

    def answer(self, run_id: str, text: str | Callable[[str], str]) -> str:
        """Send `text` to what the run waits in; a callable is asked for the text (given 'input',
        'password' or '') only once the run is known to be live, so the user is never prompted in vain."""
        run, info, _path = self.find(run_id)
        if info is None:
            return self._unknown(run_id)
        if run is None or not run.live:
            return not_running_text(run_id, info, self.now())
        where = run.answer(text if isinstance(text, str) else text(run.waiting))
        if where is not None:
            self.check()
        return answer_text(run_id, where)

    def _unknown(self, run_id: str) -> NoReturn:
        now = self.now()
        there = next((elsewhere_line(session, run.info(), now) for session, run in self.others() if run.id == run_id),
                     None)
        raise ToolError(unknown_text(run_id, [info.id for info in self.infos()], there))

    def others(self) -> list[tuple[str, Run]]:
        """This kernel's live runs started in other sessions (before `%agent --new` or a resume), each
        with its session's name: they go on, and are read, answered and stopped from their own session."""
        folder = self._folder()
        return [(path.parent.parent.name, run) for path, run in sorted(self.runs.items())
                if path.parent != folder and run.live]

    # -- what is kept of them ----------------------------------------------------------------------

    def infos(self) -> list[RunInfo]:
        """The current session's runs, oldest first: this kernel's live state, and what dead kernels left."""
        folder = self._folder()
        if folder is None or not folder.is_dir():
            return []
        found = []
        for path in folder.glob("t*.json"):
            run = self.runs.get(path.with_suffix(".log"))
            info = run.info() if run is not None else kept_info(path)
            if info is not None:
                found.append(info)
        return sorted(found, key=lambda info: int(info.id[1:]))

    def told(self, run: Run | None, info: RunInfo, *, read_to: int | None = None) -> None:
        """The agent now knows the run's state (and has read its log up to `read_to`)."""
        if run is not None:
            run.told(read_to=read_to)
        elif (folder := self._folder()) is not None:
            write_told(folder / f"{info.id}.json", info, read_to)

    def close(self) -> None:
        """The extension is unloaded: its runs are stopped and the routing put back."""
        self._watch.close()
        for run in list(self.runs.values()):
            run.stop()
        for run in list(self.runs.values()):
            run.done.wait(self.stop_grace)
            run.save()
            run.close_log()
        self.io.uninstall()
