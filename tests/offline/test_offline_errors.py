"""Errors and injected faults surface as the SDK's own exceptions, with the API's wording."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from ctx_magic.errors import PromptTooLong, is_prompt_too_long
from ctx_magic.offline import OfflineAPI, offline_client

from .offline_support import MODEL, WINDOW, refusal, text_of, user

LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * 2_500  # about 25,000 tokens


def _ask(client: anthropic.Anthropic, text: str = "hello") -> anthropic.types.Message:
    return client.messages.create(model=MODEL, max_tokens=200, messages=[user(text)])


def test_prompt_too_long_message_parses_to_numbers(sdk: anthropic.Anthropic) -> None:
    counted = sdk.messages.count_tokens(model=MODEL, messages=[user(LONG_TEXT)]).input_tokens
    with pytest.raises(anthropic.BadRequestError) as caught:
        _ask(sdk, LONG_TEXT)
    message = refusal(caught.value)
    assert message == f"prompt is too long: {counted} tokens > {WINDOW} maximum"
    assert caught.value.type == "invalid_request_error"
    assert is_prompt_too_long(caught.value.status_code, message)
    parsed = PromptTooLong.from_api_message(message)
    assert (parsed.actual, parsed.limit, parsed.gap) == (counted, WINDOW, counted - WINDOW)


def test_input_and_max_tokens_over_the_window_is_refused_in_the_apis_words(sdk: anthropic.Anthropic) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 1_100  # fits the window alone
    counted = sdk.messages.count_tokens(model=MODEL, messages=[user(text)]).input_tokens
    max_tokens = WINDOW - counted + 1
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(model=MODEL, max_tokens=max_tokens, messages=[user(text)])
    message = refusal(caught.value)
    assert message == (f"input length and `max_tokens` exceed context limit: {counted} + {max_tokens} > {WINDOW}, "
                       "decrease input length or `max_tokens` and try again")
    assert caught.value.type == "invalid_request_error" and is_prompt_too_long(400, message)
    assert sdk.messages.create(model=MODEL, max_tokens=max_tokens - 1, messages=[user(text)]).content


def test_injected_ptl_fault_refuses_a_small_prompt(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    api.inject("ptl")
    with pytest.raises(anthropic.BadRequestError) as caught:
        _ask(client)
    parsed = PromptTooLong.from_api_message(refusal(caught.value))
    assert parsed.limit == WINDOW and parsed.actual > WINDOW
    assert text_of(_ask(client))  # one fault, one call: the next call succeeds


@pytest.mark.parametrize(
    ("fault", "exception", "status"),
    [
        ("429", anthropic.RateLimitError, 429),
        ("500", anthropic.InternalServerError, 500),
        ("529", anthropic.OverloadedError, 529),
        ("401", anthropic.AuthenticationError, 401),
        ("413", anthropic.RequestTooLargeError, 413),
    ],
)
def test_each_status_fault_raises_its_sdk_exception(
    api: OfflineAPI, sdk: anthropic.Anthropic, fault: str, exception: type[Exception], status: int
) -> None:
    api.inject(fault)
    with pytest.raises(exception) as caught:
        _ask(sdk)
    assert caught.value.status_code == status
    assert text_of(_ask(sdk))


def test_faults_apply_one_per_call_in_order(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    api.inject("429", "529")
    with pytest.raises(anthropic.RateLimitError):
        _ask(client)
    with pytest.raises(anthropic.OverloadedError):
        _ask(client)
    assert api.pending_faults == ()
    assert [r.fault for r in api.requests] == ["429", "529"]


def test_single_529_is_retried_transparently(api: OfflineAPI, http_url: str) -> None:
    client = anthropic.Anthropic(api_key="test-key", base_url=http_url, max_retries=2)
    api.inject("529")
    reply = _ask(client)
    assert text_of(reply)
    assert [r.status for r in api.requests] == [529, 200]


def test_dropped_stream_raises_connection_error(api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("drop")
    received: list[str] = []
    with pytest.raises((anthropic.APIConnectionError, httpx2.TransportError)):
        with sdk.messages.stream(model=MODEL, max_tokens=500, messages=[user("stream " * 100)]) as stream:
            received.extend(stream.text_stream)
    assert received  # some deltas arrived before the connection went away


def test_dropped_plain_request_raises_connection_error(api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("drop")
    with pytest.raises(anthropic.APIConnectionError):
        _ask(sdk)


def test_missing_api_key_is_refused(http_url: str) -> None:
    response = httpx2.post(
        f"{http_url}/v1/messages",
        json={"model": MODEL, "max_tokens": 10, "messages": [user("hi")]},
        headers={"anthropic-version": "2023-06-01"},
    )
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


def test_invalid_api_key_is_refused(api: OfflineAPI) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        _ask(offline_client(api, api_key="invalid", max_retries=0))


def test_any_other_api_key_is_accepted(api: OfflineAPI) -> None:
    assert text_of(_ask(offline_client(api, api_key="sk-anything", max_retries=0)))


def test_unpaired_tool_result_is_a_bad_request(client: anthropic.Anthropic) -> None:
    orphan = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model=MODEL, max_tokens=100, messages=[user("hi"), {"role": "assistant", "content": "ok"}, orphan]
        )
    assert "unexpected `tool_use_id`" in refusal(caught.value)


def test_tool_use_without_result_is_a_bad_request(client: anthropic.Anthropic) -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "python", "input": {"code": "1"}}
    messages = [user("hi"), {"role": "assistant", "content": [call]}, user("never mind")]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=MODEL, max_tokens=100, messages=messages)
    assert "without `tool_result`" in refusal(caught.value)


def test_empty_content_is_a_bad_request(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": []}])


def test_max_tokens_over_model_limit_is_a_bad_request(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=MODEL, max_tokens=9_000, messages=[user("hi")], stream=True)
    assert "maximum allowed number of output tokens" in refusal(caught.value)


def test_unknown_model_in_messages_is_not_found(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="gpt-4o", max_tokens=100, messages=[user("hi")])


def test_unknown_fault_name_is_refused(api: OfflineAPI) -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        api.inject("503")
