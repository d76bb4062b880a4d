"""The tool-result budget: persisted outputs, frozen decisions."""

from __future__ import annotations

import re

from builders import assistant, call, results, text

from ctx_magic.context.budget import (
    MAX_MESSAGE_RESULTS_CHARS,
    MAX_RESULT_CHARS,
    PREVIEW_CHARS,
    apply_tool_result_budget,
    head_and_tail,
    oversized_prompt,
    persisted_prompt,
    preview,
    prompt_limit_tokens,
    scaled_budget,
)
from ctx_magic.messages import result_text, user_text


def path_for(tool_use_id: str) -> str:
    return f"tool-results/{tool_use_id}.txt"


def run(msgs, decided=frozenset(), start=0):
    names = {b["id"]: b["name"] for m in msgs for b in m.blocks("tool_use")}
    return apply_tool_result_budget(msgs, start, decided, names, path_for)


def one_result(output: str, tool: str = "python"):
    use = call(tool)
    return [user_text("go"), assistant(use), results((use["id"], output))], use["id"]


def test_result_over_50000_chars_is_persisted_with_preview():
    output = "line of output\n" * 4_000  # 60,000 chars
    msgs, tid = one_result(output)
    out, decided, events = run(msgs)
    block = out[2].content[0]
    assert [e.tool_use_id for e in events] == [tid]
    assert events[0].content == output
    assert events[0].original_chars == len(output)
    assert "<persisted-output>" in block["content"]
    assert path_for(tid) in block["content"]
    assert "60,000 characters" in block["content"]
    assert "read_file" in block["content"]
    assert tid in decided


def test_result_of_exactly_50000_chars_stays():
    msgs, _ = one_result("x" * 50_000)
    out, _, events = run(msgs)
    assert events == [] and out == msgs


def test_preview_is_2000_chars_cut_at_a_line_end():
    text_ = "".join(f"row {i:05d} " + "v" * 30 + "\n" for i in range(2_000))
    cut = preview(text_)
    assert len(cut) <= 2_000 and text_.startswith(cut) and text_[len(cut)] == "\n"


def test_preview_without_newlines_is_hard_cut():
    assert preview("y" * 10_000) == "y" * 2_000


def shown_preview(block_text: str) -> str:
    return block_text.split("characters):\n", 1)[1].removesuffix("\n</persisted-output>")


def test_a_persisted_preview_keeps_the_start_and_the_end_and_names_what_it_left_out():
    rows = "".join(f"collected row {i:05d}\n" for i in range(4_000))
    output = rows + "FAILED test_rows.py::test_last - KeyError: 'id'\n"
    msgs, _ = one_result(output)
    out, _, _ = run(msgs)
    shown = shown_preview(out[2].content[0]["content"])
    head, gap, tail = re.fullmatch(r"(.*)\n\[\.\.\. (.*) \.\.\.\]\n(.*)", shown, re.DOTALL).groups()
    assert len(shown) <= PREVIEW_CHARS and output.startswith(head) and output.endswith(tail)
    assert head.startswith("collected row 00000") and tail.endswith("KeyError: 'id'\n")
    left_out = output[len(head) + 1:len(output) - len(tail)]  # whole lines: the head ends where a line does
    lines = left_out.count("\n")
    assert gap == f"{lines:,} lines ({len(left_out):,} characters) left out here; read_file shows them"
    assert left_out.count("\n") > 3_000 and "collected row 02000" not in shown
    assert abs(len(head) - len(tail)) < 100  # the room is shared evenly


def test_a_preview_never_exceeds_its_limit_in_any_window():
    texts = ["y" * 10_000, "ab\n" * 5_000, "\n" * 9_000, "".join(f"line {i}\n" for i in range(3_000)),
             "z" * 4_000 + "\n" + "w" * 4_000]
    for limit in (PREVIEW_CHARS, 750, scaled_budget(4_096 / 200_000).preview_chars, 200, 60):
        for text_ in texts:
            shown = head_and_tail(text_, limit)
            assert len(shown) <= limit and shown[:20] == text_[:20]
    assert head_and_tail("short\noutput\n", 2_000) == "short\noutput\n"


