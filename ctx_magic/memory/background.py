"""The memory manager's work in threads (extraction at session end, dreaming), and the line a
failure or a refusal there leaves for the user at the next chance."""

from __future__ import annotations

import threading
from collections.abc import Callable

JOIN_SECONDS = 15.0  # how long a new session waits for the last one's extraction


class BackgroundWork:
    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._line: str | None = None
        """A line for the user at the next chance: a background task failed, refused something, or
        proposed team memories for review."""

    def report(self, line: str) -> None:
        """Keep a line for the user (the latest one wins)."""
        self._line = line

    def take_report(self) -> str | None:
        """The line kept for the user, now said: None until the next report."""
        line, self._line = self._line, None
        return line

    def start(self, run: Callable[[], None], name: str) -> threading.Thread:
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def wait(self, timeout: float = JOIN_SECONDS) -> None:
        for thread in list(self._threads):
            thread.join(timeout)
        self._threads = [t for t in self._threads if t.is_alive()]
