"""The prompt cache's documented rules, with figures worked out from the counter's parts.

Every text here is `words(n)`, counted by `count(n)` in the stand-in's unit. A message after one
of the other role also counts its header (`HEADER`); the request's frame (and with tools the
hidden tool-use prompt) counts with its first block. The model "claude-offline-test" caches
prefixes of at least 1,024 tokens.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from ctx_magic.context import api_count, model_families
from ctx_magic.offline import OfflineAPI, OfflineConfig, offline_client
from ctx_magic.offline.cache import minimum_cacheable_tokens
from ctx_magic.offline.counting import input_tokens

from .offline_support import MAX_OUTPUT, MODEL, PYTHON_TOOL, FakeClock, marked, user, words

FAMILY = model_families.family_of(MODEL)
HEADER = api_count.ROLE_CHANGE  # a message after one of the other role
FRAME = FAMILY.frame  # the request's own frame: counted with its first block


def count(n: int, word: str = "alpha") -> int:
    """The tokens of `words(n, word)` in the stand-in's unit."""
    return model_families.text_tokens(words(n, word), FAMILY)


SYSTEM_WORDS = 1_200
SYSTEM = count(SYSTEM_WORDS, "gamma")
TOOL = {**PYTHON_TOOL, "description": words(1_100, "beta")}  # over the minimum on its own
# The tools come first: the request's frame and the hidden tool-use prompt count with them.
TOOL_TOKENS = api_count.tool_tokens(TOOL, FAMILY) + api_count.request_overhead({"model": MODEL, "tools": [TOOL]})
PYTHON_TOOL_TOKENS = api_count.tool_tokens(PYTHON_TOOL, FAMILY) + api_count.request_overhead(
    {"model": MODEL, "tools": [PYTHON_TOOL]})
MESSAGES = count(100) + (HEADER + count(50, "delta")) + (HEADER + count(80, "omega"))  # the messages of _chat()


def _system(ttl: str | None = "5m", n: int = SYSTEM_WORDS) -> list[dict[str, Any]]:
    return [marked(words(n, "gamma"), ttl) if ttl else {"type": "text", "text": words(n, "gamma")}]


def _chat(last_ttl: str = "5m") -> list[dict[str, Any]]:
    return [user(words(100)), {"role": "assistant", "content": words(50, "delta")},
            {"role": "user", "content": [marked(words(80, "omega"), last_ttl)]}]


def _figures(reply: Any) -> tuple[int, int, int]:
    """(read, written, plain input) of a reply's usage."""
    usage = reply.usage
    return usage.cache_read_input_tokens, usage.cache_creation_input_tokens, usage.input_tokens


def _ask(client: anthropic.Anthropic, **request: Any) -> Any:
    return client.messages.create(model=request.pop("model", MODEL), max_tokens=2_000, **request)


def test_the_hand_counts_hold() -> None:
    body = {"tools": [TOOL], "system": _system(), "messages": _chat()}
    assert input_tokens(body) == TOOL_TOKENS + SYSTEM + MESSAGES
    assert input_tokens({"system": _system(), "messages": _chat()}) == FRAME + SYSTEM + MESSAGES
    assert TOOL_TOKENS > 1_024


# --- invalidation ---


def test_a_tool_choice_change_reads_tools_and_system_and_writes_the_messages_again(
        client: anthropic.Anthropic) -> None:
    request = {"tools": [TOOL], "system": _system(), "messages": _chat()}
    assert _figures(_ask(client, **request)) == (0, TOOL_TOKENS + SYSTEM + MESSAGES, 0)
    assert _figures(_ask(client, tool_choice={"type": "none"}, **request)) == (TOOL_TOKENS + SYSTEM, MESSAGES, 0)
    assert _figures(_ask(client, tool_choice={"type": "none"}, **request)) == (TOOL_TOKENS + SYSTEM + MESSAGES, 0, 0)
    # without tool_choice (auto) again: the first request's message prefixes are still there
    assert _figures(_ask(client, tool_choice={"type": "auto"}, **request)) == (TOOL_TOKENS + SYSTEM + MESSAGES, 0, 0)


def test_a_thinking_change_reads_tools_and_system_and_writes_the_messages_again(
        client: anthropic.Anthropic) -> None:
    request = {"tools": [TOOL], "system": _system(), "messages": _chat()}
    _ask(client, thinking={"type": "enabled", "budget_tokens": 1_024}, **request)
    changed = _ask(client, thinking={"type": "enabled", "budget_tokens": 1_500}, **request)
    thinking = api_count.THINKING_PROMPT["enabled"]  # thinking's own instructions, in the request's frame
    assert _figures(changed) == (TOOL_TOKENS + thinking + SYSTEM, MESSAGES, 0)
    assert _figures(_ask(client, **request)) == (TOOL_TOKENS + SYSTEM, MESSAGES, 0)  # thinking off again


