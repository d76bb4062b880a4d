"""SPEC S1-S3: the notes template and caps, extraction triggers, session-memory compaction."""

from __future__ import annotations

import pytest
from builders import assistant, call, results, text

from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.session_memory import (
    INIT_TOKENS,
    KEEP_MAX_TOKENS,
    KEEP_MIN_TEXT_MESSAGES,
    KEEP_MIN_TOKENS,
    MAX_SECTION_TOKENS,
    MAX_TOTAL_TOKENS,
    MIN_TOKEN_GROWTH,
    SECTIONS,
    TOOL_CALLS_BETWEEN,
    WAIT_FOR_EXTRACTION_SECONDS,
    ExtractionState,
    empty_template,
    extraction_due,
    is_correction_or_decision,
    is_empty,
    keep_from,
    rebaselined,
    sections,
    session_memory_compact,
    truncate_for_compact,
)
from ctx_magic.context.tokens import estimate_messages, message_tokens
from ctx_magic.memory.prompts import notes_prompt
from ctx_magic.memory.session_notes import enforce_caps, parse_notes
from ctx_magic.messages import user_text

NOTES = empty_template().replace("_what is being worked on right now, pending tasks, the next steps_",
                                 "_what is being worked on right now, pending tasks, the next steps_\n- fitting")


def test_s1_ten_sections_and_the_seeds_caps():
    assert [t for t, _ in SECTIONS] == [
        "Session Title", "Current State", "Task Specification", "Files and Functions", "Workflow",
        "Errors & Corrections", "Codebase and System Documentation", "Learnings", "Key Results", "Worklog"]
    assert (MAX_SECTION_TOKENS, MAX_TOTAL_TOKENS) == (2_000, 12_000)
    assert list(sections(empty_template())) == [t for t, _ in SECTIONS]
    assert is_empty(empty_template()) and not is_empty(NOTES) and is_empty(None)


def test_s1_caps_are_enforced_on_what_the_model_returns():
    bloated = empty_template().replace("# Worklog", "# Worklog\n" + "- step done today\n" * 3_000)
    capped = enforce_caps(bloated)
    from ctx_magic.context.tokens import count_text

    assert all(count_text(body) <= MAX_SECTION_TOKENS for body in sections(capped).values())
    assert count_text(capped) <= MAX_TOTAL_TOKENS + 100


def test_s1_the_prompt_carries_reminders_when_sections_are_too_long():
    long = empty_template().replace("# Learnings", "# Learnings\n" + "insight " * 3_000)
    prompt = notes_prompt(long)
    assert "The section 'Learnings' is over 2,000 tokens: condense it." in prompt
    assert "<current-notes>" in prompt and prompt.startswith("IMPORTANT: answer with plain text only")


def test_s1_replies_are_parsed_and_missing_sections_restored():
    body = "\n\n".join(f"# {t}\n_{w}_\n- x" for t, w in SECTIONS[:8])
    parsed = parse_notes(f"thinking...\n<notes>\n{body}\n</notes>")
    assert parsed is not None and list(sections(parsed)) == [t for t, _ in SECTIONS]
    assert parse_notes("no notes here") is None
    assert parse_notes("<notes># Session Title\nx</notes>") is None  # too few sections to trust


def test_s1_truncation_for_compaction_points_at_the_file():
    long = empty_template().replace("# Worklog", "# Worklog\n" + "w" * 20_000)
    cut = truncate_for_compact(long, "/s/session-memory.md")
    assert "[section cut here; the full notes are in /s/session-memory.md]" in cut
    assert len(sections(cut)["Worklog"]) < 9_000


# -- S2: when to extract -------------------------------------------------------------------------


def test_s2_constants_are_the_seeds():
    assert (INIT_TOKENS, MIN_TOKEN_GROWTH, TOOL_CALLS_BETWEEN) == (10_000, 5_000, 3)
    assert WAIT_FOR_EXTRACTION_SECONDS == 15


@pytest.mark.parametrize("tokens, due", [(9_999, None), (10_000, "init"), (50_000, "init")])
def test_s2_first_extraction_at_ten_thousand_tokens(tokens, due):
    assert extraction_due(ExtractionState(), tokens, last_turn_tool_calls=1, correction=False) == due


@pytest.mark.parametrize("growth, since, last_turn, due", [
    (4_999, 5, 0, None),            # not enough growth
    (5_000, 0, 1, None),            # growth, but one tool call and the turn used tools
    (5_000, 2, 1, "growth"),        # three tool calls since
    (5_000, 0, 3, "growth"),        # three in the last turn
    (5_000, 0, 0, "growth"),        # a turn without tools
])
def test_s2_later_extractions_need_growth_and_calls_or_a_quiet_turn(growth, since, last_turn, due):
    state = ExtractionState(initialized=True, tokens_at_last=20_000, tool_calls_since=since)
    assert extraction_due(state, 20_000 + growth, last_turn_tool_calls=last_turn, correction=False) == due


