"""Claude on Amazon Bedrock and Google Vertex AI: each provider's client is
the anthropic SDK's own (`AnthropicBedrock`, `AnthropicVertex`), built from that provider's usual
credentials and region settings, and a turn is answered by the offline stand-in speaking the
provider's paths, bodies and stream framing. No cloud is called; the credentials are made up."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2
import pytest
from agent_rig import prompt
from builders import ManualClock
from notebook_rig import clocked_shell, run, status

from ctx_magic.agent.catalog import provider_model_id
from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import AnthropicModel
from ctx_magic.agent.on_demand import ON_DEMAND_BETA
from ctx_magic.agent.session import Session, open_session
from ctx_magic.agent.tools import LocalExecutor
from ctx_magic.context.prompts import extract_summary
from ctx_magic.errors import CtxMagicError
from ctx_magic.notebook.backend import Backend, choose_backend
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.counting import input_tokens
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.prices import canonical_model
from ctx_magic.settings import Settings

THINKING = Settings(model="claude-sonnet-4-5", thinking="enabled", thinking_budget=1_024)
AWS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "not-a-real-secret", "AWS_REGION": "eu-west-1"}


class GoogleCredentials:
    """What the SDK reads of google.auth credentials: a token that has not expired."""

    token = "ya29.not-a-real-token"
    expired = False


@pytest.fixture
def served() -> Iterator[tuple[OfflineAPI, str, ManualClock]]:
    clock = ManualClock()
    api = OfflineAPI(OfflineConfig(window=200_000, max_output=64_000), clock=clock)
    with serve_in_thread(api) as (url, _stop):
        yield api, url, clock


def session_on(backend: Backend, tmp_path: Path, clock: ManualClock, settings: Settings = THINKING) -> Session:
    model = AnthropicModel(backend.client, name=settings.model, provider=backend.provider, backend=backend.name)
    settings = dataclasses.replace(settings, provider=backend.provider)
    session, _ = open_session(model, LocalExecutor(), tmp_path / ".ctx_magic", settings, root=tmp_path, clock=clock)
    return session


def test_bedrock_is_the_sdks_bedrock_client_signed_with_aws_credentials_and_answers_a_tool_loop(served, tmp_path):
    api, url, clock = served
    backend = choose_backend({**AWS, "ANTHROPIC_BEDROCK_BASE_URL": url}, Settings(provider="bedrock", max_retries=0))
    assert isinstance(backend.client, anthropic.AnthropicBedrock) and backend.client.aws_region == "eu-west-1"
    assert backend.name == "bedrock" and "Amazon Bedrock (eu-west-1)" in backend.notice
    session = session_on(backend, tmp_path, clock)
    result = run_turn(session, prompt(0))
    exact = session.exact_tokens()
    calls = [q for q in api.requests if q.provider == "bedrock"]
    assert result.error is None and result.model_calls == 2  # thinking kept across the tool loop
    stream = "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream"
    assert [q.path for q in calls[:2]] == [stream, stream]
    assert calls[-1].path.endswith("/count-tokens") and calls[-1].status == 200
    assert exact == calls[-1].input_tokens == input_tokens(calls[-1].body) > 0  # Bedrock's CountTokens answered
    assert session.frame.model.limits().source == "table"  # Bedrock's client has no Models API
    assert session.status().to_json()["provider"] == "bedrock"


def test_bedrock_takes_an_api_key_as_a_bearer_token_and_refuses_an_unsigned_request(served, tmp_path):
    api, url, clock = served
    backend = choose_backend({"AWS_BEARER_TOKEN_BEDROCK": "bedrock-api-key", "AWS_REGION": "us-east-1",
                              "ANTHROPIC_BEDROCK_BASE_URL": url}, Settings(provider="bedrock", max_retries=0))
    assert run_turn(session_on(backend, tmp_path, clock), "hello").error is None
    unsigned = httpx2.post(f"{url}/model/anthropic.claude-sonnet-5-5/invoke", json={"anthropic_version": "x"})
    assert unsigned.status_code == 403 and unsigned.headers["x-amzn-errortype"].startswith("AccessDeniedException")


def test_a_prompt_too_long_from_bedrock_is_recovered_like_the_apis(served, tmp_path):
    api, url, clock = served
    backend = choose_backend({**AWS, "ANTHROPIC_BEDROCK_BASE_URL": url}, Settings(provider="bedrock", max_retries=0))
    session = session_on(backend, tmp_path, clock, Settings(model="claude-sonnet-4-5"))
    for n in range(3):
        run_turn(session, prompt(n))
    api.inject("ptl")  # answered in Bedrock's shape: {"message": "prompt is too long: ..."}
    result = run_turn(session, prompt(3))
    assert result.error is None and result.compactions == ["reactive"]


def test_vertex_is_the_sdks_vertex_client_with_region_and_project_from_the_settings(served, tmp_path):
    api, url, clock = served
    settings = Settings(provider="vertex", region="us-east5", project="my-project", max_retries=0)
    backend = choose_backend({"ANTHROPIC_VERTEX_BASE_URL": url}, settings, vertex_credentials=GoogleCredentials())
    assert isinstance(backend.client, anthropic.AnthropicVertex) and backend.client.region == "us-east5"
    session = session_on(backend, tmp_path, clock)
    result = run_turn(session, prompt(0))
    exact = session.exact_tokens()
    calls = [q for q in api.requests if q.provider == "vertex"]
    assert result.error is None and result.model_calls == 2
    stream = "/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929"
    assert [q.path for q in calls[:2]] == [f"{stream}:streamRawPredict"] * 2
    assert calls[-1].path.endswith("/models/count-tokens:rawPredict") and exact and exact > 0


def _compacted_twice_over(backend: Backend, tmp_path: Path, clock: ManualClock) -> Session:
    """Two turns on Sonnet 5.5 (it thinks unasked), `%compact`, a third turn."""
    session = session_on(backend, tmp_path, clock, Settings(model="claude-sonnet-5-5"))
    for n in range(2):
        assert run_turn(session, prompt(n)).error is None
    assert manual_compact(session).event.trigger == "manual"
    assert run_turn(session, prompt(2)).error is None
    return session


def test_on_vertex_the_api_writes_the_summary_on_demand_and_its_block_opens_the_next_request(served, tmp_path):
    """Google Cloud is among the platforms the on-demand compaction page lists: the summary is the
    API's compaction block, sent back first in `messages`, and every request is accepted."""
    api, url, clock = served
    settings = Settings(provider="vertex", region="us-east5", project="my-project", max_retries=0)
    backend = choose_backend({"ANTHROPIC_VERTEX_BASE_URL": url}, settings, vertex_credentials=GoogleCredentials())
    _compacted_twice_over(backend, tmp_path, clock)
    calls = [q for q in api.requests if q.provider == "vertex" and q.path.endswith("Predict") and "count" not in q.path]
    asked = [q for q in calls if "compaction" in q.body]
    assert len(asked) == 1 and ON_DEMAND_BETA in asked[0].betas and asked[0].status == 200
    assert not [q for q in calls if q.kind == "compaction" and "compaction" not in q.body]  # no summary of its own
    after = calls[calls.index(asked[0]) + 1]
    assert after.body["messages"][0]["role"] == "assistant"
    assert after.body["messages"][0]["content"][0]["type"] == "compaction" and ON_DEMAND_BETA in after.betas
    assert all(q.status == 200 and not q.thinking_mismatches for q in calls)


