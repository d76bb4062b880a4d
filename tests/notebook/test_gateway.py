"""An LLM gateway, pointed at the way Claude Code is: ANTHROPIC_BASE_URL with ANTHROPIC_AUTH_TOKEN,
a bearer token and no API key. The stand-in plays the gateway over real HTTP: it accepts that one
token and answers any other credential with the API's 401, as a gateway would."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kernel_rig import Kernel, kernel_env, start

from ctx_magic.agent.model import AnthropicModel
from ctx_magic.agent.request import build_request
from ctx_magic.errors import AuthenticationFailed, CtxMagicError
from ctx_magic.messages import user_text
from ctx_magic.notebook.backend import choose_backend
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.settings import Settings

TOKEN = "sk-gateway-static-key"
MODEL = "claude-sonnet-5-5"


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[OfflineAPI, str]]:
    api = OfflineAPI(OfflineConfig(credential=TOKEN))
    with serve_in_thread(api) as (url, _stop):
        yield api, url


def ask(backend_env: dict[str, str], text: str) -> str:
    backend = choose_backend(backend_env, Settings(max_retries=0))
    request = build_request([user_text(text)], system="You help.", tools=[], max_tokens=1_024, cache_ttl="5m")
    reply = AnthropicModel(backend.client, name=MODEL).stream(request)
    return "".join(block.get("text", "") for block in reply.content if block.get("type") == "text")


def test_a_base_url_with_an_auth_token_and_no_key_talks_to_the_gateway(gateway) -> None:
    api, url = gateway
    env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": TOKEN}
    backend = choose_backend(env)
    assert backend.name == "anthropic" and backend.offline is False
    assert backend.notice == f"Using the Anthropic Messages API at {url} with the bearer token in ANTHROPIC_AUTH_TOKEN."
    before = len(api.requests)
    assert "through the gateway" in ask(env, "through the gateway")
    assert [(r.path, r.status) for r in api.requests[before:]] == [("/v1/messages", 200)]


def test_a_wrong_token_is_refused_by_the_gateway_in_one_line_naming_the_variable(gateway) -> None:
    api, url = gateway
    with pytest.raises(AuthenticationFailed) as caught:
        ask({"ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "sk-another-key"}, "hello")
    assert "ANTHROPIC_AUTH_TOKEN" in str(caught.value) and "\n" not in str(caught.value)
    assert api.requests[-1].status == 401


def test_the_token_comes_before_a_key_as_in_claude_code(gateway) -> None:
    _api, url = gateway
    env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": TOKEN, "ANTHROPIC_API_KEY": "sk-not-the-gateways"}
    assert "both set" in ask(env, "both set")  # the gateway accepts only the token


def test_a_token_without_a_base_url_goes_to_anthropics_api_as_a_bearer_token() -> None:
    backend = choose_backend({"ANTHROPIC_AUTH_TOKEN": TOKEN})
    assert "api.anthropic.com" in str(backend.client.base_url)
    assert backend.client.auth_token == TOKEN and backend.client.api_key is None


def test_a_base_url_with_neither_credential_is_refused_naming_both() -> None:
    with pytest.raises(CtxMagicError, match="but neither ANTHROPIC_API_KEY nor ANTHROPIC_AUTH_TOKEN is"):
        choose_backend({"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_AUTH_TOKEN": "  "})


@pytest.mark.slow  # a real kernel
def test_a_kernel_with_only_a_gateway_token_runs_a_turn(gateway, tmp_path) -> None:
    api, url = gateway
    kernels: list[Kernel] = []
    try:
        kernel = start(kernels, tmp_path, kernel_env(ANTHROPIC_BASE_URL=url, ANTHROPIC_AUTH_TOKEN=TOKEN))
        before = len(api.requests)
        shown = kernel.execute("%%agent\nhello through the gateway")
        text = kernel.execute("%ctx status --json")
    finally:
        for kernel in kernels:
            kernel.close()
    assert "Done" in shown and "ANTHROPIC_API_KEY" not in shown
    assert json.JSONDecoder().raw_decode(text[text.index("{"):])[0]["backend"] == "anthropic"
    sent = [r for r in api.requests[before:] if r.path == "/v1/messages"]
    assert sent and all(r.status == 200 for r in sent)
