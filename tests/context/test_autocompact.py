"""Compaction: its input, the prompt, the summary message, PTL head truncation, splits, the rebuilt context."""

from __future__ import annotations

import pytest
from builders import assistant, call, exchange, results, text

from ctx_magic.context.autocompact import (
    MAX_PTL_RETRIES,
    Compaction,
    api_round_groups,
    plan_split,
    rebuild,
    summarize_with_retries,
    summary_input,
    summary_request,
    truncate_head_for_ptl,
)
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.prompts import PTL_RETRY_MARKER, compact_prompt, extract_summary
from ctx_magic.context.tokens import message_tokens
from ctx_magic.errors import CompactionFailed, PromptTooLong, ServerError
from ctx_magic.messages import Message, user_text

IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}


class FakeSummarizer:
    """Answers with a fixed reply, or raises the queued errors first; records what it saw."""

    def __init__(self, reply: str = "<analysis>walk</analysis><summary>the summary</summary>", errors=()):
        self.reply = reply
        self.errors = list(errors)
        self.seen: list[list[Message]] = []
        self.prompts: list[str] = []

    def summarize(self, messages, prompt):
        self.seen.append(list(messages))
        self.prompts.append(prompt)
        if self.errors:
            raise self.errors.pop(0)
        return self.reply


def rounds(n: int) -> list[Message]:
    msgs = [user_text("the task")]
    for i in range(n):
        msgs += exchange("python", f"output {i} " * 50, t=i)
    return msgs


def compact(messages, summarizer=None, *, direction="full", split_at=None, trigger="manual", attachments=(),
            threshold=10**9, **job):
    """Summarize (the summarizer asked, with its retries), then rebuild: as the loop compacts."""
    split = plan_split(messages, direction, split_at)
    sent, prompt = summary_request(split)
    summary = summarize_with_retries((summarizer or FakeSummarizer()).summarize, sent, prompt)
    job = Compaction(split, trigger, now=1.0, tokens_before=1_000, threshold=threshold,
                     transcript_path="/s/transcript.jsonl", **job)
    return rebuild(job, summary, attachments=lambda kept: attachments)


# -- what the summarizer sees --------------------------------------------------------------


def test_images_and_documents_become_markers_and_attachments_stay_for_the_cache():
    use = call()
    msgs = [
        Message("user", (text("look"), IMAGE, {"type": "document", "source": {}})),
        assistant(use),
        results((use["id"], [text("plot"), IMAGE])),
        user_text("re-read file", kind="attachment"),
        user_text("boundary", kind="boundary"),
    ]
    out = summary_input(msgs)
    assert [m.kind for m in out] == ["normal", "normal", "normal", "attachment"]
    assert "re-injected by the tooling" in compact_prompt()
    assert out[0].content[1:] == (text("[image]"), text("[document]"))
    assert out[2].content[0]["content"][1] == text("[image]")


# -- the summary prompt and message ---------------------------------------------------------


def test_prompt_has_no_tools_at_both_ends_and_nine_sections():
    prompt = compact_prompt()
    assert prompt.startswith("IMPORTANT: answer with plain text only")
    assert prompt.rstrip().endswith("block with the sections above.")
    for title in ["Primary Request and Intent", "Key Technical Concepts", "Files and Code Sections",
                  "Errors and Fixes", "Problem Solving", "All User Messages", "Pending Tasks",
                  "Current Work", "Optional Next Step"]:
        assert title in prompt
    assert "<analysis>" in prompt and "<summary>" in prompt


def test_summary_prompt_appends_user_instructions():
    prompt = compact_prompt("full", "focus on the plots")
    assert "Additional instructions for this summary:\nfocus on the plots" in prompt


def test_up_to_prompt_swaps_the_last_sections():
    prompt = compact_prompt("up_to")
    assert "Work Completed" in prompt and "Context for Continuing Work" in prompt
    assert "Current Work" not in prompt
    assert "NOT re-summarized" in compact_prompt("from")


def test_analysis_is_dropped_and_summary_extracted():
    assert extract_summary("<analysis>scratch</analysis>\n<summary>\nkept\n</summary>") == "kept"
    assert extract_summary("<analysis>only</analysis>") is None
    assert extract_summary("<summary>cut off by max_tokens") == "cut off by max_tokens"


# -- PTL head truncation ----------------------------------------------------------------------


def test_truncation_groups_are_api_rounds_with_their_results():
    msgs = rounds(3)
    groups = api_round_groups(msgs)
    assert [len(g) for g in groups] == [1, 2, 2, 2]
    assert groups[1][0].role == "assistant" and groups[1][1].role == "user"


def test_truncation_drops_oldest_groups_covering_the_gap():
    msgs = rounds(6)
    groups = api_round_groups(msgs)
    gap = sum(message_tokens(m) for m in groups[0] + groups[1]) - 1
    out = truncate_head_for_ptl(msgs, gap)
    assert out is not None
    assert out[0].text == PTL_RETRY_MARKER  # the rest starts with an assistant message
    assert out[1:] == [m for g in groups[2:] for m in g]


def test_truncation_without_a_gap_drops_a_fifth_of_the_groups():
    msgs = rounds(9)  # 10 groups
    out = truncate_head_for_ptl(msgs, None)
    assert out is not None
    assert out[1:] == msgs[1 + 2 * 1:]  # two groups: the request and the first round


