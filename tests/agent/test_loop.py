"""The agent loop end to end: the real anthropic SDK over real HTTP against the offline server.

Auto-compaction, reactive compaction and the circuit breaker: long sessions that compact several
times and keep working, the reactive path, the circuit breaker, faults.
"""

from __future__ import annotations

import json
import shutil

import pytest
from agent_rig import CLIENT_SUMMARY, CompactionMisbehaves, assert_m5, prompt, request_text, rig
from builders import FillingDisk
from image_samples import png_header

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import STREAM_BACKOFF_SECONDS
from ctx_magic.agent.session import open_session
from ctx_magic.context.invariants import check_invariants
from ctx_magic.events import (
    CompactionFailedEvent,
    Notice,
    ReplyRestarted,
    ReplyWithdrawn,
    Status,
    TextDelta,
    ThinkingDelta,
    ToolStarted,
    UsageUpdated,
)
from ctx_magic.messages import Message, Usage, tool_result_block, tool_use_block, user_text
from ctx_magic.offline.images import image_block
from ctx_magic.offline.policy import Policy
from ctx_magic.settings import Settings


def test_thirty_turns_in_a_small_window_compact_repeatedly_and_keep_working(tmp_path):
    with rig(tmp_path, window=20_000) as r:
        results = [run_turn(r.session, prompt(n)) for n in range(32)]
        records = [q for q in r.api.requests if q.path == "/v1/messages"]
        compactions = [i for i, q in enumerate(records) if q.kind == "compaction"]
        window = r.api.config.window

    assert [res.error for res in results] == [None] * 32
    assert all(res.model_calls >= 2 for res in results)  # each turn ran its code and answered
    assert len(compactions) >= 3, f"expected several compactions, saw {len(compactions)}"
    assert {b.trigger for b in r.session.compaction.boundaries} == {"auto"}
    assert r.session.meter.breaks == []  # every compaction reset the cache-break baseline
    assert all(q.status == 200 for q in records), [q.status for q in records]
    assert all(q.input_tokens <= window for q in records)
    for record in records:
        assert_m5(record)
    sent_prompts = 0
    for index, record in enumerate(records):
        if record.kind != "normal":
            continue
        text = request_text(record)
        asked = [n for n in range(32) if f"Turn {n}: summarise batch {n}" in text]
        if index - 1 in compactions:  # the first request after a compaction
            assert asked == list(range(max(asked) + 1)), "a user message is missing after compaction"
        sent_prompts = max(sent_prompts, max(asked) + 1)
    assert sent_prompts == 32


def test_prompt_too_long_the_estimate_missed_recovers_with_one_compaction(tmp_path):
    with rig(tmp_path) as r:
        for n in range(3):
            assert run_turn(r.session, prompt(n)).error is None
        before = r.api.model_calls("compaction")
        r.api.inject("ptl")  # the server says too long although the estimate judged it fits
        result = run_turn(r.session, prompt(3))
        assert result.error is None
        assert result.compactions == ["reactive"]
        assert r.api.model_calls("compaction") == before + 1
        assert r.session.compaction.boundaries[-1].trigger == "reactive"
        check_invariants(r.session.live.messages)
        assert run_turn(r.session, prompt(4)).error is None


def test_second_prompt_too_long_in_a_turn_ends_in_a_clear_error_and_a_valid_session(tmp_path):
    with rig(tmp_path) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        r.api.inject("ptl", "ok", "ptl")  # main call, compaction call, retried main call
        result = run_turn(r.session, prompt(3))
        assert result.error is not None
        assert "prompt is too long" in result.error.lower() and "again after compacting" in result.error
        assert "\n" not in result.error
        check_invariants(r.session.live.messages)
        assert run_turn(r.session, prompt(4)).error is None


