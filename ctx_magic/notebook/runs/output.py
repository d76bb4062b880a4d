"""Where a run's output goes: its record while it runs in the foreground (the `python` tool's
result), its log once it runs in the background (what it printed so far first)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import IO, Any

from ctx_magic.notebook.outputs import CellRecord, display_text
from ctx_magic.store.files import open_private_append


class RunOutput:
    """One run's output; its run's lock is held around every call."""

    def __init__(self, record: CellRecord, *, background: bool) -> None:
        self.record = record
        """What a foreground run printed, displayed, returned and raised."""
        self.background = background
        """True once its output goes to its log (from the start, or since it stalled in the foreground)."""
        self._file: IO[bytes] | None = None
        self.size = 0
        """Bytes in its log."""
        self._shown_at: dict[str, int] = {}
        """A display's id -> its place in `record.displays` (an update replaces it there)."""

    def printed(self, stream: str, text: str) -> None:
        if self.background:
            self.append(text)
        else:
            (self.record.stderr if stream == "stderr" else self.record.stdout).append(text)

    def displayed(self, data: dict[str, Any], *, update: bool = False, display_id: str | None = None) -> None:
        if self.background:
            if line := _display_line(data):
                self.append(line)
        elif update and display_id in self._shown_at:
            self.record.displays[self._shown_at[display_id]] = dict(data)  # an update: its latest state
        else:
            if display_id:
                self._shown_at[display_id] = len(self.record.displays)
            self.record.displays.append(dict(data))

    def to_log(self, path: Path) -> None:
        """From now on into the log at `path`, open for the run's lifetime (what was recorded first)."""
        self._file = open_private_append(path)
        if not self.background:
            if self.record.stderr or self.record.displays:
                self.append(self.record.text() + "\n")
            else:  # as printed: a prompt keeps its line, so the answer follows it there
                self.append("".join(self.record.stdout))
            self.background = True

    def append(self, text: str) -> None:
        """`text` to the log (only a background run's output goes there)."""
        data = text.encode("utf-8", "replace")
        if self._file is not None:
            try:
                self._file.write(data)
                self._file.flush()  # in the file, not in this process: a crashed kernel loses nothing
            except (OSError, ValueError):
                pass  # a full disk or a closed log: the run goes on, its output is lost from here
        self.size += len(data)

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


def _display_line(data: dict[str, Any]) -> str:
    """What a display leaves in a background run's log: its text, or that an image was shown."""
    shown = display_text(data)
    images = [m for m in data if m.startswith("image/")]
    if shown:
        return f"[displayed {shown[0]}]\n{shown[1]}\n"
    return f"[displayed {images[0]}: images are not kept in the log]\n" if images else ""
