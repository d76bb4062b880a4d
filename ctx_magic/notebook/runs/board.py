"""This kernel's runs of the agent's code: the foreground run the turn waits for, the
background runs that go on beside the user's cells, the watch that notices a stall, and what
the agent, `%ctx tasks` and the panel are told of them.

The agent hears of a background run through its tools (the `python` call that started it, a
`task` read) and, when a run's state changed since it was last told, through one short line
before its next request (`news`): never the log itself, and nothing at all while nothing
changed, so the requests' cached prefix is never disturbed by a run going on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from ctx_magic.agent.tools import ToolError
from ctx_magic.images import human_size
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.outputs import KERNEL_RUN
from ctx_magic.notebook.runs.log import LIVE, RUN_ID, RunInfo, log_tail, read_log, stored_info, write_info
from ctx_magic.notebook.runs.routing import RunIO
from ctx_magic.notebook.runs.run import Run
from ctx_magic.notebook.runs.wording import (
    OTHER_SESSIONS_RUNS,
    STALLED,
    duration,
    last_printed_line,
    news_line,
    words,
)
from ctx_magic.store.files import make_private_folder

CHECK_SECONDS = 1.0  # how often runs are looked at for a stall (and the panel's last lines refreshed)
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
        self.check_every = CHECK_SECONDS
        self.stop_grace = INTERRUPT_GRACE
        """Seconds a stopped run gets to end before it is said to be still stopping."""
        self.runs: dict[Path, Run] = {}
        """This kernel's runs that have a log, by its path."""
        self.listeners: list[Callable[[], None]] = []
        """Told when a run's state or last line changed (the panel), from the watch's thread."""
        self._lock = threading.RLock()
        self._watch: threading.Thread | None = None
        self._wake = threading.Event()
        self._closed = False

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
            self._watch_runs()
        return run

    def _keep(self, run: Run) -> None:
        """An id and a log in the session's `tasks/` folder for `run`."""
        folder = self._folder()
        if folder is None:
            raise ToolError("A background run needs a session folder, and there is none yet.")
        with self._lock:
            try:
                make_private_folder(folder)
                run_id = self._next_id(folder)
                path = folder / f"{run_id}.log"
                run.go_background(path, run_id)
            except OSError as error:
                raise ToolError(f"A background run could not start its log in {folder}: {error}") from error
            self.runs[path] = run

    def _next_id(self, folder: Path) -> str:
        taken = [int(m.group(1)) for p in folder.glob("t*.*") if (m := RUN_ID.match(p.stem))]
        return f"t{max(taken, default=0) + 1}"

    def supervise(self, run: Run, on_output: Callable[[str], None]) -> bool:
        """Wait for a foreground run, passing on what it prints; True when it ended, False when it
        stalled (it goes on as a background run). An interrupt stops it (KeyboardInterrupt)."""
        emitted = [0, 0]
        try:
            while True:
                with run.changed:
                    if not run.done.is_set():
                        run.changed.wait(self.check_every)
                self._emit_new(run, emitted, on_output)
                if run.done.is_set():
                    self._emit_new(run, emitted, on_output)
                    return True
                if run.check(self.now(), self._settings.stall_seconds) and run.state == "stalled":
                    run.told("stalled")  # the tool result tells the agent
                    try:
                        self._keep(run)
                    except ToolError:
                        run.stop()  # a run that can keep no log is not left waiting unseen
                        raise
                    self._watch_runs()
                    self._changed()
                    return False
        except KeyboardInterrupt:
            run.stop()
            if not run.done.wait(self.stop_grace):
                self._keep(run)  # inside a call Python cannot interrupt: it stops when that call returns
                self._watch_runs()
            raise

    @staticmethod
    def _emit_new(run: Run, emitted: list[int], on_output: Callable[[str], None]) -> None:
        for index, pieces in enumerate((run.record.stdout, run.record.stderr)):
            new = pieces[emitted[index]:]
            emitted[index] += len(new)
            if new:
                try:
                    on_output("".join(new))
                except Exception:  # noqa: BLE001 - showing progress must never break the run
                    pass

    def _watch_runs(self) -> None:
        """The watch thread: looks at the live runs every `check_every` seconds while any lives."""
        with self._lock:
            if self._watch is not None and self._watch.is_alive():
                return
            self._watch = threading.Thread(target=self._watching, name="ctx_magic run watch", daemon=True)
            self._watch.start()

    def _watching(self) -> None:
        while not self._closed:
            self._wake.wait(self.check_every)
            self._wake.clear()
            try:
                if not self.check():
                    return
            except Exception:  # noqa: BLE001 - the watch must never raise into the kernel
                return

    def check(self) -> bool:
        """Look at every live run once (a stall, a resumed one, an end); True while any lives."""
        live, changed = False, False
        with self._lock:
            runs = list(self.runs.values())
        threshold = self._settings.stall_seconds
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
        info = self._stored(path.with_suffix(".json"))
        return None, info, path if info is not None else None

    def read(self, run_id: str, offset: int | None = None) -> str:
        run, info, path = self.find(run_id)
        if info is None or path is None:
            return self._unknown(run_id)
        start = info.read_to if offset is None else max(0, offset)
        text, end, size = read_log(path, start)
        head = f"Run {run_id}: {words(info, self.now())}; its log has {human_size(size)}"
        if start > size:  # nothing was read: where the agent read to stays where it was
            self._told(run, info)
            return f"{head}; offset {start:,} is past its end: nothing there."
        self._told(run, info, read_to=max(info.read_to, end))
        if end == start:
            return f"{head}; no new output since offset {start:,}."
        more = f"\n[more follows: read from offset {end:,}]" if end < size else f"\n[next offset: {end:,}]"
        return f"{head}. Output from offset {start:,} to {end:,}:\n{text.rstrip()}{more}"

    def stop(self, run_id: str) -> str:
        run, info, _path = self.find(run_id)
        if info is None:
            return self._unknown(run_id)
        if run is None or not run.stop():
            return f"Run {run_id} is not running: {words(info, self.now())}."
        run.done.wait(self.stop_grace)
        self.check()
        return (f"Run {run_id} stopped." if run.done.is_set() else
                f"Run {run_id} is stopping: it is inside a call Python cannot interrupt and stops when it returns.")

    def answer(self, run_id: str, text: str | Callable[[str], str]) -> str:
        """Send `text` to what the run waits in; a callable is asked for the text (given 'input',
        'password' or '') only once the run is known to be live, so the user is never prompted in vain."""
        run, info, _path = self.find(run_id)
        if info is None:
            return self._unknown(run_id)
        if run is None or not run.live:
            return f"Run {run_id} is not running: {words(info, self.now())}."
        where = run.answer(text if isinstance(text, str) else text(run.waiting))
        if where is None:
            return (f"Run {run_id} is not waiting for an answer it can be given: no input() or getpass() of its "
                    "code waits, and no subprocess of it reads its stdin.")
        self.check()
        return f"Sent to {where} of run {run_id}."

    def _unknown(self, run_id: str) -> NoReturn:
        known = ", ".join(info.id for info in self.infos()) or "none yet"
        where = next((f"; {line}: resume that session to reach it" for run, line in self._elsewhere()
                      if run.id == run_id), "")
        raise ToolError(f"There is no background run {run_id!r} in this session (its runs: {known}){where}.")

    def _elsewhere(self) -> list[tuple[Run, str]]:
        """This kernel's live runs started in other sessions (before `%agent --new` or a resume),
        each with its line: they go on, and are read, answered and stopped from their own session."""
        folder, now = self._folder(), self.now()
        return [(run, f"{run.id} of session {path.parent.parent.name}: {words(run.info(), now)}")
                for path, run in sorted(self.runs.items()) if path.parent != folder and run.live]

    def elsewhere(self) -> list[str]:
        """What `%ctx tasks` and a switch of session say of the runs still live in other sessions:
        a heading and a line each, or nothing."""
        lines = [line for _run, line in self._elsewhere()]
        return [OTHER_SESSIONS_RUNS, *(f"  {line}" for line in lines)] if lines else []

    # -- what they are told --------------------------------------------------------------------------

    def infos(self) -> list[RunInfo]:
        """The current session's runs, oldest first: this kernel's live state, and what dead kernels left."""
        folder = self._folder()
        if folder is None or not folder.is_dir():
            return []
        found = []
        for path in folder.glob("t*.json"):
            run = self.runs.get(path.with_suffix(".log"))
            info = run.info() if run is not None else self._stored(path)
            if info is not None:
                found.append(info)
        return sorted(found, key=lambda info: int(info.id[1:]))

    def _stored(self, path: Path) -> RunInfo | None:
        """A run another kernel left: one that was running then ended with that kernel."""
        info = stored_info(path)
        if info is not None and info.state in LIVE and info.kernel != KERNEL_RUN:
            info = replace(info, state="ended", detail="")
            write_info(path, info)
        return info

    def _told(self, run: Run | None, info: RunInfo, *, read_to: int | None = None) -> None:
        """The agent now knows the run's state (and has read its log up to `read_to`)."""
        if run is not None:
            run.told(read_to=read_to)
            return
        folder = self._folder()
        if folder is not None:
            write_info(folder / f"{info.id}.json",
                        replace(info, reported=info.state, read_to=read_to if read_to is not None else info.read_to))

    def news(self) -> list[str]:
        """One line per run whose state changed since the agent was last told; telling it counts."""
        lines = []
        now = self.now()
        for info in self.infos():
            if info.state == info.reported:
                continue
            run, _info, path = self.find(info.id)
            size = path.stat().st_size if path is not None and path.exists() else 0
            lines.append(news_line(info, now, unread=max(0, size - info.read_to)))
            self._told(run, info)
        return lines

    def rows(self) -> list[dict[str, Any]]:
        """The runs as `%ctx tasks` and the panel show them."""
        rows = []
        now = self.now()
        for info in self.infos():
            run, _info, path = self.find(info.id)
            size = path.stat().st_size if path is not None and path.exists() else 0
            tail = run.tail if run is not None else log_tail(path)
            line = last_printed_line(tail)
            rows.append({"id": info.id, "state": info.state, "words": words(info, now), "size": size,
                         "last_line": line, "log": str(path) if path is not None else "",
                         "can_stop": run is not None and run.live})
        return rows

    def live_lines(self) -> list[str]:
        """The live runs in one line each (said again after a compaction, which summarizes the news)."""
        now = self.now()
        return [f"Background run {info.id}: {words(info, now)}." for info in self.infos() if info.state in LIVE]

    def close(self) -> None:
        """The extension is unloaded: its runs are stopped and the routing put back."""
        self._closed = True
        self._wake.set()
        for run in list(self.runs.values()):
            run.stop()
        for run in list(self.runs.values()):
            run.done.wait(self.stop_grace)
            run.save()
            run.close_log()
        self.io.uninstall()


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