def test_a_tools_change_misses_everything(client: anthropic.Anthropic) -> None:
    request = {"system": _system(), "messages": _chat()}
    _ask(client, tools=[{**TOOL, "cache_control": {"type": "ephemeral"}}], **request)
    renamed = {**TOOL, "name": "python3", "cache_control": {"type": "ephemeral"}}
    reply = _ask(client, tools=[renamed], **request)
    renamed_tokens = api_count.tool_tokens(renamed, FAMILY) + TOOL_TOKENS - api_count.tool_tokens(TOOL, FAMILY)
    assert _figures(reply) == (0, renamed_tokens + SYSTEM + MESSAGES, 0)


def test_a_system_change_keeps_the_tools_and_writes_the_rest(client: anthropic.Anthropic) -> None:
    tools = [{**TOOL, "cache_control": {"type": "ephemeral"}}]
    _ask(client, tools=tools, system=_system(), messages=_chat())
    reply = _ask(client, tools=tools, system=_system(n=SYSTEM_WORDS + 7), messages=_chat())
    assert _figures(reply) == (TOOL_TOKENS, count(SYSTEM_WORDS + 7, "gamma") + MESSAGES, 0)


def test_adding_an_image_writes_every_message_block_again(client: anthropic.Anthropic) -> None:
    first = [{"role": "user", "content": [marked(words(100))]}, *_chat()[1:]]
    _ask(client, system=_system(), messages=first)
    assert _figures(_ask(client, system=_system(), messages=first))[0] == FRAME + SYSTEM + MESSAGES  # all read
    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                       "data": "iVBORw0KGgoAAAAAAAAAAAAAAAAA"}}
    grown = [*first, {"role": "assistant", "content": "Send the plot."},
             {"role": "user", "content": [png, marked(words(10))]}]
    total = input_tokens({"system": _system(), "messages": grown})
    # the message 0 breakpoint would read its own prefix but for the image: only the system is read
    assert _figures(_ask(client, system=_system(), messages=grown)) == (FRAME + SYSTEM, total - FRAME - SYSTEM, 0)


# --- the 20-block lookback ---

SEED = 1_100  # the first user message: over the minimum by itself


def _cells(count: int, trailing_text: bool, extra_mark_on_first_cell: bool = False) -> list[dict[str, Any]]:
    """The seed message, then `count` notebook cells (a tool_use + tool_result pair: 2 blocks
    each), the breakpoint on the last block (the last result, or a question after it)."""
    history: list[dict[str, Any]] = [user(words(SEED))]
    for n in range(1, count + 1):
        call: dict[str, Any] = {"type": "tool_use", "id": f"cell_{n}", "name": "python", "input": {"code": f"x = {n}"}}
        if n == 1 and extra_mark_on_first_cell:
            call["cache_control"] = {"type": "ephemeral"}
        history += [{"role": "assistant", "content": [call]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"cell_{n}",
                                                  "content": str(n)}]}]
    last = history[-1]["content"]
    if trailing_text:
        last.append(marked(words(5)))
    else:
        last[-1]["cache_control"] = {"type": "ephemeral"}
    return history


@pytest.mark.parametrize(
    ("cells", "trailing_text", "blocks_back", "reads"),
    [(10, False, 20, True), (10, True, 21, False), (12, True, 25, False)],
)
def test_a_breakpoint_finds_a_cached_prefix_only_up_to_20_blocks_back(
        client: anthropic.Anthropic, cells: int, trailing_text: bool, blocks_back: int, reads: bool) -> None:
    seeded = _ask(client, tools=[PYTHON_TOOL], messages=[{"role": "user", "content": [marked(words(SEED))]}])
    assert _figures(seeded) == (0, PYTHON_TOOL_TOKENS + count(SEED), 0)
    history = _cells(cells, trailing_text)
    assert sum(len(m["content"]) for m in history[1:]) == blocks_back
    total = input_tokens({"tools": [PYTHON_TOOL], "messages": history})
    read = PYTHON_TOOL_TOKENS + count(SEED) if reads else 0
    assert _figures(_ask(client, tools=[PYTHON_TOOL], messages=history)) == (read, total - read, 0)


def test_a_second_breakpoint_within_reach_keeps_the_cached_prefix(client: anthropic.Anthropic) -> None:
    _ask(client, tools=[PYTHON_TOOL], messages=[{"role": "user", "content": [marked(words(SEED))]}])
    history = _cells(12, trailing_text=True, extra_mark_on_first_cell=True)
    read = PYTHON_TOOL_TOKENS + count(SEED)
    total = input_tokens({"tools": [PYTHON_TOOL], "messages": history})
    assert _figures(_ask(client, tools=[PYTHON_TOOL], messages=history)) == (read, total - read, 0)


# --- lifetimes ---