def test_truncation_strips_the_previous_marker_before_grouping():
    """Claude Code's bug: the marker as its own group would be all the 20% fallback drops."""
    msgs = rounds(4)  # 5 groups: one fifth is exactly one group
    first = truncate_head_for_ptl(msgs, None)
    assert first is not None and first[0].text == PTL_RETRY_MARKER
    second = truncate_head_for_ptl(first, None)
    assert second is not None
    assert second[0].text == PTL_RETRY_MARKER
    assert sum(1 for m in second if m.text == PTL_RETRY_MARKER) == 1
    assert len(second) < len(first), "the retry must make progress"
    assert second[1:] == msgs[3:]  # the first round went, not the marker


def test_truncation_with_nothing_left_returns_none():
    assert truncate_head_for_ptl(rounds(1), 10**9) is None
    assert truncate_head_for_ptl([user_text("only")], None) is None


def test_prompt_too_long_summary_retries_at_most_three_times_then_fails_clearly():
    errors = [PromptTooLong("too long", 100, 50) for _ in range(MAX_PTL_RETRIES + 1)]
    summarizer = FakeSummarizer(errors=errors)
    with pytest.raises(CompactionFailed, match="too long to summarize"):
        summarize_with_retries(summarizer.summarize, rounds(40), "prompt")
    assert len(summarizer.seen) == MAX_PTL_RETRIES + 1
    assert all(len(a) > len(b) for a, b in zip(summarizer.seen, summarizer.seen[1:]))


def test_prompt_too_long_summary_recovers_after_a_truncation():
    summarizer = FakeSummarizer(errors=[PromptTooLong("too long", 1_200, 1_000)])
    assert summarize_with_retries(summarizer.summarize, rounds(10), "p") == "the summary"
    assert len(summarizer.seen[1]) < len(summarizer.seen[0])


def test_summary_call_model_errors_become_compaction_failures():
    with pytest.raises(CompactionFailed, match="summary call failed"):
        summarize_with_retries(FakeSummarizer(errors=[ServerError("boom")]).summarize, rounds(2), "p")
    with pytest.raises(CompactionFailed, match="no <summary>"):
        summarize_with_retries(FakeSummarizer(reply="no tags").summarize, rounds(2), "p")


# -- the rebuilt context, whole or partial --------------------------------------------------


def test_full_compaction_order_and_boundary_metadata():
    msgs = rounds(4)
    attachment = user_text("recent file", kind="attachment")
    result = compact(msgs, trigger="auto", previous_boundary="b0", turns_since=7, attachments=[attachment])
    kinds = [m.kind for m in result.messages]
    assert kinds == ["boundary", "summary", "attachment"]
    boundary = result.messages[0].meta
    assert boundary["trigger"] == "auto" and boundary["tokens_before"] == 1_000
    assert boundary["messages_summarized"] == len(msgs)
    assert boundary["previous_boundary"] == "b0" and boundary["turns_since_previous"] == 7
    assert boundary["tokens_after"] == result.event.tokens_after
    summary = result.messages[1].text
    assert "/s/transcript.jsonl" in summary and "the summary" in summary
    assert "without asking" in summary  # auto: continue the work
    assert result.event.live_uuids == tuple(m.uuid for m in result.messages)
    check_invariants(result.messages)


def test_manual_summary_does_not_tell_the_model_to_continue_silently():
    assert "without asking" not in compact(rounds(2)).messages[1].text


def test_up_to_keeps_later_messages_after_the_summary():
    msgs = rounds(6)
    result = compact(msgs, direction="up_to", split_at=7)
    assert [m.kind for m in result.messages[:2]] == ["boundary", "summary"]
    assert [m.uuid for m in result.messages[2:]] == [m.uuid for m in msgs[7:]]
    check_invariants(result.messages)


def test_split_never_separates_a_pair():
    msgs = rounds(6)
    split = plan_split(msgs, "up_to", 6)  # 6 is a tool result: the cut moves back to 5
    assert len(split.to_summarize) == 5 and split.kept_after[0].role == "assistant"


def test_from_keeps_earlier_messages_first():
    msgs = rounds(6)
    result = compact(msgs, direction="from", split_at=5)
    assert [m.uuid for m in result.messages[:5]] == [m.uuid for m in msgs[:5]]
    assert [m.kind for m in result.messages[5:7]] == ["boundary", "summary"]
    assert result.event.messages_summarized == len(msgs) - 5
    check_invariants(result.messages)


def test_from_prompt_is_the_partial_one():
    summarizer = FakeSummarizer()
    compact(rounds(6), summarizer, direction="from", split_at=5)
    assert "NOT re-summarized" in summarizer.prompts[0]


def test_compaction_with_nothing_to_summarize_fails_clearly():
    with pytest.raises(CompactionFailed, match="nothing to summarize"):
        compact([user_text("x")], split_at=0)


def test_rebound_is_reported_when_the_result_is_still_over_the_threshold():
    result = compact(rounds(3), trigger="auto", threshold=100)
    assert result.event.tokens_after >= 100
    assert result.event.rebound


def test_kept_messages_do_not_anchor_the_count_after_compaction():
    """Their usage measured the old, longer context: the new count must be estimated."""
    from ctx_magic.context.tokens import find_anchor

    msgs = rounds(6)
    result = compact(msgs, direction="up_to", split_at=7)
    assert find_anchor(result.messages) == -1
    assert [m.uuid for m in result.messages[2:]] == [m.uuid for m in msgs[7:]]
    assert all(m.usage is None for m in result.messages)
