"""The pure part of undo: what comes back (the messages from before, then those since, a clearing's
results whole), the thinking an append-only undo drops, and the transcript's fold of an undo."""

from __future__ import annotations

from builders import assistant, conversation, text

from ctx_magic.context.resume import fold_transcript
from ctx_magic.context.thinking import has_thinking
from ctx_magic.context.undo import point_of, restore, undone_event
from ctx_magic.events import Cleared, Snipped
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
