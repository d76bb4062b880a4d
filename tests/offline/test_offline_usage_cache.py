"""Token counting and the prompt-cache simulation, as the usage of replies reports them."""

from __future__ import annotations

from typing import Any

import anthropic

from ctx_magic.offline import OfflineAPI
from ctx_magic.offline.counting import input_tokens

from .offline_support import MODEL, PYTHON_TOOL, FakeClock, user

# Over 1,024 tokens: the shortest prefix the model caches (shorter ones are never written).
LONG_SYSTEM = "You are a careful data analyst working in a notebook. " * 100
LONG_TOOL = {**PYTHON_TOOL, "description": "Run Python code in the notebook's kernel. " * 150}
CACHED_SYSTEM = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]


def _conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        paste = LONG_SYSTEM if n == 0 else ""  # the first question pastes enough text to be cacheable
        messages += [user(f"question {n}: {paste}" + "details " * 30), {"role": "assistant", "content": f"answer {n}"}]
    return [*messages, user("the latest question")]


def _with_breakpoint_on_last(messages: list[dict[str, Any]], ttl: str | None = None) -> list[dict[str, Any]]:
    control: dict[str, Any] = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}
    last = messages[-1]
    block = {"type": "text", "text": last["content"], "cache_control": control}
    return [*messages[:-1], {"role": last["role"], "content": [block]}]


def _total(usage: Any) -> int:
    return usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens


def test_count_tokens_equals_reported_input_tokens(sdk: anthropic.Anthropic) -> None:
    request = {"model": MODEL, "system": CACHED_SYSTEM, "tools": [PYTHON_TOOL], "messages": _conversation(3)}
    counted = sdk.messages.count_tokens(**request).input_tokens
    reply = sdk.messages.create(max_tokens=500, **request)
    assert counted == _total(reply.usage) == input_tokens(request)
    assert counted > 500


def test_usage_parts_add_up_to_counted_input(client: anthropic.Anthropic) -> None:
    messages = _with_breakpoint_on_last(_conversation(2))
    for _ in range(2):
        reply = client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=messages)
        counted = client.messages.count_tokens(model=MODEL, system=CACHED_SYSTEM, messages=messages).input_tokens
        assert _total(reply.usage) == counted


def test_first_request_writes_cache_up_to_last_breakpoint(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("hi there")])
    system_only = client.messages.count_tokens(model=MODEL, system=CACHED_SYSTEM, messages=[user("x")]).input_tokens
    assert reply.usage.cache_read_input_tokens == 0
    assert reply.usage.cache_creation_input_tokens > 0
    assert reply.usage.cache_creation_input_tokens < system_only  # the message after the breakpoint is plain input
    assert reply.usage.input_tokens > 0
    assert reply.usage.cache_creation.ephemeral_5m_input_tokens == reply.usage.cache_creation_input_tokens


def test_cache_read_after_identical_prefix(client: anthropic.Anthropic) -> None:
    first = client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("one")])
    second = client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("two")])
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens > 0
    assert second.usage.cache_creation_input_tokens == 0


def test_growing_conversation_reads_previous_breakpoint_and_writes_the_rest(client: anthropic.Anthropic) -> None:
    history = _conversation(2)
    first = client.messages.create(model=MODEL, max_tokens=500, messages=_with_breakpoint_on_last(history))
    grown = [*history, {"role": "assistant", "content": "fine"}, user("and one more")]
    second = client.messages.create(model=MODEL, max_tokens=500, messages=_with_breakpoint_on_last(grown))
    assert second.usage.cache_read_input_tokens == _total(first.usage)
    assert second.usage.cache_creation_input_tokens == _total(second.usage) - _total(first.usage)
    assert second.usage.input_tokens == 0


def test_no_breakpoint_means_no_caching(client: anthropic.Anthropic) -> None:
    for _ in range(2):
        reply = client.messages.create(model=MODEL, max_tokens=500, system=LONG_SYSTEM, messages=[user("hi")])
        assert reply.usage.cache_read_input_tokens == reply.usage.cache_creation_input_tokens == 0


def test_changed_prefix_misses_cache(client: anthropic.Anthropic) -> None:
    client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("one")])
    changed = [{**CACHED_SYSTEM[0], "text": LONG_SYSTEM + "One more rule."}]
    reply = client.messages.create(model=MODEL, max_tokens=500, system=changed, messages=[user("one")])
    assert reply.usage.cache_read_input_tokens == 0
    assert reply.usage.cache_creation_input_tokens > 0


def test_cache_expires_after_five_minutes(client: anthropic.Anthropic, clock: FakeClock) -> None:
    client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("one")])
    clock.advance(5 * 60 + 1)
    reply = client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("two")])
    assert reply.usage.cache_read_input_tokens == 0
    assert reply.usage.cache_creation_input_tokens > 0


def test_cache_read_refreshes_lifetime(client: anthropic.Anthropic, clock: FakeClock) -> None:
    client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("one")])
    clock.advance(4 * 60)
    client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("two")])
    clock.advance(4 * 60)  # 8 minutes after writing, 4 after the last read
    reply = client.messages.create(model=MODEL, max_tokens=500, system=CACHED_SYSTEM, messages=[user("three")])
    assert reply.usage.cache_read_input_tokens > 0


def test_one_hour_ttl_survives_past_five_minutes(client: anthropic.Anthropic, clock: FakeClock) -> None:
    system = [{**CACHED_SYSTEM[0], "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    first = client.messages.create(model=MODEL, max_tokens=500, system=system, messages=[user("one")])
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == first.usage.cache_creation_input_tokens
    clock.advance(30 * 60)
    second = client.messages.create(model=MODEL, max_tokens=500, system=system, messages=[user("two")])
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    clock.advance(61 * 60)
    third = client.messages.create(model=MODEL, max_tokens=500, system=system, messages=[user("three")])
    assert third.usage.cache_read_input_tokens == 0


def test_cache_control_on_tool_definition_caches_tools(client: anthropic.Anthropic) -> None:
    tool = {**LONG_TOOL, "cache_control": {"type": "ephemeral"}}
    first = client.messages.create(model=MODEL, max_tokens=500, tools=[tool], messages=[user("one")])
    second = client.messages.create(model=MODEL, max_tokens=500, tools=[tool], messages=[user("two")])
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens > 0


def test_streamed_usage_matches_plain_usage(api: OfflineAPI, client: anthropic.Anthropic, clock: FakeClock) -> None:
    request = {"model": MODEL, "max_tokens": 500, "system": CACHED_SYSTEM, "messages": [user("same")]}
    plain = client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    assert streamed.usage.cache_read_input_tokens == plain.usage.cache_creation_input_tokens
    assert _total(streamed.usage) == _total(plain.usage)
    assert streamed.usage.output_tokens == plain.usage.output_tokens > 0
