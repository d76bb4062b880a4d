"""Append-only conversations, through the loop against the stand-in over real HTTP: on a model
that checks the prefix of every thinking block sent back, the system prompt and the tools are the
same in every request until a summary starts a new prefix (the context tools join there, or at
the first request when it starts near the threshold), news is appended, and each edit of what
was sent (an idle clearing, a snip, the model's own clearing, a summary) leaves only thinking whose
prefix is what it was written after."""

from __future__ import annotations

from agent_rig import THINKING_TYPES, _plain, rig, thinking_prefix_problems

from ctx_magic.agent.catalog import MODEL_TABLE, checks_thinking_prefix, table_limits
from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.events import ContextMeasured, Snipped, ThinkingCleared
from ctx_magic.messages import Message, text_block, user_text
from ctx_magic.settings import Settings

DEFAULTS = Settings()  # no thinking parameter: these models think adaptively all the same
CONTEXT_TOOLS = {"compact", "snip", "search_transcript"}
CHECKED = ("claude-sonnet-5-5", "claude-opus-5-5", "claude-haiku-5-5", "claude-fable-5-1", "claude-fable-5-2",
           "claude-mythos-5-1", "claude-mythos-5-2")


def code_turn(n: int, lines: int = 60) -> str:
    return f"Turn {n}\n```python\nprint('\\n'.join(f'value {n} {{i}}' for i in range({lines})))\n```"


def accepted(requests) -> bool:  # type: ignore[no-untyped-def]
    """Every Messages call answered, none with a thinking block the prefix check failed (refused or let through)."""
    calls = [q for q in requests if q.path == "/v1/messages"]
    return bool(calls) and all(q.status == 200 and not q.thinking_mismatches for q in calls)


def thinking_sent_back(requests) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for q in requests for m in (q.body or {}).get("messages", []) if isinstance(m.get("content"), list)
               for b in m["content"] if b.get("type") in THINKING_TYPES)


def test_the_catalog_names_the_models_with_the_check_and_the_setting_forces_it():
    assert {spec.prefix for spec in MODEL_TABLE if spec.prefix_check} == set(CHECKED)
    assert all(checks_thinking_prefix(model) for model in CHECKED)
    assert not any(checks_thinking_prefix(model) for model in ("claude-sonnet-4-6", "claude-opus-4-8",
                                                               "claude-sonnet-5", "claude-opus-5", "my-gateway-model"))
    assert Settings().resolve(table_limits("claude-sonnet-5-5")).append_only
    assert not Settings().resolve(table_limits("claude-sonnet-4-6")).append_only
    assert Settings(append_only="on").resolve(table_limits("my-gateway-model")).append_only
    assert not Settings(append_only="off").resolve(table_limits("claude-opus-5-5")).append_only


