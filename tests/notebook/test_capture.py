"""SPEC N2: how what a cell printed and displayed reads for the agent (pure parts)."""

from __future__ import annotations

from ctx_magic.notebook.capture import CellRecord, display_text, html_text, printed
from ctx_magic.notebook.display import latest_line


def test_n2_a_progress_bar_is_its_last_state_as_a_terminal_shows_it():
    bar = [f"\r[{'#' * (i // 10):10s}] {i}/100" for i in range(101)]
    assert printed([*bar, "\n", "finished\n"]) == "[##########] 100/100\nfinished\n"
    assert printed(["line one\r\n", "line two\n"]) == "line one\nline two\n"
    assert printed(["\x1b[31mred\x1b[0m\n"]) == "red\n"


def test_n2_an_html_only_display_reaches_the_agent_as_its_text():
    table = "<style>td {color: red}</style><table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"
    assert display_text({"text/html": table, "text/plain": "<IPython.core.display.HTML object>"}) == (
        "text/html", "a\tb\n1\t2")
    # a real text form wins; markdown wins over both
    assert display_text({"text/html": table, "text/plain": "   a  b\n0  1  2"}) == ("text/plain", "   a  b\n0  1  2")
    assert display_text({"text/markdown": "**x**", "text/plain": "x"}) == ("text/markdown", "**x**")
    assert display_text({"image/png": "AAAA"}) is None
    assert html_text("<p>one<br>two &amp; three</p><script>alert(1)</script>") == "one\ntwo & three"


def test_n2_the_record_text_uses_both():
    record = CellRecord("code", stdout=["\r1/3", "\r2/3", "\r3/3", "\n"],
                        displays=[{"text/html": "<b>bold</b>", "text/plain": "<IPython.core.display.HTML object>"}])
    assert record.text() == "3/3\n\n[displayed text/html]\nbold"


def test_the_progress_line_is_the_last_whole_line_or_the_bar_being_drawn():
    assert latest_line("step 0\nstep 1\nst") == "step 1"  # print() writes its words one at a time
    assert latest_line("epoch 2\n\r[###   ] 3/6") == "[###   ] 3/6"
    assert latest_line("only a start") == "only a start"