def test_three_failed_compactions_trip_the_breaker_and_manual_compact_resets_it(tmp_path):
    # Trigger at 20% of the effective window: far from blocking, so turns go on while failing.
    config = Settings(model=CLIENT_SUMMARY, autocompact_pct=20)  # a summary of ctx_magic's own fails
    with rig(tmp_path, window=40_000, config=config, model=CLIENT_SUMMARY) as r:
        failures: list[CompactionFailedEvent] = []

        def next_failure_mode(event):
            """Each failure arms the next kind: a tool call, no <summary>, then a server error."""
            if isinstance(event, CompactionFailedEvent):
                failures.append(event)
                if len(failures) == 1:
                    r.api.policy = CompactionMisbehaves("no_summary")
                elif len(failures) == 2:
                    r.api.policy = Policy()
            if isinstance(event, Status) and event.state == "compacting" and len(failures) == 2:
                r.api.inject("500")  # aimed at the compaction call about to be made

        r.session.listeners.append(next_failure_mode)
        r.api.policy = CompactionMisbehaves("tool_call")
        turns = 0
        while not r.session.compaction.breaker_open and turns < 12:
            assert run_turn(r.session, prompt(turns)).error is None
            turns += 1

        assert [f.consecutive_failures for f in failures] == [1, 2, 3]
        assert "no <summary>" in failures[0].reason  # its tool call was dropped, its text had no summary
        assert "<summary>" in failures[1].reason
        assert "500" in failures[2].reason
        assert failures[2].breaker_open and r.session.status().to_json()["breaker_open"]
        assert r.session.tokens() > r.session.setup().context.thresholds.autocompact

        calls = r.api.model_calls("compaction")
        assert run_turn(r.session, prompt(20)).error is None
        assert r.api.model_calls("compaction") == calls  # open breaker: no more attempts

        manual_compact(r.session, "keep the sensor names")
        assert not r.session.compaction.breaker_open and r.session.compaction.failures == 0
        assert r.session.compaction.boundaries[-1].trigger == "manual"
        assert not r.session.status().to_json()["breaker_open"]


def test_compaction_request_reuses_system_tools_and_tool_choice_and_forbids_tools_in_words(tmp_path):
    """The summary call has the same prefix as the main call, so it is read from the cache: a tool_choice change
    would invalidate every cached message block (the stand-in bills it so)."""
    with rig(tmp_path, window=200_000, model=CLIENT_SUMMARY) as r:
        run_turn(r.session, prompt(0))
        before = r.session.meter.snapshot()
        manual_compact(r.session)
        after = r.session.meter.snapshot()
        main = [q for q in r.api.requests if q.kind == "normal"][-1]
        compact = [q for q in r.api.requests if q.kind == "compaction"][-1]
    assert compact.body["system"] == main.body["system"]
    assert compact.body["tools"] == main.body["tools"]
    assert "tool_choice" not in compact.body and "tool_choice" not in main.body
    # Everything the last main call sent is read from the cache; only the prompt is new.
    read = after.cache_read_input_tokens - before.cache_read_input_tokens
    assert read == main.input_tokens
    assert compact.body["max_tokens"] <= 20_000
    last = compact.body["messages"][-1]["content"][-1]["text"]
    assert last.startswith("IMPORTANT: answer with plain text only")
    assert "REMINDER: plain text only" in last


def test_faults_end_in_one_clear_line_and_the_next_turn_works(tmp_path):
    # A window no turn here nears: the faults meet the turn's own call, never a compaction's summary.
    with rig(tmp_path, window=200_000, max_retries=2) as r:
        run_turn(r.session, prompt(0))
        transcript_lines = r.session.store.transcript_path.read_text().count("\n")
        for fault, times, words in [("429", 3, "rate limited"), ("500", 3, "failed (500)"),
                                    ("529", 3, "overloaded"), ("drop", 3, "connection"),
                                    ("reset", 3, "reset by peer")]:
            r.api.inject(*[fault] * times)  # the SDK retries twice, the loop a broken stream twice
            result = run_turn(r.session, "hello again")
            assert result.error is not None and words in result.error.lower(), (fault, result.error)
            assert "\n" not in result.error and "Traceback" not in result.error
            check_invariants(r.session.live.messages)
            assert run_turn(r.session, prompt(1)).error is None
        loaded = r.session.store.load_transcript()
        assert loaded.problems == []
        assert r.session.store.transcript_path.read_text().count("\n") > transcript_lines


@pytest.mark.parametrize("fault", ["drop", "reset"])
def test_a_stream_broken_mid_reply_is_asked_again_and_nothing_partial_stays(tmp_path, fault):
    with rig(tmp_path) as r:
        seen = []
        r.session.listeners.append(seen.append)
        r.api.inject(fault)  # the next reply breaks off after its first events (closed, or reset)
        result = run_turn(r.session, "hello there")
        lines = r.session.store.transcript_path.read_text().splitlines()
    assert result.error is None
    restarts = [e for e in seen if isinstance(e, ReplyRestarted)]
    assert [(e.attempt, e.attempts) for e in restarts] == [(2, 3)] and "broke" in restarts[0].reason
    assert sum(1 for q in r.api.requests if q.path == "/v1/messages") == 2
    replies = [m for m in r.session.live.messages if m.role == "assistant"]
    assert len(replies) == 1 and replies[0].api_id  # one whole reply, from the second attempt
    assert sum(json.loads(line).get("role") == "assistant" for line in lines) == 1


