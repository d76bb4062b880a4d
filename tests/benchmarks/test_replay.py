"""The replay cost benchmark (benchmarks/replay): its bill, its loaders, its strategies, its command.

Fast: each test replays a few short sessions at most. Nothing here times anything.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.corpus_location import corpus_missing, corpus_path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a package of the repository, not of the installed ctx_magic

import benchmarks.replay.results as results_module  # noqa: E402
from benchmarks.replay.billing import API_HEADERS, MESSAGES, MODEL, Bench, Call, Meter, new_bench, price  # noqa: E402
from benchmarks.replay.cli import left_out_line, parse_args, report, run_replays  # noqa: E402
from benchmarks.replay.corpus import (  # noqa: E402
    BASH_TOOL,
    Action,
    Replay,
    ToolRun,
    Turn,
    load_claude_code,
    load_corpus,
    load_notebook,
    load_swe,
    notebook_paths,
    swe_paths,
)
from benchmarks.replay.ctx_strategy import CtxOptions, run_ctx_magic  # noqa: E402
from benchmarks.replay.harness import ReplayDesync, api_messages, cell_messages, longest_reply, max_output  # noqa: E402
from benchmarks.replay.identifiers import (  # noqa: E402
    COMPACTED,
    EDITED,
    NEVER_SHOWN,
    NOT_SERVED,
    Sightings,
    identifiers,
    uses_by_action,
)
from benchmarks.replay.results import REFERENCE, RunResult, floor_of, reference_run, run_one  # noqa: E402
from benchmarks.replay.side_output import (  # noqa: E402
    P9999_SUMMARY_TOKENS,
    STAND_IN,
    ReplySizes,
    p9999_sizes,
    real_sizes,
    sized_reply,
)
from benchmarks.replay.strategies import DEFAULT, THINKING, strategy  # noqa: E402
from benchmarks.replay.table import grouped, overhead_table, overheads, warm_misses, window_tables  # noqa: E402
from ctx_magic.context.prompts import compact_prompt, extract_summary  # noqa: E402
from ctx_magic.context.tokens import count_text  # noqa: E402
from ctx_magic.offline.counting import input_tokens, output_tokens  # noqa: E402
from ctx_magic.offline.thinking import thinking_blocks  # noqa: E402

CORPUS = corpus_path()
needs_corpus = pytest.mark.skipif(  # absent under CI the tests run, and fail
    corpus_missing("mini-swe-agent-gemini3") is not None and os.environ.get("CI") != "true",
    reason=corpus_missing("mini-swe-agent-gemini3") or "")
# A system prompt over 1,024 tokens: cacheable even under the API's minimum cacheable length.
LONG_SYSTEM = "You replay recorded sessions. " + " ".join(f"rule {n}: answer briefly and exactly." for n in range(200))


def recording(meter: Meter) -> list[dict[str, Any]]:
    """Keep every request body the meter sends (to count its tokens independently)."""
    sent: list[dict[str, Any]] = []
    send = meter.messages

    def messages(request: Any) -> tuple[int, dict[str, Any]]:
        sent.append(request)
        return send(request)

    meter.messages = messages  # type: ignore[method-assign]
    return sent


def reply_tokens(request: dict[str, Any], action: Action) -> int:
    """A main reply's output tokens: the thinking the model opens it with, then the recorded action."""
    return output_tokens([*thinking_blocks(request), *action.content()], "claude-sonnet-5-5")


def three_turns(gap_before_third: float) -> Replay:
    replies = ("First answer.", "Second answer, a little longer than the first.", "Third.")
    turns = tuple(Turn(f"Question {n + 1}?", (Action(text),), gap=gap_before_third if n == 2 else 10.0)
                  for n, text in enumerate(replies))
    return Replay("three-turns", "test", LONG_SYSTEM, (BASH_TOOL,), turns)


# -- the bill --------------------------------------------------------------------------------------


def test_price_of_one_usage() -> None:
    # 100 input + 150 written for 5m (x1.25) + 50 written for 1h (x2) + 1,000 read (x0.1) + 10 out (x5)
    # = 100 + 187.5 + 100 + 100 + 50
    assert price(100, 150, 50, 1_000, 10) == 537.5
    call = Call("normal", 200, 0.0, input_tokens=100, write_5m=150, write_1h=50, read=1_000, output_tokens=10)
    assert call.cost == 537.5 and call.prompt_tokens == 1_300


