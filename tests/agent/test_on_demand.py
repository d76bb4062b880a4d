"""Compaction on demand, through the loop against the stand-in over real HTTP: where the model and
provider take it, a summary compaction is the main call's request with `compaction` and its beta
header, answered by the compaction block alone; the block then opens every request, byte for
byte, and the thinking written after it is accepted. A model without it, or a refusal, keeps
ctx_magic's own summary."""

from __future__ import annotations

from agent_rig import CLIENT_SUMMARY, THINKING_TYPES, _plain, rig, thinking_prefix_problems

from ctx_magic.agent.catalog import compacts_on_demand
from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.on_demand import ON_DEMAND_BETA
from ctx_magic.agent.session import open_session
from ctx_magic.agent.summaries_back import summaries_as_text
from ctx_magic.agent.undo import undo_last
from ctx_magic.context.prompts import extract_summary
from ctx_magic.events import Compacted, Notice, Status
from ctx_magic.messages import user_text
from ctx_magic.settings import Settings

DEFAULTS = Settings()  # claude-sonnet-5-5, every setting at its default


def code_turn(n: int, lines: int = 60) -> str:
    return f"Turn {n}\n```python\nprint('\\n'.join(f'value {n} {{i}}' for i in range({lines})))\n```"


def talk(n: int) -> str:
    """A turn whose words stay: nothing in it can be cleared, so the threshold calls for a summary."""
    return f"Turn {n}: " + f"reading {n} at the north valve. " * 120 + f"\n```python\nprint({n} * 7)\n```"


def calls(api):  # type: ignore[no-untyped-def]
    return [q for q in api.requests if q.path == "/v1/messages"]


def on_demand_calls(api):  # type: ignore[no-untyped-def]
    return [q for q in calls(api) if "compaction" in (q.body or {})]


def all_accepted(api) -> bool:  # type: ignore[no-untyped-def]
    made = calls(api)
    return bool(made) and all(q.status == 200 and not q.thinking_mismatches for q in made)


def thinking_after_block(body) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for m in body["messages"][1:] if m["role"] == "assistant" for b in m["content"]
               if b.get("type") in THINKING_TYPES)


def test_the_catalog_decides_per_model_and_provider():
    assert compacts_on_demand("claude-sonnet-5-5", "anthropic") and compacts_on_demand("claude-sonnet-4-6", "anthropic")
    assert not compacts_on_demand("claude-sonnet-4-5", "anthropic")  # not on the on-demand page
    assert not compacts_on_demand("claude-fable-5-2", "anthropic")
    assert compacts_on_demand("claude-sonnet-5-5", "vertex")  # Google Cloud: on the page's platforms
    assert not compacts_on_demand("claude-sonnet-5-5", "bedrock") and not compacts_on_demand("my-gateway-model",
                                                                                             "anthropic")


def test_auto_compaction_asks_the_api_and_the_block_opens_every_later_request(tmp_path):
    events: list = []
    with rig(tmp_path, window=20_000, config=DEFAULTS) as r:
        r.session.listeners.append(events.append)
        turns = 0
        while not r.session.compaction.boundaries and turns < 12:
            assert run_turn(r.session, talk(turns)).error is None
            turns += 1
        pending = talk(turns - 1)
        for n in range(turns, turns + 2):
            assert run_turn(r.session, talk(n)).error is None
    asked = on_demand_calls(r.api)
    assert [e.trigger for e in events if isinstance(e, Compacted)] == ["auto"] and len(asked) == 1
    ask = asked[0]
    assert ON_DEMAND_BETA in ask.betas and ask.body["compaction"]["type"] == "summarize"
    instructions = ask.body["compaction"]["instructions"]
    assert "<summary>" in instructions and "<analysis>" not in instructions  # the model walks it in its thinking
    assert r.api.model_calls("compaction") == 1  # no summary call of ctx_magic's own
    made = calls(r.api)
    main_before = made[made.index(ask) - 1]
    assert ask.body["system"] == main_before.body["system"] and ask.body["tools"] == main_before.body["tools"]
    assert _plain(ask.body["messages"][:len(main_before.body["messages"])]) == _plain(main_before.body["messages"])
    records = r.session.store.load_transcript().records
    block = next(rec["content"][0] for rec in records
                 if rec.get("type") == "message" and rec["content"] and rec["content"][0].get("type") == "compaction")
    after = made[made.index(ask) + 1]
    assert after.body["messages"][0] == {"role": "assistant", "content": [block]}  # signature and all
    assert "signature" in block
    compacted = next(e for e in events if isinstance(e, Compacted))
    assert block["content"].startswith("<summary>")  # kept as the API wrote it, no scratchpad to carry
    assert compacted.summary == extract_summary(block["content"])  # what the coverage audit read
    assert compacted.audit is not None and compacted.audit.user_messages_checked == turns - 1  # the pending one stays
    assert pending in [b.get("text") for b in after.body["messages"][1]["content"]]  # the user's message, word for word
    later = [q for q in made[made.index(ask) + 1:] if q.kind == "normal"]
    assert len(later) >= 3 and all(q.body["messages"][0] == after.body["messages"][0] for q in later)
    assert all(ON_DEMAND_BETA in q.betas for q in made[made.index(ask) + 1:])  # every request carrying the block
    assert thinking_after_block(later[-1].body) > 0  # the thinking written after the block goes back
    assert all_accepted(r.api) and thinking_prefix_problems(r.api.requests) == []


