"""How the stand-in checks credentials: an x-api-key header or an `Authorization: Bearer` token,
as the API and LLM gateways take them. Given the one credential it accepts (`credential`, or
`--auth-token` on the command line) it refuses every other with the API's 401, so a client that
sends the wrong header, or none, fails here as it would against a real gateway. Its own control
endpoints want that credential too, and what it records is bounded."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import anthropic
import httpx2
import pytest

from ctx_magic.offline import OfflineAPI, app, serve_in_thread
from ctx_magic.offline.app import KEPT_BODY_BYTES, OfflineConfig

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


SECRET_PROMPT = "the prompt only the token's holder may read"
CONTROL = [("GET", "/_offline/requests"), ("DELETE", "/_offline/requests"), ("POST", "/_offline/faults")]


@pytest.mark.parametrize(("method", "route"), CONTROL)
@pytest.mark.parametrize("headers", [{}, {"x-api-key": "sk-another-key"}, {"authorization": "Bearer sk-another-key"}])
def test_the_control_endpoints_refuse_another_local_user_and_change_nothing(
        method: str, route: str, headers: dict[str, str]) -> None:
    api = OfflineAPI(OfflineConfig(credential=TOKEN))
    with serve_in_thread(api) as (url, _stop):
        sent = httpx2.post(f"{url}/v1/messages", headers={"x-api-key": TOKEN, "anthropic-version": "2023-06-01"},
                           json={**BODY, "messages": [user(SECRET_PROMPT)]})
        assert sent.status_code == 200
        response = httpx2.request(method, f"{url}{route}", headers=headers, json={"faults": ["529"]})
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
        assert SECRET_PROMPT not in response.text
        assert [r.path for r in api.requests] == ["/v1/messages"]  # nothing cleared
        assert api.pending_faults == ()  # nothing queued


@pytest.mark.parametrize("headers", [{"authorization": f"Bearer {TOKEN}"}, {"x-api-key": TOKEN}])
def test_the_control_endpoints_work_for_the_tokens_holder(headers: dict[str, str]) -> None:
    api = OfflineAPI(OfflineConfig(credential=TOKEN))
    with serve_in_thread(api) as (url, _stop):
        httpx2.post(f"{url}/v1/messages", headers={"x-api-key": TOKEN, "anthropic-version": "2023-06-01"},
                    json={**BODY, "messages": [user(SECRET_PROMPT)]})
        seen = httpx2.get(f"{url}/_offline/requests", headers=headers)
        assert seen.status_code == 200 and SECRET_PROMPT in seen.text
        queued = httpx2.post(f"{url}/_offline/faults", headers=headers, json={"faults": ["529"]})
        assert queued.json() == {"queued": ["529"]} and api.pending_faults == ("529",)
        assert httpx2.delete(f"{url}/_offline/requests", headers=headers).status_code == 200
        assert api.requests == []


LARGE_REQUESTS = 30
LARGE_BYTES = 2_000_000


def test_thirty_requests_of_two_megabytes_keep_a_bounded_record() -> None:
    api = OfflineAPI(OfflineConfig(credential=TOKEN))
    # A model the API does not know: refused at once (counting 2 MB of text takes seconds), recorded all the same.
    body = {"model": "not-a-model", "max_tokens": 10, "messages": [user("x" * LARGE_BYTES)]}
    with serve_in_thread(api) as (url, _stop):
        for _ in range(LARGE_REQUESTS):
            response = httpx2.post(f"{url}/v1/messages", json=body,
                                   headers={"x-api-key": TOKEN, "anthropic-version": "2023-06-01"})
            assert response.status_code == 404
    records = api.requests
    kept = [r for r in records if r.body is not None]
    assert len(records) == LARGE_REQUESTS  # every call is still counted, in order
    assert api.kept_body_bytes <= KEPT_BODY_BYTES
    assert len(kept) == KEPT_BODY_BYTES // (LARGE_BYTES + 100) == 16  # each body is 2 MB and a few bytes
    assert records[-len(kept):] == kept and all(r.body_dropped for r in records[:-len(kept)])  # the oldest went


def test_no_more_than_the_kept_number_of_requests_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "KEPT_REQUESTS", 5)
    api = OfflineAPI()
    for n in range(8):
        api.handle("GET", f"/v1/models/claude-{n}", {"x-api-key": "k"}, b"")
    assert [r.path for r in api.requests] == [f"/v1/models/claude-{n}" for n in range(3, 8)]