def test_three_turn_bill_by_hand() -> None:
    """raw, three turns, the third after an idle gap longer than the 5-minute cache TTL.

    P1, P2, P3 are the prompts' tokens, o1, o2, o3 the replies' (as the stand-in counts them: the
    replay's model thinks by default, so each reply is its thinking block and the recorded action).
    Call 1: nothing cached, all of P1 written:           1.25 P1                 + 5 o1
    Call 2: 10 s later, P1 read, the rest written:       0.1 P1 + 1.25 (P2 - P1)  + 5 o2
    Call 3: 6 minutes later, the cache expired:          1.25 P3                 + 5 o3
    """
    replay = three_turns(gap_before_third=360.0)
    bench = new_bench(replay, 200_000)
    sent = recording(bench.meter)
    outcome = strategy("raw")(bench)
    assert not outcome.overflow
    p1, p2, p3 = (input_tokens(r) for r in sent)
    o1, o2, o3 = (reply_tokens(r, a) for r, a in zip(sent, replay.actions()))
    assert p1 < p2 < p3 and p1 > 1_024
    expected = 1.25 * p1 + 5 * o1 + (0.1 * p1 + 1.25 * (p2 - p1) + 5 * o2) + (1.25 * p3 + 5 * o3)
    assert bench.meter.cost == pytest.approx(expected)
    assert [c.read for c in bench.meter.calls] == [0, p1, 0]


def test_within_the_ttl_the_third_call_reads_and_the_floor_equals_raw() -> None:
    replay = three_turns(gap_before_third=60.0)
    raw = run_one("raw", replay, 200_000)
    assert [c.read for c in raw.calls][2] == raw.calls[1].prompt_tokens  # all of P2 read
    assert floor_of(raw).cost == pytest.approx(raw.cost)  # raw's caching was perfect here
    expired = run_one("raw", three_turns(gap_before_third=360.0), 200_000)
    assert floor_of(expired).cost < expired.cost  # the floor assumes nothing ever expires


def test_uncached_bills_every_prompt_token_at_full_price() -> None:
    replay = three_turns(gap_before_third=10.0)
    bench = new_bench(replay, 200_000)
    sent = recording(bench.meter)
    strategy("raw-uncached")(bench)
    outputs = sum(reply_tokens(r, a) for r, a in zip(sent, replay.actions()))
    assert bench.meter.cost == pytest.approx(sum(input_tokens(r) for r in sent) + 5 * outputs)


def test_compaction_requests_get_the_default_summary_and_main_calls_the_script() -> None:
    replay = three_turns(gap_before_third=10.0)
    bench = new_bench(replay, 200_000)
    summary_request = {
        "model": "claude-sonnet-5-5", "max_tokens": 2_000,
        "messages": [{"role": "user", "content": "Summarize.\n<analysis>, then <summary> with:\n"
                                                  "1. Goal: x\n2. Files: y\n3. Next: z"}],
    }
    status, body = bench.meter.messages(summary_request)
    texts = [b["text"] for b in body["content"] if b["type"] == "text"]
    assert status == 200 and body["content"][0]["type"] == "thinking" and "<summary>" in texts[0]
    assert bench.meter.calls[-1].kind == "compaction" and bench.policy.served == 0  # no action consumed
    assert strategy("raw")(bench).overflow is False
    assert bench.policy.served == 3


def test_an_on_demand_compaction_is_billed_as_a_summary_padded_inside_its_tags_and_uses_no_action() -> None:
    sizes = ReplySizes("test", analysis=300, summary=900)
    bench = new_bench(three_turns(gap_before_third=10.0), 200_000, sizes)
    request = {"model": "claude-sonnet-5-5", "max_tokens": 4_000, "messages": [
        {"role": "user", "content": "Plot the north valve readings."}, {"role": "assistant", "content": "Plotted."}],
        "compaction": {"type": "summarize", "instructions": compact_prompt("full")}}
    reply = bench.meter.handle("POST", MESSAGES, {**API_HEADERS, "anthropic-beta": "compact-2026-09-04"},
                               json.dumps(request).encode())
    body = json.loads(b"".join(reply.body))
    block = body["content"][0]
    summary = extract_summary(block["content"])
    assert reply.status == 200 and body["stop_reason"] == "compaction" and [b["type"] for b in body["content"]] == [
        "compaction"]
    assert summary is not None and count_text(summary) >= 900 and count_text(block["content"]) >= 1_200
    call = bench.meter.calls[-1]
    assert call.kind == "compaction" and call.rule == "compaction" and call.output_tokens >= 1_200
    assert bench.policy.served == 0  # the recorded actions are left for the main calls