def test_every_request_that_sends_the_apis_summary_back_carries_its_beta(tmp_path):
    """The on-demand page: the beta header goes on every later request that carries the block, a
    side call's too, with a note of its own before it."""
    with rig(tmp_path, window=60_000, config=DEFAULTS) as r:
        assert run_turn(r.session, talk(0)).error is None
        manual_compact(r.session)
        sent = [m for m in r.session.live.messages if m.sent]
        assert sent[0].content[0]["type"] == "compaction"
        setup = r.session.setup()
        for messages in (sent, [user_text("Earlier messages were left out."), *sent]):
            assert ON_DEMAND_BETA in r.session.frame.build(messages, setup, purpose="notes").betas
        assert ON_DEMAND_BETA not in r.session.frame.build(sent[1:], setup).betas


def test_a_summary_block_is_read_as_text_where_it_is_not_taken():
    """At the head of the user message after it, its breakpoint kept; a block with nothing after it
    becomes a user message of its own; other messages are left as they are."""
    ttl = {"type": "ephemeral"}
    block = {"type": "compaction", "content": "<summary>The valve reads 7.</summary>", "signature": "s",
             "cache_control": ttl}
    after = [{"role": "assistant", "content": [block]}, {"role": "user", "content": "Go on."},
             {"role": "assistant", "content": [{"type": "text", "text": "On it."}]}]
    assert summaries_as_text(after) == [
        {"role": "user", "content": [{"type": "text", "text": "Summary:\nThe valve reads 7.", "cache_control": ttl},
                                     {"type": "text", "text": "Go on."}]}, after[2]]
    assert summaries_as_text(after[:1]) == [{"role": "user", "content": [
        {"type": "text", "text": "Summary:\nThe valve reads 7.", "cache_control": ttl}]}]


def _alter_the_summary_block(r, tmp_path):  # type: ignore[no-untyped-def]
    """A session whose conversation opens with the API's summary, thinking written after it; the
    transcript's copy of the block altered (a hand edit, a bad disk)."""
    assert run_turn(r.session, talk(0)).error is None
    manual_compact(r.session)
    assert run_turn(r.session, talk(1)).error is None  # thinking written after the block
    signature = next(m for m in r.session.live.messages if m.sent).content[0]["signature"]
    altered = signature[:10] + ("B" if signature[10] != "B" else "C") + signature[11:]
    path = r.session.store.transcript_path
    path.write_text(path.read_text().replace(signature, altered))


def _resumed(r, tmp_path, events: list):  # type: ignore[no-untyped-def]
    resumed, problems = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic",
                                     DEFAULTS, session_id=r.session.session_id, resume=True, root=tmp_path,
                                     clock=r.clock)
    assert problems == []
    resumed.listeners.append(events.append)
    return resumed


def _refusals_said(events: list) -> list[str]:
    return [e.text for e in events if isinstance(e, Notice) and "refused the summary it wrote" in e.text]


