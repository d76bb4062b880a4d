"""Property tests of prepare() on random conversations.

Random text, tool calls of random sizes up to 1 MB, images, parallel calls, binary outputs,
random clocks and settings. After prepare(): the API's rules hold; every persisted or cleared result can
be recovered byte for byte from the transcript or its persisted file; a second prepare() on
the output changes nothing; the live token count never grows; and folding the transcript
gives back exactly the live context (resume).
"""

from __future__ import annotations

import itertools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctx_magic.context.engine import ContextSettings, prepare
from ctx_magic.context.index import measure
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.resume import fold_transcript
from ctx_magic.context.state import ContextState
from ctx_magic.context.thresholds import compute_thresholds
from ctx_magic.events import Compacted, Persisted
from ctx_magic.messages import (
    Message,
    Usage,
    decode_output,
    result_text,
    text_block,
    tool_result_block,
    tool_use_block,
    user_text,
)
from ctx_magic.store.session import SessionDir

TOOLS = ["python", "python", "notebook_cell", "read_file", "grep", "list_files", "memory"]
SIZES = [0, 10, 300, 5_000, 49_999, 50_001, 120_000, 1_000_000]
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


def make_output(rng: random.Random, size: int) -> str | list:
    """Deterministic output of about `size` characters: lines, a binary blob, or an image."""
    kind = rng.choice(["lines", "lines", "binary", "image"])
    if kind == "binary":
        return decode_output(bytes(rng.randrange(256) for _ in range(min(size, 4_096) + 1)))
    body = "".join(f"row {i}: {rng.random():.6f}\n" for i in range(max(1, size // 20)))[: max(size, 1)]
    if kind == "image":
        return [text_block(body or "plot"), IMAGE]
    return body or "(no output)"


@st.composite
def conversations(draw):
    rng = random.Random(draw(st.integers(0, 2**32)))
    ids = itertools.count()
    clock = 0.0
    msgs = [user_text("please work through the data", timestamp=clock)]
    for turn in range(draw(st.integers(1, 40))):
        clock += draw(st.sampled_from([1.0, 30.0, 400.0, 4_000.0]))
        usage = Usage(draw(st.integers(100, 180_000)), draw(st.integers(1, 2_000)))
        api_id = f"msg_{turn}"
        step = draw(st.sampled_from(["text", "tools", "tools", "tools", "user"]))
        if step == "user":
            msgs.append(user_text(f"next question {turn}", timestamp=clock))
            msgs.append(Message("assistant", (text_block(f"answer {turn}"),), api_id=api_id, usage=usage,
                                timestamp=clock))
            continue
        if step == "text":
            msgs.append(Message("assistant", (text_block(f"thinking aloud {turn}"),), api_id=api_id,
                                usage=usage, timestamp=clock))
            msgs.append(user_text(f"ok {turn}", timestamp=clock))
            continue
        calls = [tool_use_block(f"toolu_{next(ids)}", rng.choice(TOOLS), {"code": f"step({turn})"})
                 for _ in range(draw(st.integers(1, 3)))]
        msgs.append(Message("assistant", tuple(calls), api_id=api_id, usage=usage, timestamp=clock))
        outputs = [tool_result_block(c["id"], make_output(rng, rng.choice(SIZES))) for c in calls]
        msgs.append(Message("user", tuple(outputs), timestamp=clock + 1))
    return msgs, clock


@st.composite
def engine_settings(draw):
    window = draw(st.sampled_from([20_000, 50_000, 200_000]))
    max_output = draw(st.sampled_from([4_096, 8_192, 32_000]))
    return ContextSettings(
        thresholds=compute_thresholds(window, min(max_output, window // 2), env={}),
        keep_recent=draw(st.integers(1, 8)),
        idle_seconds=draw(st.sampled_from([300.0, 3600.0])),
        clear_at_least=draw(st.sampled_from([100, 2_000, 20_000])),
        snip_max_messages=draw(st.sampled_from([10, 25, 60, 200])),
        tool_results_dir="/session/tool-results",
        transcript_path="/session/transcript.jsonl",
    )


def store_session(tmp_path, raw, prepared):
    """Write what the loop writes: every raw message, the persisted files, the events."""
    session = SessionDir(tmp_path, "s").create()
    transcript = session.transcript()
    for message in raw:
        transcript.append_message(message)
    for message in prepared.messages:
        if message.uuid not in {m.uuid for m in raw}:
            transcript.append_message(message)  # snip markers
    for event in prepared.events:
        if isinstance(event, Persisted):
            session.write_tool_result(event.tool_use_id, event.content)
        if event.durable:
            transcript.append_event(event)
    transcript.close()
    return session


PROPERTY_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                                    HealthCheck.data_too_large,
                                                                                    HealthCheck.function_scoped_fixture])


@PROPERTY_SETTINGS
@given(conversations(), engine_settings(), st.floats(0, 10_000))
def test_prepare_keeps_m5_is_idempotent_and_never_grows(convo, cfg, idle):
    raw, clock = convo
    now = clock + idle
    out = prepare(raw, ContextState(), now, cfg)
    check_invariants(out.messages)
    again = prepare(out.messages, out.state, now, cfg)
    assert again.messages == out.messages
    assert [e for e in again.events if e.durable] == []
    before = measure(raw, ContextState()).tokens
    assert out.count.tokens <= before


@PROPERTY_SETTINGS
@given(conversations(), engine_settings(), st.floats(0, 10_000))
def test_every_changed_result_is_recoverable_byte_for_byte(tmp_path_factory, convo, cfg, idle):
    raw, clock = convo
    out = prepare(raw, ContextState(), clock + idle, cfg)
    session = store_session(tmp_path_factory.mktemp("s"), raw, out)
    loaded = session.load_transcript()
    assert loaded.problems == []
    original = {b["tool_use_id"]: b for m in loaded.messages() for b in m.blocks("tool_result")}
    raw_results = {b["tool_use_id"]: b for m in raw for b in m.blocks("tool_result")}
    assert original == raw_results
    for message in out.messages:
        for block in message.blocks("tool_result"):
            before = raw_results[block["tool_use_id"]]
            if block != before:
                assert original[block["tool_use_id"]] == before
    for event in out.events:
        if isinstance(event, Persisted):
            saved = session.tool_result_path(event.tool_use_id).read_text(encoding="utf-8")
            assert saved == result_text(raw_results[event.tool_use_id])


@PROPERTY_SETTINGS
@given(conversations(), engine_settings(), st.floats(0, 10_000))
def test_folding_the_transcript_rebuilds_the_live_context(tmp_path_factory, convo, cfg, idle):
    """Resume: last boundary onwards, every decision re-applied byte-identically."""
    raw, clock = convo
    out = prepare(raw, ContextState(), clock + idle, cfg)
    session = store_session(tmp_path_factory.mktemp("s"), raw, out)
    saved = ContextState.from_json(out.state.to_json())  # what state.json holds
    live, state, problems = fold_transcript(session.load_transcript().records, saved)
    assert problems == []
    assert live == out.messages
    resumed = prepare(live, state, clock + idle, cfg)
    assert resumed.messages == out.messages


def test_fold_follows_a_compaction(tmp_path):
    session = SessionDir(tmp_path, "s").create()
    t = session.transcript()
    old = [user_text("one"), Message("assistant", (text_block("two"),), api_id="m", usage=Usage(1, 1))]
    boundary = user_text("compacted", kind="boundary")
    summary = user_text("summary of one and two", kind="summary")
    for m in [*old, boundary, summary]:
        t.append_message(m)
    t.append_event(Compacted("manual", 100, 10, 2, boundary.uuid, (boundary.uuid, summary.uuid), "s"))
    after = user_text("three")
    t.append_message(after)
    t.close()
    live, _, problems = fold_transcript(session.load_transcript().records)
    assert live == [boundary, summary, after] and problems == []