def test_an_overloaded_error_event_mid_stream_is_asked_again_after_a_wait(tmp_path):
    with rig(tmp_path) as r:
        started = r.clock()
        r.api.inject("overloaded_midstream")
        result = run_turn(r.session, "hello there")
    assert result.error is None and result.text
    assert r.clock() - started == STREAM_BACKOFF_SECONDS  # waited on the session's clock, not the wall's
    assert [q.status for q in r.api.requests if q.path == "/v1/messages"] == [200, 200]


def test_a_stream_closed_before_message_stop_never_runs_a_tool_with_half_its_input(tmp_path):
    with rig(tmp_path) as r:
        r.api.inject("early_close_tool")
        result = run_turn(r.session, "run\n```python\nx = 41 + 1\nprint(x)\n```")
    assert result.error is None
    uses = [b for m in r.session.live.messages for b in m.blocks("tool_use")]
    assert len(uses) == 1 and uses[0]["input"] == {"code": "x = 41 + 1\nprint(x)"}
    assert "42" in json.dumps([m.to_json() for m in r.session.live.messages])


@pytest.mark.parametrize("fault", ["drop", "reset"])
def test_after_a_third_broken_stream_the_partial_reply_is_withdrawn_and_nothing_stored(tmp_path, fault):
    with rig(tmp_path) as r:
        seen = []
        r.session.listeners.append(seen.append)
        r.api.inject(fault, fault, fault)
        result = run_turn(r.session, "stream " * 300)
        assert run_turn(r.session, "and now?").error is None
    assert result.error is not None and "broke" in result.error
    withdrawn = [e for e in seen if isinstance(e, ReplyWithdrawn)]
    assert len(withdrawn) == 1 and withdrawn[0].reason == result.error
    # something had streamed (the model's thinking comes first, and may be all there was)
    assert any(isinstance(e, (TextDelta, ThinkingDelta)) for e in seen[: seen.index(withdrawn[0])])
    assert [m.role for m in r.session.live.messages] == ["user", "user", "assistant"]


@pytest.mark.parametrize("fault", ["empty_reply", "whitespace_reply"])
def test_an_empty_reply_is_asked_again_and_never_stored(tmp_path, fault):
    with rig(tmp_path) as r:
        r.api.inject(fault)
        result = run_turn(r.session, "hello there")
        lines = r.session.store.transcript_path.read_text().splitlines()
    assert result.error is None and result.text
    assert [m.role for m in r.session.live.messages] == ["user", "assistant"]
    assert all(m.text.strip() for m in r.session.live.messages)
    assert sum(json.loads(line).get("role") == "assistant" for line in lines) == 1


def test_an_empty_reply_twice_ends_the_turn_with_a_warning_and_the_next_turn_works(tmp_path):
    with rig(tmp_path) as r:
        seen = []
        r.session.listeners.append(seen.append)
        run_turn(r.session, "run\n```python\nprint(1)\n```")
        r.api.inject("whitespace_reply", "empty_reply")
        result = run_turn(r.session, "run\n```python\nprint(2)\n```")
        after = run_turn(r.session, "and now?")
        for record in [q for q in r.api.requests if q.path == "/v1/messages"]:
            assert_m5(record)
    assert result.error is None
    warnings = [e.text for e in seen if isinstance(e, Notice) and e.level == "warning"]
    assert "The model's reply was empty 2 times; nothing was stored." in warnings
    assert after.error is None
    assert all(m.content and all(b.get("text", "x").strip() for b in m.content) for m in r.session.live.messages)


def test_an_empty_reply_an_earlier_version_stored_is_repaired_at_resume(tmp_path):
    with rig(tmp_path) as r:
        run_turn(r.session, prompt(0))
        r.session.append(Message("assistant", (), timestamp=r.clock()))  # what the loop used to store
        r.session.append(user_text("and then?", timestamp=r.clock()))
        r.session.append(Message("assistant", ({"type": "text", "text": "\n\n"},), timestamp=r.clock()))
        r.session.end_turn()
        sid = r.session.session_id
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic",
                                         Settings(), session_id=sid, resume=True, root=tmp_path, clock=r.clock)
        assert problems == ["2 empty replies were left out of the live context (an earlier version stored them; "
                            "the API refuses empty messages)"]
        before = len(r.api.requests)
        assert run_turn(resumed, prompt(1)).error is None
        manual_compact(resumed)
        assert run_turn(resumed, prompt(2)).error is None
        resumed.live.snip(2, resumed.clock(), resumed.setup())
        assert run_turn(resumed, prompt(3)).error is None
        sent = [q for q in r.api.requests[before:] if q.path == "/v1/messages"]
    assert {q.kind for q in sent} == {"normal", "compaction"} and all(q.status == 200 for q in sent)


