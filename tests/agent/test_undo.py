"""Undo of the last compaction, snip or clearing, through the loop against the stand-in over real
HTTP, on a model with the prefix check on thinking: the next request carries what was sent before
the change, byte for byte, and the stand-in accepts every thinking block in it."""

from __future__ import annotations

import pytest
from agent_rig import _plain, prompt, rig

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.session import open_session
from ctx_magic.agent.undo import undo_last
from ctx_magic.context.thinking import has_thinking
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import Undone
from ctx_magic.messages import result_text
from ctx_magic.notebook.wording import undone_line
from ctx_magic.settings import Settings

APPEND_ONLY = "claude-sonnet-5-5"


def small_turn(n: int) -> str:
    """A turn that adds a few hundred tokens: the compaction it ends in leaves room to undo it."""
    return f"Turn {n}\n```python\nprint('\\n'.join(f'value {n} {{i}}' for i in range(20)))\n```"


def main_calls(api):  # type: ignore[no-untyped-def]
    return [q for q in api.requests if q.path == "/v1/messages" and q.kind != "compaction"]


def test_undo_of_a_manual_compaction_sends_what_was_sent_before_it(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        sent_before = main_calls(r.api)[-1].body["messages"]
        assert any(b.get("type") == "thinking" for m in sent_before for b in m["content"])
        live_before = r.session.live.messages
        manual_compact(r.session)
        line = undone_line(undo_last(r.session))
        assert r.session.live.messages == live_before
        run_turn(r.session, "and now?")
        after = main_calls(r.api)[-1]
    assert line.startswith("Undid the manual compaction: the 12 messages it replaced are back")
    assert "Its summary's $0.0" in line and "stays spent" in line
    assert after.status == 200 and not after.thinking_mismatches
    sent = _plain(after.body["messages"])
    assert sent[:len(sent_before)] == _plain(sent_before)
    assert len(sent) == len(sent_before) + 2  # the turn's answer, then the new prompt


def test_undo_of_a_snip_brings_the_snipped_messages_back(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(4):
            run_turn(r.session, prompt(n))
        live_before = r.session.live.messages
        snipped = r.session.live.snip(4, r.session.clock(), r.session.setup())
        assert snipped and len(r.session.live.messages) < len(live_before)
        result = undo_last(r.session)
        assert r.session.live.messages == live_before
        run_turn(r.session, "and now?")
        after = main_calls(r.api)[-1]
    assert result.event.kind == "snip" and undone_line(result).startswith(
        f"Undid your snip: the {snipped} messages it removed are back")
    assert after.status == 200 and not after.thinking_mismatches


def test_undo_of_a_clearing_makes_the_cleared_results_whole_again(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        ids = [i for m in r.session.live.messages for i in m.tool_result_ids][:2]
        whole = {b["tool_use_id"]: result_text(b) for m in r.session.live.messages for b in m.blocks("tool_result")}
        cleared, _ = r.session.live.clear_results(ids, "user", r.session.setup())
        assert cleared == ids
        line = undone_line(undo_last(r.session))
        assert not set(ids) & set(r.session.live.state.cleared)
        run_turn(r.session, "and now?")
        after = main_calls(r.api)[-1]
    assert line.startswith("Undid your clearing: the 2 tool results it cleared are whole again (")
    assert "summary" not in line
    sent = {b["tool_use_id"]: b for m in after.body["messages"] for b in m["content"] if b.get("type") == "tool_result"}
    assert [result_text(sent[i]) for i in ids] == [whole[i] for i in ids]
    assert after.status == 200 and not after.thinking_mismatches


def test_undo_twice_takes_back_the_change_before_and_then_says_there_is_none(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(4):
            run_turn(r.session, prompt(n))
        original = r.session.live.messages
        r.session.live.snip(4, r.session.clock(), r.session.setup())
        start = len(r.session.live.messages)
        run_turn(r.session, prompt(4))
        turn = r.session.live.messages[start:]
        thinking = sum(1 for m in turn for b in m.content if b.get("type") == "thinking")
        manual_compact(r.session)
        first, second = undo_last(r.session), undo_last(r.session)
        assert [first.event.kind, second.event.kind] == ["compaction", "snip"]
        live = r.session.live.messages
        with pytest.raises(CtxMagicError, match="^There is no compaction, snip or clearing to undo in this session"):
            undo_last(r.session)
        assert r.session.live.messages == live
    assert [m.uuid for m in live] == [m.uuid for m in original] + [m.uuid for m in turn]
    # The turn after the snip was written after the snip's prefix: its thinking went with the undo.
    assert thinking and second.dropped_thinking == thinking and not any(has_thinking(m) for m in live[-len(turn):])


def test_nothing_to_undo_in_a_new_session(tmp_path):
    with rig(tmp_path, model=APPEND_ONLY) as r:
        with pytest.raises(CtxMagicError, match="There is no compaction, snip or clearing to undo"):
            undo_last(r.session)
        assert run_turn(r.session, "hello").error is None


def test_an_undo_that_does_not_fit_the_window_says_by_how_much_and_changes_nothing(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(11):
            run_turn(r.session, prompt(n))
        manual_compact(r.session)
        for n in range(11, 17):
            run_turn(r.session, prompt(n))
        live, blocking = r.session.live.messages, r.session.setup().context.thresholds.blocking
        with pytest.raises(CtxMagicError) as refused:
            undo_last(r.session)
        assert r.session.live.messages == live and len(r.session.undo.points) == 1
        assert run_turn(r.session, "still working?").error is None
    message = str(refused.value)
    assert message.startswith("Undoing the manual compaction does not fit: the context would be ")
    assert f"over the window's limit of {blocking:,}; nothing was changed." in message


def test_resume_after_an_undo_sees_the_undone_context(tmp_path):
    with rig(tmp_path, window=60_000, model=APPEND_ONLY) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        manual_compact(r.session)
        run_turn(r.session, prompt(3))
        undo_last(r.session)
        r.session.end_turn()
        expected = r.session.request(r.session.setup()).messages
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic",
                                         r.session.frame.settings, session_id=r.session.session_id, resume=True,
                                         root=tmp_path, clock=r.clock)
        records = resumed.store.load_transcript().records
        assert problems == []
        assert [(m.uuid, m.content) for m in resumed.live.messages] == [
            (m.uuid, m.content) for m in r.session.live.messages]
        assert resumed.request(resumed.setup()).messages == expected
    assert [rec["event"] for rec in records if rec.get("event") == Undone.name] == ["undone"]


def test_undo_of_an_automatic_compaction_reports_its_summary_s_cost_as_spent(tmp_path):
    no_snip = Settings(model=APPEND_ONLY, snip_max_messages=1_000)  # many small turns: no snip before the compaction
    with rig(tmp_path, window=30_000, model=APPEND_ONLY, config=no_snip) as r:
        sent_before = None
        for n in range(80):  # small turns fill the window in about sixty; a bound, not a wait
            calls = len(main_calls(r.api))
            run_turn(r.session, small_turn(n))
            if r.session.compaction.boundaries:
                sent_before = main_calls(r.api)[calls - 1]
                break
        assert sent_before is not None and r.session.compaction.boundaries[-1].trigger == "auto"
        spent = r.session.meter.totals.cost_usd
        result = undo_last(r.session)
        assert r.session.meter.totals.cost_usd == spent  # an undo calls no model
        run_turn(r.session, "and now?")
        after = main_calls(r.api)[-1]
    summary = [q for q in r.api.requests if q.kind == "compaction"]
    assert len(summary) == 1 and result.event.spent_usd > 0
    assert undone_line(result).startswith("Undid the automatic compaction: the ")
    assert f"Its summary's ${result.event.spent_usd:,.4f} stays spent." in undone_line(result)
    before, sent = _plain(sent_before.body["messages"]), _plain(after.body["messages"])
    assert sent[:len(before)] == before and after.status == 200 and not after.thinking_mismatches