def test_message_total_over_200000_persists_largest_first():
    uses = [call() for _ in range(5)]
    sizes = [45_000, 49_000, 48_000, 47_000, 46_000]  # each under 50,000; 235,000 together
    msgs = [
        user_text("go"),
        assistant(*uses),
        results(*[(u["id"], "z" * n) for u, n in zip(uses, sizes)]),
    ]
    out, _, events = run(msgs)
    assert [e.tool_use_id for e in events] == [uses[1]["id"]]
    remaining = sum(len(result_text(b)) for b in out[2].content)
    assert remaining <= MAX_MESSAGE_RESULTS_CHARS


def test_read_file_results_are_never_persisted():
    msgs, _ = one_result("r" * 300_000, tool="read_file")
    out, _, events = run(msgs)
    assert events == [] and out == msgs


def test_budget_decision_is_frozen_once_made():
    """A result kept once is never persisted later, even if the rule would now fire."""
    msgs, tid = one_result("k" * 60_000)
    out, _, events = run(msgs, decided=frozenset({tid}))
    assert events == [] and out == msgs


def test_budget_only_looks_at_messages_from_start():
    msgs, _ = one_result("k" * 60_000)
    out, _, events = run(msgs, start=3)
    assert events == [] and out == msgs


def test_images_in_a_persisted_result_are_kept():
    use = call()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    msgs = [user_text("go"), assistant(use), results((use["id"], [text("p" * 60_000), image]))]
    out, _, events = run(msgs)
    content = out[2].content[0]["content"]
    assert len(events) == 1 and content[1] == image and "<persisted-output>" in content[0]["text"]


def test_binary_and_non_utf8_outputs_are_stored_and_previewed(tmp_path):
    from ctx_magic.messages import decode_output
    from ctx_magic.store.session import SessionDir

    blob = decode_output(bytes(range(256)) * 400)  # binary: a description and a hex preview
    latin = decode_output(("café " * 20_000).encode("latin-1"))  # not UTF-8, mostly text
    assert blob.startswith("[binary output: 102,400 bytes") and "00 01 02" in blob
    use_a, use_b = call(), call()
    msgs = [user_text("go"), assistant(use_a, use_b), results((use_a["id"], blob), (use_b["id"], latin))]
    out, _, events = run(msgs)
    session = SessionDir(tmp_path, "s").create()
    for event in events:
        assert session.write_tool_result(event.tool_use_id, event.content).read_text("utf-8") == event.content
    assert [e.tool_use_id for e in events] == [use_b["id"]]  # 100,000 characters: persisted
    assert "caf\ufffd" in out[2].content[1]["content"]  # the preview shows the replacement character


def test_a_user_message_over_a_quarter_of_the_threshold_or_50000_characters_is_oversized():
    assert prompt_limit_tokens(167_000) == 41_750 and prompt_limit_tokens(100) == 500
    assert not oversized_prompt("short question", 5_000)
    assert oversized_prompt("word " * 2_000, 5_000)  # about 2,000 tokens > 1,250
    assert oversized_prompt("x" * 50_001, 10**9) and not oversized_prompt("hello " * 8_000, 10**9)
    block = persisted_prompt("/s/tool-results/prompt-1-0.txt", "line\n" * 1_000, 100)
    assert block.startswith("<persisted-input>") and "/s/tool-results/prompt-1-0.txt" in block
    assert "5,000 characters" in block and block.count("line") <= 25


def test_budget_limits_scale_with_the_window_below_200k():
    assert scaled_budget(1.0) == scaled_budget(5.0)  # a 1M window keeps Claude Code's figures
    full = scaled_budget(1.0)
    assert (full.max_result_chars, full.max_message_chars, full.preview_chars) == (
        MAX_RESULT_CHARS, MAX_MESSAGE_RESULTS_CHARS, PREVIEW_CHARS)
    small = scaled_budget(12_000 / 200_000)
    assert (small.max_result_chars, small.max_message_chars, small.preview_chars) == (3_000, 12_000, 750)
    tiny = scaled_budget(4_096 / 200_000)
    assert tiny.preview_chars == 256 and tiny.max_result_chars == 1_024


def test_a_45000_character_output_is_persisted_in_a_12000_token_window():
    output = "\n".join(f"[{i}, {i * 7 % 1000}]," for i in range(4_000))[:45_000]
    msgs, _ = one_result(output)
    names = {b["id"]: b["name"] for m in msgs for b in m.blocks("tool_use")}
    out, _decided, events = apply_tool_result_budget(msgs, 0, frozenset(), names, path_for,
                                                     scaled_budget(12_000 / 200_000))
    assert len(events) == 1 and events[0].original_chars == len(output)
    assert len(result_text(out[-1].content[0])) < 1_500