def test_one_overload_is_retried_by_the_sdk_transparently(tmp_path):
    with rig(tmp_path, max_retries=2) as r:
        r.api.inject("529")
        assert run_turn(r.session, prompt(0)).error is None


def test_disk_full_mid_turn_ends_in_one_line_and_the_session_goes_on_when_there_is_room(tmp_path):
    with rig(tmp_path) as r:
        assert run_turn(r.session, prompt(0)).error is None
        disk = FillingDisk(r.session.recorder.transcript, partial=True)

        def fill(event: object) -> None:
            if isinstance(event, ToolStarted):
                disk.full = True

        r.session.listeners.append(fill)
        result = run_turn(r.session, prompt(1))  # the disk fills while the code runs
        assert result.error is not None and "disk is full" in result.error and "\n" not in result.error
        check_invariants(r.session.live.messages)
        r.session.listeners.pop()
        failed = run_turn(r.session, "still full?")  # the prompt itself cannot be written
        assert failed.error is not None and "disk is full" in failed.error and failed.model_calls == 0
        assert len(r.session.recorder.unwritten) == 2  # the code's results, then this prompt, in order
        disk.full = False
        assert run_turn(r.session, prompt(2)).error is None
        assert r.session.recorder.unwritten == []
        check_invariants(r.session.live.messages)
        loaded = r.session.store.load_transcript()
    assert loaded.problems == []  # no partial line was left behind
    live = [m.uuid for m in r.session.live.messages]
    assert [m.uuid for m in loaded.messages()][-len(live):] == live


def test_plots_over_the_many_image_pixel_limit_are_left_out_and_the_api_takes_the_rest(tmp_path):
    # More than 20 images in a request: the API takes none over 2,000 pixels a side (the stand-in
    # refuses such a request as the API does), so the wide plot goes as text and the turn answers.
    plots = [image_block(png_header(640, 480), "image/png") for _ in range(20)]
    plots.append(image_block(png_header(3_000, 400), "image/png"))
    with rig(tmp_path, window=200_000) as r:
        assert run_turn(r.session, "hello").error is None
        r.session.append(Message("assistant", (tool_use_block("toolu_plots", "python", {"code": "plot_all()"}),),
                                 api_id="msg_local", usage=Usage(3_000, 20), timestamp=r.clock()))
        r.session.append(Message("user", (tool_result_block("toolu_plots", plots),), timestamp=r.clock()))
        result = run_turn(r.session, "what do you see?")
        sent = [q for q in r.api.requests if q.path == "/v1/messages"][-1]
    body = request_text(sent)
    assert result.error is None and sent.status == 200
    assert body.count('"type": "image"') == 20
    assert "over 2,000 pixels a side" in body


def test_request_too_large_strips_images_and_saves_oversized_results_then_retries(tmp_path):
    (tmp_path / "wide.csv").write_text("".join(f"{i}," + "x" * 120 + "\n" for i in range(1_000)))
    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with rig(tmp_path, window=200_000) as r:
        assert run_turn(r.session, "hello").error is None
        read = r.session.files.read_file("wide.csv", tool_use_id="toolu_read")  # 120,000+ characters
        plot = {"type": "tool_result", "tool_use_id": "toolu_plot",
                "content": [{"type": "text", "text": "a plot"}, png]}
        r.session.append(Message("assistant", (tool_use_block("toolu_read", "read_file", {"path": "wide.csv"}),
                                               tool_use_block("toolu_plot", "python", {"code": "plot()"})),
                                 api_id="msg_local", usage=Usage(3_000, 20), timestamp=r.clock()))
        r.session.append(Message("user", (tool_result_block("toolu_read", read), plot), timestamp=r.clock()))
        r.api.inject("413")
        result = run_turn(r.session, "what do you see?")
        sent = [q for q in r.api.requests if q.path == "/v1/messages"][-1]
        sid, expected = r.session.session_id, r.session.request(r.session.setup()).messages
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic",
                                         Settings(), session_id=sid, resume=True, root=tmp_path, clock=r.clock)
    assert len(read) > 100_000
    assert result.error is None and sent.status == 200
    body = request_text(sent)
    assert '"type": "image"' not in body and "image removed" in body
    assert "<persisted-output>" in body and len(body) < len(read)
    saved = tmp_path / ".ctx_magic" / "sessions" / sid / "tool-results" / "toolu_read.txt"
    assert saved.read_text() == read  # nothing lost: the full read is on disk
    assert "toolu_read" in r.session.live.state.persisted
    assert problems == [] and resumed.request(resumed.setup()).messages == expected  # the transcript knows (resume)


