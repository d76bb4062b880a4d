"""Snip keeps the head and the tail, pairs intact, one marker naming the transcript."""

from __future__ import annotations

from builders import assistant, call, exchange, results, text

from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.snip import KEEP_HEAD, safe_cuts, snip_middle
from ctx_magic.messages import user_text


def long_conversation(exchanges: int):
    msgs = [user_text("the task")]
    for n in range(exchanges):
        msgs += exchange("python", f"out {n}", t=n)
    return msgs


def test_no_snip_at_or_below_the_limit():
    msgs = long_conversation(20)[:40]
    out, events = snip_middle(msgs, 40, transcript_path="t.jsonl", now=0)
    assert out == msgs and events == []


def test_keeps_first_three_and_most_recent_with_one_marker():
    msgs = long_conversation(100)  # 201 messages
    out, events = snip_middle(msgs, 50, transcript_path="/s/transcript.jsonl", now=5.0)
    assert len(out) <= 50
    assert out[:KEEP_HEAD] == msgs[:KEEP_HEAD]
    assert out[-1] == msgs[-1]
    marker = out[KEEP_HEAD]
    assert marker.uuid == events[0].marker_uuid
    assert f"{events[0].count:,} earlier messages were snipped" in marker.text
    assert "/s/transcript.jsonl" in marker.text
    assert events[0].count == len(msgs) - len(out) + 1
    check_invariants(out)


def test_never_splits_a_tool_use_from_its_result():
    """Parallel calls answered by one message: the cut moves to a safe place."""
    msgs = [user_text("task")]
    for n in range(60):
        a, b = call(), call()
        msgs += [assistant(text(f"step {n}"), a, b), results((a["id"], "x"), (b["id"], "y"))]
    for limit in range(10, 60):
        out, _ = snip_middle(msgs, limit, transcript_path="t", now=0)
        check_invariants(out)


def test_head_extends_past_a_pending_tool_use():
    use = call()
    msgs = [user_text("task"), assistant(text("a")), assistant(use), results((use["id"], "r"))]
    msgs += long_conversation(30)[1:]
    out, _ = snip_middle(msgs, 20, transcript_path="t", now=0)
    assert out[:4] == msgs[:4]  # the third message's tool_use pulls its result into the head
    check_invariants(out)


def test_snip_safe_cuts_marks_pairs():
    use = call()
    msgs = [user_text("task"), assistant(use), results((use["id"], "r"))]
    assert safe_cuts(msgs) == [True, True, False, True]


def test_repeated_snips_accumulate_the_count():
    msgs = long_conversation(100)
    out, first = snip_middle(msgs, 50, transcript_path="t", now=0)
    out += long_conversation(40)[1:]
    out2, second = snip_middle(out, 50, transcript_path="t", now=0)
    kept_originals = sum(1 for m in out2 if m.uuid != second[0].marker_uuid)
    total = len(msgs) + 80
    assert second[0].count == total - kept_originals
    assert first[0].marker_uuid in second[0].removed_uuids


def test_event_lists_removed_messages_and_tokens_freed():
    msgs = long_conversation(50)
    out, events = snip_middle(msgs, 30, transcript_path="t", now=0)
    removed = set(events[0].removed_uuids)
    assert removed == {m.uuid for m in msgs} - {m.uuid for m in out}
    assert events[0].tokens_freed > 0


def test_cuts_to_half_the_limit_so_the_next_turn_does_not_snip_again():
    """Beyond Claude Code: re-snipping at every message would rewrite the cached prefix each turn."""
    msgs = long_conversation(30)  # 61 messages
    out, events = snip_middle(msgs, 40, transcript_path="t", now=0)
    assert events and len(out) <= 20 + 1
    grown = out + long_conversation(5)[1:]
    again, more = snip_middle(grown, 40, transcript_path="t", now=0)
    assert more == [] and again == grown
