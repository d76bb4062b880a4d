"""Cells as tool results across a restart: the cells run since the last agent turn are on disk as they finish,
the next turn takes them once, and a crash between taking and consuming never doubles one."""

from __future__ import annotations

from ctx_magic.messages import Message, tool_use_block
from ctx_magic.store.pending import PENDING_ID_KEY, PendingCells, absorbed_ids
from ctx_magic.store.session import SessionDir


def cell(n: int) -> dict:
    return {"source": f"x = {n}", "execution_count": n, "stdout": [f"{n}\n"]}


def test_cells_are_on_disk_as_they_finish_and_load_oldest_first(tmp_path):
    pending = SessionDir(tmp_path, "s").create().pending_cells()
    added = [pending.add(cell(n), now=float(n)) for n in (1, 2, 3)]
    again = PendingCells(pending.path).load()  # a new kernel reads what the old one wrote
    assert again.cells == added and again.problems == []
    assert [c.cell["source"] for c in again.cells] == ["x = 1", "x = 2", "x = 3"]


def test_consumed_cells_are_gone_and_the_file_with_them(tmp_path):
    pending = PendingCells(tmp_path / "pending-cells.jsonl")
    one, two = pending.add(cell(1), now=1), pending.add(cell(2), now=2)
    pending.consume([one.id])
    assert pending.load().cells == [two]
    later = pending.add(cell(3), now=3)
    pending.consume([two.id, later.id])
    assert pending.load().cells == [] and not pending.path.exists()
    pending.consume(["unknown"])  # nothing there: fine


def test_cells_the_transcript_already_holds_are_not_taken_twice(tmp_path):
    pending = PendingCells(tmp_path / "pending-cells.jsonl")
    one, two = pending.add(cell(1), now=1), pending.add(cell(2), now=2)
    use = Message("assistant", (tool_use_block("cell_1_1", "notebook_cell", {}),), meta={PENDING_ID_KEY: one.id})
    records = [{"type": "message", **use.to_json()}, {"type": "event", "event": "cleared"}]
    assert absorbed_ids(records) == {one.id}
    assert pending.load(absorbed=absorbed_ids(records)).cells == [two]  # the crash came before consume()


def test_a_cell_record_cut_off_by_a_crash_is_reported_and_the_next_one_kept(tmp_path):
    pending = PendingCells(tmp_path / "pending-cells.jsonl")
    first = pending.add(cell(1), now=1)
    with open(pending.path, "ab") as fh:
        fh.write(b'{"id": "abc", "cell": {"sou')
    after = pending.add(cell(2), now=2)
    loaded = pending.load()
    assert loaded.cells == [first, after]
    assert loaded.problems == ["pending-cells.jsonl line 2: a cell record cut off or unreadable (27 bytes); "
                               "that cell is left out"]
    pending.consume([first.id])  # the damaged line moves aside instead of being reported every turn
    assert pending.load().cells == [after] and pending.load().problems == []
    assert pending.path.with_suffix(".damaged").read_bytes() == b'{"id": "abc", "cell": {"sou\n'


def test_lone_surrogates_in_a_cell_round_trip(tmp_path):
    pending = PendingCells(tmp_path / "pending-cells.jsonl")
    added = pending.add({"stdout": ["bad \udcff byte"]}, now=0)
    assert pending.load().cells == [added]
