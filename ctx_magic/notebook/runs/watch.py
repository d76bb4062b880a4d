"""Watching runs: the thread that looks at the live background runs every second while any lives
(a stall, a resumed run, an end, the panel's last lines), and a turn's wait on its foreground
run, which passes on what it prints and ends early when it stalls."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ctx_magic.notebook.runs.run import Run

CHECK_SECONDS = 1.0  # how often runs are looked at for a stall (and the panel's last lines refreshed)


class Watch:
    """The watch thread: calls `look` every `every` seconds until it returns False (no run lives)."""

    def __init__(self, look: Callable[[], bool], every: float = CHECK_SECONDS) -> None:
        self._look = look
        self.every = every
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._closed = False

    def ensure(self) -> None:
        """Started, unless it is watching already."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._watching, name="ctx_magic run watch", daemon=True)
            self._thread.start()

    def _watching(self) -> None:
        while not self._closed:
            self._wake.wait(self.every)
            self._wake.clear()
            try:
                if not self._look():
                    return
            except Exception:  # noqa: BLE001 - the watch must never raise into the kernel
                return

    def close(self) -> None:
        self._closed = True
        self._wake.set()


def follow(run: Run, on_output: Callable[[str], None], *, every: float, stalled: Callable[[], bool]) -> bool:
    """Wait for a foreground run, passing on what it prints; True when it ended, False as soon as
    `stalled()` (asked every `every` seconds and at each output) says it stalled."""
    emitted = [0, 0]
    while True:
        with run.changed:
            if not run.done.is_set():
                run.changed.wait(every)
        _emit_new(run, emitted, on_output)
        if run.done.is_set():
            _emit_new(run, emitted, on_output)
            return True
        if stalled():
            return False


def _emit_new(run: Run, emitted: list[int], on_output: Callable[[str], None]) -> None:
    for index, pieces in enumerate((run.record.stdout, run.record.stderr)):
        new = pieces[emitted[index]:]
        emitted[index] += len(new)
        if new:
            try:
                on_output("".join(new))
            except Exception:  # noqa: BLE001 - showing progress must never break the run
                pass
