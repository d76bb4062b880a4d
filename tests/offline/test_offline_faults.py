"""The reply faults a session must survive, each observed through the real SDK as the API's would be."""

from __future__ import annotations

import json
import re
import socket

import anthropic
import httpx2
import pytest

from ctx_magic.offline import OfflineAPI, offline_client
from ctx_magic.offline import faults as faults_module
from ctx_magic.offline.faults import FAULTS, WHITESPACE_TEXT

from .offline_support import MODEL, PYTHON_TOOL, text_of, user

LONG = "Tell me a long story. " * 20
CODE = "Run this:\n```python\nprint(6 * 7)\n```"


Streamed = tuple[list[str], anthropic.types.Message]


def _stream(client: anthropic.Anthropic, text: str = LONG, **extra: object) -> Streamed:
    """The event types a stream delivered and the message the SDK assembled from them."""
    with client.messages.stream(model=MODEL, max_tokens=1_000, messages=[user(text)], **extra) as stream:
        events = [event.type for event in stream]
        return events, stream.get_final_message()


def test_every_fault_is_documented_in_the_module() -> None:
    documented = set(re.findall(r'^- ((?:"[\w]+"(?:, )?)+)', faults_module.__doc__ or "", re.MULTILINE))
    names = {name for line in documented for name in re.findall(r'"(\w+)"', line)}
    assert names == FAULTS