def test_system_and_tools_are_the_same_in_every_request_without_the_context_tools_far_from_the_threshold(tmp_path):
    """A pin, a notice and a clearing included: nothing before a block changes under it, and the
    context tools, which could join only at the first request, stay out of a conversation that
    started far below the warning level."""
    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        run_turn(r.session, code_turn(0))
        r.session.pin_board.pin("Always report temperatures in kelvin.")
        run_turn(r.session, code_turn(1))
        r.session.notice("a line for the user only")
        old = next(i for m in r.session.live.messages for i in m.tool_result_ids)
        assert r.session.live.clear_results([old], "model", r.session.setup())[0] == [old]  # a cut
        run_turn(r.session, "what did batch 1 show?")
        messages = [q for q in r.api.requests if q.path == "/v1/messages"]
    assert not {t["name"] for t in messages[0].body["tools"]} & CONTEXT_TOOLS
    assert not r.session.setup().context_tools  # the registry does not take a call to a tool not offered
    assert len({repr(_plain([q.body["system"], q.body["tools"]])) for q in messages}) == 1
    pinned = next(n for n, q in enumerate(messages) if "kelvin" in repr(q.body["messages"]))
    assert "kelvin" in repr(messages[pinned].body["messages"][-1])  # news arrives at the end
    sent_back = [b for q in messages[1:] for m in q.body["messages"] if m["role"] == "assistant"
                 for b in m["content"] if b.get("type") == "thinking"]
    assert any(b["thinking"] == "" for b in sent_back)  # notes between tool calls: empty, sent back as they came
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_the_context_tools_join_at_a_compaction_and_stay(tmp_path):
    """A summary starts a new prefix: the tools may change there, and only there."""
    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        for n in range(2):
            run_turn(r.session, code_turn(n))
        manual_compact(r.session, "keep the values")
        before = len(r.api.requests)
        for n in range(2, 4):
            run_turn(r.session, code_turn(n))
    offered = [[bool({t["name"] for t in q.body["tools"]} & CONTEXT_TOOLS) for q in requests
                if q.path == "/v1/messages" and q.kind == "normal"]
               for requests in (r.api.requests[:before], r.api.requests[before:])]
    assert set(offered[0]) == {False} and set(offered[1]) == {True}
    assert len({repr(q.body["tools"]) for q in r.api.requests[before:] if q.path == "/v1/messages"}) == 1
    assert r.session.setup().context_tools
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_a_conversation_starting_past_the_warning_level_has_the_context_tools_from_its_first_request(tmp_path):
    with rig(tmp_path, window=20_000, config=DEFAULTS) as r:
        r.session.append(user_text("notes: " + "reading 42 at the north valve. " * 1_600, timestamp=r.clock()))
        run_turn(r.session, "what do the notes say?")
        first = next(q for q in r.api.requests if q.path == "/v1/messages" and q.kind == "normal")
    assert {t["name"] for t in first.body["tools"]} >= CONTEXT_TOOLS
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_a_model_without_the_check_keeps_the_context_tools_for_the_first_cut(tmp_path):
    with rig(tmp_path, window=200_000, model="claude-sonnet-4-6") as r:
        run_turn(r.session, code_turn(0))
        first = r.api.requests[-1].body
    assert not {t["name"] for t in first["tools"]} & CONTEXT_TOOLS


