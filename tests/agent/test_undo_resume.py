"""Undo after a resume, through the loop against the stand-in over real HTTP on a model with the
prefix check on thinking: the transcript keeps each undo point, so a session resumed from it undoes
exactly what the session before the restart would have, and the next request is accepted. An
undone compaction stays listed, marked undone, and is counted in no figure, before a resume or after."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agent_rig import _plain, prompt, rig
from builders import FillingDisk

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.session import Session, open_session
from ctx_magic.agent.undo import undo_last
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import UndoKept
from ctx_magic.notebook.wording import status_text

APPEND_ONLY = "claude-sonnet-5-5"
NOTHING = "^There is no compaction, snip or clearing to undo in this session"


def main_calls(api):  # type: ignore[no-untyped-def]
    return [q for q in api.requests if q.path == "/v1/messages" and q.kind != "compaction"]


def resumed(session: Session, storage: Path) -> Session:
    """The session opened again from the copy of its folder in `storage`, as after a restart."""
    again, problems = open_session(session.frame.model, session.frame.executor, storage, session.frame.settings,
                                   session_id=session.session_id, resume=True, root=storage.parent,
                                   clock=session.clock)
    assert problems == []
    return again


def copied(session: Session, to: Path) -> Path:
    """A copy of the session's folder (its transcript and state.json), as a restart finds it."""
    session.end_turn()
    storage = to / ".ctx_magic"
    shutil.copytree(session.store.root, storage / "sessions" / session.session_id,
                    ignore=shutil.ignore_patterns("owner.*"))
    return storage


def without_kept(storage: Path, session_id: str, keep: int = 0) -> None:
    """The transcript as a version that kept no undo points wrote it (but the first `keep`)."""
    path = storage / "sessions" / session_id / "transcript.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = [i for i, line in enumerate(lines) if json.loads(line).get("event") == UndoKept.name]
    path.write_text("".join(line + "\n" for i, line in enumerate(lines) if i not in kept[keep:]), encoding="utf-8")


def kept_records(path: Path) -> int:
    """How many undo points a transcript file keeps."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return sum(1 for line in lines if json.loads(line).get("event") == UndoKept.name)


def test_undo_after_a_resume_restores_what_the_session_before_it_would_have(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        sent_before = main_calls(r.api)[-1].body["messages"]
        boundary = manual_compact(r.session).event.boundary_uuid
        run_turn(r.session, prompt(3))  # a turn after the compaction binds the conversation to a new prefix
        storage = copied(r.session, tmp_path / "restart")
        in_memory = undo_last(r.session)
        r.session.close()
        again = resumed(r.session, storage)
        after_resume = undo_last(again, boundary)  # the panel's Undo names the compaction by its boundary
        assert [(m.uuid, m.content) for m in again.live.messages] == [
            (m.uuid, m.content) for m in r.session.live.messages]
        assert again.frame.bound == r.session.frame.bound
        run_turn(again, "and now?")
        after = main_calls(r.api)[-1]
        again.close()
    assert after_resume.event.to_json() == in_memory.event.to_json()
    assert after_resume.dropped_thinking == in_memory.dropped_thinking > 0
    before, sent = _plain(sent_before), _plain(after.body["messages"])
    assert sent[:len(before)] == before
    assert after.status == 200 and not after.thinking_mismatches


def test_a_snip_and_a_compaction_are_undone_in_turn_after_a_resume(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(4):
            run_turn(r.session, prompt(n))
        original = r.session.live.messages
        r.session.live.snip(4, r.session.clock(), r.session.setup())
        run_turn(r.session, prompt(4))
        manual_compact(r.session)
        storage = copied(r.session, tmp_path / "restart")
        r.session.close()
        again = resumed(r.session, storage)
        first, second = undo_last(again), undo_last(again)
        with pytest.raises(CtxMagicError, match=NOTHING):
            undo_last(again)
        live = again.live.messages
        assert run_turn(again, "and now?").error is None
        after = main_calls(r.api)[-1]
        again.close()
    assert [first.event.kind, second.event.kind] == ["compaction", "snip"]
    assert [m.uuid for m in live[:len(original)]] == [m.uuid for m in original]
    assert after.status == 200 and not after.thinking_mismatches


def test_a_transcript_without_kept_points_resumes_with_nothing_to_undo(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        manual_compact(r.session)
        storage = copied(r.session, tmp_path / "restart")
        r.session.close()
        without_kept(storage, r.session.session_id)
        again = resumed(r.session, storage)
        live = again.live.messages
        with pytest.raises(CtxMagicError, match=NOTHING):
            undo_last(again)
        assert again.live.messages == live
        assert run_turn(again, "still working?").error is None
        again.close()


def test_a_change_whose_point_was_not_kept_stops_the_undo_before_older_ones(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(4):
            run_turn(r.session, prompt(n))
        r.session.live.snip(4, r.session.clock(), r.session.setup())
        run_turn(r.session, prompt(4))
        manual_compact(r.session)
        storage = copied(r.session, tmp_path / "restart")
        r.session.close()
        without_kept(storage, r.session.session_id, keep=1)  # the snip's point kept, the compaction's lost
        again = resumed(r.session, storage)
        # Undoing the snip under the compaction would bring back a context that never was.
        with pytest.raises(CtxMagicError, match=NOTHING):
            undo_last(again)
        again.close()


def test_an_undone_compaction_is_listed_as_undone_and_counted_in_no_figure(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        first = manual_compact(r.session).event
        for n in range(3, 5):
            run_turn(r.session, prompt(n))
        second = manual_compact(r.session).event
        counted = r.session.status().report().compactions
        undo_last(r.session)
        status = r.session.status()
        storage = copied(r.session, tmp_path / "restart")
        r.session.close()
        again = resumed(r.session, storage)
        after_resume = again.status()
        again.close()
    for shown in (status, after_resume):
        report = shown.report()
        assert (counted, report.compactions, report.undone_compactions) == (2, 1, 1)
        assert report.last_compaction is not None and report.last_compaction.boundary_uuid == first.boundary_uuid
        assert [b["undone"] for b in shown.to_json()["boundaries"]] == [False, True]
        assert report.to_json()["last_compaction"]["tokens_after"] == first.tokens_after != second.tokens_after
        assert "1 compaction (1 more undone, not counted) · breaker closed" in status_text(shown)
        assert "compactions: 1 (last: manual, " in repr(report) and "; 1 undone, not counted" in repr(report)


def test_a_point_the_full_disk_kept_out_waits_and_is_kept_once_there_is_room(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        disk = FillingDisk(r.session.recorder.transcript)
        manual_compact(r.session)
        disk.full = True
        r.session.end_turn()  # the point cannot be written: it waits, nothing is raised
        disk.full = False
        kept_then = kept_records(r.session.store.transcript_path)
        storage = copied(r.session, tmp_path / "restart")  # the turn end after it keeps the point
        r.session.close()
        again = resumed(r.session, storage)
        result = undo_last(again)
        again.close()
    assert kept_then == 0 and kept_records(storage / "sessions" / again.session_id / "transcript.jsonl") == 1
    assert result.event.kind == "compaction"
