"""The real HTTP server: models, control endpoints, the command line, and always stopping."""

from __future__ import annotations

import subprocess
import sys

import anthropic
import httpx2
import pytest

from ctx_magic.offline import OfflineAPI, serve_in_thread

from .offline_support import MAX_OUTPUT, MODEL, WINDOW, refusal, user

CLI_MAX_SECONDS = 20  # the command line server stops by itself well before the test's timeout


def test_models_retrieve_known_model_reports_window(sdk: anthropic.Anthropic) -> None:
    info = sdk.models.retrieve(MODEL)
    assert (info.id, info.type, info.max_input_tokens, info.max_tokens) == (MODEL, "model", WINDOW, MAX_OUTPUT)
    assert "offline" in info.display_name


def test_models_retrieve_unknown_model_is_not_found(sdk: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        sdk.models.retrieve("gpt-4o")
    assert "gpt-4o" in refusal(caught.value)


def test_models_list_returns_configured_ids(sdk: anthropic.Anthropic, api: OfflineAPI) -> None:
    assert [m.id for m in sdk.models.list()] == list(api.config.listed_models)


def test_requests_endpoint_shows_and_resets_records(http_client: anthropic.Anthropic, http_url: str) -> None:
    http_client.messages.create(model=MODEL, max_tokens=100, messages=[user("hello")])
    seen = httpx2.get(f"{http_url}/_offline/requests").json()
    assert seen["counts"] == {"normal": 1}
    assert seen["requests"][0]["body"]["messages"] == [user("hello")]
    assert httpx2.delete(f"{http_url}/_offline/requests").status_code == 200
    assert httpx2.get(f"{http_url}/_offline/requests").json()["requests"] == []


def test_faults_endpoint_queues_faults(http_client: anthropic.Anthropic, http_url: str, api: OfflineAPI) -> None:
    assert httpx2.post(f"{http_url}/_offline/faults", json={"faults": ["529", "429"]}).status_code == 200
    assert api.pending_faults == ("529", "429")
    with pytest.raises(anthropic.OverloadedError):
        http_client.messages.create(model=MODEL, max_tokens=100, messages=[user("hello")])
    assert httpx2.post(f"{http_url}/_offline/faults", json={"faults": ["nope"]}).status_code == 400


def test_stream_arrives_as_chunked_server_sent_events(http_url: str) -> None:
    body = {"model": MODEL, "max_tokens": 200, "stream": True, "messages": [user("hello " * 40)]}
    with httpx2.stream("POST", f"{http_url}/v1/messages", json=body, headers={"x-api-key": "k"}) as response:
        assert response.headers["content-type"] == "text/event-stream"
        events = [line for line in response.iter_lines() if line.startswith("event: ")]
    assert events[:2] == ["event: message_start", "event: ping"]
    assert events[-2:] == ["event: message_delta", "event: message_stop"]
    assert events.count("event: content_block_delta") > 1


def test_stop_is_idempotent_and_frees_the_port() -> None:
    with serve_in_thread(OfflineAPI()) as (url, stop):
        assert httpx2.get(f"{url}/v1/models", headers={"x-api-key": "k"}).status_code == 200
        stop()
        stop()
        with pytest.raises(httpx2.TransportError):
            httpx2.get(f"{url}/v1/models", headers={"x-api-key": "k"}, timeout=2)


def test_command_line_serves_and_stops_by_itself() -> None:
    command = [sys.executable, "-m", "ctx_magic.offline", "--port", "0", "--window", "30000", "--max-seconds"]
    with subprocess.Popen([*command, str(CLI_MAX_SECONDS)], stdout=subprocess.PIPE, text=True) as process:
        try:
            line = process.stdout.readline() if process.stdout else ""
            url = line.split()[0]
            assert "offline stand-in" in line
            client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
            assert client.models.retrieve(MODEL).max_input_tokens == 30_000
        finally:
            process.terminate()
            process.wait(timeout=CLI_MAX_SECONDS)


def test_max_seconds_makes_the_server_exit_on_its_own() -> None:
    command = [sys.executable, "-m", "ctx_magic.offline", "--window", "30000", "--max-seconds", "0.5"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=CLI_MAX_SECONDS)
    assert finished.returncode == 0
    assert finished.stdout.startswith("http://127.0.0.1:")


def test_command_line_sets_the_minimum_cacheable_length() -> None:
    from ctx_magic.offline.__main__ import parse_args

    assert parse_args(["--min-cacheable", "0"]).min_cacheable == 0
    assert parse_args([]).min_cacheable is None  # the model's own minimum
    with pytest.raises(SystemExit):
        parse_args(["--min-cacheable", "-1"])
