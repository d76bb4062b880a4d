"""The panel's memories waiting for review: a row per memory with its text and destination, Keep
and Discard buttons that answer with its id, rows kept in place, no section when none wait."""

from __future__ import annotations

from ctx_magic.ui.pending import PendingRows

ROW = {"id": "reports-go-out-1a2b3c4d", "text": "Reports <go> out on Mondays.", "type": "project", "scope": "project"}
TEAM = {"id": "region-code-5e6f7a8b", "text": "Use region_code.", "type": "project", "scope": "team"}


def test_each_row_shows_the_text_and_where_it_goes_and_its_buttons_answer_with_its_id():
    answers: list[tuple[str, str]] = []
    rows = PendingRows(lambda memory_id, action: answers.append((memory_id, action)))
    rows.show([ROW, TEAM])
    title, mine, team = rows.box.children
    assert rows.box.layout.display is None and "Memories waiting for review (2" in title.value
    shown = mine.children[0].value
    assert "Reports &lt;go&gt; out on Mondays." in shown and "project · yours" in shown
    assert "project · for the team" in team.children[0].value
    _text, keep, discard = mine.children
    assert (keep.description, discard.description) == ("Keep", "Discard")
    keep.click()
    team.children[2].click()
    assert answers == [(ROW["id"], "keep"), (TEAM["id"], "discard")]
    rows.show([TEAM])
    assert rows.box.children[1:] == (team,)  # the same row, kept in place


def test_none_waiting_no_section():
    rows = PendingRows()
    rows.show([])
    assert rows.box.layout.display == "none"