def test_a_summary_the_api_no_longer_takes_goes_as_text_and_the_session_goes_on(tmp_path):
    """The resumed session's first request is refused once, one line says so, the summary goes as
    text from then on, the thinking after it leaves, and every later request is accepted."""
    events: list = []
    with rig(tmp_path, window=60_000, config=DEFAULTS) as r:
        _alter_the_summary_block(r, tmp_path)
        resumed = _resumed(r, tmp_path, events)
        r.api.reset()
        results = [run_turn(resumed, talk(n)) for n in (2, 3)]
    assert [x.error for x in results] == [None, None]
    said = _refusals_said(events)
    assert len(said) == 1 and "Invalid `signature` in `compaction` block). It goes as text from now on." in said[0]
    made = calls(r.api)
    assert [q.status for q in made].count(400) == 1 and made[0].status == 400
    assert all(q.status == 200 and not q.thinking_mismatches for q in made[1:])
    opening = made[1].body["messages"][0]
    assert opening["role"] == "user" and opening["content"][0]["text"].startswith("Summary:\n")
    assert not any(b.get("type") == "compaction" for q in made[1:] for m in q.body["messages"] for b in m["content"])


def test_compact_works_first_on_a_summary_the_api_no_longer_takes(tmp_path):
    """`%compact` before any turn of the resumed session: the API's refusal of its old block leaves
    the summary to ctx_magic, which sends the old one as text; the compaction is done, said once,
    and the turn after it is accepted."""
    events: list = []
    with rig(tmp_path, window=60_000, config=DEFAULTS) as r:
        _alter_the_summary_block(r, tmp_path)
        resumed = _resumed(r, tmp_path, events)
        r.api.reset()
        manual_compact(resumed)
        result = run_turn(resumed, talk(2))
    assert result.error is None and len(resumed.compaction.boundaries) == 2  # the first, before the resume
    assert len(_refusals_said(events)) == 1
    made = calls(r.api)
    assert [(q.kind, q.status) for q in made] == [("other", 400), ("compaction", 200), ("normal", 200), ("normal", 200)]
    assert not any(q.thinking_mismatches for q in made)
    sent = [b for m in made[1].body["messages"] for b in m["content"]]  # the side call's note, the old summary
    assert any(b.get("text", "").startswith("Summary:\n") for b in sent[:3])
    assert not any(b.get("type") == "compaction" for b in sent)


def test_the_refusal_is_remembered_across_a_resume(tmp_path):
    """Resumed again after the refusal, the session sends the summary as text at once: no second 400."""
    events: list = []
    with rig(tmp_path, window=60_000, config=DEFAULTS) as r:
        _alter_the_summary_block(r, tmp_path)
        r.api.reset()
        assert run_turn(_resumed(r, tmp_path, events), talk(2)).error is None
        assert run_turn(_resumed(r, tmp_path, events), talk(3)).error is None
    made = calls(r.api)
    assert [q.status for q in made].count(400) == 1 and made[0].status == 400 and len(_refusals_said(events)) == 1
    assert all(q.status == 200 and not q.thinking_mismatches for q in made[1:])


def test_a_model_without_it_keeps_the_client_summary(tmp_path):
    with rig(tmp_path, window=20_000, model=CLIENT_SUMMARY) as r:
        turns = 0
        while not r.session.compaction.boundaries and turns < 12:
            assert run_turn(r.session, talk(turns)).error is None
            turns += 1
        run_turn(r.session, talk(turns))
    summary_calls = [q for q in calls(r.api) if q.kind == "compaction"]
    assert r.session.compaction.boundaries and len(summary_calls) == 1
    assert on_demand_calls(r.api) == [] and ON_DEMAND_BETA not in summary_calls[0].betas
    assert "<summary>" in summary_calls[0].body["messages"][-1]["content"][-1]["text"]
    assert calls(r.api)[-1].body["messages"][0]["role"] == "user"
    assert all_accepted(r.api)