def test_empty_reply_is_end_turn_with_no_content(api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("empty_reply", "empty_reply")
    plain = sdk.messages.create(model=MODEL, max_tokens=100, messages=[user("hi")])
    assert (plain.content, plain.stop_reason) == ([], "end_turn")
    events, streamed = _stream(sdk)
    assert (streamed.content, streamed.stop_reason) == ([], "end_turn")
    assert "content_block_start" not in events and events[-1] == "message_stop"


def test_empty_reply_even_where_a_tool_call_was_due(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    api.inject("empty_reply")
    reply = client.messages.create(model=MODEL, max_tokens=500, tools=[PYTHON_TOOL], messages=[user(CODE)])
    assert (reply.content, reply.stop_reason) == ([], "end_turn")


def test_whitespace_reply_says_only_whitespace(api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("whitespace_reply", "whitespace_reply")
    plain = sdk.messages.create(model=MODEL, max_tokens=100, messages=[user("hi")])
    assert text_of(plain) == WHITESPACE_TEXT and plain.stop_reason == "end_turn"
    _, streamed = _stream(sdk)
    assert text_of(streamed) == WHITESPACE_TEXT
    # sent back as it came, the whitespace is what the API refuses
    history = [user("hi"), {"role": "assistant", "content": plain.to_dict()["content"]}, user("again")]
    with pytest.raises(anthropic.BadRequestError, match="non-whitespace text"):
        sdk.messages.create(model=MODEL, max_tokens=100, messages=history)


def test_overloaded_midstream_is_an_error_event_after_some_deltas(api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("overloaded_midstream")
    received: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        with sdk.messages.stream(model=MODEL, max_tokens=1_000, messages=[user(LONG)]) as stream:
            received.extend(stream.text_stream)
    assert len(received) == 2  # two text deltas, then the error
    assert caught.value.status_code == 200  # the stream had begun: the status was already sent
    assert caught.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert not isinstance(caught.value, anthropic.OverloadedError)


def test_overloaded_midstream_on_a_plain_request_is_a_529(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    api.inject("overloaded_midstream")
    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(model=MODEL, max_tokens=100, messages=[user("hi")])


def test_early_close_ends_cleanly_without_message_stop(api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("early_close")
    events, partial = _stream(sdk)  # no exception: the stream just ended
    assert "message_stop" not in events and "message_delta" not in events
    assert partial.stop_reason is None
    _, whole = _stream(sdk)
    assert whole.stop_reason == "end_turn" and len(text_of(partial)) < len(text_of(whole))


def test_early_close_after_a_tool_use_start_leaves_an_empty_input(api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("early_close_tool")
    events, partial = _stream(sdk, CODE, tools=[PYTHON_TOOL])
    assert events[-1] == "content_block_start" and "message_stop" not in events
    assert partial.content[-1].type == "tool_use" and partial.content[-1].input == {}
    assert partial.stop_reason is None


def test_early_close_on_a_plain_request_is_a_broken_connection(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    api.inject("early_close")
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.create(model=MODEL, max_tokens=100, messages=[user("hi")])


def test_html_body_is_not_a_message(api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("html_body")
    answer = sdk.messages.create(model=MODEL, max_tokens=100, messages=[user("hi")])
    assert isinstance(answer, str) and answer.startswith("<!DOCTYPE html>")  # the SDK hands back the text


def test_html_body_fails_a_strict_client_and_a_stream(api: OfflineAPI, http_url: str) -> None:
    strict = anthropic.Anthropic(api_key="k", base_url=http_url, max_retries=0, _strict_response_validation=True)
    api.inject("html_body", "html_body")
    with pytest.raises(anthropic.APIResponseValidationError):
        strict.messages.create(model=MODEL, max_tokens=100, messages=[user("hi")])
    with pytest.raises(AssertionError):  # no event ever came: the SDK has no message to give
        _stream(strict)
    response = httpx2.get(f"{http_url}/v1/models", headers={"x-api-key": "k"})
    assert response.status_code == 200  # the server itself is fine


def test_new_faults_queue_over_http_and_answer_in_order(api: OfflineAPI, http_url: str) -> None:
    names = ["empty_reply", "whitespace_reply", "early_close", "html_body"]
    assert httpx2.post(f"{http_url}/_offline/faults", json={"faults": names}).status_code == 200
    client = anthropic.Anthropic(api_key="k", base_url=http_url, max_retries=0)
    assert _stream(client)[1].content == []
    assert text_of(_stream(client)[1]) == WHITESPACE_TEXT
    assert _stream(client)[1].stop_reason is None
    assert isinstance(client.messages.create(model=MODEL, max_tokens=10, messages=[user("x")]), str)
    assert [r.fault for r in api.requests] == names


def test_an_invalid_request_leaves_the_queued_fault_for_the_next_call(api: OfflineAPI) -> None:
    client = offline_client(api, max_retries=0)
    api.inject("empty_reply")
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL, max_tokens=100, messages=[user(" ")])
    assert api.pending_faults == ("empty_reply",)  # an invalid request never reaches the fault


def test_random_faults_hit_about_their_share_of_calls_the_same_ones_for_the_same_seed() -> None:
    def draws(seed: int) -> list[str | None]:
        api = OfflineAPI()
        api.random_faults(0.1, seed)
        client = offline_client(api, max_retries=0)
        for _ in range(200):
            try:
                client.messages.create(model=MODEL, max_tokens=50, messages=[user("hi")])
            except (anthropic.APIError, ValueError):
                pass
        return [r.fault for r in api.requests]

    first = draws(7)
    assert first == draws(7) and first != draws(8)
    hits = [f for f in first if f is not None]
    assert 10 <= len(hits) <= 30 and set(hits) <= set(faults_module.SURVIVABLE_FAULTS)
    assert "stall" not in faults_module.SURVIVABLE_FAULTS  # a soak never waits on a release nobody gives


def test_a_queued_fault_comes_before_a_random_one_and_rate_0_stops_them() -> None:
    api = OfflineAPI()
    api.random_faults(1.0, 3, ("529",))
    api.inject("500")
    client = offline_client(api, max_retries=0)
    for expected in (anthropic.InternalServerError, anthropic.APIStatusError):
        with pytest.raises(expected):
            client.messages.create(model=MODEL, max_tokens=50, messages=[user("hi")])
    api.random_faults(0, 3)
    assert client.messages.create(model=MODEL, max_tokens=50, messages=[user("hi")]).content
    assert [r.fault for r in api.requests] == ["500", "529", None]


def test_reset_sends_the_start_of_a_stream_then_a_tcp_reset(api: OfflineAPI, http_url: str) -> None:
    """Read with a bare socket: the stream's first events arrive, then the kernel reports a reset
    (RST), not an orderly end of the stream (FIN)."""
    api.inject("reset")
    host, port = http_url.removeprefix("http://").split(":")
    body = json.dumps({"model": MODEL, "max_tokens": 1_000, "stream": True, "messages": [user(LONG)]}).encode()
    head = (f"POST /v1/messages HTTP/1.1\r\nhost: {host}\r\nx-api-key: k\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    received = b""
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(head + body)
        with pytest.raises(ConnectionResetError):
            for _ in range(1_000):  # bounded: the reset comes after a few events
                chunk = conn.recv(65_536)
                assert chunk, "the server closed the connection in order instead of resetting it"
                received += chunk
    assert b"event: message_start" in received and b"event: message_stop" not in received


def test_reset_through_the_sdk_reads_as_a_reset_by_peer_after_the_stream_began(
        api: OfflineAPI, sdk: anthropic.Anthropic) -> None:
    api.inject("reset", "reset")
    received: list[str] = []
    with pytest.raises(Exception, match="reset by peer"):  # the class depends on the SDK's version
        with sdk.messages.stream(model=MODEL, max_tokens=1_000, messages=[user(LONG)]) as stream:
            received.extend(event.type for event in stream)
    assert received[0] == "message_start" and "message_stop" not in received
    with pytest.raises(anthropic.APIConnectionError):  # a plain request: reset before any answer
        sdk.with_options(max_retries=0).messages.create(model=MODEL, max_tokens=100, messages=[user("hi")])
    assert [r.fault for r in api.requests] == ["reset", "reset"]
