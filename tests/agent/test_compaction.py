"""Compaction as the loop runs it, over real HTTP: PTL inside compaction, partial
compaction, rehydration, hooks, the model's compact and snip tools, resume
(same next request), interrupts (a valid conversation) and idle microcompact."""

from __future__ import annotations

import json

from agent_rig import CLIENT_SUMMARY, request_messages, rig

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.session import open_session
from ctx_magic.agent.tools import PYTHON_TOOL, Executor, LocalExecutor, Tool, ToolCall
from ctx_magic.context.invariants import INTERRUPTED_RESULT, check_invariants
from ctx_magic.context.microcompact import CLEARED_TEXT
from ctx_magic.context.prompts import PTL_RETRY_MARKER
from ctx_magic.events import Cleared, Compacted
from ctx_magic.messages import result_text
from ctx_magic.offline.conversation import asked_text
from ctx_magic.offline.policy import Answer, Policy, Rule
from ctx_magic.settings import Settings

EDITING = "claude-sonnet-4-6"  # no prefix check on thinking: the context tools arrive at the first cut


def code_turn(n: int, lines: int = 200) -> str:
    return f"Turn {n}\n```python\nprint('\\n'.join(f'value {n} {{i}}' for i in range({lines})))\n```"


def tool_rule(name: str, trigger: str, tool_input) -> Rule:  # type: ignore[no-untyped-def]
    """A policy rule: when the user's text contains `trigger`, call tool `name`."""

    def applies(request) -> bool:  # type: ignore[no-untyped-def]
        return trigger in asked_text(request)

    def answer(request) -> Answer:  # type: ignore[no-untyped-def]
        call = {"type": "tool_use", "name": name, "input": tool_input(request) if callable(tool_input) else tool_input}
        return Answer(({"type": "text", "text": f"calling {name}"}, call), "tool_use")

    return Rule(f"call-{name}", "normal", applies, answer)


def test_prompt_too_long_inside_compaction_truncates_the_head_and_succeeds(tmp_path):
    with rig(tmp_path, window=60_000, model=CLIENT_SUMMARY) as r:
        for n in range(6):
            run_turn(r.session, code_turn(n))
        r.api.inject("ptl", "ptl")  # the first two compaction requests are "too long"
        manual_compact(r.session)
        compactions = [q for q in r.api.requests if q.kind == "compaction"]
    assert [q.status for q in compactions] == [400, 400, 200]
    sizes = [q.input_tokens for q in compactions]
    assert sizes[0] > sizes[1] > sizes[2]
    texts = [json.dumps(q.body["messages"]) for q in compactions]
    assert texts[2].count(PTL_RETRY_MARKER) <= 1
    assert r.session.compaction.boundaries[-1].trigger == "manual"


def test_partial_up_to_and_from_through_the_session(tmp_path):
    with rig(tmp_path, window=100_000, model=EDITING) as r:  # no thinking: the cuts fall where they are asked
        for n in range(4):
            run_turn(r.session, code_turn(n, lines=20))
        before = list(r.session.live.messages)
        manual_compact(r.session, direction="up_to", index=7)
        kinds = [m.kind for m in r.session.live.messages]
        assert kinds[:2] == ["boundary", "summary"]
        assert [m.uuid for m in r.session.live.messages[2:2 + len(before) - 7]] == [m.uuid for m in before[7:]]
        check_invariants(r.session.live.messages)
        for n in range(4, 6):
            run_turn(r.session, code_turn(n, lines=20))
        head = list(r.session.live.messages[:4])
        manual_compact(r.session, direction="from", index=4)
        assert [m.uuid for m in r.session.live.messages[:4]] == [m.uuid for m in head]
        assert [m.kind for m in r.session.live.messages[4:6]] == ["boundary", "summary"]
        check_invariants(r.session.live.messages)
        assert run_turn(r.session, "and now?").error is None