def test_a_refusal_falls_back_to_the_client_summary_with_one_line_and_is_not_asked_again(tmp_path):
    notices: list[Notice] = []
    with rig(tmp_path, window=60_000, config=DEFAULTS) as r:
        def refuse_the_first(event):  # type: ignore[no-untyped-def]
            if isinstance(event, Notice):
                notices.append(event)
            if isinstance(event, Status) and event.state == "compacting" and not on_demand_calls(r.api):
                r.api.inject("400")  # aimed at the compaction call about to be made

        r.session.listeners.append(refuse_the_first)
        for n in range(2):
            run_turn(r.session, code_turn(n))
        manual_compact(r.session)
        run_turn(r.session, code_turn(2))
        manual_compact(r.session, "keep the values")
        result = run_turn(r.session, code_turn(3))
    asked = on_demand_calls(r.api)
    assert [q.status for q in asked] == [400]  # refused once, never asked again
    assert len([q for q in calls(r.api) if q.kind == "compaction" and "compaction" not in q.body]) == 2
    said = [n.text for n in notices if "refused to write the summary" in n.text]
    assert len(said) == 1 and "400" in said[0]
    assert result.error is None and len(r.session.compaction.boundaries) == 2
    assert thinking_prefix_problems(r.api.requests) == []
    assert all(q.status == 200 and not q.thinking_mismatches for q in calls(r.api) if q.fault is None)


def test_a_resumed_session_sends_the_block_back_and_goes_on(tmp_path):
    with rig(tmp_path, window=60_000, config=DEFAULTS) as r:
        for n in range(2):
            run_turn(r.session, code_turn(n))
        manual_compact(r.session)
        run_turn(r.session, code_turn(2))
        before = calls(r.api)[-1].body["messages"]
        r.session.close()
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic",
                                         DEFAULTS, session_id=r.session.session_id, resume=True, root=tmp_path,
                                         clock=r.clock)
        result = run_turn(resumed, code_turn(3))
        resumed.close()
    sent = calls(r.api)[-1].body["messages"]
    assert problems == [] and result.error is None
    assert sent[0]["content"][0]["type"] == "compaction" and _plain(sent[:len(before)]) == _plain(before)
    assert thinking_after_block(calls(r.api)[-1].body) > 0
    assert all_accepted(r.api) and thinking_prefix_problems(r.api.requests) == []


def test_undo_of_an_on_demand_compaction_brings_back_what_was_sent_before_it(tmp_path):
    with rig(tmp_path, window=60_000, config=DEFAULTS) as r:
        for n in range(3):
            run_turn(r.session, code_turn(n))
        sent_before = [q for q in calls(r.api) if q.kind == "normal"][-1].body["messages"]
        live_before = r.session.live.messages
        manual_compact(r.session)
        assert r.session.live.messages[1].content[0]["type"] == "compaction"
        undo_last(r.session)
        assert r.session.live.messages == live_before
        run_turn(r.session, "and now?")
        after = calls(r.api)[-1]
    assert len(on_demand_calls(r.api)) == 1
    assert _plain(after.body["messages"])[:len(sent_before)] == _plain(sent_before)
    assert after.status == 200 and not after.thinking_mismatches
    assert thinking_prefix_problems(r.api.requests) == []


def test_a_prompt_too_long_the_estimate_missed_is_compacted_by_the_api_and_the_turn_goes_on(tmp_path):
    with rig(tmp_path, window=20_000, config=DEFAULTS) as r:
        for n in range(3):
            assert run_turn(r.session, code_turn(n)).error is None
        r.api.inject("ptl")  # the server says too long although the estimate judged it fits
        result = run_turn(r.session, code_turn(3))
        assert run_turn(r.session, code_turn(4)).error is None
    assert result.error is None and result.compactions == ["reactive"]
    made = calls(r.api)
    refused = next(q for q in made if q.status == 400)
    asked = on_demand_calls(r.api)
    assert len(asked) == 1 and made.index(asked[0]) == made.index(refused) + 1  # the API writes the summary at once
    assert r.api.model_calls("compaction") == 1 and asked[0].status == 200  # and ctx_magic writes none of its own
    retry = made[made.index(asked[0]) + 1]
    block = retry.body["messages"][0]["content"][0]
    assert block["type"] == "compaction" and "signature" in block
    assert all(q.body["messages"][0]["content"][0] == block for q in made[made.index(retry):] if q.kind == "normal")
    assert r.session.compaction.boundaries[-1].trigger == "reactive"
    assert all(q.status == 200 and not q.thinking_mismatches for q in made if q is not refused)
