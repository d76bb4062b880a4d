"""The cells the user runs between agent turns (SPEC N2): recorded by IPython's pre/post
run-cell hooks, kept until the next turn, then added to the context as notebook_cell pairs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ctx_magic.agent.session import Session
from ctx_magic.messages import notebook_cell_id, user_text
from ctx_magic.notebook.capture import CellRecord, OutputRecorder, cell_messages, is_own_or_skipped

CELLS_INTRO = "(Notebook cells the user ran before this conversation started follow.)"


class CellCapture:
    """Records user cells; `absorb` moves them into a session's context."""

    def __init__(self, recorder: OutputRecorder, *, image_max_bytes: Callable[[], int],
                 clock: Callable[[], float]) -> None:
        self.recorder = recorder
        self._image_max_bytes = image_max_bytes
        self._clock = clock
        self.pending: list[CellRecord] = []
        """Cells run since the last turn, oldest first."""
        self._cell: CellRecord | None = None

    def start(self, info: Any) -> None:
        """pre_run_cell: record this cell unless it is ours or marked `# ctx: skip`."""
        source = getattr(info, "raw_cell", "") or ""
        self._cell = None if is_own_or_skipped(source) else self.recorder.start(source)
        if self._cell is not None:
            self._cell.cell_id = getattr(info, "cell_id", None) or None

    def finish(self, result: Any) -> None:
        """post_run_cell: the recorded cell waits for the next turn."""
        record, self._cell = self._cell, None
        if record is None:
            return
        self.recorder.stop()
        self.pending.append(self.recorder.finish(record, result))

    def abandon(self) -> None:
        """A hook failed: stop recording, leave this cell out."""
        self.recorder.stop()
        self._cell = None

    @property
    def recording(self) -> bool:
        return self._cell is not None

    def carry(self, pending: Sequence[CellRecord]) -> None:
        """Cells recorded before `%reload_ext`: they go first."""
        self.pending = [*pending, *self.pending]

    def absorb(self, session: Session) -> None:
        """Recorded cells enter the context as notebook_cell pairs before the next turn."""
        if not self.pending:
            return
        if not any(m.sent for m in session.messages):
            session.append(user_text(CELLS_INTRO, timestamp=self._clock()))
        for record in self.pending:
            cell_id = notebook_cell_id(record.execution_count)
            for message in cell_messages(record, cell_id, self._image_max_bytes(), self._clock()):
                session.append(message)
        self.pending = []
