"""Cell marks are keyed so that a kernel restart never marks the wrong cell: by the frontend's
cell id with its execution count, or by the count alone only within one kernel process."""

from __future__ import annotations

from ctx_magic.messages import Message, tool_result_block, tool_use_block
from ctx_magic.ui.marks import CellIndex, CellRef, cell_refs, with_marks


def cell_messages(count: int, cell_id: str | None, kernel: str, tool_use_id: str) -> tuple[Message, Message]:
    use = Message("assistant", (tool_use_block(tool_use_id, "notebook_cell",
                                               {"execution_count": count, "source": "x"}),),
                  meta={"cell": count, "cell_id": cell_id, "kernel": kernel})
    return use, Message("user", (tool_result_block(tool_use_id, "out"),))


def test_a_cell_with_an_id_is_keyed_by_its_id_whatever_the_kernel():
    assert CellRef(3, "c-1", "k1").key(current_kernel="k2") == "c-1"


def test_a_cell_without_an_id_is_marked_only_within_its_own_kernel_process():
    assert CellRef(3, None, "k1").key(current_kernel="k1") == "count:3"
    assert CellRef(3, None, "k1").key(current_kernel="k2") is None  # counts restarted at 1 since


def test_index_finds_cells_by_result_and_by_message_including_the_result_message():
    use, result = cell_messages(4, "c-4", "k1", "cell_4_aa")
    index = CellIndex()
    index.learn(use)
    index.learn(result)
    assert index.results(["cell_4_aa", "toolu_9"]) == {"cell_4_aa": CellRef(4, "c-4", "k1")}
    assert index.in_messages([result.uuid]) == [CellRef(4, "c-4", "k1")]
    assert index.in_messages([use.uuid, result.uuid]) == [CellRef(4, "c-4", "k1")]


def test_index_looks_in_the_live_context_when_it_has_not_seen_a_message():
    use, result = cell_messages(5, "c-5", "k1", "cell_5_bb")
    index = CellIndex(live=lambda: (use, result))
    assert index.results(["cell_5_bb"])["cell_5_bb"].cell_id == "c-5"


def test_an_old_transcript_without_cell_metadata_still_yields_the_count():
    use = Message("assistant", (tool_use_block("cell_7_cc", "notebook_cell", {"source": "x"}),))
    assert cell_refs(use) == {"cell_7_cc": CellRef(7, None, None)}
    assert CellIndex().results(["cell_8_dd"]) == {"cell_8_dd": CellRef(8)}


def test_a_cell_keeps_the_mark_of_its_latest_run():
    marks = with_marks({}, [CellRef(9, "c-1", "k")], kind="persisted", why="saved", card="saved-1",
                       current_kernel="k")
    older = with_marks(marks, [CellRef(3, "c-1", "k")], kind="summarized", why="summarized", card="compaction-1",
                       current_kernel="k")
    assert older["c-1"]["count"] == 9 and older["c-1"]["kind"] == "persisted"
    same = with_marks(marks, [CellRef(9, "c-1", "k")], kind="cleared", why="cleared", card="clearing-2",
                      current_kernel="k")
    assert same["c-1"] == {"count": 9, "kind": "cleared", "why": "cleared", "card": "clearing-2",
                           "still": same["c-1"]["still"]}
    assert "stub" in same["c-1"]["still"]
