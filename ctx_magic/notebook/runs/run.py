"""One run of the agent's code in a thread of the kernel: in the foreground (the agent's turn
waits for it) or as a background run (the turn goes on, and so do the user's cells).

A foreground run that stalls (stall.py) stops holding the turn: it goes on as a background run
the agent can answer or stop. Stopping a run raises `RunStopped` in its thread (between two
Python instructions: a call blocked inside C returns first) after killing the subprocesses it
started, and wakes an `input()` it waits in. Only `Run` writes a run's fields: the board and
the watch ask it through its methods.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctx_magic.notebook.outputs import KERNEL_RUN, CellRecord, formatted
from ctx_magic.notebook.runs.cell_code import CodeThread, RunStopped, error_text, run_source, running_cell_number
from ctx_magic.notebook.runs.children import Children
from ctx_magic.notebook.runs.log import CODE_KEPT_CHARS, LIVE, RunInfo, write_info
from ctx_magic.notebook.runs.output import RunOutput
from ctx_magic.notebook.runs.routing import RunIO
from ctx_magic.notebook.runs.stall import TAIL_CHARS, is_stalled, last_line, shown_prompt


class Run:
    """One run of the agent's code in its own thread."""

    def __init__(self, shell: Any, io: RunIO, code: str, clock: Callable[[], float], *, background: bool) -> None:
        self.shell, self.code, self.clock = shell, code, clock
        self.cell_number = running_cell_number(shell)
        """The cell it started in (the %%agent cell), which its tracebacks name."""
        self.record = CellRecord(code)
        """What a foreground run printed, displayed, returned and raised (its tool result)."""
        self._output = RunOutput(self.record, background=background)
        self.id = ""
        self.log_path: Path | None = None
        self.state, self.detail, self.tail = "running", "", ""
        self.started_at = self.last_output_at = clock()
        self.ended_at: float | None = None
        self.read_to, self.reported = 0, "running"
        """Where the agent's last read of the log ended; the state the agent was last told."""
        self.waiting = ""
        """'input' or 'password' while its code waits in input() or getpass()."""
        self.stopping = False
        self._answers: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self.children = Children(lambda text: self.printed("stdout", text))
        """The subprocesses its code started (routing.py gives them the run's streams)."""
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.done = threading.Event()
        self._thread = CodeThread(lambda: run_source(shell, code, self.cell_number), self._finish,
                                  lambda: io.bound(self))
        self.outcome: BaseException | None = None
        self._seen: tuple[str, int] = ("", -1)
        """(state, log size) when the watch last looked: a change is saved and shown."""

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def info(self) -> RunInfo:
        with self.lock:
            silent = self.clock() - self.last_output_at if self.state == "stalled" and not self.waiting else 0.0
            return RunInfo(self.id, self.state, self.detail, self.started_at, self.ended_at, KERNEL_RUN,
                           self.reported, self.read_to, silent, self.code[:CODE_KEPT_CHARS])

    # -- its thread ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def _finish(self, value: Any, error: BaseException | None) -> None:
        self.children.drain()
        with self.lock:
            if value is not None:
                self.record.returned(formatted(self.shell, value))
                if self._output.background:
                    self._output.append(f"[result]\n{self.record.result.get('text/plain', '')}\n")
            if error is not None:
                self.outcome = error
                self.record.failed(error_text(self.shell, error))
                if self._output.background and not isinstance(error, RunStopped):
                    self._output.append(f"{self.record.error.rstrip()}\n")
            stopped = self.stopping or isinstance(error, RunStopped)
            self.state = "stopped" if stopped else ("failed" if error is not None else "finished")
            self.detail = "" if stopped or error is None else last_line(self.record.error or "").strip()[:200]
            self.waiting = ""
            self.ended_at = self.clock()
            self.changed.notify_all()
        self.save()
        self.done.set()

    # -- what its code prints, displays and reads (routing.py routes them here) ------------------

    def printed(self, stream: str, text: str) -> None:
        with self.lock:
            self._output.printed(stream, text)
            self._heard(text)

    def displayed(self, data: dict[str, Any], *, update: bool = False, display_id: str | None = None) -> None:
        with self.lock:
            self._output.displayed(data, update=update, display_id=display_id)
            self._heard("")

    def _heard(self, text: str) -> None:
        self.tail = (self.tail + text)[-TAIL_CHARS:]
        self.last_output_at = self.clock()
        self.changed.notify_all()

    def ask(self, prompt: str, *, password: bool) -> str:
        """input() or getpass() in its code: the prompt goes to its output, the answer comes from
        `answer` (the agent, or the user with %ctx answer); a stop raises RunStopped."""
        if prompt:
            self.printed("stdout", prompt)
        return self._wait_answer("password" if password else "input", echo=not password)

    def read_line(self) -> str:
        """`sys.stdin.readline()` in its code (the builtin input() between cells): one answer."""
        return self._wait_answer("input", echo=True) + "\n"

    def _wait_answer(self, kind: str, *, echo: bool) -> str:
        with self.lock:
            self.waiting = kind
            self.detail = shown_prompt(self.tail) or "(no prompt)"
            self.changed.notify_all()
        try:
            answer = self._answers.get()
        finally:
            with self.lock:
                self.waiting = ""
        if answer is None:
            raise RunStopped()
        self.printed("stdout", (answer if echo else "") + "\n")  # as a terminal shows what was typed
        return answer

    # -- what the watch, the agent and the user do to it -----------------------------------------

    def check(self, now: float, threshold: float) -> bool:
        """Stalled or running again, by the rules of stall.py; True when the state changed."""
        with self.lock:
            if not self.live:
                return False
            stalled = is_stalled(now=now, last_output_at=self.last_output_at, threshold=threshold, tail=self.tail,
                                 waiting=bool(self.waiting))
            state = "stalled" if stalled else "running"
            if state == self.state:
                return False
            self.state = state
            if stalled and not self.waiting:
                self.detail = shown_prompt(self.tail)
            self.changed.notify_all()
            return True

    def look(self, now: float, threshold: float) -> bool:
        """The watch's look: `check`, then True (and its json saved) when its state or log changed
        since the last look."""
        moved = self.check(now, threshold)
        with self.lock:
            current = (self.state, self._output.size)
            if not moved and current == self._seen:
                return False
            self._seen = current
        self.save()
        return True

    def told(self, state: str | None = None, *, read_to: int | None = None) -> None:
        """The agent now knows its state (`state`: the one its tool result gave), and has read its
        log up to `read_to`."""
        with self.lock:
            self.reported = state or self.state
            self.read_to = read_to if read_to is not None else self.read_to
        self.save()

    def answer(self, text: str) -> str | None:
        """A line for what it waits on: its input(), or the stdin of its subprocesses; None when
        it waits on neither."""
        with self.lock:
            if not self.live:
                return None
            if self.waiting:
                self._answers.put(text)
                where = "the getpass()" if self.waiting == "password" else "the input()"
            elif self.children.feed(text):
                self.printed("stdout", text + "\n")
                where = "the stdin of the subprocess"
            else:
                return None
            self.last_output_at = self.clock()
            self.state, self.reported = "running", "running"
            self.changed.notify_all()
        self.save()
        return where

    def stop(self) -> bool:
        """Kill its subprocesses, wake an input() it waits in, and raise RunStopped in its code."""
        with self.lock:
            if not self.live:
                return False
            self.stopping = True
            self.children.kill()
            self._answers.put(None)
            self._thread.stop()
            return True

    # -- its log ---------------------------------------------------------------------------------

    def go_background(self, log_path: Path, run_id: str) -> None:
        """From now on its output goes to its log (what it printed so far first)."""
        with self.lock:
            self.id, self.log_path = run_id, log_path
            self._output.to_log(log_path)
            self.save()

    def save(self) -> None:
        """Its json beside its log (its state for `%ctx tasks`, the panel, and a resumed session)."""
        if self.log_path is not None:
            write_info(self.log_path.with_suffix(".json"), self.info())

    def close_log(self) -> None:
        with self.lock:
            self._output.close()