def test_on_bedrock_ctx_magic_writes_the_summary_itself(served, tmp_path):
    """Bedrock is not on that page, and its requests open with a user message: ctx_magic's own summary."""
    api, url, clock = served
    backend = choose_backend({**AWS, "ANTHROPIC_BEDROCK_BASE_URL": url}, Settings(provider="bedrock", max_retries=0))
    _compacted_twice_over(backend, tmp_path, clock)
    calls = [q for q in api.requests if q.provider == "bedrock" and "count-tokens" not in q.path]
    assert not [q for q in calls if "compaction" in q.body]
    assert len([q for q in calls if q.kind == "compaction"]) == 1
    assert all(q.status == 200 and q.body["messages"][0]["role"] == "user" for q in calls)


def test_after_the_apis_summary_a_switch_to_bedrock_sends_the_summary_as_text(served, tmp_path):
    """The API wrote the summary first-party; on Bedrock, which takes no compaction block and opens
    a conversation with a user message, the summary goes as text at the head of that message."""
    api, url, clock = served
    first = choose_backend({"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": url}, Settings(max_retries=0))
    session = _compacted_twice_over(first, tmp_path, clock)
    block = next(q for q in api.requests if q.status == 200 and "compaction" in (q.body or {}))
    summary = extract_summary(str(api.requests[api.requests.index(block) + 1].body["messages"][0]["content"][0]
                                  ["content"]))
    bedrock = choose_backend({**AWS, "ANTHROPIC_BEDROCK_BASE_URL": url}, Settings(provider="bedrock", max_retries=0))
    settings = Settings(model="claude-sonnet-5-5", provider="bedrock")
    session.switch_model(settings, AnthropicModel(bedrock.client, name=settings.model, provider="bedrock",
                                                  backend=bedrock.name))
    for n in (3, 4):
        assert run_turn(session, prompt(n)).error is None
    calls = [q for q in api.requests if q.provider == "bedrock" and "count-tokens" not in q.path]
    assert calls and all(q.status == 200 for q in calls)
    for q in calls:
        opening = q.body["messages"][0]
        assert opening["role"] == "user" and opening["content"][0]["text"] == f"Summary:\n{summary}"
        assert "The summary above covers it" in opening["content"][1]["text"]
        assert not any(b.get("type") == "compaction" for m in q.body["messages"] for b in m["content"])