def test_an_idle_break_drops_all_thinking_and_the_requests_after_it_stay_valid(tmp_path):
    events: list = []
    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        r.session.listeners.append(events.append)
        for n in range(3):
            run_turn(r.session, code_turn(n))
        r.clock.advance(10 * 60)  # the cache has expired: old results are cleared, the thinking goes
        run_turn(r.session, code_turn(3))
        run_turn(r.session, code_turn(4))
        after = r.api.requests[-1].body["messages"]
    cleared = [e for e in events if isinstance(e, ThinkingCleared)]
    assert [e.trigger for e in cleared] == ["idle"] and cleared[0].blocks >= 3
    assert thinking_sent_back([r.api.requests[-1]]) > 0  # the turns after the break think again
    assert all(b.get("type") not in THINKING_TYPES for m in after[:6] for b in m["content"])
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_a_snip_and_the_models_clearing_drop_exactly_the_thinking_they_invalidate(tmp_path):
    events: list = []
    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        r.session.listeners.append(events.append)
        for n in range(6):
            run_turn(r.session, code_turn(n))
        before = sum(1 for m in r.session.live.messages for b in m.content if b.get("type") in THINKING_TYPES)
        assert r.session.live.snip(4, r.clock(), r.session.setup()) > 0  # what %compact --snip does
        run_turn(r.session, code_turn(6))
        old = next(i for m in r.session.live.messages[:4] for i in m.tool_result_ids)
        cleared, _ = r.session.live.clear_results([old], "model", r.session.setup())
        run_turn(r.session, code_turn(7))
    dropped = [e for e in events if isinstance(e, ThinkingCleared)]
    assert cleared == [old] and [e.trigger for e in dropped] == ["edit", "edit"]
    assert 0 < dropped[0].blocks < before  # the head's thinking, before the marker, stays
    assert thinking_sent_back(r.api.requests[-1:]) > 0
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_a_client_summary_keeps_no_thinking_from_before_it(tmp_path):
    events: list = []
    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        r.session.listeners.append(events.append)
        for n in range(3):
            run_turn(r.session, code_turn(n))
        manual_compact(r.session, "keep the values")
        live_thinking = [b for m in r.session.live.messages for b in m.content if b.get("type") in THINKING_TYPES]
        run_turn(r.session, code_turn(3))
        run_turn(r.session, code_turn(4))
    assert live_thinking == []
    assert r.api.model_calls("compaction") == 1
    assert thinking_sent_back(r.api.requests[-1:]) > 0  # thinking written after the summary is sent back
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_a_switch_of_model_and_back_sends_only_thinking_the_model_can_take(tmp_path):
    """Sonnet, then Opus, then Sonnet again: each switch drops the blocks the other model wrote and
    all thinking after the first of them; every request is accepted and the thinking written after
    the last switch is sent back."""
    import dataclasses

    from ctx_magic.agent.model import AnthropicModel

    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        sonnet = r.session.frame.model
        run_turn(r.session, code_turn(0))
        opus = AnthropicModel(sonnet.client, name="claude-opus-5-5")
        r.session.switch_model(dataclasses.replace(DEFAULTS, model="claude-opus-5-5"), opus)
        run_turn(r.session, code_turn(1))
        dropped = r.session.switch_model(DEFAULTS, sonnet)
        run_turn(r.session, code_turn(2))
    assert dropped is not None and dropped.trigger == "model-switch"
    assert thinking_sent_back(r.api.requests[-1:]) > 0
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_a_request_too_large_strips_an_old_image_and_the_thinking_after_it(tmp_path):
    from ctx_magic.messages import Message, Usage, tool_result_block, tool_use_block

    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        run_turn(r.session, code_turn(0))
        r.session.append(Message("assistant", (tool_use_block("toolu_plot", "python", {"code": "plot()"}),),
                                 api_id="msg_local", usage=Usage(3_000, 20), timestamp=r.clock()))
        r.session.append(Message("user", (tool_result_block("toolu_plot", [{"type": "text", "text": "a plot"}, png]),),
                                 timestamp=r.clock()))
        run_turn(r.session, code_turn(1))  # thinking written after the image
        r.api.inject("413")
        result = run_turn(r.session, code_turn(2))
        records = r.session.store.load_transcript().records
    assert result.error is None
    assert any(rec.get("event") == "thinking_cleared" and rec.get("trigger") == "edit" for rec in records)
    assert thinking_prefix_problems(r.api.requests) == []
    assert all(q.status == 200 and not q.thinking_mismatches for q in r.api.requests
               if q.path == "/v1/messages" and q.fault is None)


def test_a_resumed_session_sends_the_prefix_its_thinking_was_written_after(tmp_path):
    from ctx_magic.agent.session import open_session

    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        run_turn(r.session, code_turn(0))
        run_turn(r.session, code_turn(1))
        bound = r.session.frame.bound
        r.session.close()
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic",
                                         DEFAULTS, session_id=r.session.session_id, resume=True, root=tmp_path,
                                         clock=r.clock)
        result = run_turn(resumed, code_turn(2))
        resumed.close()
    assert problems == [] and result.error is None and resumed.frame.bound == bound
    assert thinking_sent_back(r.api.requests[-1:]) > 0
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_the_decision_snips_later_on_a_model_with_the_check_and_its_requests_stay_valid(tmp_path):
    """Past a 20-message limit a snip pays sooner on a model without the prefix check (only the tail
    is written again) than on one with it (the tail's thinking leaves too, priced as output to think
    again): each snip is the decision's, with its reason; the request after it is accepted with
    every thinking block sent back valid, and thinking written after it is sent back."""
    first_snip, reasons = {}, {}
    for model, config in (("claude-sonnet-4-5", Settings(model="claude-sonnet-4-5", thinking="enabled",
                                                         thinking_budget=1_024, snip_max_messages=20)),
                          ("claude-sonnet-5-5", Settings(snip_max_messages=20))):
        events: list = []
        with rig(tmp_path / model, window=200_000, model=model, config=config) as r:
            r.session.listeners.append(events.append)
            for n in range(20):  # until a turn after the first snip
                run_turn(r.session, code_turn(n))
                if model in first_snip:
                    break
                if any(isinstance(e, Snipped) for e in events):
                    first_snip[model] = n
        reasons[model] = [e.figures.plan for e in events if isinstance(e, ContextMeasured) and "snipping" in
                          e.figures.plan]
        assert [e.trigger for e in events if isinstance(e, Snipped)] == ["auto"] * len(reasons[model])
        assert accepted(r.api.requests) and thinking_sent_back(r.api.requests[-1:]) > 0
        if model == "claude-sonnet-5-5":
            dropped = [e for e in events if isinstance(e, ThinkingCleared)]
            assert [e.trigger for e in dropped] == ["edit"] * len(reasons[model])
            assert all("tokens of thinking after it (it pays back" in why for why in reasons[model])
            assert thinking_prefix_problems(r.api.requests) == []
    assert reasons["claude-sonnet-4-5"] and reasons["claude-sonnet-5-5"]
    assert first_snip["claude-sonnet-4-5"] < first_snip["claude-sonnet-5-5"]