def test_a_main_call_that_talks_about_memory_still_gets_the_recorded_action() -> None:
    # The default rules would answer this as a memory extraction (memory words and a verb).
    prompt = "Update the session memory notes file, then save your memories."
    replay = Replay("memory-words", "test", LONG_SYSTEM, (BASH_TOOL,),
                    (Turn(prompt, (Action("Running it.", (ToolRun("bash", {"command": "ls"}, "a.txt"),)),
                                   Action("Done."))),))
    result = run_one("raw", replay, 200_000)
    assert [c.kind for c in result.calls] == ["normal", "normal"]


# -- overflow --------------------------------------------------------------------------------------


@needs_corpus
def test_raw_overflows_at_a_tiny_window_and_is_billed_up_to_it() -> None:
    replay = load_swe(swe_paths(CORPUS)[0])
    result = run_one("raw", replay, 5_000)
    # The window is first too small for the prompt and the reply it asks room for (the API's 400).
    assert result.overflow and "exceed context limit" in (result.error or "")
    assert result.calls[-1].status == 400 and result.calls[-1].cost == 0
    assert 0 < result.cost < run_one("raw", replay, 200_000).cost  # the calls before the overflow
    assert result.ids_lost[NOT_SERVED] == result.ids_used - result.ids_kept > 0  # the actions never reached


# -- ctx_magic's loop ------------------------------------------------------------------------------


@needs_corpus
def test_ctx_magic_replays_a_short_trajectory_whole_at_a_small_window() -> None:
    replay = load_swe(swe_paths(CORPUS)[0])  # django__django-16255: 18 steps, up to ~8,400 tokens
    assert run_one("raw", replay, 5_000).overflow  # the window is too small to send it whole
    bench = new_bench(replay, 5_000)
    outcome = run_ctx_magic(bench, CtxOptions())
    assert not outcome.overflow, outcome.error
    assert outcome.events["auto"] + outcome.events["session-memory"] >= 1  # it had to compact
    assert bench.policy.served == replay.steps  # every recorded action was replayed
    kinds = {c.kind for c in bench.meter.calls if c.status == 200}
    assert {"normal", "compaction", "memory"} <= kinds  # main calls and side calls are all billed


@needs_corpus
def test_ctx_magic_ablations_send_fewer_side_calls() -> None:
    replay = load_swe(swe_paths(CORPUS)[0])
    # At 200,000 no compaction is in sight and the session stays short: no notes, no extraction.
    assert not run_one("ctx_magic", replay, 200_000).side_calls()
    full = run_one("ctx_magic", replay, 10_000)
    bare = run_one("ctx_magic+no-notes+no-memory", replay, 10_000)
    # At 10,000 it compacts once, so the extraction at its end runs; the ablation sends the summary only.
    assert full.side_calls() == {"compaction": 1, "memory": 1} and bare.side_calls() == {"compaction": 1}
    assert bare.cost < full.cost


def test_a_session_whose_recorded_reply_outgrows_the_reply_cap_is_left_out_for_every_strategy() -> None:
    """At 8,000 tokens the reply cap is 2,000: a recorded reply of about 3,000 tokens (text, then
    its command) would be cut before its command, so that session is left out at that window for
    every strategy, named with its longest reply, and out of the reference's totals there too; at
    an unlimited window it runs."""
    long_action = Action("word " * 3_000, (ToolRun("bash", {"command": "ls"}, "a.txt"),))
    long = Replay("long-reply", "swe", LONG_SYSTEM, (BASH_TOOL,),
                  (Turn("Look around.", (long_action, Action("Done."))),))
    short = dataclasses.replace(three_turns(gap_before_third=10.0), source="swe")
    window = 8_000
    assert max_output(window) == 2_000 and longest_reply(long, MODEL) > 2_000 > longest_reply(short, MODEL)
    with pytest.raises(ReplayDesync):  # replayed anyway, the cut reply loses its command
        run_one("raw", long, window)
    runs = run_replays([short, long], [window, 200_000], ["raw", "cc-default", "masking"], STAND_IN)
    assert [o.session for o in runs.left_out[window]] == ["long-reply"] and runs.left_out[200_000] == []
    assert {r.replay for r in runs.results if r.window == 200_000} == {"three-turns", "long-reply"}
    at_window = [r for r in runs.results if r.window == window]
    assert sorted((r.strategy, r.replay) for r in at_window) == [
        ("cc-default", "three-turns"), ("masking", "three-turns"), ("raw", "three-turns")]
    assert {r.replay for r in runs.results if r.strategy == REFERENCE} == {"three-turns", "long-reply"}
    tables = grouped(runs.results)
    assert set(tables[window][REFERENCE]) == {"three-turns"}
    line = left_out_line(window, runs.left_out[window], 2)
    assert line == (f"1 of 2 sessions left out at 8,000 for every strategy: a recorded reply longer than the reply cap "
                    f"(2,000 tokens, a quarter of the window), which the API would cut; longest reply in tokens: "
                    f"long-reply ({longest_reply(long, MODEL):,})")
    printed = window_tables(window, tables[window], line)
    assert line in printed and "| strategy | swe (1) |" in printed
    assert left_out_line(window, [], 2) == ""
    whole = report(runs, overhead_of="masking")  # every window: its tables, then the overhead table
    at_8k, at_200k = whole.split("## Window 200,000")
    assert line in at_8k and "sessions left out" not in at_200k and "| strategy | swe (2) |" in at_200k
    assert whole.count("Where masking's bill goes") == 2


