"""The pure part of undo: what comes back (the messages from before, then those since, a clearing's
results whole), the thinking an append-only undo drops, the transcript's fold of an undo, and the
undo points a resumed session reads back from the transcript."""

from __future__ import annotations

from builders import assistant, conversation, text

from ctx_magic.context.autocompact import without_usage
from ctx_magic.context.resume import fold_transcript
from ctx_magic.context.thinking import has_thinking, without_thinking
from ctx_magic.context.undo import kept_event, merged, point_of, points_from_transcript, restore, undone_event
from ctx_magic.events import Cleared, ServerCompacted, Snipped
from ctx_magic.messages import Message, user_text

THINK = {"type": "thinking", "thinking": "let me see", "signature": "sig-1"}


def records(*items: Message | object) -> list[dict]:
    return [{"type": "message", **i.to_json()} if isinstance(i, Message) else {"type": "event", **i.to_json()}
            for i in items]


def test_a_snip_s_undo_puts_the_messages_back_then_those_since_without_their_thinking():
    before = conversation("a", "b", "c")
    marker = user_text("[snipped]")
    after = [before[0], marker, *before[-2:]]
    point = point_of(Snipped(4, tuple(m.uuid for m in before[1:5]), marker.uuid, 100, "user"), before, after)
    since = [user_text("next?"), assistant(THINK, text("here"))]
    kept = restore(point, [*after, *since], {}, append_only=False)
    dropped = restore(point, [*after, *since], {}, append_only=True)
    assert [m.uuid for m in kept.messages] == [m.uuid for m in [*before, *since]]
    assert has_thinking(kept.messages[-1]) and kept.thinking is None
    assert not has_thinking(dropped.messages[-1]) and dropped.thinking is not None
    assert dropped.thinking.message_uuids == (since[1].uuid,) and dropped.since == tuple(m.uuid for m in since)
    assert all(m.usage is None for m in dropped.messages[-2:])  # billed after another prefix: no anchor


def test_a_clearing_s_undo_makes_its_results_whole_and_leaves_other_clearings():
    live = conversation("first output", "second output")
    ids = [i for m in live for i in m.tool_result_ids]
    event = Cleared("user", {ids[0]: "[cleared]"}, 10)
    point = point_of(event, live, live)
    restored = restore(point, live, {ids[0]: "[cleared]", "older": "[cleared]"}, append_only=True)
    assert restored.cleared == {"older": "[cleared]"} and restored.messages == tuple(live)
    assert point.returning == 1 and point.describe() == "your clearing"


def test_resume_folds_an_undo_from_the_messages_as_first_written():
    live = conversation("first output", "second output")
    ids = [i for m in live for i in m.tool_result_ids]
    cleared = Cleared("user", {ids[0]: "[cleared]"}, 10)
    point = point_of(cleared, live, live)
    restored = restore(point, live, {ids[0]: "[cleared]"}, append_only=False)
    undone = undone_event(point, restored, 50, 60)
    messages, state, problems = fold_transcript(records(*live, cleared, undone))
    assert problems == [] and state.cleared == {}
    assert [m.content for m in messages] == [m.content for m in live]


def snip_of(live: list[Message], trigger: str = "user") -> tuple[Snipped, list[Message]]:
    """A snip of the middle of `live`: the event and the live context it leaves."""
    marker = user_text("[snipped]")
    removed = live[1:-2]
    return Snipped(len(removed), tuple(m.uuid for m in removed), marker.uuid, 100, trigger), [
        live[0], marker, *live[-2:]]


def test_a_kept_point_reads_back_with_its_messages_as_they_were_before_the_change():
    live = [*conversation("first output", "second output"), assistant(THINK, text("done"))]
    # As a session held them: an answer kept by a compaction, without its usage; thinking dropped.
    before = [live[0], without_usage(live[1]), *live[2:-1], without_thinking(live[-1])]
    snip, after = snip_of(before)
    point = point_of(snip, before, after)
    read = points_from_transcript(records(*live, after[1], snip, kept_event(point)))
    assert read == (point,) and read[0].before == tuple(before)
    assert live[1].usage is not None and read[0].before[1].usage is None
    assert has_thinking(live[-1]) and not has_thinking(read[0].before[-1])


def test_only_an_unbroken_run_of_kept_points_up_to_the_last_change_is_read_back():
    live = conversation("a", "b", "c", "d")
    first, after_first = snip_of(live)
    second, after_second = snip_of([*after_first, *conversation("e", "f")[1:]])
    p1 = point_of(first, live, after_first)
    p2 = point_of(second, [*after_first], after_second)
    base = [*live, after_first[1], first, after_second[1], second]
    assert [p.key for p in points_from_transcript(records(*base, kept_event(p1), kept_event(p2)))] == [
        p1.key, p2.key]
    assert points_from_transcript(records(*base, kept_event(p1))) == ()  # the last change kept no point
    assert [p.key for p in points_from_transcript(records(*base, kept_event(p2)))] == [p2.key]
    assert points_from_transcript(records(*base)) == ()  # a transcript from before points were kept


def test_an_undo_takes_its_point_and_a_server_compaction_all_of_them():
    live = conversation("a", "b", "c")
    snip, after = snip_of(live)
    point = point_of(snip, live, after)
    restored = restore(point, after, {}, append_only=False)
    undone = undone_event(point, restored, 50, 60)
    server = ServerCompacted(live[-1].uuid, (live[-1].uuid,), "summary", 100, 10, 3)
    base = [*live, after[1], snip, kept_event(point)]
    assert len(points_from_transcript(records(*base))) == 1
    assert points_from_transcript(records(*base, undone)) == ()
    assert points_from_transcript(records(*base, server)) == ()


def test_a_snip_and_a_clearing_made_in_one_step_read_back_as_one_point():
    live = conversation("a", "b", "c", "d")
    snip, after = snip_of(live)
    ids = [i for m in after for i in m.tool_result_ids]
    clearing = Cleared("pressure", {ids[-1]: "[cleared]"}, 10)
    point = merged(point_of(snip, live, after), point_of(clearing, live, after))
    read = points_from_transcript(records(*live, after[1], snip, clearing, kept_event(point)))
    assert len(read) == 1 and read[0].changes == (snip.marker_uuid, ids[-1]) and read[0].uncleared == {ids[-1]}
    restored = restore(point, after, {ids[-1]: "[cleared]"}, append_only=False)
    assert points_from_transcript(records(*live, after[1], snip, clearing, kept_event(point),
                                          undone_event(point, restored, 50, 60))) == ()
