"""Session notes: the template and caps, extraction triggers, session-memory compaction."""

from __future__ import annotations

import pytest
from builders import assistant, call, results, text

from ctx_magic.context.autocompact import Compaction
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.notes import (
    KEEP_MAX_TOKENS,
    KEEP_MIN_TEXT_MESSAGES,
    KEEP_MIN_TOKENS,
    MAX_SECTION_TOKENS,
    MAX_TOTAL_TOKENS,
    SECTIONS,
    ExtractionState,
    apply_update,
    compact_from_notes,
    empty_template,
    enforce_caps,
    extraction_due,
    is_correction_or_decision,
    is_empty,
    keep_from,
    notes_prompt,
    notes_split,
    rebaselined,
    sections,
    tail_limits,
    truncate_for_compact,
    update_step,
)
from ctx_magic.context.thresholds import compute_thresholds
from ctx_magic.context.tokens import message_tokens
from ctx_magic.messages import user_text

NOTES = empty_template().replace("_what is being worked on right now, pending tasks, the next steps_",
                                 "_what is being worked on right now, pending tasks, the next steps_\n- fitting")


def test_ten_sections_in_their_order():
    assert [t for t, _ in SECTIONS] == [
        "Session Title", "Current State", "Task Specification", "Files and Functions", "Workflow",
        "Errors & Corrections", "Codebase and System Documentation", "Learnings", "Key Results", "Worklog"]
    assert list(sections(empty_template())) == [t for t, _ in SECTIONS]
    assert is_empty(empty_template()) and not is_empty(NOTES) and is_empty(None)


def test_caps_are_enforced_on_what_the_model_returns():
    bloated = empty_template().replace("# Worklog", "# Worklog\n" + "- step done today\n" * 3_000)
    capped = enforce_caps(bloated)
    from ctx_magic.context.tokens import count_text

    assert all(count_text(body) <= MAX_SECTION_TOKENS for body in sections(capped).values())
    assert count_text(capped) <= MAX_TOTAL_TOKENS + 100


def test_the_prompt_carries_reminders_when_sections_are_too_long():
    long = empty_template().replace("# Learnings", "# Learnings\n" + "insight " * 3_000)
    prompt = notes_prompt(long)
    assert "The section 'Learnings' is over 2,000 tokens: rewrite it shorter." in prompt
    assert "<current-notes>" in prompt and prompt.startswith("IMPORTANT: answer with plain text only")
    assert "Answer with only what changes" in prompt  # not the whole file again (output is 5x input)


def test_an_update_rewrites_and_appends_only_the_sections_it_names():
    current = apply_update(empty_template(), '<notes-update><append title="Worklog">- loaded sales.csv</append>'
                                             "</notes-update>")
    assert current is not None
    reply = ('<notes-update>\n<section title="Current State">\n- plotting revenue\n</section>\n'
             '<append title="Worklog">\n- plotted revenue\n</append>\n<append title="Made Up">- x</append>\n'
             "</notes-update>")
    updated = apply_update(current, reply)
    assert updated is not None and list(sections(updated)) == [t for t, _ in SECTIONS]
    body = sections(updated)
    assert body["Current State"].splitlines() == [sections(empty_template())["Current State"], "- plotting revenue"]
    assert body["Worklog"].splitlines()[1:] == ["- loaded sales.csv", "- plotted revenue"]
    assert body["Learnings"] == sections(empty_template())["Learnings"]  # untouched
    assert apply_update(current, "<notes-update></notes-update>") == current  # nothing changed
    assert apply_update(current, "no update here") is None


def test_truncation_for_compaction_points_at_the_file():
    long = empty_template().replace("# Worklog", "# Worklog\n" + "w" * 20_000)
    cut = truncate_for_compact(long, "/s/session-memory.md")
    assert "[section cut here; the full notes are in /s/session-memory.md]" in cut
    assert len(sections(cut)["Worklog"]) < 9_000


# -- when to extract -----------------------------------------------------------------------------


TH = compute_thresholds(200_000, 32_000, env={})  # warning 147,000, autocompact 167,000
STEP = update_step(TH)  # 10,000: two updates on the way from the warning level to the threshold


@pytest.mark.parametrize("tokens, due", [(10_000, None), (146_999, None), (147_000, "init"), (160_000, "init")])
def test_notes_start_only_once_a_compaction_is_in_sight(tokens, due):
    assert extraction_due(ExtractionState(), tokens, TH, last_turn_tool_calls=1, correction=False) == due


@pytest.mark.parametrize("growth, since, last_turn, due", [
    (STEP - 1, 5, 0, None),         # not enough growth
    (STEP, 0, 1, None),             # growth, but one tool call and the turn used tools
    (STEP, 2, 1, "growth"),         # three tool calls since
    (STEP, 0, 3, "growth"),         # three in the last turn
    (STEP, 0, 0, "growth"),         # a turn without tools
])
def test_later_extractions_need_growth_and_calls_or_a_quiet_turn(growth, since, last_turn, due):
    state = ExtractionState(initialized=True, tokens_at_last=150_000, tool_calls_since=since)
    assert extraction_due(state, 150_000 + growth, TH, last_turn_tool_calls=last_turn, correction=False) == due


