"""Fixtures for the offline API tests: a stand-in with an injected clock, SDK clients to it."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from ctx_magic.offline import OfflineAPI, offline_client, serve_in_thread

from .offline_support import MAX_OUTPUT, WINDOW, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(clock: FakeClock) -> OfflineAPI:
    return OfflineAPI(window=WINDOW, max_output=MAX_OUTPUT, clock=clock)


@pytest.fixture
def client(api: OfflineAPI) -> anthropic.Anthropic:
    """The real SDK, in process, no retries."""
    return offline_client(api, max_retries=0)


@pytest.fixture
def http_url(api: OfflineAPI) -> Iterator[str]:
    with serve_in_thread(api) as (url, _stop):
        yield url


@pytest.fixture
def http_client(http_url: str) -> anthropic.Anthropic:
    """The real SDK over real HTTP to a server in a thread, no retries."""
    return anthropic.Anthropic(api_key="test-key", base_url=http_url, max_retries=0)


@pytest.fixture(params=["in-process", "http"])
def sdk(request: pytest.FixtureRequest, api: OfflineAPI) -> Iterator[anthropic.Anthropic]:
    """Both ways of reaching the stand-in: every test using this runs once per transport."""
    if request.param == "in-process":
        yield offline_client(api, max_retries=0)
        return
    with serve_in_thread(api) as (url, _stop):
        yield anthropic.Anthropic(api_key="test-key", base_url=url, max_retries=0)
