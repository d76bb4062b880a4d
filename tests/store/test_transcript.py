"""SPEC M2-M3: transcript appends, fsync at turn end, corrupt lines skipped, atomic writes, one
kernel per session."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys

import pytest

from ctx_magic.errors import SessionInUse, StorageError
from ctx_magic.events import Cleared
from ctx_magic.messages import Message, Usage, tool_result_block, user_text
from ctx_magic.store import files
from ctx_magic.store.session import SessionDir, latest_session, list_sessions, new_session_id, safe_name
from ctx_magic.store.transcript import Transcript


def test_m2_messages_round_trip_through_the_transcript(tmp_path):
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


def test_m2_lines_reach_the_file_before_sync(tmp_path):
    """A kernel crash loses at most the message being streamed: each line is written through."""
    t = Transcript(tmp_path / "transcript.jsonl")
    t.append_message(user_text("one"))
    assert (tmp_path / "transcript.jsonl").read_bytes().count(b"\n") == 1


def test_m2_sync_fsyncs(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    t = Transcript(tmp_path / "transcript.jsonl")
    t.append_message(user_text("one"))
    t.sync()
    assert calls


def test_m2_corrupt_and_truncated_lines_are_reported_and_skipped(tmp_path):
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


def test_m2_lone_surrogates_round_trip(tmp_path):
    t = Transcript(tmp_path / "t.jsonl")
    msg = Message("user", (tool_result_block("t", "bad \udcff byte"),))
    t.append_message(msg)
    t.sync()
    assert list(Transcript.load(t.path).messages()) == [msg]


def test_m2_disk_full_leaves_no_partial_line(tmp_path, monkeypatch):
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


def test_m3_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "state.json"
    files.atomic_write_json(path, {"a": 1})
    files.atomic_write_json(path, {"a": 2})
    assert files.read_json(path) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_m3_failed_atomic_write_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    files.atomic_write_json(path, {"a": 1})

    def no_room(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", no_room)
    with pytest.raises(StorageError, match="disk is full"):
        files.atomic_write_json(path, {"a": 2})
    assert files.read_json(path) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_m3_session_folder_layout(tmp_path):
    s = SessionDir(tmp_path / ".ctx_magic", "20260101-000000-abcdef").create()
    assert s.transcript_path == tmp_path / ".ctx_magic/sessions/20260101-000000-abcdef/transcript.jsonl"
    assert s.state_path.name == "state.json"
    assert s.session_memory_path.name == "session-memory.md"
    assert s.tool_results_dir.is_dir()
    path = s.write_tool_result("toolu/../evil", "content")
    assert path.parent == s.tool_results_dir and path.read_text() == "content"
    s.save_state({"x": 1})
    assert s.load_state() == {"x": 1}


def test_m3_session_ids_sort_by_time_and_latest_is_found(tmp_path):
    a, b = new_session_id(1_000_000), new_session_id(2_000_000)
    assert a < b
    for sid in (a, b):
        SessionDir(tmp_path, sid).create().transcript().append_message(user_text(sid))
    assert [s.session_id for s in list_sessions(tmp_path)] == [a, b]
    assert latest_session(tmp_path).session_id in (a, b)
    assert safe_name("a/b c") == "a_b_c"


def test_a_session_open_in_another_live_process_is_refused_and_a_dead_ones_taken_over(tmp_path):
    store = SessionDir(tmp_path, "s1").create()
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        store.owner_path.write_text(json.dumps({"pid": other.pid, "host": socket.gethostname()}))
        with pytest.raises(SessionInUse, match=f"open in another kernel \\(process {other.pid}\\)"):
            store.claim()
        store.release()  # not ours: left alone
        assert json.loads(store.owner_path.read_text())["pid"] == other.pid
    finally:
        other.kill()
        other.wait()
    store.claim()  # its owner is gone: taken over
    assert json.loads(store.owner_path.read_text())["pid"] == os.getpid()
    store.claim()  # claiming again in the same process is fine
    store.release()
    assert not store.owner_path.exists()
