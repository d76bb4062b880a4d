"""Extended thinking through the whole loop, on the real SDK against the offline stand-in, which
signs every thinking block and refuses one that comes back changed, missing, out of place or
written by another model; and thinking clearing after an idle gap."""

from __future__ import annotations

import dataclasses
import json

import anthropic
from agent_rig import prompt, rig

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import AnthropicModel
from ctx_magic.agent.session import open_session
from ctx_magic.context.thinking import THINKING_OMITTED, clear_old_thinking, side_call_view, thinking_turns
from ctx_magic.events import ThinkingCleared, ThinkingDelta
from ctx_magic.messages import Message, text_block, user_text
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.offline.thinking import signature_valid
from ctx_magic.settings import Settings

THINKING = Settings(thinking="enabled", thinking_budget=1_024)
BUDGETED = "claude-sonnet-4-6"  # takes a thinking budget (the 5.5 models think adaptively only)


def main_calls(api: OfflineAPI) -> list:
    return [q for q in api.requests if q.path == "/v1/messages"]


def thinking_of(session) -> list[dict]:
    return [b for m in session.live.messages for b in m.content if b.get("type") in ("thinking", "redacted_thinking")]


def test_a_tool_loop_with_thinking_sends_the_blocks_back_byte_for_byte(tmp_path):
    with rig(tmp_path, window=200_000, config=dataclasses.replace(THINKING, model=BUDGETED), model=BUDGETED) as r:
        deltas: list[str] = []
        r.session.listeners.append(lambda e: deltas.append(e.text) if isinstance(e, ThinkingDelta) else None)
        result = run_turn(r.session, prompt(0))
        calls = main_calls(r.api)
    assert result.error is None and result.model_calls == 2  # the code ran, then the loop continued
    assert [q.status for q in calls] == [200, 200]
    assert all(q.body["thinking"] == {"type": "enabled", "budget_tokens": 1_024} for q in calls)
    assert all(q.body["max_tokens"] == r.session.frame.window.reply_cap + 1_024 for q in calls)
    answer = r.session.live.messages[1]
    block = answer.content[0]
    assert block["type"] == "thinking" and signature_valid(block["thinking"], block["signature"], BUDGETED)
    assert "".join(deltas) == block["thinking"]  # streamed as it came, then kept whole
    continued = calls[1].body["messages"][1]["content"]
    assert json.dumps(continued[0]) == json.dumps(block)  # the loop sent it back unchanged
    assert answer.meta["model"] == BUDGETED


def test_the_stand_in_refuses_an_edited_block_so_the_test_above_can_fail(tmp_path):
    with rig(tmp_path, window=200_000, config=THINKING) as r:
        run_turn(r.session, prompt(0))
        body = dict(main_calls(r.api)[-1].body)
    body["messages"][1]["content"][0]["thinking"] += " (edited)"
    with serve_in_thread(r.api) as (url, _stop):
        client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
        try:
            client.post("/v1/messages", body=body, cast_to=object)
        except anthropic.BadRequestError as refused:
            assert "Invalid `signature` in `thinking` block" in str(refused)
        else:
            raise AssertionError("an edited thinking block was accepted")


def test_thinking_survives_compaction_and_resume_in_a_restarted_stand_in(tmp_path):
    with rig(tmp_path, window=200_000, config=dataclasses.replace(THINKING, model=BUDGETED), model=BUDGETED) as r:
        for n in range(3):
            assert run_turn(r.session, prompt(n)).error is None
        manual_compact(r.session, direction="from", index=len(r.session.live.messages) - 4)  # keeps the last loop
        assert run_turn(r.session, prompt(3)).error is None
        kept = thinking_of(r.session)
        assert kept and all(q.status == 200 for q in main_calls(r.api))
        compaction = next(q for q in main_calls(r.api) if q.kind == "compaction")
        assert compaction.body["thinking"]["type"] == "enabled"  # the summary shares the main call's settings
        sid, store = r.session.session_id, tmp_path / ".ctx_magic"
        r.session.close()
    restarted = OfflineAPI(OfflineConfig(window=200_000, max_output=4_096), clock=r.clock)  # a new server process
    with serve_in_thread(restarted) as (url, _stop):
        model = AnthropicModel(anthropic.Anthropic(api_key="k", base_url=url, max_retries=0), name=BUDGETED)
        resumed, problems = open_session(model, r.session.frame.executor, store,
                                         dataclasses.replace(THINKING, model=BUDGETED), session_id=sid, resume=True,
                                         root=tmp_path, clock=r.clock)
        assert problems == []
        assert [json.dumps(b) for b in thinking_of(resumed)] == [json.dumps(b) for b in kept]
        result = run_turn(resumed, prompt(4))
        resumed.close()
    assert result.error is None and result.model_calls == 2
    assert [q.status for q in main_calls(restarted)] == [200, 200]


