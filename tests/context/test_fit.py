"""A side call fitted to the window (context/fit.py): unchanged when it fits, tool results cut
first, the user's words last, the oldest rounds dropped only when nothing else is enough."""

from __future__ import annotations

from builders import assistant, call, results, text

from ctx_magic.context.fit import CUT_NOTE, MIN_KEPT_TOKENS, fit_messages, shared_cap
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.prompts import PTL_RETRY_MARKER
from ctx_magic.context.tokens import message_tokens
from ctx_magic.messages import Message, result_text, user_text


def rows(n: int, tag: str) -> str:
    return "\n".join(f"{tag} row {i}: {i * 37 % 1000 / 10:.1f} C" for i in range(n))


def turn(n: int, output_rows: int) -> list[Message]:
    use = call()
    return [user_text(f"Turn {n}: summarise batch {n}, please, and say what stands out."), assistant(use),
            results((use["id"], rows(output_rows, f"batch-{n}"))), assistant(text(f"Batch {n} looks steady."))]


def tokens(messages: list[Message]) -> int:
    return sum(message_tokens(m) for m in messages if m.sent)


def test_a_conversation_that_fits_goes_out_unchanged():
    messages = [m for n in range(3) for m in turn(n, 20)]
    fitted = fit_messages(messages, tokens(messages))
    assert all(a is b for a, b in zip(fitted, messages, strict=True))  # the cached prefix is shared


def test_tool_results_are_cut_first_keeping_their_start_and_end_and_every_word_of_the_user():
    messages = [m for n in range(4) for m in turn(n, 400)]
    room = tokens(messages) // 2
    fitted = fit_messages(messages, room)
    assert tokens(fitted) <= room
    assert [m.uuid for m in fitted] == [m.uuid for m in messages]  # no round dropped
    assert [m.text for m in fitted if m.role == "user"] == [m.text for m in messages if m.role == "user"]
    assert [m.text for m in fitted if m.role == "assistant"] == [m.text for m in messages if m.role == "assistant"]
    cut = result_text(next(b for m in fitted for b in m.blocks("tool_result")))
    assert cut.startswith("batch-0 row 0:") and cut.endswith("batch-0 row 399: 76.3 C")
    assert "characters left out so that this call fits the window; the transcript keeps them" in cut
    check_invariants(fitted)


def test_when_even_short_blocks_do_not_fit_the_oldest_rounds_go_and_pairs_stay_whole():
    messages = [m for n in range(12) for m in turn(n, 400)]
    room = 10 * MIN_KEPT_TOKENS
    fitted = fit_messages(messages, room)
    assert tokens(fitted) <= room
    assert any("Turn 11" in m.text for m in fitted)  # the latest round stays
    assert not any("Turn 0:" in m.text for m in fitted)  # the oldest went
    assert fitted[0].role == "user"
    check_invariants(fitted)


def test_a_kept_list_that_would_open_with_the_model_gets_the_retry_marker():
    use = call()
    messages = [user_text("go " * 3_000), assistant(use), results((use["id"], rows(300, "x"))),
                assistant(text("done " * 3_000))]
    fitted = fit_messages(messages, 400)
    assert fitted[0].text == PTL_RETRY_MARKER and fitted[1].role == "assistant"
    check_invariants(fitted)


def test_the_shared_cap_is_the_largest_that_fits():
    assert shared_cap([10, 20, 300], 330) == 300  # all fit whole
    assert shared_cap([10, 20, 300], 130) == 100  # the two small ones whole, the large one cut to the rest
    assert shared_cap([100, 100], 50) == 25
    assert shared_cap([5], 0) == 0


def test_the_note_says_how_much_was_left_out():
    assert CUT_NOTE.format(chars=12_345).strip().startswith("[… 12,345 characters left out")
