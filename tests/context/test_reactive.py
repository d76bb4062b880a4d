"""Reactive compaction: the pure parts of the reactive path (the loop's side is in tests/agent/test_loop.py)."""

from __future__ import annotations

from builders import assistant, call, results, text

from ctx_magic.context.budget import MAX_RESULT_CHARS
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.reactive import REACTIVE_KEEP_MESSAGES, persist_oversized, reactive_split, strip_images
from ctx_magic.messages import result_text, user_text


def test_reactive_split_keeps_about_five_messages_and_never_splits_a_pair():
    use = call("python")
    messages = [user_text("start"), assistant(text("ok")), user_text("go"), assistant(use),
                results((use["id"], "out")), assistant(text("done")), user_text("next"), assistant(text("fine")),
                user_text("last")]
    # the kept tail would start at the tool result: the cut moves back to its tool_use
    assert messages[len(messages) - REACTIVE_KEEP_MESSAGES].tool_result_ids
    cut = reactive_split(messages)
    assert cut == 3 and messages[cut].tool_use_ids
    check_invariants([user_text("the summary"), *messages[cut:]])  # the summary goes first


def test_413_persists_only_results_over_the_single_result_limit_with_the_full_text():
    big, small = call("read_file"), call("python")
    huge = "".join(f"row {i}\n" for i in range(20_000))
    messages = [user_text("read it"), assistant(big, small),
                results((big["id"], huge), (small["id"], "x" * MAX_RESULT_CHARS))]
    out, events = persist_oversized(messages, lambda i: f"tool-results/{i}.txt")
    assert [e.tool_use_id for e in events] == [big["id"]] and events[0].content == huge
    new = {b["tool_use_id"]: result_text(b) for b in out[2].blocks("tool_result")}
    assert new[big["id"]].startswith("<persisted-output>") and f"tool-results/{big['id']}.txt" in new[big["id"]]
    assert new[small["id"]] == "x" * MAX_RESULT_CHARS  # at the limit, not over it: kept
    assert out[:2] == messages[:2] and events[0].tokens_freed > 0
    check_invariants(out)


def test_413_replaces_images_inside_and_outside_tool_results():
    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    use = call("python")
    messages = [user_text("look"), assistant(use),
                results((use["id"], [{"type": "text", "text": "plot"}, png])), user_text("and this")]
    messages[3] = messages[3].with_content([*messages[3].content, png])
    out, changed = strip_images(messages)
    assert changed == [messages[2].uuid, messages[3].uuid]
    assert "image" not in {b.get("type") for m in out for b in m.content}
    assert "image removed" in result_text(out[2].content[0]) and out[3].content[-1]["type"] == "text"