def test_one_hour_and_five_minute_entries_expire_on_their_own_clocks(
        client: anthropic.Anthropic, clock: FakeClock) -> None:
    request = {"system": _system("1h"), "messages": _chat("5m")}
    first = _ask(client, **request)
    written = first.usage.cache_creation
    system = FRAME + SYSTEM  # the first block carries the request's frame
    assert (written.ephemeral_1h_input_tokens, written.ephemeral_5m_input_tokens) == (system, MESSAGES)
    clock.advance(60)
    assert _figures(_ask(client, **request)) == (system + MESSAGES, 0, 0)
    clock.advance(10 * 60)  # the 5-minute entries are gone, the 1-hour one lives
    later = _ask(client, **request)
    assert _figures(later) == (system, MESSAGES, 0)
    assert later.usage.cache_creation.ephemeral_5m_input_tokens == MESSAGES
    clock.advance(61 * 60)  # an hour after its last read: gone too
    gone = _ask(client, **request)
    assert _figures(gone) == (0, system + MESSAGES, 0)
    assert gone.usage.cache_creation.ephemeral_1h_input_tokens == system


def test_mixed_ttls_bill_1h_up_to_the_last_1h_breakpoint_and_5m_after_it(client: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": [marked(words(1_100), "1h")]}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [marked(words(300), "1h"), marked(words(80), "5m")]}]
    reply = _ask(client, messages=messages)
    ok = model_families.text_tokens("ok", FAMILY)
    up_to_last_1h = (FRAME + count(1_100)) + (HEADER + ok) + (HEADER + count(300))
    assert reply.usage.cache_creation.ephemeral_1h_input_tokens == up_to_last_1h
    assert reply.usage.cache_creation.ephemeral_5m_input_tokens == count(80)
    assert _figures(reply) == (0, up_to_last_1h + count(80), 0)


# --- the minimum cacheable length ---


def test_a_prefix_under_the_model_minimum_is_neither_written_nor_read(client: anthropic.Anthropic) -> None:
    request = {"system": _system(n=2_000), "messages": [user(words(10))]}
    claude_4 = model_families.family_of("claude-sonnet-4-6")
    system = claude_4.frame + model_families.text_tokens(words(2_000, "gamma"), claude_4)
    question = model_families.text_tokens(words(10), claude_4)
    assert system < 4_096
    for _ in range(2):  # Haiku 4.5 caches from 4,096 tokens
        assert _figures(_ask(client, model="claude-haiku-4-5", **request)) == (0, 0, system + question)
    assert _figures(_ask(client, model="claude-sonnet-4-6", **request)) == (0, system, question)
    assert _figures(_ask(client, model="claude-sonnet-4-6", **request)) == (system, 0, question)


def test_a_short_breakpoint_is_ignored_and_a_later_long_one_counts(client: anthropic.Anthropic) -> None:
    request = {"system": _system(n=300), "messages": [{"role": "user", "content": [marked(words(800))]}]}
    system = FRAME + count(300, "gamma")
    assert system < 1_024
    assert _figures(_ask(client, **request)) == (0, system + count(800), 0)
    changed = {"system": _system(n=300), "messages": [{"role": "user", "content": [marked(words(810))]}]}
    assert _figures(_ask(client, **changed)) == (0, system + count(810), 0)  # the short system was never stored


def test_the_minimum_is_configurable_for_tiny_test_prompts(clock: FakeClock) -> None:
    client = offline_client(OfflineAPI(OfflineConfig(max_output=MAX_OUTPUT, min_cacheable_tokens=0), clock=clock))
    request = {"system": _system(n=30), "messages": [user("hi")]}
    _ask(client, **request)
    assert _figures(_ask(client, **request))[0] == FRAME + count(30, "gamma")


@pytest.mark.parametrize(
    ("model", "minimum"),
    [("claude-sonnet-4-5-20250929", 1_024), ("claude-opus-4-1", 1_024), ("claude-opus-4-6", 4_096),
     ("claude-haiku-4-5-20251001", 4_096), ("claude-3-haiku-20240307", 2_048), ("claude-opus-5", 512),
     ("claude-sonnet-5-5", 1_024), ("claude-offline-test", 1_024)],
)
def test_minimum_cacheable_length_by_model(model: str, minimum: int) -> None:
    assert minimum_cacheable_tokens(model) == minimum


# --- the top-level breakpoint ---


def test_top_level_cache_control_marks_the_last_block(client: anthropic.Anthropic) -> None:
    request = {"system": _system(None), "messages": [user(words(100))], "extra_body": {
        "cache_control": {"type": "ephemeral"}}}
    whole = FRAME + SYSTEM + count(100)
    assert _figures(_ask(client, **request)) == (0, whole, 0)
    assert _figures(_ask(client, **request)) == (whole, 0, 0)