# -- the loaders -----------------------------------------------------------------------------------


@needs_corpus
def test_swe_steps_become_bash_calls_with_recorded_outputs() -> None:
    replay = load_swe(swe_paths(CORPUS)[0])
    first = replay.turns[0].actions[0]
    assert first.calls[0].name == "bash" and first.calls[0].input == {"command": "ls -R django/contrib/sitemaps"}
    assert "```" not in first.text and first.text.startswith("THOUGHT:")
    assert str(first.calls[0].output).startswith("<returncode>0</returncode>")
    assert replay.actions()[-1].calls == ()  # the session ends with a text-only reply


@needs_corpus
def test_a_format_error_ends_the_turn_and_the_complaint_is_the_next_prompt() -> None:
    replay = load_swe(CORPUS / "mini-swe-agent-gemini3" / "trajs" / "django__django-11433.traj.json")
    assert len(replay.turns) == 4  # three replies with two bash blocks each
    assert replay.turns[1].prompt.startswith("Please always provide EXACTLY ONE action")
    assert all(t.actions[-1].calls == () for t in replay.turns)


@needs_corpus
def test_notebook_cells_enter_between_turns_with_gaps_over_the_ttl() -> None:
    replay = load_notebook(notebook_paths(CORPUS)[-1])
    assert any(len(t.cells) * 2 > 20 for t in replay.turns)  # more blocks than the cache lookback
    assert any(t.gap > 300 for t in replay.turns) and any(t.gap < 300 for t in replay.turns[1:])
    cell = replay.turns[1].cells[0]
    use, result = cell_messages(cell, 0)
    assert use.content[0]["name"] == "notebook_cell" and use.content[0]["input"]["source"] == cell.source
    assert result.content[0]["content"] == cell.content
    merged = api_messages([use, result], cached=True)
    assert merged[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


@needs_corpus
def test_claude_code_log_keeps_prompts_tools_and_recorded_gaps() -> None:
    replay = load_claude_code(CORPUS / "claude-code-session-share" / "0ccf1a04-1b4c-43b6-8aa5-79e41db43a68.jsonl")
    assert replay.turns[0].prompt.startswith("Spaw sub-agents")
    assert [c.name for c in replay.turns[0].actions[0].calls] == ["Task", "Task", "Task"]
    assert max(t.gap for t in replay.turns) > 3_600  # the session paused for over an hour


@needs_corpus
def test_the_quick_corpus_is_small_and_has_every_source() -> None:
    replays = load_corpus(CORPUS, quick=True)
    assert {r.source for r in replays} == {"swe", "claude-code", "notebook"} and len(replays) <= 6


def test_the_overhead_table_splits_the_bill_of_quiet_sessions_and_puts_memory_extraction_apart() -> None:
    """Only sessions that never near the threshold are listed, ordered by their bill without the
    end-of-session memory extraction; each side call's rule is a share of raw's bill."""
    def run(strategy: str, name: str, calls: list[Call], largest: int = 1_000) -> RunResult:
        return RunResult(strategy, name, "swe", 200_000, calls, largest_request=largest)

    main = Call("normal", 200, 0.0, input_tokens=100)  # billed 100
    notes = Call("memory", 200, 1.0, input_tokens=50, rule="session-notes")  # billed 50
    memory = Call("memory", 200, 2.0, input_tokens=20, rule="memory-longterm")  # billed 20
    raw = {"a": run(REFERENCE, "a", [main]), "b": run(REFERENCE, "b", [main]),
           "c": run(REFERENCE, "c", [main], largest=190_000)}
    ours = {"a": run("ctx_magic", "a", [main, memory]), "b": run("ctx_magic", "b", [main, notes]),
            "c": run("ctx_magic", "c", [main, notes, notes])}
    rows = overheads(ours, raw, lambda reference: reference.largest_request < 150_000)
    table = overhead_table(rows, count=5).splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == ["| b", "| a"]  # c nears its threshold
    assert table[2] == "| b | 1,000 | 1.500 | 1.500 | 0.000 | 0.500 | 0.000 | +0.000 |"
    assert table[3] == "| a | 1,000 | 1.200 | 1.000 | 0.200 | 0.000 | 0.000 | +0.000 |"


# -- the command -----------------------------------------------------------------------------------


@needs_corpus
@pytest.mark.slow
def test_quick_command_prints_the_table() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.replay", "--quick", "--windows", "32000,1000000",
         "--strategies", "raw,floor,ctx_magic", "--sources", "swe,claude-code"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "# Replay cost benchmark" in done.stdout and "- commit: " in done.stdout
    assert "| strategy | billed vs raw | median | p90 | overflow runs |" in done.stdout
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in done.stdout.splitlines()
            if line.startswith("| ") and " of 4 " in line}
    # At 32,000 one session of the quick set outgrows raw's window; ctx_magic finishes all four.
    assert rows["raw"][4] == "1 of 4" and rows["ctx_magic"][4] == "0 of 4"
    assert "## Targets" in done.stdout
    assert "- window 1,000,000 not run: no session's largest request passes 200,000 tokens" in done.stdout
    assert "## Window 1,000,000" not in done.stdout


