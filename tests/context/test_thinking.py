"""Thinking blocks in the engine (context/thinking.py, and the cuts of snip / compaction): whole
blocks only ever leave, turns are the user's, and no cut separates a loop from its thinking."""

from __future__ import annotations

from builders import assistant, call, results, text

from ctx_magic.context.reactive import reactive_split
from ctx_magic.context.snip import safe_cuts
from ctx_magic.context.thinking import (
    clear_foreign_thinking,
    clear_old_thinking,
    drop_refused_thinking,
    side_call_view,
    thinking_turns,
    without_thinking,
)
from ctx_magic.messages import Message, user_text


def thought(n: int) -> dict:
    return {"type": "thinking", "thinking": f"reasoning {n} " * 50, "signature": f"sig{n}"}


def loop(n: int, rounds: int = 2) -> list[Message]:
    """A prompt, an answer opening with thinking and a call, then `rounds - 1` more calls, a reply."""
    first = call(tool_use_id=f"t{n}_0")
    out: list[Message] = [user_text(f"prompt {n}"), assistant(thought(n), first), results((first["id"], "out"))]
    for r in range(1, rounds):
        more = call(tool_use_id=f"t{n}_{r}")
        out += [assistant(more), results((more["id"], "out"))]
    return [*out, assistant(text(f"done {n}"))]


def test_turns_are_the_users_and_the_last_one_keeps_its_thinking():
    messages = loop(0) + loop(1) + loop(2)
    assert [len(t) for t in thinking_turns(messages)] == [1, 1, 1]
    cleared, event = clear_old_thinking(messages)
    assert event is not None and event.trigger == "idle" and event.blocks == 2 and event.tokens_freed > 0
    assert [len(t) for t in thinking_turns(cleared)] == [1]
    kept = thinking_turns(cleared)[0][0]
    assert cleared[kept] == messages[kept]  # the last turn's answer, byte for byte
    assert [m.uuid for m in cleared] == [m.uuid for m in messages]  # same messages, blocks removed
    assert clear_old_thinking(cleared)[1] is None  # nothing more to clear


def test_a_switch_removes_what_another_model_wrote_and_keeps_the_rest():
    mine = assistant(thought(1), text("a"))
    mine = Message("assistant", mine.content, api_id="m", meta={"model": "new"})
    messages = [user_text("q"), assistant(thought(0), text("b")), user_text("r"), mine]
    cleared, event = clear_foreign_thinking(messages, lambda m: m.meta.get("model") == "new")
    assert event is not None and event.message_uuids == (messages[1].uuid,) and event.trigger == "model-switch"
    assert cleared[1].content == (text("b"),) and cleared[3] == mine


def test_a_refused_block_and_every_later_one_leave_and_earlier_thinking_stays():
    messages = loop(0) + loop(1) + loop(2)
    refused = dict(thought(1))  # as the request sent it (the same signature)
    dropped, event = drop_refused_thinking(messages, [refused])
    assert event is not None and event.trigger == "prefix-check" and event.blocks == 2
    assert [len(t) for t in thinking_turns(dropped)] == [1]  # loop 0's thinking, before the refused one
    assert dropped[:len(loop(0))] == messages[:len(loop(0))]
    assert [m.uuid for m in dropped] == [m.uuid for m in messages]


def test_a_refused_block_that_is_not_in_the_context_changes_nothing():
    messages = loop(0)
    assert drop_refused_thinking(messages, [thought(9), {"type": "text", "text": "x"}]) == (messages, None)


def test_side_calls_see_the_blocks_only_while_the_cache_is_warm():
    messages = loop(0)
    assert side_call_view(messages, cache_warm=True) == messages
    cold = side_call_view(messages, cache_warm=False)
    assert not any(b.get("type") == "thinking" for m in cold for b in m.content)
    assert cold[1] == without_thinking(messages[1])


def test_no_cut_falls_inside_a_loop_that_opened_with_thinking():
    messages = [user_text("start"), *loop(0, rounds=3)[1:]]  # prompt, A(thinking, call), U, A(call), U, A(call), U, A
    safe = safe_cuts(messages)
    assert safe[1] and safe[-1]  # before the loop's first answer, and after its last one
    assert not any(safe[2:-1])  # nowhere inside it: the tail would lose the answer that opened it
    assert reactive_split(messages, keep=2) == 1  # a reactive compaction keeps the loop whole
    plain = [user_text("start"), *[without_thinking(m) for m in loop(0, rounds=3)[1:]]]
    assert safe_cuts(plain)[3] and reactive_split(plain, keep=2) == 5  # without thinking, pairs are enough


# -- append-only conversations: an edit voids the thinking after it --------------------------------


def test_only_appended_messages_are_no_change_and_an_edit_is_found_where_it_is():
    from ctx_magic.context.thinking import first_change

    before = loop(0) + loop(1)
    assert first_change(before, [*before, user_text("more")]) is None
    assert first_change(before, before[:-2]) is None  # taken from the end: nothing sent before it changed
    edited = list(before)
    edited[2] = edited[2].with_content([{**edited[2].content[0], "content": "[cleared]"}])
    assert first_change(before, edited) == 2
    copied = [m.with_content(list(m.content)) for m in before]  # equal values, other objects: no change
    assert first_change(before, copied) is None


def test_an_edit_drops_exactly_the_thinking_after_it_and_keeps_the_thinking_before():
    from ctx_magic.context.thinking import keep_valid_thinking

    before = loop(0) + loop(1) + loop(2)
    first_of_loop_1 = len(loop(0))
    edited = list(before)
    at = first_of_loop_1 + 2  # loop 1's first tool result, after its thinking answer
    edited[at] = edited[at].with_content([{**edited[at].content[0], "content": "[cleared]"}])
    kept, event = keep_valid_thinking(before, edited)
    assert event is not None and event.trigger == "edit"
    assert event.blocks == 1  # loop 2's: loop 1's came before the edit
    assert [len(t) for t in thinking_turns(kept)] == [1, 1]
    assert kept[: at + 1] == edited[: at + 1]
    unchanged, none = keep_valid_thinking(before, [*before, user_text("next")])
    assert none is None and unchanged[-1].text == "next"
