"""How the stand-in checks credentials: an x-api-key header or an `Authorization: Bearer` token,
as the API and LLM gateways take them. Given the one credential it accepts (`credential`, or
`--auth-token` on the command line) it refuses every other with the API's 401, so a client that
sends the wrong header, or none, fails here as it would against a real gateway."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import anthropic
import httpx2
import pytest

from ctx_magic.offline import OfflineAPI, serve_in_thread
from ctx_magic.offline.app import OfflineConfig

from .offline_support import MODEL, text_of, user

TOKEN = "sk-gateway-static-key"
CLI_MAX_SECONDS = 20  # the command line server stops by itself well before the test's timeout
BODY = {"model": MODEL, "max_tokens": 10, "messages": [user("hi")]}


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    with serve_in_thread(OfflineAPI(OfflineConfig(credential=TOKEN))) as (url, _stop):
        yield url


def post(url: str, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(f"{url}/v1/messages", json=BODY, headers={"anthropic-version": "2023-06-01", **headers})


@pytest.mark.parametrize(("headers", "message"), [
    ({}, "x-api-key header is required"),
    ({"authorization": f"Basic {TOKEN}"}, "x-api-key header is required"),
    ({"authorization": "Bearer sk-another-key"}, "Invalid bearer token"),
    ({"x-api-key": "sk-another-key"}, "invalid x-api-key"),
])
def test_a_missing_or_wrong_credential_is_the_apis_401(gateway_url: str, headers: dict[str, str],
                                                         message: str) -> None:
    response = post(gateway_url, headers)
    assert response.status_code == 401
    assert response.json() == {"type": "error", "error": {"type": "authentication_error", "message": message}}


@pytest.mark.parametrize("headers", [{"authorization": f"Bearer {TOKEN}"}, {"x-api-key": TOKEN}])
def test_the_accepted_credential_passes_as_a_bearer_token_or_a_key(gateway_url: str, headers: dict[str, str]) -> None:
    assert post(gateway_url, headers).status_code == 200


def test_the_sdks_auth_token_reaches_the_gateway_and_a_wrong_one_is_refused(gateway_url: str) -> None:
    right = anthropic.Anthropic(auth_token=TOKEN, base_url=gateway_url, max_retries=0)
    assert text_of(right.messages.create(**BODY))
    wrong = anthropic.Anthropic(auth_token="sk-another-key", base_url=gateway_url, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(**BODY)


def test_command_line_auth_token_accepts_that_token_alone() -> None:
    command = [sys.executable, "-m", "ctx_magic.offline", "--port", "0", "--auth-token", TOKEN, "--max-seconds",
               str(CLI_MAX_SECONDS)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            url = (process.stdout.readline() if process.stdout else "").split()[0]
            assert anthropic.Anthropic(auth_token=TOKEN, base_url=url, max_retries=0).models.list().data
            with pytest.raises(anthropic.AuthenticationError):
                anthropic.Anthropic(api_key="sk-any-key", base_url=url, max_retries=0).models.list()
        finally:
            process.terminate()
            process.wait(timeout=CLI_MAX_SECONDS)