def test_a_message_too_large_for_the_window_is_saved_to_a_file_and_the_session_goes_on(tmp_path):
    pasted = "Here is my data:\n" + "\n".join(f"{i},{i * 2},{i * 3},region_{i % 7}" for i in range(2_000))
    with rig(tmp_path, window=20_000) as r:
        notices = []
        r.session.listeners.append(lambda e: notices.append(e.text) if isinstance(e, Notice) else None)
        assert len(pasted) < 50_000  # under the tool-result budget's limit, but far more than a quarter of this window
        result = run_turn(r.session, pasted)
        sent = [q for q in r.api.requests if q.path == "/v1/messages"][-1]
        saved = r.session.store.tool_results_dir / "prompt-1-0.txt"
        assert result.error is None and sent.status == 200
        assert saved.read_text() == pasted  # nothing lost
        body = request_text(sent)
        assert "<persisted-input>" in body and "Here is my data" in body and "1999,3998" not in body
        assert any("too large for the conversation" in n for n in notices)
        assert r.session.files.read_file(str(saved), limit=3).count("\n") >= 2  # the agent can read it
        assert run_turn(r.session, "just print 2\n```python\nprint(2)\n```").error is None
        assert r.session.status().to_json()["zone"] == "ok"


def test_a_session_folder_deleted_mid_session_is_started_again_from_the_live_context(tmp_path):
    with rig(tmp_path, window=200_000) as r:
        notices = []
        r.session.listeners.append(lambda e: notices.append(e.text) if isinstance(e, Notice) else None)
        for n in range(3):
            assert run_turn(r.session, prompt(n)).error is None
        shutil.rmtree(tmp_path / ".ctx_magic")  # the user cleans up while the kernel runs
        assert run_turn(r.session, prompt(3)).error is None
        assert any("was removed while the session ran" in n for n in notices)
        expected, sid = r.session.request(r.session.setup()).messages, r.session.session_id
        loaded = r.session.store.load_transcript()
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic",
                                         Settings(), session_id=sid, resume=True, root=tmp_path, clock=r.clock)
    assert loaded.problems == [] and problems == []
    assert [m.uuid for m in loaded.messages()] == [m.uuid for m in r.session.live.messages]  # each message once
    assert resumed.request(resumed.setup()).messages == expected


def test_the_learned_ratio_stays_true_after_a_clearing_moves_the_anchor(tmp_path):
    config = Settings(context_window=8_000, clear_at_least=300, keep_recent=2)
    with rig(tmp_path, window=8_000, config=config) as r:
        ratios = []
        for n in range(11):
            code = f"for i in range(60): print('row', i, i * {n})"
            assert run_turn(r.session, f"turn {n}\n```python\n{code}\n```").error is None
            ratios.append(r.session.live.state.correction.ratio)
            exact = r.session.exact_tokens()
            assert exact is not None and abs(r.session.tokens() - exact) <= 0.05 * exact
        assert r.session.live.state.cleared  # a pressure clearing happened on the way
    assert max(ratios) < 1.2  # it went to 1.93 when a stale 'freed' figure was subtracted again


def test_the_call_that_brings_the_context_tools_in_counts_their_definitions(tmp_path):
    """An idle clearing is the first cut: the context tools are offered from that call on, and
    the count the call was decided on holds their definitions, which the last response's figure
    was billed without."""
    with rig(tmp_path, config=Settings(keep_recent=1)) as r:
        for n in range(3):
            assert run_turn(r.session, prompt(n)).error is None
        r.clock.advance(4_000)  # past the cache TTL: old results are cleared before the next call
        updates = []
        r.session.listeners.append(lambda e: isinstance(e, UsageUpdated) and updates.append(e))
        assert run_turn(r.session, prompt(3)).error is None
        assert r.session.live.state.cleared
    first = updates[0]
    assert abs(first.estimated_prompt_tokens - first.usage.prompt_tokens) <= 0.02 * first.usage.prompt_tokens
