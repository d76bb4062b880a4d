"""The transcript and session folder: appends, fsync at turn end, corrupt lines skipped, a line a crash cut
off set aside before the next append, atomic writes."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ctx_magic.errors import StorageError
from ctx_magic.events import Cleared
from ctx_magic.messages import Message, Usage, tool_result_block, user_text
from ctx_magic.store import files
from ctx_magic.store.session import SessionDir, latest_session, list_sessions, new_session_id, safe_name
from ctx_magic.store.transcript import Transcript


def test_messages_round_trip_through_the_transcript(tmp_path):
    t = Transcript(tmp_path / "transcript.jsonl")
    msgs = [
        user_text("hello", timestamp=1.5),
        Message("assistant", ({"type": "text", "text": "hi"},), api_id="msg_1", usage=Usage(1, 2, 3, 4),
                timestamp=2.25, meta={"k": [1]}),
    ]
    for m in msgs:
        t.append_message(m)
    t.append_event(Cleared("idle", {"t1": "[cleared]"}, 10))
    t.sync()
    loaded = Transcript.load(t.path)
    assert list(loaded.messages()) == msgs
    assert loaded.records[-1] == {"type": "event", "event": "cleared", "trigger": "idle",
                                  "replacements": {"t1": "[cleared]"}, "tokens_freed": 10}
    assert loaded.problems == []


def test_lines_reach_the_file_before_sync(tmp_path):
    """A kernel crash loses at most the message being streamed: each line is written through."""
    t = Transcript(tmp_path / "transcript.jsonl")
    t.append_message(user_text("one"))
    assert (tmp_path / "transcript.jsonl").read_bytes().count(b"\n") == 1


def test_transcript_sync_fsyncs(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    t = Transcript(tmp_path / "transcript.jsonl")
    t.append_message(user_text("one"))
    t.sync()
    assert calls


def test_corrupt_and_truncated_lines_are_reported_and_skipped(tmp_path):
    path = tmp_path / "transcript.jsonl"
    good = user_text("kept")
    t = Transcript(path)
    t.append_message(good)
    t.close()
    with open(path, "ab") as fh:
        fh.write(b"{not json\n")
        fh.write(b'{"type": "message", "role": "robot", "content": [], "uuid": "x"}\n')
        fh.write(b"\xff\xfe garbage\n")
        fh.write(json.dumps({"type": "message", **user_text("also kept").to_json()}).encode() + b"\n")
        fh.write(b'{"type": "message", "role": "user", "con')  # crash mid-line
    loaded = Transcript.load(path)
    assert [m.text for m in loaded.messages()] == ["kept", "also kept"]
    assert len(loaded.problems) == 4
    assert any("truncated" in p for p in loaded.problems)


def test_lone_surrogates_round_trip(tmp_path):
    t = Transcript(tmp_path / "t.jsonl")
    msg = Message("user", (tool_result_block("t", "bad \udcff byte"),))
    t.append_message(msg)
    t.sync()
    assert list(Transcript.load(t.path).messages()) == [msg]


def test_disk_full_leaves_no_partial_line(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    t = Transcript(path)
    t.append_message(user_text("first"))
    handle = t._open()
    real_write = handle.write

    class FullDisk:
        def __getattr__(self, name):
            return getattr(handle, name)

        def write(self, data):
            real_write(data[: len(data) // 2])
            handle.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    t._handle = FullDisk()  # type: ignore[assignment]
    with pytest.raises(StorageError, match="disk is full"):
        t.append_message(user_text("second"))
    loaded = Transcript.load(path)
    assert [m.text for m in loaded.messages()] == ["first"] and loaded.problems == []
    t.append_message(user_text("third"))  # the session goes on once there is room
    assert [m.text for m in Transcript.load(path).messages()] == ["first", "third"]


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "state.json"
    files.atomic_write_json(path, {"a": 1})
    files.atomic_write_json(path, {"a": 2})
    assert files.read_json(path) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_failed_atomic_write_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    files.atomic_write_json(path, {"a": 1})

    def no_room(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", no_room)
    with pytest.raises(StorageError, match="disk is full"):
        files.atomic_write_json(path, {"a": 2})
    assert files.read_json(path) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_session_folder_layout(tmp_path):
    s = SessionDir(tmp_path / ".ctx_magic", "20260101-000000-abcdef").create()
    assert s.transcript_path == tmp_path / ".ctx_magic/sessions/20260101-000000-abcdef/transcript.jsonl"
    assert s.state_path.name == "state.json"
    assert s.notes_path.name == "session-memory.md"
    assert s.tool_results_dir.is_dir()
    path = s.write_tool_result("toolu/../evil", "content")
    assert path.parent == s.tool_results_dir and path.read_text() == "content"
    s.save_state({"x": 1})
    assert s.load_state() == {"x": 1}


def test_session_ids_sort_by_time_and_latest_is_found(tmp_path):
    a, b = new_session_id(1_000_000), new_session_id(2_000_000)
    assert a < b
    for sid in (a, b):
        SessionDir(tmp_path, sid).create().transcript().append_message(user_text(sid))
    assert [s.session_id for s in list_sessions(tmp_path)] == [a, b]
    assert latest_session(tmp_path).session_id in (a, b)
    assert safe_name("a/b c") == "a_b_c"


def _crash_mid_write(path, message):
    """What a kernel killed mid-append leaves: the first part of a line, without its newline."""
    line = json.dumps({"type": "message", **message.to_json()}).encode()
    with open(path, "ab") as fh:
        fh.write(line[: len(line) // 2])
    return line[: len(line) // 2]


def test_a_line_cut_off_by_a_crash_is_set_aside_before_the_next_append(tmp_path):
    path = tmp_path / "transcript.jsonl"
    first, second, lost, after = (user_text(t) for t in ("one", "two", "being written", "after the restart"))
    t = Transcript(path)
    t.append_message(first)
    t.append_message(second)
    t.close()
    cut = _crash_mid_write(path, lost)
    before = Transcript.load(path)
    assert [m.text for m in before.messages()] == ["one", "two"]
    assert before.problems == [before.problems[0]] and "truncated" in before.problems[0]

    resumed = Transcript(path)  # the next kernel appends
    resumed.append_message(after)
    resumed.close()
    loaded = Transcript.load(path)
    assert list(loaded.messages()) == [first, second, after]  # nothing glued onto the broken line
    assert loaded.problems == [f"A record cut off by a crash ({len(cut):,} bytes) was set aside in "
                               "transcript.damaged (from byte 0); every whole record is kept."]
    assert resumed.repairs == loaded.problems
    assert (tmp_path / "transcript.damaged").read_bytes() == cut + b"\n"  # the bytes stay recoverable


def test_a_whole_record_that_only_lost_its_newline_is_kept(tmp_path):
    path = tmp_path / "transcript.jsonl"
    whole = user_text("whole")
    path.write_bytes(json.dumps({"type": "message", **whole.to_json()}).encode())  # no newline
    assert list(Transcript.load(path).messages()) == [whole]
    t = Transcript(path)
    t.append_message(user_text("next"))
    t.close()
    loaded = Transcript.load(path)
    assert [m.text for m in loaded.messages()] == ["whole", "next"] and loaded.problems == []
    assert not (tmp_path / "transcript.damaged").exists()


def test_a_second_crash_is_set_aside_after_the_first(tmp_path):
    path = tmp_path / "transcript.jsonl"
    cuts = []
    for n in range(2):
        t = Transcript(path)
        t.append_message(user_text(f"kept {n}"))
        t.close()
        cuts.append(_crash_mid_write(path, user_text(f"lost {n}")))
    Transcript(path).append_message(user_text("last"))
    loaded = Transcript.load(path)
    assert [m.text for m in loaded.messages()] == ["kept 0", "kept 1", "last"]
    assert len(loaded.problems) == 2 and f"from byte {len(cuts[0]) + 1:,}" in loaded.problems[1]
    assert (tmp_path / "transcript.damaged").read_bytes() == cuts[0] + b"\n" + cuts[1] + b"\n"