@needs_corpus
def test_the_fair_raw_reads_the_cache_where_ctx_magic_does_on_the_notebook_replay() -> None:
    """Eleven cells add 22 blocks: past the API's 20-block lookback, a single breakpoint on the
    last block finds nothing while the cache is warm (raw-1bp, Claude Code's layout); the fair raw
    keeps a second one where the last request ended, as ctx_magic does, and loses nothing (the
    replay's warm_misses counts only calls that repeat the whole previous request, and
    whose previous request was long enough to be cached: eight here)."""
    replay = next(r for r in load_corpus(CORPUS, quick=True) if r.source == "notebook")
    assert any(len(t.cells) == 11 for t in replay.turns)
    one, one_total = warm_misses([run_one("raw-1bp", replay, 200_000)])
    fair, fair_total = warm_misses([run_one("raw", replay, 200_000)])
    ours, our_total = warm_misses([run_one("ctx_magic", replay, 200_000)])
    assert one == 3 and one_total == 8  # one call brings the first image: not a lookback case
    assert fair == 0 and fair_total == 8
    assert ours == 0 and our_total == 8  # the call after the 700-second gap clears old results first


# -- the fair baselines ------------------------------------------------------------------------------


@needs_corpus
def test_cc_default_finishes_the_sessions_its_summary_call_used_to_overflow() -> None:
    """At 32,000 a result landing just before the trigger leaves a 15,717-token summary prompt:
    asking 20,000 tokens of reply on top was refused (15,717 + 20,000 > 32,000); the summary call
    now asks for what the window leaves, and the session finishes."""
    replay = load_swe(CORPUS / "mini-swe-agent-gemini3" / "trajs" / "django__django-15572.traj.json")
    bench = new_bench(replay, 32_000)
    sent = recording(bench.meter)
    outcome = strategy("cc-default")(bench)
    summaries = [r for r in sent if r["max_tokens"] != sent[0]["max_tokens"]]
    assert not outcome.overflow, outcome.error
    assert outcome.events["auto"] == len(summaries) >= 1 and bench.policy.served == replay.steps
    tight = [r for r in summaries if input_tokens(r) + 20_000 > 32_000]
    assert tight and all(input_tokens(r) + r["max_tokens"] <= 32_000 for r in summaries)


@needs_corpus
def test_a_session_far_below_its_threshold_bills_what_the_fair_raw_bills() -> None:
    """Nothing to manage (under 10,000 tokens against a 170,616-token threshold): no side call,
    the same breakpoints. Editing ctx_magic sends no context tools until a first cut; append-only
    ctx_magic (the replay's model checks the prefix of the thinking sent back), whose tools may
    change only where a prefix starts, leaves them for a first compaction that never comes: both
    bill what raw bills. Offered from the first request, their definitions ride on every call."""
    replay = load_swe(swe_paths(CORPUS)[0])
    raw = run_one("raw", replay, 200_000)
    editing = run_one("ctx_magic-edit", replay, 200_000)
    assert raw.largest_request < 10_000 and not editing.side_calls()
    assert editing.cost == pytest.approx(raw.cost, rel=0.01)
    append_only = run_one("ctx_magic", replay, 200_000)
    assert append_only.cost == pytest.approx(raw.cost, rel=0.01) and not append_only.side_calls()
    assert run_one("ctx_magic+tools-from-start", replay, 200_000).cost > 1.02 * raw.cost


