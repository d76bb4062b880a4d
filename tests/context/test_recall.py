"""Searching the session's own transcript: matches with their turn and a ref, by text,
regex, turn or cell; a ref reads the whole message page by page."""

from __future__ import annotations

import re

import pytest

from ctx_magic.context.recall import READ_CHARS, answer, entries, unrecorded_files
from ctx_magic.messages import Message, tool_result_block, tool_use_block, user_text


def record(message: Message) -> dict:
    return {"type": "message", **message.to_json()}


def transcript() -> list[dict]:
    cell = Message("assistant", (tool_use_block("cell_7_abc", "notebook_cell",
                                                {"execution_count": 7, "source": "df = load()"}),))
    return [
        record(user_text("(Notebook cells the user ran before this conversation started follow.)", synthetic=True)),
        record(cell),
        record(Message("user", (tool_result_block("cell_7_abc", "loaded 1,204 rows"),))),
        record(user_text("Plot the price per region, in euros.")),  # turn 1
        record(Message("assistant", (tool_use_block("t1", "python", {"code": "print(big)"}),))),
        record(Message("user", (tool_result_block("t1", "line\n" * 30_000 + "NEEDLE at the end"),))),
        {"type": "event", "event": "persisted", "tool_use_id": "t1", "path": "/s/tool-results/t1.txt"},
        record(user_text("Now the median, please.")),  # turn 2
        record(Message("assistant", (tool_use_block("s1", "search_transcript", {"query": "euros"}),))),
        record(Message("user", (tool_result_block("s1", "turn 1 · user: Plot the price per region, in euros."),))),
        record(user_text("[boundary]", kind="boundary")),
    ]


def test_a_text_search_finds_the_message_with_its_turn_and_ref():
    records = transcript()
    out = answer(records, query="IN EUROS")
    assert out.startswith("1 message(s) match")  # the earlier search's own result is not a match
    ref = re.search(r"turn 1 · user · ref (\w+): Plot the price per region, in euros\.", out).group(1)
    assert answer(records, ref=ref).endswith("Plot the price per region, in euros.")


def test_a_persisted_output_is_found_with_where_it_is_saved_and_read_page_by_page():
    records = transcript()
    out = answer(records, query="needle")
    assert "turn 1 · tool results · ref" in out and "saved at /s/tool-results/t1.txt" in out
    ref = re.search(r"ref (\w+) ·", out).group(1)
    first = answer(records, ref=ref)
    assert f"offset={READ_CHARS}]" in first and "NEEDLE" not in first
    offset = len("[result of python]\n" + "line\n" * 30_000) - 10
    assert "NEEDLE at the end" in answer(records, ref=ref, offset=offset)


def test_by_turn_by_cell_and_by_regex():
    assert "Now the median" in answer(transcript(), turn=2)
    by_cell = answer(transcript(), cell=7)
    assert "cell 7" in by_cell and by_cell.startswith("2 message(s)")  # the cell's call and its output
    assert "loaded 1,204 rows" in answer(transcript(), query=r"\d,\d{3} rows", regex=True)
    assert answer(transcript(), query="kelvin").startswith("No match for 'kelvin'")


def test_a_bad_regex_or_an_empty_search_is_a_clear_error():
    with pytest.raises(ValueError, match="bad regular expression"):
        answer(transcript(), query="(", regex=True)
    with pytest.raises(ValueError, match="give a query"):
        answer(transcript())


def test_saved_files_the_transcript_does_not_hold_are_searched_too():
    records = transcript()
    names = unrecorded_files(records, ["t1.txt", "prompt-3-0.txt"])
    assert names == ["prompt-3-0.txt"]
    out = answer(records, {"/s/tool-results/prompt-3-0.txt": "a huge pasted CSV with ZEBRA in it"}, query="zebra")
    assert "saved file" in out and "ref file:prompt-3-0.txt" in out


def test_boundaries_and_re_read_files_are_not_entries():
    found = entries([*transcript(), record(user_text("<recent-file>x</recent-file>", kind="attachment"))])
    assert all(e.who != "boundary" and "recent-file" not in e.text for e in found)


def test_reading_from_an_offset_past_the_message_says_where_it_ends():
    records = transcript()
    ref = re.search(r"ref (\w+):", answer(records, query="median")).group(1)
    out = answer(records, ref=ref, offset=5_000)
    assert out.endswith("[offset 5,000 is past the end of this message: it has 23 characters; read from offset=0]")
