"""The cells the user runs between agent turns: recorded by IPython's pre/post
run-cell hooks, kept until the next turn, then added to the context as notebook_cell pairs (a
cell of the agent's own code, named by its first line, as a re-run or a diff: agent_cells.py).

Once a session has had a turn here, each recorded cell is also written to that session's
pending-cells.jsonl as it finishes (store/pending.py), so a kernel restart does not lose it:
the next turn of the resumed session takes the cells the dead kernel left, then consumes them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.pin_board import PinBoard
from ctx_magic.errors import CtxMagicError
from ctx_magic.messages import Message, notebook_cell_id, user_text
from ctx_magic.notebook.agent_cells import as_agent_cell
from ctx_magic.notebook.capture import OutputRecorder
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.display import notice
from ctx_magic.notebook.outputs import CellRecord, cell_messages, is_own_or_skipped, pinned_source
from ctx_magic.notebook.wording import with_remedy
from ctx_magic.store.pending import PendingCells, absorbed_ids
from ctx_magic.store.session import SessionDir

CELLS_INTRO = "(Notebook cells the user ran before this conversation started follow.)"


class CellCapture:
    """Records user cells; `absorb` moves them into a session's context."""

    def __init__(self, recorder: OutputRecorder, settings: CtxMagic, clock: Callable[[], float]) -> None:
        self.recorder = recorder
        self._settings = settings
        """The settings in force: `image_max_bytes` caps the images a cell sends, read as it enters."""
        self._clock = clock
        self.pending: list[CellRecord] = []
        """Cells run since the last turn, oldest first."""
        self._cell: CellRecord | None = None
        self._into: _Attached | None = None
        """The current session's parts: recorded cells are kept on disk in its folder and enter
        its live context."""

    def start(self, info: Any) -> None:
        """pre_run_cell: record this cell unless it is ours or marked `# ctx: skip`."""
        source = getattr(info, "raw_cell", "") or ""
        cell_id = getattr(info, "cell_id", None) or None
        self._cell = None if is_own_or_skipped(source) else self.recorder.start(source, cell_id=cell_id)

    def finish(self, result: Any) -> None:
        """post_run_cell: the recorded cell waits for the next turn."""
        record, self._cell = self._cell, None
        if record is None:
            return
        self.recorder.stop()
        self.pending.append(self._kept(self.recorder.finish(record, result)))

    def attach(self, store: SessionDir, live: LiveContext, pins: PinBoard, append: Callable[[Message], None],
               notice: Callable[[str, str], None]) -> None:
        """A session opened: cells recorded from now on are kept in its pending-cells.jsonl, and
        enter its live context (through `append`) at its next turn; `notice` says what went wrong."""
        self._into = _Attached(store, live, pins, append, notice)

    def live_messages(self) -> Sequence[Message]:
        """The current session's live context, which the recorded cells enter (empty before one opens)."""
        return self._into.live.messages if self._into is not None else ()

    def _kept(self, record: CellRecord) -> CellRecord:
        """The cell written to the session's pending file (a failure there only loses its
        survival of a restart: it still enters from memory)."""
        if self._into is None:
            return record
        pending = self._into.store.pending_cells()
        try:
            written = pending.add(record.to_json(), now=self._clock())
        except CtxMagicError:
            return record
        record.kept_in(written.id, pending.path)
        return record

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

    def absorb(self) -> None:
        """Recorded cells enter the current session's context as notebook_cell pairs before the
        next turn: first those a dead kernel left in its pending file, then this kernel's; then
        they are consumed from their files."""
        attached = self._into
        if attached is None:
            return
        records = [*self._left_behind(attached), *self.pending]
        if not records:
            return
        if not any(m.sent for m in attached.live.messages):
            attached.append(user_text(CELLS_INTRO, timestamp=self._clock(), synthetic=True))
        for record in records:
            cell_id = notebook_cell_id(record.execution_count)
            pair = cell_messages(record, cell_id, self._settings.current.image_max_bytes, self._clock(),
                                 pending_id=record.pending_id)
            for message in as_agent_cell(pair, record.source, attached.live.messages):  # the agent's own code
                attached.append(message)
            _pin_if_marked(attached.pins, record)
        self.pending = []
        _consume(records)

    def _left_behind(self, attached: _Attached) -> list[CellRecord]:
        """Cells in the session's pending file that this kernel did not record (a kernel that
        died before its next turn wrote them), without those the transcript already holds."""
        pending = attached.store.pending_cells()
        loaded = pending.load()
        for problem in loaded.problems:
            attached.notice(problem, "warning")
        mine = {r.pending_id for r in self.pending}
        theirs = [c for c in loaded.cells if c.id not in mine]
        if theirs:  # a crash after they entered the transcript but before they were consumed
            taken = absorbed_ids(attached.store.load_transcript().records)
            theirs = [c for c in theirs if c.id not in taken]
        records = []
        for cell in theirs:
            record = CellRecord.from_json(cell.cell)
            record.kept_in(cell.id, pending.path)
            records.append(record)
        return records



@dataclass(frozen=True)
class _Attached:
    """The parts of the current session recorded cells enter."""

    store: SessionDir
    live: LiveContext
    pins: PinBoard
    append: Callable[[Message], None]
    notice: Callable[[str, str], None]


def _pin_if_marked(pins: PinBoard, record: CellRecord) -> None:
    """A cell marked `# ctx: pin` is pinned as it enters the context; past the budget, a notice."""
    source = pinned_source(record.source)
    if source is None:
        return
    try:
        pins.pin(source, cell=record.execution_count)
    except CtxMagicError as refused:  # said in the cell that absorbs it (the next %%agent's)
        notice(with_remedy(f"Cell {record.execution_count} was not pinned: {refused}", refused.remedy), "warning")


def _consume(records: Sequence[CellRecord]) -> None:
    """The cells are in the transcript now: out of every pending file that held them."""
    by_file: dict[Path, list[str]] = defaultdict(list)
    for record in records:
        if record.pending_file is not None and record.pending_id is not None:
            by_file[record.pending_file].append(record.pending_id)
    for path, ids in by_file.items():
        try:
            PendingCells(path).consume(ids)
        except CtxMagicError:  # left for the next turn; the transcript check keeps them from entering twice
            pass