@needs_corpus
def test_the_reference_is_raw_at_an_unlimited_window_and_counts_every_session_in_full() -> None:
    replay = load_swe(swe_paths(CORPUS)[0])
    assert run_one("raw", replay, 5_000).overflow
    reference = reference_run(replay)
    assert reference.strategy == REFERENCE and not reference.overflow
    assert reference.cost == pytest.approx(run_one("raw", replay, 200_000).cost)


# -- side-call replies as long as a model's ------------------------------------------------------------


@needs_corpus
def test_real_reply_sizes_come_from_claude_codes_compaction_runs() -> None:
    sizes = real_sizes(CORPUS)
    assert "5 Claude Code compaction replies" in sizes.source
    # In the default model's unit: its newer tokenizer counts these Claude 4 replies higher than theirs.
    assert 2_500 < sizes.summary_reply < 7_000 and sizes.analysis < sizes.summary
    sensitivity = p9999_sizes(sizes)
    assert sensitivity.summary_reply == P9999_SUMMARY_TOKENS


def test_a_summary_reply_is_padded_inside_its_tags_and_cut_to_max_tokens() -> None:
    sizes = p9999_sizes(ReplySizes("real", 1_000, 2_500, 250, 250))
    reply = "<analysis>\nwalked through\n</analysis>\n\n<summary>\n## 1. Goal\nfix it\n</summary>"
    long = sized_reply("compaction", {"max_tokens": 40_000}, reply, sizes)
    assert count_text(long) >= P9999_SUMMARY_TOKENS and "fix it" in long
    assert long.index("</analysis>") < long.index("<summary>") and long.rstrip().endswith("</summary>")
    capped = sized_reply("compaction", {"max_tokens": 2_000}, reply, sizes)
    assert count_text(capped) <= 2_000 and capped.rstrip().endswith("</summary>")
    assert sized_reply("fallback", {"max_tokens": 2_000}, "hello", sizes) == "hello"


# -- what later actions use ----------------------------------------------------------------------------


def test_an_action_uses_the_paths_names_and_error_lines_earlier_results_taught() -> None:
    first = Action("Looking around.", (ToolRun("bash", {"command": "ls"}, "src/app/models.py\nREADME"),))
    second = Action("Run it.", (ToolRun("bash", {"command": "python -c 'import x'"},
                                        "Traceback\nValueError: bad value for max_items\n"),))
    third = Action("The ValueError: bad value for max_items comes from src/app/models.py; fix parse_items.",
                   (ToolRun("bash", {"command": "sed -n 1,20p src/app/models.py"}, "..."),))
    turn = Turn("go", (first, second, third, Action("Done.")))
    replay = Replay("ids", "test", "You are a bot.", (BASH_TOOL,), (turn,))
    uses = uses_by_action(replay)
    assert uses[0] == () and uses[1] == ()
    assert set(uses[2]) == {"src/app/models.py", "ValueError", "max_items", "ValueError: bad value for max_items"}
    assert "parse_items" in identifiers(third.text)  # a code name, but not learned from a result: not counted
    request = {"system": [{"type": "text", "text": "x"}],
               "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                          "content": "src/app/models.py"}]}]}
    assert Sightings().kept(uses[2], request) == 1


def _sent(opening: str, *later: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": opening}]},
                         *({"role": "user", "content": [{"type": "text", "text": t}]} for t in later)]}


def test_where_an_identifier_not_kept_went_is_read_from_the_requests_sent_before() -> None:
    """Held earlier with the same opening since: edited away; held earlier under another opening:
    compacted away; never held by a request: never shown."""
    sightings = Sightings()
    assert sightings.kept(["src/app.py", "load_rows"], _sent("task", "src/app.py defines load_rows")) == 2
    assert sightings.kept(["src/app.py"], _sent("task", "[Old tool result content cleared]")) == 0
    assert sightings.kept(["load_rows", "parse_items"], _sent("summary of the task")) == 0
    assert sightings.lost == {EDITED: 1, COMPACTED: 1, NEVER_SHOWN: 1}


@needs_corpus
def test_a_compaction_can_lose_what_later_actions_use_and_the_bill_says_so() -> None:
    """At 32,000 the Claude-Code-like default summarizes a long trajectory: some identifiers its
    later actions use are no longer in their requests; raw keeps every one it sends."""
    replay = load_swe(CORPUS / "mini-swe-agent-gemini3" / "trajs" / "pylint-dev__pylint-7277.traj.json")
    raw, cc = reference_run(replay), run_one("cc-default", replay, 32_000)
    assert raw.ids_used == cc.ids_used > 0 and raw.ids_kept == raw.ids_used
    assert cc.events["auto"] >= 1 and cc.ids_kept < cc.ids_used
    assert sum(cc.ids_lost.values()) == cc.ids_used - cc.ids_kept and cc.ids_lost[COMPACTED] > 0


