"""The API's rules (invariants) and the one clear error that names the offending index."""

from __future__ import annotations

import pytest
from builders import assistant, call, results, text

from ctx_magic.context.engine import ContextSettings, prepare
from ctx_magic.context.invariants import (
    INTERRUPTED_RESULT,
    check_invariants,
    close_dangling_tool_uses,
    without_empty,
)
from ctx_magic.context.state import ContextState
from ctx_magic.errors import InvariantError
from ctx_magic.messages import Message, tool_result_block, user_text


def test_valid_conversation_passes_the_api_rules():
    use = call()
    check_invariants([user_text("go"), assistant(use), results((use["id"], "ok")), assistant(text("done"))])


def test_first_sent_message_must_be_user():
    with pytest.raises(InvariantError, match="message 0") as err:
        check_invariants([assistant(text("hi")), user_text("go")])
    assert err.value.index == 0


def test_boundaries_are_skipped_when_finding_the_first():
    boundary = user_text("boundary", kind="boundary")
    check_invariants([boundary, user_text("summary", kind="summary"), assistant(text("ok"))])


def test_result_must_follow_its_tool_use():
    use = call()
    msgs = [user_text("go"), assistant(text("thinking")), results((use["id"], "orphan"))]
    with pytest.raises(InvariantError) as err:
        check_invariants(msgs)
    assert err.value.index == 2 and "does not follow" in str(err.value)


def test_tool_use_without_result_names_the_next_message():
    use = call()
    msgs = [user_text("go"), assistant(use), user_text("no result here")]
    with pytest.raises(InvariantError) as err:
        check_invariants(msgs)
    assert err.value.index == 2 and use["id"] in str(err.value)


def test_dangling_tool_use_at_the_end_is_refused():
    use = call()
    with pytest.raises(InvariantError, match="left without a result"):
        check_invariants([user_text("go"), assistant(use)])


def test_empty_content_and_empty_text_are_refused():
    with pytest.raises(InvariantError, match="content is empty") as err:
        check_invariants([user_text("go"), Message("assistant", ())])
    assert err.value.index == 1
    with pytest.raises(InvariantError, match="empty text"):
        check_invariants([user_text("   ")])


def test_consecutive_same_role_messages_form_one_turn():
    """Notebook cells arrive as a synthetic tool_use after the assistant's own text."""
    use = call("notebook_cell")
    msgs = [user_text("go"), assistant(text("done")), assistant(use), results((use["id"], "cell output")),
            user_text("next question")]
    check_invariants(msgs)


def test_duplicate_results_are_refused():
    use = call()
    msgs = [user_text("go"), assistant(use), results((use["id"], "a"), (use["id"], "b"))]
    with pytest.raises(InvariantError, match="two results"):
        check_invariants(msgs)


def test_incremental_check_rereads_previous_turn():
    use = call()
    msgs = [user_text("go"), assistant(use)]
    msgs.append(user_text("forgot the result"))
    with pytest.raises(InvariantError):
        check_invariants(msgs, start=2)


def test_prepare_rejects_broken_input_naming_the_index():
    use = call()
    msgs = [user_text("go"), assistant(use), user_text("x"), assistant(text("y"))]
    with pytest.raises(InvariantError) as err:
        prepare(msgs, ContextState(), 0.0, ContextSettings())
    assert err.value.index == 2
    assert str(err.value).startswith("message 2 breaks the API invariants")


def test_interrupted_tool_gets_an_error_result():
    a, b = call(), call()
    msgs = [user_text("go"), assistant(a, b)]
    closing = close_dangling_tool_uses(msgs, now=1.0)
    assert closing is not None
    assert [blk["tool_use_id"] for blk in closing.content] == [a["id"], b["id"]]
    assert all(blk["is_error"] and blk["content"] == INTERRUPTED_RESULT for blk in closing.content)
    check_invariants([*msgs, closing])
    assert close_dangling_tool_uses([*msgs, closing], now=2.0) is None


def test_tool_result_block_shape():
    assert tool_result_block("t", "x", is_error=True) == {
        "type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": True,
    }


def test_empty_and_whitespace_answers_are_left_out_and_the_rest_keeps_its_bytes():
    use = call()
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "s"}
    kept = [user_text("go  "), assistant(text("fine  ")), user_text("next")]
    broken = [Message("assistant", ()), assistant(text("\n\n")), assistant(thinking, text("\n\n")),
              assistant(text(" "), use)]
    messages = [kept[0], broken[0], kept[1], broken[1], kept[2], broken[2], broken[3], results((use["id"], "ok"))]
    repaired, dropped = without_empty(messages)
    assert dropped == 3
    assert repaired[:3] == kept  # untouched, trailing spaces and all: no cache prefix changes
    assert repaired[3].content == (use,) and repaired[3].uuid == broken[3].uuid
    check_invariants(repaired)
