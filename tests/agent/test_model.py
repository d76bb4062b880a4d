"""AnthropicModel (agent/model.py) on the real SDK against the offline Messages-API server: counts, limits, faults."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from ctx_magic.agent.api_errors import map_error
from ctx_magic.agent.catalog import FALLBACK_LIMITS, table_limits
from ctx_magic.agent.model import (
    BINDING_BETA,
    STREAM_BACKOFF_SECONDS,
    AnthropicModel,
    ModelRequest,
    stream_reply,
)
from ctx_magic.agent.request import build_request
from ctx_magic.agent.tools import PYTHON_TOOL
from ctx_magic.errors import (
    AuthenticationFailed,
    ModelError,
    NetworkError,
    Overloaded,
    PromptTooLong,
    RateLimited,
    RequestTooLarge,
    ServerError,
    StreamDropped,
    StreamOverloaded,
    ThinkingRefused,
    UnknownModel,
)
from ctx_magic.messages import Message, text_block, user_text
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.settings import ModelLimits, Settings

WINDOW = 20_000  # small, so a prompt-too-long is cheap to reach
MAX_OUTPUT = 8_192
MODEL = "claude-offline-test"
SYSTEM = "You are a careful data analyst working in a Jupyter notebook. " * 40
LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * 2_500  # about 25,000 tokens


@pytest.fixture
def api() -> OfflineAPI:
    return OfflineAPI(OfflineConfig(window=WINDOW, max_output=MAX_OUTPUT))


@pytest.fixture
def url(api: OfflineAPI) -> Iterator[str]:
    with serve_in_thread(api) as (served, _stop):
        yield served


def sdk(url: str, *, retries: int = 0, key: str = "k") -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=url, max_retries=retries)


@pytest.fixture
def model(url: str) -> AnthropicModel:
    return AnthropicModel(sdk(url), name=MODEL)


def request(*messages: Message, tools: list[dict[str, Any]] | None = None, ttl: str | None = "5m") -> ModelRequest:
    return build_request(messages, system=SYSTEM, tools=tools or [], max_tokens=1_000, cache_ttl=ttl)


def text_of(content: tuple[dict[str, Any], ...]) -> str:
    return "".join(b["text"] for b in content if b["type"] == "text")


def assert_one_clear_line(error: BaseException) -> None:
    message = str(error)
    assert message and "\n" not in message
    assert "Traceback" not in message and 'File "' not in message


# --- streaming ------------------------------------------------------------------------------


def test_stream_returns_the_text_reply(model: AnthropicModel, api: OfflineAPI) -> None:
    reply = model.stream(request(user_text("How many rows does the frame have?")))
    assert "How many rows does the frame have?" in text_of(reply.content)
    assert reply.stop_reason == "end_turn"
    assert reply.api_id.startswith("msg_") and reply.model == MODEL
    assert reply.tool_uses == []
    assert api.requests[-1].body["stream"] is True


def test_on_text_receives_the_streamed_text_pieces(model: AnthropicModel) -> None:
    pieces: list[str] = []
    reply = model.stream(request(user_text("describe " * 200)), on_text=pieces.append)
    assert len(pieces) > 1
    assert "".join(pieces) == text_of(reply.content)


def test_stream_returns_tool_use_blocks_for_the_python_tool(model: AnthropicModel) -> None:
    ask = user_text("Please run this:\n```python\nprint(6 * 7)\n```\nand this\n```python\nx = 1\n```\n")
    reply = model.stream(request(ask, tools=[PYTHON_TOOL]))
    assert reply.stop_reason == "tool_use"
    uses = reply.tool_uses
    assert [(u["name"], u["input"]) for u in uses] == [
        ("python", {"code": "print(6 * 7)"}),
        ("python", {"code": "x = 1"}),
    ]
    assert all(u["id"].startswith("toolu_") and set(u) == {"type", "id", "name", "input"} for u in uses)


def test_reply_blocks_carry_no_null_fields(model: AnthropicModel) -> None:
    reply = model.stream(request(user_text("hello")))
    assert all(value is not None for block in reply.content for value in block.values())


def test_without_tools_offered_no_tool_call_comes_back(model: AnthropicModel, api: OfflineAPI) -> None:
    reply = model.stream(request(user_text("```python\nprint(1)\n```")))
    assert reply.tool_uses == []
    assert "tools" not in api.requests[-1].body


def test_usage_reports_cache_write_then_cache_read(model: AnthropicModel) -> None:
    ask = request(user_text("summarize the dataset " * 400))  # over the model's minimum cacheable length
    first = model.stream(ask).usage
    second = model.stream(ask).usage
    assert first.cache_creation_input_tokens > 0 and first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert second.prompt_tokens == first.prompt_tokens
    assert first.output_tokens > 0


def test_a_grown_conversation_reads_its_earlier_prefix_from_cache(model: AnthropicModel) -> None:
    opening = user_text("load the csv and look at it " * 200)  # over the minimum cacheable length
    first = model.stream(request(opening))
    answer = Message("assistant", first.content, api_id=first.api_id)
    later = model.stream(request(opening, answer, user_text("now plot it"))).usage
    assert later.cache_read_input_tokens == first.usage.prompt_tokens
    assert later.cache_creation_input_tokens > 0
    assert later.prompt_tokens > first.usage.prompt_tokens


def test_usage_without_breakpoints_has_no_cache_figures(model: AnthropicModel) -> None:
    ask = request(user_text("no caching here"), ttl=None)
    model.stream(ask)
    usage = model.stream(ask).usage
    assert usage.cache_creation_input_tokens == 0 and usage.cache_read_input_tokens == 0
    assert usage.input_tokens > 0


# --- count_tokens ---------------------------------------------------------------------------


def test_count_tokens_equals_the_servers_count(model: AnthropicModel, api: OfflineAPI) -> None:
    ask = request(user_text("count me " * 300), tools=[PYTHON_TOOL])
    counted = model.count_tokens(ask)
    record = api.requests[-1]
    assert record.path == "/v1/messages/count_tokens"
    assert counted == record.input_tokens and counted > 300
    assert "max_tokens" not in record.body
    assert model.stream(ask).usage.prompt_tokens == counted


def test_count_tokens_of_an_unknown_model_is_unknown_model(url: str) -> None:
    with pytest.raises(UnknownModel, match="'gpt-4o'"):
        AnthropicModel(sdk(url), name="gpt-4o").count_tokens(request(user_text("hi")))


def test_count_tokens_with_a_rejected_key_is_authentication_failed(url: str) -> None:
    with pytest.raises(AuthenticationFailed):
        AnthropicModel(sdk(url, key="invalid"), name=MODEL).count_tokens(request(user_text("hi")))


# --- limits ---------------------------------------------------------------------------------


def test_limits_come_from_the_models_api(model: AnthropicModel, api: OfflineAPI) -> None:
    assert model.limits() == ModelLimits(WINDOW, MAX_OUTPUT, "models-api")
    assert api.requests[-1].path == f"/v1/models/{MODEL}"


def test_limits_are_asked_once(model: AnthropicModel, api: OfflineAPI) -> None:
    model.limits()
    model.limits()
    assert sum(1 for r in api.requests if r.path.startswith("/v1/models")) == 1


def test_a_configured_window_wins_over_the_models_api(model: AnthropicModel) -> None:
    window = Settings(context_window=50_000).resolve(model.limits())
    assert (window.tokens, window.reply_cap, window.source) == (50_000, MAX_OUTPUT, "config")


def test_the_reply_cap_is_the_setting_capped_by_the_model_and_a_quarter_of_the_window(model: AnthropicModel) -> None:
    assert Settings(context_window=10_000).resolve(model.limits()).reply_cap == 2_500
    assert Settings(max_output_tokens=1_000).resolve(model.limits()).reply_cap == 1_000
    assert Settings(context_window=100_000).resolve(model.limits()).reply_cap == MAX_OUTPUT
    assert Settings().resolve(model.limits()).source == "models-api"


def test_limits_fall_back_to_the_table_when_the_server_cannot_be_reached() -> None:
    with serve_in_thread(OfflineAPI()) as (gone, stop):
        stop()
        limits = AnthropicModel(sdk(gone), name="claude-3-5-haiku-20241022").limits()
    assert (limits.window, limits.max_output, limits.source) == (200_000, 8_192, "table")
    assert limits.thinking_types == ()  # Haiku 3.5 does not think


def test_unknown_model_limits_raise_unknown_model_naming_it(url: str) -> None:
    with pytest.raises(UnknownModel) as caught:
        AnthropicModel(sdk(url), name="gpt-4o").limits()
    assert "'gpt-4o'" in str(caught.value)
    assert_one_clear_line(caught.value)


def test_unknown_model_stream_raises_unknown_model_naming_it(url: str) -> None:
    with pytest.raises(UnknownModel) as caught:
        AnthropicModel(sdk(url), name="llama-3").stream(request(user_text("hi")))
    assert "'llama-3'" in str(caught.value)
    assert_one_clear_line(caught.value)


def test_limits_with_a_rejected_key_are_authentication_failed(url: str) -> None:
    with pytest.raises(AuthenticationFailed) as caught:
        AnthropicModel(sdk(url, key="invalid"), name=MODEL).limits()
    assert "ANTHROPIC_API_KEY" in str(caught.value)


# --- faults map to our errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error_type", "words"),
    [
        ("429", RateLimited, "429"),
        ("500", ServerError, "500"),
        ("529", Overloaded, "overloaded"),
        ("401", AuthenticationFailed, "ANTHROPIC_API_KEY"),
        ("413", RequestTooLarge, "413"),
        ("ptl", PromptTooLong, "too long"),
    ],
)
def test_each_fault_maps_to_its_error_with_one_clear_line(
    model: AnthropicModel, api: OfflineAPI, fault: str, error_type: type[ModelError], words: str
) -> None:
    api.inject(fault)
    with pytest.raises(error_type) as caught:
        model.stream(request(user_text("hello")))
    assert type(caught.value) is error_type
    assert words in str(caught.value)
    assert ".." not in str(caught.value)
    assert_one_clear_line(caught.value)
    assert model.stream(request(user_text("hello"))).content  # one fault, one call


def test_injected_prompt_too_long_parses_actual_and_limit(model: AnthropicModel, api: OfflineAPI) -> None:
    api.inject("ptl")
    with pytest.raises(PromptTooLong) as caught:
        model.stream(request(user_text("hello")))
    assert (caught.value.actual, caught.value.limit, caught.value.gap) == (WINDOW + 1, WINDOW, 1)


def test_real_prompt_too_long_reports_the_gap(model: AnthropicModel) -> None:
    ask = request(user_text(LONG_TEXT))
    counted = model.count_tokens(ask)
    assert counted > WINDOW
    with pytest.raises(PromptTooLong) as caught:
        model.stream(ask)
    assert (caught.value.actual, caught.value.limit) == (counted, WINDOW)
    assert caught.value.gap == counted - WINDOW
    assert str(caught.value) == f"The prompt is too long: {counted:,} tokens > {WINDOW:,} maximum."


def test_a_prompt_that_leaves_no_room_for_the_reply_is_refused_as_too_long(model: AnthropicModel) -> None:
    sentence = "The quick brown fox jumps over the lazy dog. "
    low, high = 1, 4_000  # repeats of the sentence: find a prompt that fits alone, not with the reply
    while high - low > 1:
        middle = (low + high) // 2
        fits = model.count_tokens(request(user_text(sentence * middle))) <= WINDOW - MAX_OUTPUT // 2
        low, high = (middle, high) if fits else (low, middle)
    ask = request(user_text(sentence * low))
    counted = model.count_tokens(ask)
    assert counted <= WINDOW < counted + MAX_OUTPUT
    tight = ModelRequest(system=ask.system, tools=ask.tools, messages=ask.messages, max_tokens=MAX_OUTPUT)
    with pytest.raises(PromptTooLong) as caught:  # the API's rule: input + max_tokens within the window
        model.stream(tight)
    assert (caught.value.actual, caught.value.limit) == (counted + MAX_OUTPUT, WINDOW)
    assert str(caught.value) == (f"The prompt and the room asked for the reply exceed the window: {counted:,} + "
                                 f"{MAX_OUTPUT:,} tokens > {WINDOW:,}.")


def test_dropped_stream_is_a_network_error(model: AnthropicModel, api: OfflineAPI) -> None:
    api.inject("drop")
    pieces: list[str] = []
    with pytest.raises(NetworkError) as caught:
        model.stream(request(user_text("stream " * 300)), on_text=pieces.append)
    assert_one_clear_line(caught.value)


@pytest.mark.parametrize(("fault", "error_type", "words"), [
    ("overloaded_midstream", StreamOverloaded, "mid-stream (overloaded_error: Overloaded)"),
    ("early_close", StreamDropped, "ended before the reply was complete"),
    ("early_close_tool", StreamDropped, "ended before the reply was complete"),
    ("html_body", StreamDropped, "answered with text/html instead of a reply stream (HTTP 200)"),
])
def test_a_stream_that_never_reaches_message_stop_is_dropped_never_a_whole_reply(
    model: AnthropicModel, api: OfflineAPI, fault: str, error_type: type[StreamDropped], words: str
) -> None:
    api.inject(fault)
    tools = [PYTHON_TOOL] if fault == "early_close_tool" else None
    ask = request(user_text("run it\n```python\nprint(1)\n```"), tools=tools)
    with pytest.raises(StreamDropped) as caught:
        model.stream(ask)
    assert type(caught.value) is error_type and words in str(caught.value)
    assert "AssertionError" not in str(caught.value)
    assert_one_clear_line(caught.value)
    assert model.stream(ask).stop_reason in ("end_turn", "tool_use")  # one fault, one call


@pytest.mark.parametrize("fault", ["empty_reply", "whitespace_reply"])
def test_an_empty_or_whitespace_reply_comes_back_with_no_blocks(model: AnthropicModel, api: OfflineAPI,
                                                                 fault: str) -> None:
    api.inject(fault)
    assert model.stream(request(user_text("hello"))).content == ()


def test_a_broken_stream_is_asked_again_and_an_overload_waits_first(model: AnthropicModel, api: OfflineAPI) -> None:
    api.inject("overloaded_midstream", "drop")
    waits: list[float] = []
    heard: list[tuple[int, int]] = []
    reply = stream_reply(model, request(user_text("stream " * 300)), sleep=waits.append,
                         restarted=lambda attempt, attempts, error: heard.append((attempt, attempts)))
    assert text_of(reply.content)
    assert heard == [(2, 3), (3, 3)]
    assert waits == [STREAM_BACKOFF_SECONDS]  # after the overload only; a dropped connection is asked at once


def test_a_connection_reset_mid_reply_is_asked_again_at_once(model: AnthropicModel, api: OfflineAPI) -> None:
    """A TCP reset after the stream began is a broken reply, whatever exception the SDK reports it as."""
    api.inject("reset")
    waits: list[float] = []
    heard: list[str] = []
    reply = stream_reply(model, request(user_text("stream " * 300)), sleep=waits.append,
                         restarted=lambda attempt, attempts, error: heard.append(str(error)))
    assert text_of(reply.content) and reply.stop_reason == "end_turn"
    assert len(heard) == 1 and "reset by peer" in heard[0] and waits == []
    assert [(r.fault, r.status) for r in api.requests] == [("reset", 200), (None, 200)]


def test_three_resets_in_a_row_are_a_broken_reply_and_the_next_call_works(model: AnthropicModel,
                                                                         api: OfflineAPI) -> None:
    api.inject("reset", "reset", "reset")
    with pytest.raises(StreamDropped, match="broke while the reply was streaming") as caught:
        stream_reply(model, request(user_text("stream " * 300)), sleep=lambda seconds: None)
    assert_one_clear_line(caught.value)
    assert api.model_calls() == 3
    assert text_of(stream_reply(model, request(user_text("again"))).content)


def test_a_third_broken_stream_is_the_error(model: AnthropicModel, api: OfflineAPI) -> None:
    api.inject("early_close", "early_close", "early_close")
    with pytest.raises(StreamDropped):
        stream_reply(model, request(user_text("hello")), sleep=lambda seconds: None)
    assert api.model_calls() == 3


def test_an_error_event_the_request_caused_is_not_asked_again() -> None:
    error = status_error(200, "messages: bad", body={"type": "error", "error": {"type": "invalid_request_error",
                                                                               "message": "messages: bad"}})
    mapped = map_error(error)
    assert not isinstance(mapped, StreamDropped)
    assert str(mapped) == "The API stopped the reply with an error (invalid_request_error): messages: bad."


def test_single_529_is_retried_transparently(url: str, api: OfflineAPI) -> None:
    model = AnthropicModel(sdk(url, retries=2), name=MODEL)
    api.inject("529")
    reply = model.stream(request(user_text("hello")))
    assert text_of(reply.content)
    assert [r.status for r in api.requests if r.path == "/v1/messages"] == [529, 200]


def test_overload_after_every_retry_is_overloaded(url: str, api: OfflineAPI) -> None:
    model = AnthropicModel(sdk(url, retries=2), name=MODEL)
    api.inject("529", "529", "529")
    with pytest.raises(Overloaded):
        model.stream(request(user_text("hello")))
    assert api.model_calls() == 3


def test_mapped_errors_keep_the_sdk_error_as_cause(model: AnthropicModel, api: OfflineAPI) -> None:
    api.inject("429")
    with pytest.raises(RateLimited) as caught:
        model.stream(request(user_text("hello")))
    assert isinstance(caught.value.__cause__, anthropic.RateLimitError)


# --- map_error on synthetic errors ----------------------------------------------------------


def status_error(status: int, message: str, *, body: object = "api") -> anthropic.APIStatusError:
    http_request = httpx2.Request("POST", "https://api.example.invalid/v1/messages")
    response = httpx2.Response(status, request=http_request)
    if body == "api":
        body = {"type": "error", "error": {"type": "some_error", "message": message}}
    return anthropic.APIStatusError(message, response=response, body=body)


@pytest.mark.parametrize("status", [400, 413])
def test_map_error_prompt_too_long_with_thousands_separators(status: int) -> None:
    error = map_error(status_error(status, "prompt is too long: 250,000 tokens > 200,000 maximum"))
    assert isinstance(error, PromptTooLong)
    assert (error.actual, error.limit, error.gap) == (250_000, 200_000, 50_000)


def test_map_error_prompt_too_long_without_numbers_has_no_gap() -> None:
    error = map_error(status_error(400, "Prompt is too long"))
    assert isinstance(error, PromptTooLong) and error.gap is None


@pytest.mark.parametrize(
    ("status", "message", "error_type"),
    [
        (413, "Request exceeds the maximum allowed number of bytes.", RequestTooLarge),
        (401, "invalid x-api-key", AuthenticationFailed),
        (403, "not allowed for this organization", AuthenticationFailed),
        (429, "slow down", RateLimited),
        (529, "Overloaded", Overloaded),
        (500, "boom", ServerError),
        (503, "unavailable", ServerError),
    ],
)
def test_map_error_by_status(status: int, message: str, error_type: type[ModelError]) -> None:
    error = map_error(status_error(status, message))
    assert type(error) is error_type
    assert_one_clear_line(error)


def test_map_error_403_keeps_the_apis_reason() -> None:
    assert "not allowed for this organization" in str(map_error(status_error(403, "not allowed for this organization")))


def test_map_error_404_is_unknown_model_only_when_a_model_is_named() -> None:
    with_model = map_error(status_error(404, "model: claude-nope"), "claude-nope")
    without = map_error(status_error(404, "no such route"))
    assert isinstance(with_model, UnknownModel) and "'claude-nope'" in str(with_model)
    assert type(without) is ModelError and "404" in str(without)


def test_map_error_other_client_error_is_a_plain_model_error_with_the_reason() -> None:
    error = map_error(status_error(400, "messages: roles must alternate"))
    assert type(error) is ModelError
    assert str(error) == "The API refused the request (400): messages: roles must alternate"


def test_map_error_without_an_error_body_uses_the_exception_message() -> None:
    error = map_error(status_error(500, "Error code: 500 - upstream", body=None))
    assert isinstance(error, ServerError) and "upstream" in str(error)


def test_map_error_timeout_and_connection_errors_are_network_errors() -> None:
    http_request = httpx2.Request("POST", "https://api.example.invalid/v1/messages")
    timeout = map_error(anthropic.APITimeoutError(http_request))
    refused = map_error(anthropic.APIConnectionError(request=http_request))
    assert isinstance(timeout, NetworkError) and "timeout" in str(timeout)
    assert isinstance(refused, NetworkError) and "Could not reach the API" in str(refused)


def test_map_error_transport_and_os_errors_are_network_errors_not_broken_replies() -> None:
    """Outside a stream that began, a transport error says nothing of a reply (the stream itself
    decides what broke off, by what it received)."""
    broken = map_error(httpx2.RemoteProtocolError("peer closed connection"))
    reset = map_error(ConnectionResetError(104, "Connection reset by peer"))
    assert isinstance(broken, NetworkError) and "peer closed connection" in str(broken)
    assert isinstance(reset, NetworkError)
    assert not isinstance(broken, StreamDropped) and not isinstance(reset, StreamDropped)


def test_map_error_anything_else_is_a_model_error_naming_its_type() -> None:
    error = map_error(ValueError("weird payload"))
    assert type(error) is ModelError
    assert str(error) == "The model call failed: ValueError: weird payload"


def test_map_error_passes_our_own_errors_through() -> None:
    ours = Overloaded("already mapped")
    assert map_error(ours) is ours



# --- table_limits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "window", "max_output"),
    [
        ("claude-opus-4-1-20250805", 200_000, 32_000),
        ("claude-opus-4-20250514", 200_000, 32_000),
        ("claude-sonnet-4-5", 200_000, 64_000),
        ("claude-sonnet-4-20250514", 200_000, 64_000),
        ("claude-haiku-4-5", 200_000, 64_000),
        ("claude-3-7-sonnet-latest", 200_000, 64_000),
        ("claude-3-5-haiku-20241022", 200_000, 8_192),
        ("claude-3-5-sonnet-20241022", 200_000, 8_192),
    ],
)
def test_table_limits_by_model_prefix(name: str, window: int, max_output: int) -> None:
    limits = table_limits(name)
    assert (limits.window, limits.max_output, limits.source) == (window, max_output, "table")


@pytest.mark.parametrize("name", ["claude-future-9", "claude-2.1", "gpt-4o", ""])
def test_table_limits_fall_back_for_unknown_models(name: str) -> None:
    assert table_limits(name) == ModelLimits(*FALLBACK_LIMITS, "table")


# --- ModelRequest ---------------------------------------------------------------------------


def test_request_params_leave_out_empty_tools_and_missing_tool_choice() -> None:
    ask = ModelRequest(system=[text_block("s")], tools=[], messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert ask.params("claude-x") == {
        "model": "claude-x",
        "max_tokens": 5,
        "system": [text_block("s")],
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_request_params_carry_tools_and_tool_choice() -> None:
    ask = ModelRequest(
        system=[], tools=[PYTHON_TOOL], messages=[], max_tokens=5, tool_choice={"type": "none"}
    )
    params = ask.params("claude-x")
    assert params["tools"] == [PYTHON_TOOL] and params["tool_choice"] == {"type": "none"}


def test_tool_choice_none_is_honored_by_the_server(model: AnthropicModel) -> None:
    ask = request(user_text("```python\nprint(1)\n```"), tools=[PYTHON_TOOL])
    forbidden = ModelRequest(ask.system, ask.tools, ask.messages, ask.max_tokens, tool_choice={"type": "none"})
    assert model.stream(forbidden).tool_uses == []


# --- the prefix check of the models with preserved thinking ----------------------------------


def _edited_history(model: AnthropicModel) -> ModelRequest:
    """A second request whose first message changed after the reply to it was written."""
    first = model.stream(request(user_text("What is in the frame?")))
    assert first.content[0]["type"] == "thinking"  # the model thinks by default
    return request(user_text("What is in the frame? (edited)"), Message("assistant", first.content),
                   user_text("And now?"))


def test_a_refused_prefix_is_thinking_refused_naming_the_block(url: str) -> None:
    model = AnthropicModel(sdk(url), name="claude-sonnet-5-5")
    with pytest.raises(ThinkingRefused) as caught:
        model.stream(_edited_history(model))
    assert (caught.value.message_index, caught.value.block_index) == (1, 0)
    assert_one_clear_line(caught.value)


def test_asked_to_drop_failing_thinking_the_api_answers_and_lists_it(url: str, api: OfflineAPI) -> None:
    model = AnthropicModel(sdk(url), name="claude-sonnet-5-5")
    reply = model.stream(_edited_history(model).dropping_invalid_thinking())
    assert text_of(reply.content) and reply.invalid_thinking == ("messages.1.content.0",)
    assert api.requests[-1].betas == (BINDING_BETA,)
    assert api.requests[-1].body["thinking"] == {"type": "adaptive",
                                                 "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