def test_an_idle_gap_over_the_ttl_keeps_only_the_last_thinking_turn_and_resume_agrees(tmp_path):
    editing = dataclasses.replace(THINKING, model="claude-sonnet-4-6")  # a model without the prefix check
    with rig(tmp_path, window=200_000, config=editing, model=editing.model) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
            r.clock.advance(60)  # active use: well inside the 5-minute cache TTL
        assert len(thinking_turns(r.session.live.messages)) == 3  # nothing cleared while active
        events: list = []
        r.session.listeners.append(events.append)
        r.clock.advance(5 * 60 + 1)
        result = run_turn(r.session, "I'm back: what did the last batch show?")
        cleared = [e for e in events if isinstance(e, ThinkingCleared)]
        sent = main_calls(r.api)[-1].body["messages"]
        expected = r.session.request(r.session.setup()).messages
        resumed, _ = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic", editing,
                                  session_id=r.session.session_id, resume=True, root=tmp_path, clock=r.clock)
    assert result.error is None
    assert len(cleared) == 1 and cleared[0].trigger == "idle" and cleared[0].tokens_freed > 0
    assert len(cleared[0].message_uuids) == 2  # turns 0 and 1; turn 2 was the last thinking turn
    with_thinking = [m for m in sent if m["role"] == "assistant" and m["content"][0]["type"] == "thinking"]
    assert len(with_thinking) == 1  # only the last turn's answer still opens with its thinking
    assert len(thinking_turns(r.session.live.messages)) == 2  # that turn, and the answer to the new prompt
    assert resumed.request(resumed.setup()).messages == expected  # the clearing is replayed byte for byte on resume


def test_a_model_switch_drops_the_blocks_the_new_model_cannot_take(tmp_path):
    with rig(tmp_path, window=200_000, config=THINKING) as r:
        run_turn(r.session, prompt(0))
        other = AnthropicModel(r.session.frame.model.client, name="claude-opus-5-5")
        # Without the switch's stripping the stand-in refuses Sonnet's blocks on Opus (bound signatures):
        r.session.frame.reconfigure(dataclasses.replace(THINKING, model="claude-opus-5-5"), other)
        refused = run_turn(r.session, "and now?")
        assert refused.error is not None and "Invalid `signature`" in refused.error
        r.session.frame.reconfigure(THINKING, r.session.frame.model)
        event = r.session.switch_model(dataclasses.replace(THINKING, model="claude-opus-5-5"), other)
        result = run_turn(r.session, "and now?")
    assert event is not None and event.trigger == "model-switch"
    assert result.error is None and main_calls(r.api)[-1].status == 200
    assert {m.meta.get("model") for m in r.session.live.messages if m.role == "assistant" and m.content and
            m.content[0].get("type") == "thinking"} == {"claude-opus-5-5"}


def test_redacted_thinking_goes_back_unchanged_too(tmp_path):
    with rig(tmp_path, window=200_000, config=THINKING) as r:
        r.api.inject("redacted_thinking")
        result = run_turn(r.session, prompt(0))
    assert result.error is None and [q.status for q in main_calls(r.api)] == [200, 200]
    assert r.session.live.messages[1].content[0]["type"] == "redacted_thinking"


def test_side_calls_keep_the_blocks_while_the_cache_is_warm_and_drop_them_when_it_is_cold(tmp_path):
    with rig(tmp_path, window=200_000, config=dataclasses.replace(THINKING, model=BUDGETED), model=BUDGETED) as r:
        run_turn(r.session, prompt(0))
        r.session.side_calls.text(r.session.live.messages, "Save the memories worth keeping.")
        warm = main_calls(r.api)[-1].body["messages"]
        r.clock.advance(5 * 60 + 1)
        r.session.side_calls.text(r.session.live.messages, "Save the memories worth keeping.")
        cold = main_calls(r.api)[-1].body["messages"]
    def count(messages):
        return sum(1 for m in messages for b in m["content"] if b.get("type") == "thinking")
    assert count(warm) == 1 and count(cold) == 0


def test_the_thinking_budget_is_reserved_in_the_thresholds(tmp_path):
    with (rig(tmp_path, window=200_000, max_output=64_000) as plain,
          rig(tmp_path / "t", window=200_000, max_output=64_000, config=THINKING) as thinking):
        a, b = plain.session.setup().context.thresholds, thinking.session.setup().context.thresholds
    assert plain.session.frame.window.reply_cap == thinking.session.frame.window.reply_cap == 16_384
    assert thinking.session.frame.window.max_tokens == 16_384 + 1_024
    assert (a.effective, b.effective) == (200_000 - 16_384, 200_000 - 16_384 - 1_024)
    assert a.autocompact - b.autocompact == 1_024 and a.blocking - b.blocking == 1_024


def test_an_answer_that_was_only_thinking_keeps_a_note_so_no_message_is_empty():
    only = Message("assistant", ({"type": "thinking", "thinking": "t", "signature": "s"},), api_id="m1")
    turns = [user_text("a"), only, user_text("b"),
             Message("assistant", ({"type": "thinking", "thinking": "u", "signature": "s"}, text_block("hi")),
                     api_id="m2")]
    cleared, event = clear_old_thinking(turns)
    assert cleared[1].content == (text_block(THINKING_OMITTED),) and event is not None and event.blocks == 1
    assert cleared[3] == turns[3]
    assert side_call_view(turns, cache_warm=True) == turns
