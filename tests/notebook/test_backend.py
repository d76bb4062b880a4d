"""Which server answers (notebook/backend.py): the Anthropic API with a key, else the offline
stand-in; a base URL without a key is refused in one line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ctx_magic.agent.model import AnthropicModel, ModelRequest
from ctx_magic.agent.request import build_request
from ctx_magic.errors import CtxMagicError
from ctx_magic.messages import Message, user_text
from ctx_magic.notebook.backend import OFFLINE_NOTICE, choose_backend
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.settings import Settings

MODEL = "claude-offline-test"


@pytest.fixture
def api() -> OfflineAPI:
    return OfflineAPI(OfflineConfig(window=20_000, max_output=8_192))


@pytest.fixture
def url(api: OfflineAPI) -> Iterator[str]:
    with serve_in_thread(api) as (served, _stop):
        yield served


def request(*messages: Message) -> ModelRequest:
    return build_request(messages, system="You help.", tools=[], max_tokens=1_024, cache_ttl="5m")


def text_of(content) -> str:  # type: ignore[no-untyped-def]
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def test_choose_backend_without_a_key_is_the_offline_stand_in() -> None:
    backend = choose_backend(env={})
    assert backend.offline is True
    assert backend.notice == OFFLINE_NOTICE
    assert "offline stand-in" in backend.notice and "not Claude" in backend.notice
    assert "ANTHROPIC_API_KEY" in backend.notice
    reply = AnthropicModel(backend.client, name=MODEL).stream(request(user_text("hi")))
    assert backend.stand_in is not None and backend.stand_in.model_calls() == 1
    assert text_of(reply.content).startswith("Offline stand-in")


def test_choose_backend_offline_window_is_what_the_models_api_reports() -> None:
    backend = choose_backend(env={}, offline_window=30_000)
    assert AnthropicModel(backend.client, name=MODEL).limits().window == 30_000


def test_choose_backend_blank_key_is_still_offline() -> None:
    assert choose_backend(env={"ANTHROPIC_API_KEY": "  "}).offline is True


def test_choose_backend_with_a_key_and_base_url_talks_to_that_server(url: str, api: OfflineAPI) -> None:
    backend = choose_backend({"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url}, Settings(max_retries=1))
    assert backend.offline is False
    assert url in backend.notice and "offline" not in backend.notice
    assert str(backend.client.base_url).rstrip("/") == url
    assert backend.client.max_retries == 1
    reply = AnthropicModel(backend.client, name=MODEL).stream(request(user_text("hello from a real client")))
    assert "hello from a real client" in text_of(reply.content)
    assert api.model_calls() == 1


def test_choose_backend_with_only_a_key_uses_the_anthropic_api() -> None:
    backend = choose_backend(env={"ANTHROPIC_API_KEY": "sk-test"})
    assert backend.offline is False
    assert backend.notice == "Using the Anthropic Messages API."
    assert "api.anthropic.com" in str(backend.client.base_url)


def test_choose_backend_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch, url: str, api: OfflineAPI
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    backend = choose_backend()
    assert backend.offline is False
    AnthropicModel(backend.client, name=MODEL).count_tokens(request(user_text("hi")))
    assert api.requests[-1].path == "/v1/messages/count_tokens"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    assert choose_backend().offline is True


def test_a_base_url_without_a_key_is_refused_in_one_line() -> None:
    refused = "ANTHROPIC_BASE_URL is set .* but neither ANTHROPIC_API_KEY nor ANTHROPIC_AUTH_TOKEN is"
    with pytest.raises(CtxMagicError, match=refused):
        choose_backend(env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