# -- the thinking sent back to a model that checks its prefix --------------------------------------


@needs_corpus
def test_on_a_model_with_the_prefix_check_only_the_editing_run_that_asks_no_drop_block_is_refused() -> None:
    """A notebook replay on claude-sonnet-5-5 (replies carry thinking, a new account: a thinking
    block whose prefix changed earns a 400). Append-only ctx_magic takes out the thinking its own
    edits invalidate and is never refused; editing with drop_block, the API drops the blocks
    instead (the client sends no more a block the API reported dropped); editing without it, the
    first request after such an edit is refused, and the client takes the refused thinking out and
    asks again: a refusal each time, no dead end."""
    replay = next(r for r in load_corpus(CORPUS) if r.source == "notebook" and r.name == "tools_pandas")
    append_only, edit, refused = (run_one(name, replay, 32_000)
                                  for name in ("ctx_magic", "ctx_magic-edit", "ctx_magic-edit-refused"))
    assert (append_only.refused_thinking, append_only.thinking_dropped()) == (0, (0, 0))
    assert append_only.thinking_cleared["blocks"] == 22 and not append_only.overflow
    assert edit.refused_thinking == 0 and edit.thinking_dropped() == (6, 271) and not edit.overflow
    assert any(c.thinking_dropped for c in edit.calls[1:]) and edit.ids_kept == edit.ids_used
    assert refused.refused_thinking == 3 and not refused.overflow and refused.error is None
    raw = run_one("raw", replay, 32_000)  # append-only by construction
    assert (raw.refused_thinking, raw.thinking_dropped(), sum(raw.thinking_cleared.values())) == (0, (0, 0), 0)


def test_editing_the_first_cut_brings_the_context_tools_and_the_client_drops_the_thinking_itself() -> None:
    """Editing on a model with the check, the first cut brings the context tools in: every thinking
    block written before is void, and the client takes it out before the request (one line), so
    the API neither drops nor refuses any."""
    replay = next(r for r in load_corpus(CORPUS, quick=True) if r.source == "notebook")
    edit, refused = (run_one(name, replay, 32_000) for name in ("ctx_magic-edit", "ctx_magic-edit-refused"))
    for run in (edit, refused):
        assert (run.refused_thinking, run.thinking_dropped()) == (0, (0, 0)) and run.thinking_cleared["blocks"] == 4


def test_thinking_picks_its_strategies_and_leaves_the_default_run_as_it_was() -> None:
    assert parse_args([]).strategies == list(DEFAULT) and not parse_args([]).thinking
    assert parse_args(["--thinking"]).strategies == ["raw", "cc-default", "ctx_magic", "ctx_magic-edit"] == \
        list(THINKING)
    assert parse_args(["--thinking", "--strategies", "ctx_magic-edit-refused"]).strategies == \
        ["raw", "ctx_magic-edit-refused"]
    with pytest.raises(SystemExit):
        parse_args(["--strategies", "ctx_magic-rewrite"])


@needs_corpus
def test_the_thinking_table_reads_the_refused_requests_and_the_thinking_dropped() -> None:
    replay = next(r for r in load_corpus(CORPUS) if r.source == "notebook" and r.name == "tools_pandas")
    runs = run_replays([replay], [32_000], ["raw", "ctx_magic-edit", "ctx_magic-edit-refused"], STAND_IN)
    printed = report(runs, per_session=0, thinking=True)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in printed.splitlines()
            if line.startswith("| ") and "blocks)" in line}
    assert rows["raw"][3] == "0" and rows["raw"][5:7] == ["0 tokens (0 blocks)", "0 tokens (0 blocks)"]
    assert rows["ctx_magic-edit"][3] == "0" and rows["ctx_magic-edit"][6] == "271 tokens (6 blocks)"
    main = [c.thinking_written for r in runs.results if r.strategy == "raw" for c in r.calls
            if c.kind == "normal" and c.status == 200]
    assert rows["raw"][4] == f"{sum(main):,} tokens"
    # Every main reply thinks: with text on a new prompt, an empty block between tool calls.
    assert min(main) == output_tokens([{"type": "thinking", "thinking": "", "signature": ""}], "claude-sonnet-5-5")
    assert main[0] > min(main) and rows["raw"][2] == "1 of 1"  # raw overflows: each of its calls is counted
    assert rows["ctx_magic-edit-refused"][2:4] == ["0 of 1", "3"]  # refused three times, recovered each time
    assert "refused requests" not in report(runs, per_session=0)  # the default report is unchanged


