"""Extended thinking: signed thinking blocks in answers, streamed as the API streams them, and
the API's rules on sending them back."""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import pytest

from ctx_magic.context import block_count, model_families
from ctx_magic.offline import OfflineAPI
from ctx_magic.offline.thinking import redacted_valid, signature_valid

from .offline_support import MODEL, PYTHON_TOOL, refusal, user

ENABLED = {"type": "enabled", "budget_tokens": 1_024}
CODE = "Run this:\n```python\nprint(6 * 7)\n```"


def _ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], thinking: Any = ENABLED) -> Any:
    extra = {"thinking": thinking} if thinking is not None else {}
    return client.messages.create(model=MODEL, max_tokens=2_000, tools=[PYTHON_TOOL], messages=messages, **extra)


def _loop(client: anthropic.Anthropic, thinking: Any = ENABLED) -> list[dict[str, Any]]:
    """A request continuing a tool loop: the question, the answer with its call, the result."""
    first = _ask(client, [user(CODE)], thinking)
    content = first.to_dict()["content"]
    call = next(b for b in content if b["type"] == "tool_use")
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "42"}]}
    return [user(CODE), {"role": "assistant", "content": content}, result]


def test_an_answer_with_thinking_opens_with_a_signed_thinking_block(sdk: anthropic.Anthropic) -> None:
    reply = _ask(sdk, [user(CODE)])
    assert [b.type for b in reply.content] == ["thinking", "text", "tool_use"]
    assert reply.content[0].thinking.startswith("Offline stand-in thinking")
    assert signature_valid(reply.content[0].thinking, reply.content[0].signature)
    assert [b.type for b in _ask(sdk, [user(CODE)], thinking=None).content] == ["text", "tool_use"]


def test_thinking_streams_as_thinking_deltas_then_one_signature_delta(sdk: anthropic.Anthropic) -> None:
    deltas: list[str] = []
    with sdk.messages.stream(model=MODEL, max_tokens=2_000, thinking=ENABLED, messages=[user("hello " * 30)]) as s:
        for event in s:
            if event.type == "content_block_delta" and event.index == 0:
                deltas.append(event.delta.type)
        final = s.get_final_message()
    assert deltas.count("thinking_delta") > 1 and deltas[-1] == "signature_delta"
    assert deltas.count("signature_delta") == 1
    assert signature_valid(final.content[0].thinking, final.content[0].signature)
    assert final.model_dump()["content"] == _ask(sdk, [user("hello " * 30)]).model_dump()["content"]


def test_thinking_counts_in_the_output_tokens(client: anthropic.Anthropic) -> None:
    with_thinking = _ask(client, [user("hi")])
    without = _ask(client, [user("hi")], thinking=None)
    block = with_thinking.content[0].model_dump(exclude_none=True)
    thought = block_count.block_tokens(block, model_families.family_of(MODEL))  # what it costs sent back, too
    assert with_thinking.usage.output_tokens - without.usage.output_tokens == thought > 0


def test_a_tool_loop_with_its_thinking_unchanged_passes(sdk: anthropic.Anthropic) -> None:
    reply = _ask(sdk, _loop(sdk))
    assert reply.stop_reason == "end_turn"
    assert [b.type for b in reply.content] == ["text"]  # no new thinking until the next user turn


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c[0].update(thinking=c[0]["thinking"] + " (edited)"), "Invalid `signature` in `thinking` block"),
        (lambda c: c[0].update(signature=c[0]["signature"][:-4] + "AAA="), "Invalid `signature` in `thinking` block"),
        (lambda c: c[0].pop("signature"), "messages.1.content.0.thinking.signature: Field required"),
        (lambda c: c.pop(0), "Expected `thinking` or `redacted_thinking`, but found `text`"),
        (lambda c: c.insert(0, c.pop()), "Expected `thinking` or `redacted_thinking`, but found `tool_use`"),
    ],
    ids=["text edited", "signature edited", "signature missing", "thinking dropped", "thinking not first"],
)
def test_a_tool_loop_with_its_thinking_changed_or_missing_is_refused(
        sdk: anthropic.Anthropic, change: Any, expected: str) -> None:
    messages = _loop(sdk)
    change(messages[1]["content"])
    with pytest.raises(anthropic.BadRequestError) as caught:
        _ask(sdk, messages)
    assert expected in refusal(caught.value)
    assert refusal(caught.value).startswith("messages.1.content.0")


def test_thinking_turned_on_in_the_middle_of_a_tool_loop_is_refused(client: anthropic.Anthropic) -> None:
    messages = _loop(client, thinking=None)
    with pytest.raises(anthropic.BadRequestError) as caught:
        _ask(client, messages)
    assert "but found `text`" in refusal(caught.value)


def test_a_new_user_turn_needs_no_thinking_but_old_blocks_must_still_verify(client: anthropic.Anthropic) -> None:
    messages = _loop(client)
    closing = _ask(client, messages).to_dict()["content"]
    follow_up = [*messages, {"role": "assistant", "content": closing}, user("and now 7 * 8?")]
    assert _ask(client, follow_up).content[0].type == "thinking"  # a new turn thinks again
    tampered = copy.deepcopy(follow_up)
    tampered[1]["content"][0]["thinking"] += "!"
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        _ask(client, tampered)


def test_thinking_blocks_in_history_pass_with_thinking_off(client: anthropic.Anthropic) -> None:
    messages = _loop(client)
    closing = _ask(client, messages).to_dict()["content"]
    assert _ask(client, [*messages, {"role": "assistant", "content": closing}, user("ok")], thinking=None).content


def test_a_prefill_with_thinking_on_is_refused(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="Expected `thinking` or `redacted_thinking`"):
        _ask(client, [user("hi"), {"role": "assistant", "content": "Well"}])


def test_adaptive_thinking_thinks_after_tool_results_and_requires_no_block(client: anthropic.Anthropic) -> None:
    adaptive = {"type": "adaptive"}
    messages = _loop(client, thinking=adaptive)
    assert _ask(client, messages, adaptive).content[0].type == "thinking"  # interleaved thinking
    del messages[1]["content"][0]  # the model may skip thinking in adaptive mode: nothing to require
    assert _ask(client, messages, adaptive).content


def test_the_redacted_thinking_fault_round_trips_and_refuses_changed_data(
        api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("redacted_thinking")
    first = _ask(sdk, [user(CODE)])
    assert first.content[0].type == "redacted_thinking" and redacted_valid(first.content[0].data)
    content = first.to_dict()["content"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": content[-1]["id"], "content": "42"}]}
    messages = [user(CODE), {"role": "assistant", "content": content}, result]
    assert _ask(sdk, messages).stop_reason == "end_turn"
    content[0]["data"] = content[0]["data"][:-8] + "AAAAAAA="
    with pytest.raises(anthropic.BadRequestError, match="Invalid `data` in `redacted_thinking` block"):
        _ask(sdk, messages)


def test_redacted_thinking_fault_without_thinking_answers_normally(
        api: OfflineAPI, client: anthropic.Anthropic) -> None:
    api.inject("redacted_thinking")
    assert [b.type for b in _ask(client, [user("hi")], thinking=None).content] == ["text"]
    assert api.pending_faults == ()