def test_s2_growth_counts_from_the_smaller_context_after_a_compaction():
    before = ExtractionState(initialized=True, tokens_at_last=160_000, tool_calls_since=5)
    assert rebaselined(before, 170_000) is before
    after = rebaselined(before, 30_000)
    assert after.tokens_at_last == 30_000 and after.tool_calls_since == 5
    assert extraction_due(after, 34_999, last_turn_tool_calls=0, correction=False) is None
    assert extraction_due(after, 35_000, last_turn_tool_calls=0, correction=False) == "growth"


def test_s2_a_correction_or_decision_extracts_at_once():
    assert extraction_due(ExtractionState(), 500, last_turn_tool_calls=0, correction=True) == "correction"
    for said in ("No, use the median instead", "Actually the file is sales_2024.csv", "I meant the other column",
                 "Let's go with a log scale", "From now on, plot in dark mode", "don't drop the NaNs",
                 "We decided to keep 2019 out", "Plot it with seaborn instead of matplotlib",
                 "Wait, that is the old file"):
        assert is_correction_or_decision(said), said
    for said in ("Plot the revenue by month", "What is the mean?", "Load the data",
                 "Load data.csv and don't print the whole frame", "Why does this always return NaN?",
                 "Show the totals by region, not by store"):
        assert not is_correction_or_decision(said), said


# -- S3: session-memory compaction -----------------------------------------------------------------


def turns(n: int, chars: int = 2_000) -> list:
    msgs = [user_text("start the analysis")]
    for i in range(n):
        use = call()
        msgs += [assistant(text(f"step {i}"), use), results((use["id"], f"out {i} " + "v" * chars)),
                 assistant(text(f"reply {i}")), user_text(f"next {i}")]
    return msgs


def test_s3_constants_are_the_seeds():
    assert (KEEP_MIN_TOKENS, KEEP_MIN_TEXT_MESSAGES, KEEP_MAX_TOKENS) == (10_000, 5, 40_000)


def test_s3_tail_grows_back_to_ten_thousand_tokens_and_five_texts():
    msgs = turns(40)
    covered = msgs[-1].uuid  # the notes cover everything: the tail starts empty and grows back
    start = keep_from(msgs, covered)
    tail = msgs[start:]
    tokens = sum(message_tokens(m) for m in tail)
    assert tokens >= KEEP_MIN_TOKENS and sum(1 for m in tail if m.text.strip()) >= KEEP_MIN_TEXT_MESSAGES
    assert tokens <= KEEP_MAX_TOKENS
    check_invariants([user_text("summary"), *tail])


def test_s3_tail_is_capped_at_forty_thousand_tokens():
    msgs = turns(30, chars=40_000)  # each result is ~5,000 tokens
    start = keep_from(msgs, msgs[-1].uuid)
    assert sum(message_tokens(m) for m in msgs[start:]) <= KEEP_MAX_TOKENS


def test_s3_cut_keeps_pairs_together():
    msgs = turns(40)
    for covered in range(1, len(msgs)):
        start = keep_from(msgs, msgs[covered].uuid)
        check_invariants([user_text("summary"), *msgs[start:]])


def test_s3_never_crosses_the_last_boundary():
    boundary = user_text("[boundary]", kind="boundary")
    summary = user_text("earlier summary", kind="summary")
    msgs = [*turns(3)[:-1], boundary, summary, *turns(2)[1:]]
    start = keep_from(msgs, msgs[-1].uuid)
    assert start >= msgs.index(boundary) + 1


def test_s3_notes_that_cover_no_live_message_cannot_be_used():
    assert keep_from(turns(3), "not-a-live-uuid") is None


def compact(msgs, notes=NOTES, threshold=10**9, covered=None):
    return session_memory_compact(
        msgs, notes, covered or msgs[-10].uuid, notes_path="/s/session-memory.md", transcript_path="/s/t.jsonl",
        now=1.0, tokens_before=99_999, measure=estimate_messages, threshold=threshold)


def test_s3_the_notes_become_the_summary_with_no_model_call():
    msgs = turns(40)
    result = compact(msgs)  # a model call would raise inside
    assert result is not None and result.event.trigger == "session-memory"
    kinds = [m.kind for m in result.messages]
    assert kinds[:2] == ["boundary", "summary"] and "- fitting" in result.messages[1].text
    assert [m.uuid for m in result.messages[2:]] == [m.uuid for m in msgs[keep_from(msgs, msgs[-10].uuid):]]
    check_invariants(result.messages)


def test_s3_rejected_when_the_result_would_still_be_over_the_threshold():
    assert compact(turns(40), threshold=1_000) is None


def test_s3_empty_notes_are_not_used():
    assert compact(turns(40), notes=empty_template()) is None
