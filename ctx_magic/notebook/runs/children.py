"""The subprocesses a run's code starts: the pipes they get when its code chose no streams of
its own (their output becomes the run's, their stdin is where an answer can reach them), the
thread that pumps that output in, and how they are killed when the run is stopped."""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

PIPE_CHUNK = 65_536
PUMP_DRAIN_SECONDS = 2.0  # what exited subprocesses wrote is read in before the run's end is written


class Children:
    """One run's subprocesses; `printed` takes what they write."""

    def __init__(self, printed: Callable[[str], None]) -> None:
        self._printed = printed
        self._lock = threading.RLock()
        self._started: list[subprocess.Popen[Any]] = []
        self._groups: set[int] = set()
        """The pids of the ones that lead a process group of their own."""
        self._stdin: tuple[int, int] | None = None
        self._stdout: tuple[int, int] | None = None
        self._pump_thread: threading.Thread | None = None

    def streams(self) -> dict[str, int]:
        """The streams a subprocess gets when its code chose none: the run's."""
        with self._lock:
            if self._stdout is None:
                self._stdout = os.pipe()
                self._pump_thread = threading.Thread(target=self._pump, args=(self._stdout[0],),
                                                     name="ctx_magic run output", daemon=True)
                self._pump_thread.start()
            if self._stdin is None:
                self._stdin = os.pipe()
            return {"stdin": self._stdin[0], "stdout": self._stdout[1], "stderr": self._stdout[1]}

    def adopt(self, child: subprocess.Popen[Any], *, grouped: bool = False) -> None:
        """`grouped`: it leads a process group of its own, killed whole."""
        with self._lock:
            self._started.append(child)
            if grouped:
                self._groups.add(child.pid)

    def _pump(self, fd: int) -> None:
        """Their output into the run's, until the last of them closes it."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while chunk := os.read(fd, PIPE_CHUNK):
                self._printed(decoder.decode(chunk))
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)

    def drain(self) -> None:
        """The run's ends of their pipes closed (their stdin sees end-of-file), and what the ones
        that exited wrote read in before the run's end is written (another thread reads it)."""
        with self._lock:
            ends = [*(self._stdin or ()), *(self._stdout[1:] if self._stdout else ())]
            self._stdin = None
            exited = all(child.poll() is not None for child in self._started)
            pump = self._pump_thread
        for fd in ends:
            with contextlib.suppress(OSError):
                os.close(fd)
        if pump is not None and exited:
            pump.join(PUMP_DRAIN_SECONDS)  # a grandchild that kept the pipe open is not waited for long

    def feed(self, line: str) -> bool:
        """`line` to the stdin they share; False when none of them is alive to read it."""
        with self._lock:
            if self._stdin is None or not any(child.poll() is None for child in self._started):
                return False
            try:
                os.write(self._stdin[1], (line + "\n").encode())
            except OSError:
                return False
            return True

    def kill(self) -> None:
        with self._lock:
            for child in self._started:
                if child.pid in self._groups and child.returncode is None:  # not reaped: its pid is not reused
                    with contextlib.suppress(OSError):  # one that exited may have left what it started
                        os.killpg(child.pid, signal.SIGKILL)
                elif child.poll() is None:
                    with contextlib.suppress(OSError):
                        child.kill()