def test_vertex_needs_a_region_and_google_auth_and_says_so_in_one_line(monkeypatch):
    with pytest.raises(CtxMagicError, match="Vertex needs a region"):
        choose_backend({}, Settings(provider="vertex"))
    monkeypatch.setitem(sys.modules, "google.auth", None)  # google-auth not installed
    with pytest.raises(CtxMagicError, match=r'pip install "ctx_magic\[vertex\]"'):
        choose_backend({"CLOUD_ML_REGION": "global"}, Settings(provider="vertex"))


def test_bedrock_without_boto3_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)  # boto3 not installed
    with pytest.raises(CtxMagicError, match=r'^Bedrock needs boto3: pip install "ctx_magic\[bedrock\]".$'):
        choose_backend(AWS, Settings(provider="bedrock"))


@pytest.mark.parametrize(("model", "provider", "sent"), [
    ("claude-sonnet-4-5", "bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ("claude-sonnet-5-5", "bedrock", "anthropic.claude-sonnet-5-5"),
    ("us.anthropic.claude-opus-4-1-20250805-v1:0", "bedrock", "us.anthropic.claude-opus-4-1-20250805-v1:0"),
    ("claude-haiku-4-5", "vertex", "claude-haiku-4-5@20251001"),
    ("claude-opus-5-5", "vertex", "claude-opus-5-5"),
    ("claude-sonnet-5-5", "anthropic", "claude-sonnet-5-5"),
])
def test_model_ids_are_mapped_to_the_providers_and_back(model, provider, sent):
    assert provider_model_id(model, provider) == sent
    assert canonical_model(sent) == canonical_model(model)


def test_the_provider_setting_switches_a_notebook_to_bedrock(tmp_path, monkeypatch, served):
    api, url, _clock = served
    for name, value in {**AWS, "ANTHROPIC_BEDROCK_BASE_URL": url}.items():
        monkeypatch.setenv(name, value)
    with clocked_shell(tmp_path, monkeypatch) as shell:
        run(shell, "%config CtxMagic.provider = 'bedrock'")
        run(shell, "%config CtxMagic.model = 'claude-haiku-4-5'")
        _result, shown = run(shell, "%%agent\nhello from a notebook")
        seen = status(shell)
    assert "Done" in shown and "hello from a notebook" in shown
    assert seen["provider"] == "bedrock" and seen["backend"] == "bedrock" and seen["window_source"] == "table"
    stream = "/model/anthropic.claude-haiku-4-5-20251001-v1:0/invoke-with-response-stream"
    assert {q.path for q in api.requests} == {stream}