@needs_corpus
def test_a_baseline_that_edits_under_thinking_is_refused_and_its_run_ends_there_counted() -> None:
    """masking replaces all but the last ten results: the first request after it masks one sends
    back thinking written after the original, and the prefix check refuses it. The run ends there
    as a dead end, with the refusal counted, instead of stopping the benchmark."""
    replay = load_swe(swe_paths(CORPUS)[0])
    masked = run_one("masking", replay, 200_000)
    assert masked.overflow and masked.refused_thinking == 1 and "Invalid `signature`" in (masked.error or "")
    assert masked.calls[-1].status == 400 and [c.status for c in masked.calls[:-1]] == [200] * 11


# -- the model a replay runs on ---------------------------------------------------------------------


def every_request(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The body of every POST the runs' meters receive from here on (main, side and count calls,
    whether a strategy sends plain JSON or ctx_magic's loop goes through the SDK)."""
    sent: list[dict[str, Any]] = []

    def bench_that_records(*args: Any, **kwargs: Any) -> Bench:
        bench = new_bench(*args, **kwargs)
        handle = bench.meter.handle

        def recorded(method: str, path: str, headers: Any, body: bytes) -> Any:
            if method.upper() == "POST":
                sent.append(json.loads(body))
            return handle(method, path, headers, body)

        bench.meter.handle = recorded  # type: ignore[method-assign]
        return bench

    monkeypatch.setattr(results_module, "new_bench", bench_that_records)
    return sent


def long_outputs() -> Replay:
    """Four reads of about 21,000 characters each: s08's context passes its 50,000-character limit
    with the last three intact, so it writes its summary."""
    actions = tuple(Action(f"Reading part {n}.", (ToolRun("bash", {"command": f"cat part{n}.txt"},
                                                          f"line {n}: " + "lorem ipsum dolor " * 1_200),))
                    for n in range(4))
    return Replay("long-outputs", "swe", LONG_SYSTEM, (BASH_TOOL,),
                  (Turn("Read the four parts.", (*actions, Action("Done."))),))


@needs_corpus
@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "claude-sonnet-5-5"])
def test_every_request_names_the_model_asked_for_and_only_the_model_that_thinks_writes_thinking(
        model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same short trajectory, its reference, raw and ctx_magic (at 10,000, with its memory
    extraction at the end), and s08 writing its summary: every request names the model asked for.
    Sonnet 5.5 thinks unasked, so its replies open with thinking; Sonnet 4.6 thinks only when
    asked, and nothing asks."""
    replay = load_swe(swe_paths(CORPUS)[0])
    sent = every_request(monkeypatch)
    runs = run_replays([replay], [10_000], ["raw", "ctx_magic"], STAND_IN, model)
    s08 = run_one("s08", long_outputs(), 200_000, model=model)
    assert runs.model == model and len(sent) > 3 * replay.steps
    assert {body["model"] for body in sent} == {model}
    ctx = next(r for r in runs.results if r.strategy == "ctx_magic")
    assert ctx.side_calls()["memory"] == 1 and not ctx.overflow  # side calls name it too
    assert s08.events["auto"] == 1 and s08.side_calls() == {"compaction": 1} and not s08.overflow
    written = {r.strategy: sum(c.thinking_written for c in r.calls) for r in [*runs.results, s08]}
    if model == MODEL:
        assert all(written[name] > 0 for name in (REFERENCE, "raw", "ctx_magic", "s08"))
    else:
        assert set(written.values()) == {0}
    check = "(prefix check on, " if model == MODEL else "(a model without the prefix check)"
    assert f"The thinking sent back to {model} {check}" in report(runs, per_session=0, thinking=True)


@needs_corpus
def test_the_older_tokenizer_counts_the_same_first_request_smaller() -> None:
    """Sonnet 4.6's tokenizer counts the same text in fewer tokens than Sonnet 5.5's: the first
    request (no reply, so no thinking, in it yet) is smaller, by about a fifth."""
    replay = load_swe(swe_paths(CORPUS)[0])
    old, new = (run_one("raw", replay, 200_000, model=m).calls[0].prompt_tokens
                for m in ("claude-sonnet-4-6", "claude-sonnet-5-5"))
    assert 0.7 * new < old < 0.85 * new


def test_the_model_is_one_the_catalog_knows_and_an_unknown_id_is_one_parser_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args([]).model == MODEL == "claude-sonnet-5-5"
    assert parse_args(["--model", "claude-sonnet-4-6"]).model == "claude-sonnet-4-6"
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--model", "claude-sonnet-9"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("python -m benchmarks.replay: error: argument --model: invalid choice: 'claude-sonnet-9'")
    assert "'claude-sonnet-5-5'" in error and "'claude-sonnet-4-6'" in error