def test_images_left_out_past_the_limit_drop_the_thinking_after_them_in_one_line(tmp_path):
    """90 images, two turns that think after them, then 15 more: the 20 oldest are left out of every
    request from then on, so the thinking after them leaves once, said in one line; the turn after
    that sends its own thinking back, nothing more is dropped, and every request is accepted."""
    import base64

    from image_samples import png

    from ctx_magic.notebook.notices import thinking_cleared_line

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(png()).decode()}}
    events: list = []
    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        r.session.listeners.append(events.append)
        r.session.append(Message("user", (text_block("plots"), *[image] * 90), timestamp=r.clock()))
        run_turn(r.session, code_turn(0))
        run_turn(r.session, code_turn(1))
        r.session.append(Message("user", (text_block("more plots"), *[image] * 15), timestamp=r.clock()))
        run_turn(r.session, code_turn(2))
        run_turn(r.session, code_turn(3))
    dropped = [e for e in events if isinstance(e, ThinkingCleared)]
    assert [e.trigger for e in dropped] == ["images"] and dropped[0].blocks >= 2
    assert thinking_cleared_line(dropped[0]).startswith(
        f"Cleared {dropped[0].blocks} thinking blocks written before older images were left out of each request")
    last = r.api.requests[-1].body["messages"]
    assert sum(1 for m in last if isinstance(m["content"], list) for b in m["content"]
               if b.get("type") == "image") == 85  # 105 less the 20 oldest
    assert thinking_sent_back(r.api.requests[-1:]) > 0
    assert thinking_prefix_problems(r.api.requests) == [] and accepted(r.api.requests)


def test_forced_off_and_back_a_change_of_tools_drops_the_thinking_before_the_request(tmp_path):
    """A snip in an append-only conversation, then `CtxMagic.append_only = 'off'`: the cut brings the
    context tools in, which voids every thinking block written before; they leave before the
    request, said in one line, and it is accepted. Forced back on, the conversation goes back to the
    tools it was bound to: the same again."""
    import dataclasses

    events: list = []
    with rig(tmp_path, window=200_000, config=DEFAULTS) as r:
        r.session.listeners.append(events.append)
        for n in range(6):
            run_turn(r.session, code_turn(n))
        assert r.session.live.snip(4, r.clock(), r.session.setup()) > 0  # what %compact --snip does
        run_turn(r.session, code_turn(6))
        r.session.frame.reconfigure(dataclasses.replace(DEFAULTS, append_only="off"))
        run_turn(r.session, code_turn(7))
        with_tools = r.api.requests[-1].body
        r.session.frame.reconfigure(DEFAULTS)
        run_turn(r.session, code_turn(8))
        without = r.api.requests[-1].body
    assert {t["name"] for t in with_tools["tools"]} & CONTEXT_TOOLS == CONTEXT_TOOLS
    assert not {t["name"] for t in without["tools"]} & CONTEXT_TOOLS
    dropped = [e for e in events if isinstance(e, ThinkingCleared) and e.trigger == "tools"]
    assert len(dropped) == 2 and all(e.blocks > 0 for e in dropped)
    assert thinking_sent_back(r.api.requests[-1:]) > 0  # written after the change: valid, sent back
    assert accepted(r.api.requests)