def test_recent_files_are_re_read_fresh_within_budget(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for n in range(7):
        (data / f"f{n}.txt").write_text(f"file {n} original\n")
    (data / "big.txt").write_text("".join(f"line {i} of a very long file with words\n" for i in range(20_000)))
    with rig(tmp_path, window=200_000) as r:
        for n in range(7):
            r.session.files.read_file(f"data/f{n}.txt", tool_use_id=f"t{n}")
        r.session.files.read_file("data/big.txt", tool_use_id="tbig")
        (data / "f6.txt").write_text("file 6 CHANGED after the read\n")
        run_turn(r.session, "hello")
        result = manual_compact(r.session)
    files = [m for m in result.new_messages if m.meta.get("rehydrated")]
    names = [m.meta["rehydrated"].rsplit("/", 1)[-1] for m in files]
    assert names == ["big.txt", "f6.txt", "f5.txt", "f4.txt", "f3.txt"]  # 5 most recent first
    assert "CHANGED after the read" in files[1].text  # fresh from disk, not the old read
    assert "truncated to about 5,000 tokens" in files[0].text
    notes = [m for m in result.new_messages if m.kind == "attachment" and not m.meta.get("rehydrated")]
    assert "Tools available: python, read_file" in notes[-1].text
    assert notes[-1].text.startswith("<context-refresh>")


def test_the_sessions_own_files_are_skipped_and_five_work_files_still_come_back(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for n in range(7):
        (data / f"f{n}.txt").write_text(f"file {n}\n")
    with rig(tmp_path, window=200_000) as r:
        for n in range(7):
            r.session.files.read_file(f"data/f{n}.txt", tool_use_id=f"t{n}")
        notes = r.session.store.notes_path
        notes.write_text("# Session Title\nnotes\n")
        r.session.files.read_file(str(notes), tool_use_id="tnotes")  # the most recent read
        run_turn(r.session, "hello")
        result = manual_compact(r.session)
    names = [m.meta["rehydrated"].rsplit("/", 1)[-1] for m in result.new_messages if m.meta.get("rehydrated")]
    assert names == ["f6.txt", "f5.txt", "f4.txt", "f3.txt", "f2.txt"]


def test_hooks_add_instructions_receive_the_summary_and_add_context(tmp_path):
    seen: list[Compacted] = []
    with rig(tmp_path) as r:
        r.session.hooks.add("PreCompact", lambda trigger, instructions: f"hook says keep units ({trigger})")
        r.session.hooks.add("PostCompact", seen.append)
        r.session.hooks.add("SessionStart", lambda source: f"session restarted after {source}")
        run_turn(r.session, code_turn(0, lines=10))
        manual_compact(r.session, "user says keep plots")
        prompt = r.api.requests[-1].body["compaction"]["instructions"]  # the API writes the summary
    assert "user says keep plots\nhook says keep units (manual)" in prompt
    assert len(seen) == 1 and seen[0].trigger == "manual" and seen[0].summary
    assert r.session.live.messages[-1].text == "session restarted after compact"
    check_invariants(r.session.live.messages)


def offered(request) -> set[str]:  # type: ignore[no-untyped-def]
    return {t["name"] for t in request.body.get("tools") or []}


def test_the_model_can_compact_with_its_own_tool_once_the_context_was_cut(tmp_path):
    """The context tools come in with the first cut of the context (here the user's compaction):
    before it the model is not offered `compact`, after it it can compact by itself (a model
    without the prefix check on thinking: with it, they are offered from the first request)."""
    with rig(tmp_path, model=EDITING) as r:
        r.api.policy = Policy().with_rule(tool_rule("compact", "wrap up", {"instructions": "keep totals"}))
        run_turn(r.session, code_turn(0, lines=10))
        before = offered(r.api.requests[-1])
        manual_compact(r.session)
        result = run_turn(r.session, "wrap up this phase please")
        compaction_prompt = [q for q in r.api.requests if q.kind == "compaction"][-1].body
    assert "compact" not in before and "python" in before
    assert result.error is None and result.compactions == ["model"]
    assert r.session.compaction.boundaries[-1].trigger == "model"
    assert "keep totals" in compaction_prompt["compaction"]["instructions"]  # the API writes it on demand
    check_invariants(r.session.live.messages)


def test_the_model_can_snip_old_results_once_the_context_was_cut(tmp_path):
    with rig(tmp_path, model=EDITING) as r:
        for n in range(7):
            run_turn(r.session, code_turn(n, lines=20))
        assert "snip" not in offered(r.api.requests[-1])
        r.clock.advance(600)  # idle: the oldest results are cleared at the next prepare, the context tools come in
        r.session.prepare()
        first_id = next(i for m in r.session.live.messages for i in m.tool_result_ids
                        if i not in r.session.live.state.cleared)
        r.api.policy = Policy().with_rule(tool_rule("snip", "forget", {"tool_use_ids": [first_id, "nope"]}))
        events = []
        r.session.listeners.append(events.append)
        run_turn(r.session, "forget the first batch")
        cleared = [e for e in events if isinstance(e, Cleared)]
        texts = {i: result_text(b) for m in r.session.live.messages for b in m.blocks("tool_result")
                 for i in [b["tool_use_id"]]}
    assert cleared and cleared[0].trigger == "model" and first_id in cleared[0].replacements
    assert texts[first_id] == CLEARED_TEXT
    snip_result = [t for t in texts.values() if t.startswith("Cleared 1 tool result")]
    assert snip_result and "nope" in snip_result[0]


def test_resume_after_restart_sends_the_same_next_request(tmp_path):
    config = Settings(snip_max_messages=30)
    with rig(tmp_path, window=200_000, config=config) as r:
        for n in range(10):
            run_turn(r.session, code_turn(n, lines=300 if n != 2 else 4_000))  # turn 2: persisted
        r.clock.advance(600)  # idle: old results get cleared at the next prepare
        r.session.prepare()
        manual_compact(r.session, direction="from", index=len(r.session.live.messages) - 4)
        run_turn(r.session, code_turn(10, lines=50))
        expected = r.session.request(r.session.setup()).messages
        tools = r.session.request(r.session.setup()).tools
        live_results = {i for m in r.session.live.messages for i in m.tool_result_ids}
        assert r.session.compaction.boundaries and live_results & set(r.session.live.state.cleared)
        assert r.session.live.state.persisted
        assert any(m.meta.get("snipped_count") for m in r.session.store.load_transcript().messages())
        sid = r.session.session_id
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor,
                                         tmp_path / ".ctx_magic", config,
                                         session_id=sid, resume=True, root=tmp_path, clock=r.clock)
        assert problems == []
        assert resumed.live.messages == r.session.live.messages
        assert resumed.request(resumed.setup()).messages == expected
        assert resumed.request(resumed.setup()).tools == tools and {"compact", "snip", "search_transcript"} <= {
            t["name"] for t in tools}  # the context was cut before the restart: the same tools after it
        r.session.prepare()  # the next turn starts with the zero-call layers, on both sides
        resumed.prepare()
        assert resumed.request(resumed.setup()).messages == r.session.request(r.session.setup()).messages
        assert resumed.status().to_json()["boundaries"] == r.session.status().to_json()["boundaries"]
        assert resumed.status().to_json()["tokens"] == r.session.status().to_json()["tokens"]


def test_interrupt_while_a_tool_runs_closes_the_call_and_the_next_turn_works(tmp_path):
    class Interrupting(Executor):
        def __init__(self, inner):
            self.inner, self.armed = inner, True

        def tools(self):
            return [Tool(PYTHON_TOOL, self.run)]

        def run(self, call: ToolCall, _context):
            if self.armed:
                self.armed = False
                raise KeyboardInterrupt
            return self.inner.run_python(call)

    with rig(tmp_path, executor=Interrupting(LocalExecutor())) as r:
        result = run_turn(r.session, code_turn(0, lines=5))
        assert result.interrupted
        last = r.session.live.messages[-1]
        assert last.content[0]["is_error"] and result_text(last.content[0]) == INTERRUPTED_RESULT
        check_invariants(r.session.live.messages)
        assert run_turn(r.session, code_turn(1, lines=5)).error is None
        for record in r.api.requests:
            if record.path == "/v1/messages":
                check_invariants(request_messages(record))


def test_interrupt_while_streaming_keeps_the_conversation_valid(tmp_path):
    with rig(tmp_path) as r:
        def interrupt_on_text(event):
            if event.name == "text":
                raise KeyboardInterrupt

        r.session.listeners.append(interrupt_on_text)
        result = run_turn(r.session, "tell me something")
        r.session.listeners.remove(interrupt_on_text)
        assert result.interrupted
        check_invariants(r.session.live.messages)
        assert r.session.live.messages[-1].role == "user"  # the half-streamed reply was not kept
        assert run_turn(r.session, "again").error is None
        assert r.session.store.load_transcript().problems == []


def test_idle_gap_clears_old_results_before_the_next_call(tmp_path):
    with rig(tmp_path, window=200_000) as r:
        for n in range(8):
            run_turn(r.session, code_turn(n, lines=30))
        events = []
        r.session.listeners.append(events.append)
        r.clock.advance(5 * 60 + 1)
        run_turn(r.session, "back from lunch")
    cleared = [e for e in events if isinstance(e, Cleared)]
    assert cleared and cleared[0].trigger == "idle"


def test_consecutive_calls_read_the_previous_prefix_from_the_cache(tmp_path):
    with rig(tmp_path, window=200_000) as r:
        for n in range(3):
            run_turn(r.session, code_turn(n, lines=300))  # prefixes over the minimum cacheable length
    usage = r.session.meter.totals
    assert usage.cache_read_input_tokens > 0
    assert usage.cache_hit_ratio > 0.5


def test_compaction_waits_up_to_fifteen_seconds_for_a_running_extraction(tmp_path):
    class Source:
        def __init__(self):
            self.waited: list[float] = []

        def wait(self, timeout):
            self.waited.append(timeout)

        def current(self):
            return None  # no usable notes: the LLM compaction follows

        def tokens(self):
            return 0  # none written yet (the status a PreCompact hook is given asks)

    with rig(tmp_path) as r:
        run_turn(r.session, code_turn(0, lines=10))
        r.session.plugins.attach_notes(source := Source())
        manual_compact(r.session)
    assert source.waited == [15.0]
    assert r.session.compaction.boundaries[-1].trigger == "manual"


def test_an_estimate_over_the_threshold_is_checked_with_the_exact_count(tmp_path):
    """The 4/3 padding over-estimates: near the threshold the API's count decides."""
    from ctx_magic.context.tokens import Correction

    with rig(tmp_path, window=30_000) as r:
        run_turn(r.session, code_turn(0, lines=200))
        threshold = r.session.setup().context.thresholds.autocompact
        exact = r.session.exact_tokens()
        assert exact is not None and exact < threshold
        # Make the padded estimate cross the threshold while the real size stays well under it.
        r.session.live.correct(Correction(threshold / 300, 1))
        result = run_turn(r.session, "and a short question")
    assert result.compactions == [] and r.api.model_calls("compaction") == 0


def test_the_first_compaction_says_the_size_the_next_request_will_have(tmp_path):
    """The first compaction brings the context tools in: the size it reports after it counts
    their definitions, as the next request (and %ctx status right after) does."""
    with rig(tmp_path, window=100_000, model=EDITING) as r:
        for n in range(2):
            run_turn(r.session, code_turn(n, lines=20))
        assert not r.session.setup().context_tools
        event = manual_compact(r.session, "keep the numbers").event
        setup = r.session.setup()
        assert setup.context_tools
        assert event.tokens_after == r.session.live.tokens(setup.overhead_tokens)


WORDS = ("model", "table", "column", "plot", "axis", "label", "sample", "batch", "window", "summary", "cache",
         "result", "station", "rainfall", "hour", "notes", "memory", "chart", "series", "frame")


def _summary_prompt_leaving(session, spare: int) -> str:  # type: ignore[no-untyped-def]
    """A summary prompt (plain words, which the estimate counts closely) that leaves about `spare`
    tokens beside the conversation and a full reply, by the count the side call itself uses."""
    setup = session.setup()
    reply = min(20_000, setup.window.reply_cap)

    def prompt_of(lines: int) -> str:
        return "Summarize the work so far.\n" + "".join(
            f"Keep what was said about the {WORDS[i % 20]} and the {WORDS[i * 7 % 20]} {WORDS[i * 3 % 20]}.\n"
            for i in range(lines))

    def left(lines: int) -> int:
        return session.side_calls._measured_spare(setup, session.live.messages, reply, prompt_of(lines))

    low, high = 0, 2_000  # lines: the more, the less room is left
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if left(mid) > spare else (low, mid)
    assert abs(left(high) - spare) < 50
    return prompt_of(high)


def _filled(r) -> None:  # type: ignore[no-untyped-def]
    """Turns of printed output until the context is a little under the warning level (32,000 window)."""
    n = 0
    while r.session.tokens() < 16_000 and n < 30:
        run_turn(r.session, code_turn(n, 300))
        n += 1
    assert not r.session.compaction.boundaries and r.session.tokens() < 18_720


def test_a_summary_that_fits_with_a_little_less_reply_room_reads_the_cached_conversation_whole(tmp_path):
    """Just past the room its reply asks for, the summary call asks for less reply rather than
    cut the conversation: its messages start as the last main call's (thinking included) and
    the cache serves them."""
    from ctx_magic.agent.side_calls import SUMMARY_LEAST_REPLY

    with rig(tmp_path, window=32_000, max_output=8_000) as r:
        _filled(r)
        cap = r.session.setup().window.reply_cap
        prompt = _summary_prompt_leaving(r.session, -1_000)
        before = r.session.meter.snapshot()
        r.session.side_calls.summarize(r.session.live.messages, prompt)
        read = r.session.meter.snapshot().cache_read_input_tokens - before.cache_read_input_tokens
    main, summary = [q.body for q in r.api.requests if q.path.endswith("/v1/messages")][-2:]
    unmarked = json.loads(json.dumps(main["messages"]).replace(', "cache_control": {"type": "ephemeral"}', ""))
    assert summary["messages"][:len(unmarked) - 1] == unmarked[:-1]
    assert any(b["type"] == "thinking" for m in summary["messages"] for b in m["content"])
    assert cap - 1_100 <= summary["max_tokens"] <= cap - 900 and summary["max_tokens"] >= SUMMARY_LEAST_REPLY
    assert read > 10_000


def test_a_summary_that_would_keep_too_little_reply_room_is_cut_instead(tmp_path):
    with rig(tmp_path, window=32_000, max_output=8_000) as r:
        _filled(r)
        cap = r.session.setup().window.reply_cap
        prompt = _summary_prompt_leaving(r.session, -(cap - 4_000))  # room for a 4,000-token reply only
        r.session.side_calls.summarize(r.session.live.messages, prompt)
    summary = r.api.requests[-1].body
    assert summary["max_tokens"] == cap
    assert not any(b["type"] == "thinking" for m in summary["messages"] for b in m["content"])
