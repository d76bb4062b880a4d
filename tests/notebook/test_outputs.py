"""Cells as tool results: how what a cell printed and displayed reads for the agent (pure parts)."""

from __future__ import annotations

import base64
import json

from image_samples import GIF_1X1, jpeg, png

from ctx_magic.notebook.display import latest_line
from ctx_magic.notebook.outputs import (
    KERNEL_RUN,
    CellRecord,
    cell_messages,
    display_text,
    html_text,
    left_out_line,
    printed,
)
from ctx_magic.store.pending import PENDING_ID_KEY


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_a_progress_bar_is_its_last_state_as_a_terminal_shows_it():
    bar = [f"\r[{'#' * (i // 10):10s}] {i}/100" for i in range(101)]
    assert printed([*bar, "\n", "finished\n"]) == "[##########] 100/100\nfinished\n"
    assert printed(["line one\r\n", "line two\n"]) == "line one\nline two\n"
    assert printed(["\x1b[31mred\x1b[0m\n"]) == "red\n"


def test_an_html_only_display_reaches_the_agent_as_its_text():
    table = "<style>td {color: red}</style><table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"
    assert display_text({"text/html": table, "text/plain": "<IPython.core.display.HTML object>"}) == (
        "text/html", "a\tb\n1\t2")
    # a real text form wins; markdown wins over both
    assert display_text({"text/html": table, "text/plain": "   a  b\n0  1  2"}) == ("text/plain", "   a  b\n0  1  2")
    assert display_text({"text/markdown": "**x**", "text/plain": "x"}) == ("text/markdown", "**x**")
    assert display_text({"image/png": "AAAA"}) is None
    assert html_text("<p>one<br>two &amp; three</p><script>alert(1)</script>") == "one\ntwo & three"


def test_the_record_text_uses_both():
    record = CellRecord("code", stdout=["\r1/3", "\r2/3", "\r3/3", "\n"],
                        displays=[{"text/html": "<b>bold</b>", "text/plain": "<IPython.core.display.HTML object>"}])
    assert record.text() == "3/3\n\n[displayed text/html]\nbold"


def test_the_progress_line_is_the_last_whole_line_or_the_bar_being_drawn():
    assert latest_line("step 0\nstep 1\nst") == "step 1"  # print() writes its words one at a time
    assert latest_line("epoch 2\n\r[###   ] 3/6") == "[###   ] 3/6"
    assert latest_line("only a start") == "only a start"


# -- images (images.py at the capture side) and the pending-cells form ---------------------------


def test_an_image_of_another_type_than_declared_reaches_the_agent_with_its_real_type():
    record = CellRecord("show", displays=[{"image/png": b64(jpeg()), "text/plain": "<IPython.core.display.Image>"}])
    content = record.content(1_000_000)
    assert isinstance(content, list) and content[1]["source"]["media_type"] == "image/jpeg"
    assert left_out_line(record.image_checks(1_000_000)) is None


def test_images_left_out_become_text_and_one_line_names_them():
    record = CellRecord("show", displays=[{"image/png": b64(b"no image here")},
                                          {"image/png": b64(png(40, 40, noise=True))}, {"image/gif": b64(GIF_1X1)}])
    content = record.content(2_000)
    assert [b["type"] for b in content] == ["text", "image"] and content[1]["source"]["media_type"] == "image/gif"
    assert "[image omitted: declared image/png, but the bytes are not a PNG" in content[0]["text"]
    assert "over the size cap of 1.95 KB]" in content[0]["text"]
    line = left_out_line(record.image_checks(2_000))
    assert line.startswith("ctx_magic: 2 images of this output will not be sent to the agent: declared image/png")


def test_a_cell_record_round_trips_through_its_json_with_image_bytes_as_base64():
    record = CellRecord("x", 3, ["out\n"], ["err\n"], [{"image/png": png(), "text/plain": "<img>"}],
                        {"text/plain": "42"}, "boom")
    data = json.loads(json.dumps(record.to_json()))
    again = CellRecord.from_json(data)
    assert again.displays[0]["image/png"] == b64(png()) and again.content(10_000) == record.content(10_000)
    assert (again.source, again.execution_count, again.stdout, again.error) == ("x", 3, ["out\n"], "boom")


def test_the_notebook_cell_pair_carries_its_pending_id_its_cell_id_and_its_kernel():
    use, result = cell_messages(CellRecord("x = 1", 4, cell_id="c-4"), "cell_4_1", 1_000, 0.0, pending_id="p1")
    assert use.meta == {"cell": 4, "cell_id": "c-4", "kernel": KERNEL_RUN, PENDING_ID_KEY: "p1"}
    assert result.tool_result_ids == ["cell_4_1"]
    assert cell_messages(CellRecord("x", 5), "cell_5_1", 1_000, 0.0)[0].meta == {"cell": 5, "cell_id": None,
                                                                                  "kernel": KERNEL_RUN}


def test_a_cell_a_dead_kernel_left_keeps_its_cell_id_and_that_kernel_not_this_one():
    left = CellRecord.from_json({**CellRecord("x", 2, cell_id="c-2").to_json(), "kernel": "deadbeef0000"})
    assert cell_messages(left, "cell_2_1", 1_000, 0.0)[0].meta == {"cell": 2, "cell_id": "c-2",
                                                                    "kernel": "deadbeef0000"}
    older = CellRecord.from_json({"source": "y", "execution_count": 3})  # a line written before kernels were kept
    assert older.kernel != KERNEL_RUN