def test_after_a_compaction_the_next_update_waits_for_the_warning_level_again():
    before = ExtractionState(initialized=True, tokens_at_last=160_000, tool_calls_since=5)
    assert rebaselined(before, 170_000) is before
    after = rebaselined(before, 30_000)
    assert after.tokens_at_last == 30_000 and after.tool_calls_since == 5
    assert extraction_due(after, 146_999, TH, last_turn_tool_calls=0, correction=False) is None
    assert extraction_due(after, 147_000, TH, last_turn_tool_calls=0, correction=False) == "growth"


def test_a_correction_or_decision_extracts_at_once_when_notes_are_kept():
    kept = ExtractionState(initialized=True, tokens_at_last=150_000)
    assert extraction_due(kept, 150_500, TH, last_turn_tool_calls=0, correction=True) == "correction"
    assert extraction_due(kept, 20_000, TH, last_turn_tool_calls=0, correction=True) is None
    for said in ("No, use the median instead", "Actually the file is sales_2024.csv", "I meant the other column",
                 "Let's go with a log scale", "From now on, plot in dark mode", "don't drop the NaNs",
                 "We decided to keep 2019 out", "Plot it with seaborn instead of matplotlib",
                 "Wait, that is the old file"):
        assert is_correction_or_decision(said), said
    for said in ("Plot the revenue by month", "What is the mean?", "Load the data",
                 "Load data.csv and don't print the whole frame", "Why does this always return NaN?",
                 "Show the totals by region, not by store"):
        assert not is_correction_or_decision(said), said


# -- session-memory compaction ---------------------------------------------------------------------


def turns(n: int, chars: int = 2_000) -> list:
    msgs = [user_text("start the analysis")]
    for i in range(n):
        use = call()
        msgs += [assistant(text(f"step {i}"), use), results((use["id"], f"out {i} " + "v" * chars)),
                 assistant(text(f"reply {i}")), user_text(f"next {i}")]
    return msgs


def test_tail_grows_back_to_ten_thousand_tokens_and_five_texts():
    msgs = turns(40)
    covered = msgs[-1].uuid  # the notes cover everything: the tail starts empty and grows back
    start = keep_from(msgs, covered, TH.autocompact)
    tail = msgs[start:]
    tokens = sum(message_tokens(m) for m in tail)
    assert tokens >= KEEP_MIN_TOKENS and sum(1 for m in tail if m.text.strip()) >= KEEP_MIN_TEXT_MESSAGES
    assert tokens <= KEEP_MAX_TOKENS
    check_invariants([user_text("summary"), *tail])


def test_tail_is_capped_at_forty_thousand_tokens():
    msgs = turns(30, chars=40_000)  # each result is ~5,000 tokens
    start = keep_from(msgs, msgs[-1].uuid, TH.autocompact)
    assert sum(message_tokens(m) for m in msgs[start:]) <= KEEP_MAX_TOKENS


def test_notes_compaction_cut_keeps_pairs_together():
    msgs = turns(40)
    for covered in range(1, len(msgs)):
        start = keep_from(msgs, msgs[covered].uuid, TH.autocompact)
        check_invariants([user_text("summary"), *msgs[start:]])


def test_notes_compaction_never_crosses_the_last_boundary():
    boundary = user_text("[boundary]", kind="boundary")
    summary = user_text("earlier summary", kind="summary")
    msgs = [*turns(3)[:-1], boundary, summary, *turns(2)[1:]]
    start = keep_from(msgs, msgs[-1].uuid, TH.autocompact)
    assert start >= msgs.index(boundary) + 1


def test_notes_that_cover_no_live_message_cannot_be_used():
    assert keep_from(turns(3), "not-a-live-uuid", TH.autocompact) is None


def compact(msgs, notes=NOTES, threshold=10**9, covered=None):
    """A compaction from the notes, as the loop makes one: no model call anywhere."""
    split = notes_split(msgs, notes, covered or msgs[-10].uuid, threshold)
    if split is None:
        return None
    job = Compaction(split, "session-memory", now=1.0, tokens_before=99_999, threshold=threshold,
                     transcript_path="/s/t.jsonl", auto=True)
    return compact_from_notes(job, notes, "/s/session-memory.md")


def test_the_notes_become_the_summary_with_no_model_call():
    msgs = turns(40)
    result = compact(msgs)  # a model call would raise inside
    assert result is not None and result.event.trigger == "session-memory"
    kinds = [m.kind for m in result.messages]
    assert kinds[:2] == ["boundary", "summary"] and "- fitting" in result.messages[1].text
    kept = msgs[keep_from(msgs, msgs[-10].uuid, TH.autocompact):]
    assert [m.uuid for m in result.messages[2:]] == [m.uuid for m in kept]
    check_invariants(result.messages)


def test_notes_compaction_rejected_when_the_result_would_still_be_over_the_threshold():
    assert compact(turns(40), threshold=1_000) is None


def test_empty_notes_are_not_used_for_compaction():
    assert compact(turns(40), notes=empty_template()) is None


def test_on_a_small_window_the_kept_tail_is_at_most_a_share_of_the_threshold():
    small = compute_thresholds(32_000, 8_000, env={})
    least, most = tail_limits(small.autocompact)
    assert most == int(small.autocompact * 0.3) and least == most // 2
    assert tail_limits(TH.autocompact) == (10_000, 40_000)  # Claude Code's figures on a 200,000 window
    msgs = turns(60)
    start = keep_from(msgs, msgs[-1].uuid, small.autocompact)
    assert sum(message_tokens(m) for m in msgs[start:]) <= most
