"""The offline stand-in for the Anthropic Messages API, independent of any transport.

`OfflineAPI.handle(method, path, headers, body)` answers one HTTP request with an `HttpReply`
whose body is an iterator of byte chunks, so a stream goes out event by event. The in-process
transport (transport.py) and the real HTTP server (server.py) both run it. This module routes,
checks the key, records every API call and keeps the queued faults; the endpoints live beside it:

- POST /v1/messages, plain JSON or `"stream": true` server-sent events (messages_endpoint.py);
  the request is checked by the API's rules first (validate.py: a 400 naming the place; a body
  over 32 MB is a 413); the answer comes from the deterministic policy (policy.py), opened by a
  signed thinking block when thinking is on (thinking.py); usage from counting.py and the prompt
  cache (cache.py);
- POST /v1/messages/count_tokens -> {"input_tokens": N}, the same count the usage reports;
- the same two as Bedrock and Vertex serve them (providers.py), for the SDK's AnthropicBedrock
  and AnthropicVertex clients;
- `context_management` and `compaction` (with their beta headers): the API's context edits,
  server and on-demand compaction, deterministic (server_context.py);
- the prefix check of the models with preserved thinking, per `OfflineConfig.account`, with
  drop_block and `input_transformations` (prefix_check.py); every request's failing blocks are
  in its record (`thinking_mismatches`);
- GET /v1/models and /v1/models/{id} (any id starting with "claude-" is known), with the
  model's capabilities (models.py);
- GET /_offline/requests (the requests recorded, counts by kind), DELETE it to reset,
  POST /_offline/faults {"faults": [...]} to queue faults (faults.py). With a credential set
  (`--auth-token`) these want it too, in the same headers: they hold every prompt sent.

What is recorded is bounded (KEPT_REQUESTS, KEPT_BODY_BYTES): a stand-in that serves a notebook
for hours, or a client sending large prompts, must not grow without end.

Nothing in an answer depends on randomness or the wall clock: ids come from counters, and
the cache's clock is injected.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.parse
from collections import Counter, deque
from collections.abc import Iterable, Mapping

from ctx_magic.offline import models, providers
from ctx_magic.offline.cache import Clock
from ctx_magic.offline.faults import ApiError, RandomFaults, check_faults
from ctx_magic.offline.messages_endpoint import MessagesEndpoint
from ctx_magic.offline.policy import Policy
from ctx_magic.offline.shapes import (
    HttpReply,
    OfflineConfig,
    Outcome,
    RecordedRequest,
    error_reply,
    json_reply,
    provider_error,
)

# Far more calls than any test or benchmark run makes (a 150-turn soak makes a few hundred), while
# the metadata of that many stays small (a few MB); beyond it the oldest records go.
KEPT_REQUESTS = 10_000
# Raw request bytes whose parsed bodies are kept (the parsed JSON costs a few times that in memory);
# older bodies are dropped (the record stays, body None, `body_dropped` set), so counts and the
# order of calls stay whole. Tests read the recent bodies; 32 MB holds a long session's last ones.
KEPT_BODY_BYTES = 32 * 1024 * 1024


def _kinds(records: Iterable[RecordedRequest]) -> Counter[str]:
    return Counter(r.kind for r in records)


def _betas(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The anthropic-beta header's comma-separated names."""
    return tuple(b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip())


class OfflineAPI:
    """The Messages-API stand-in: routing, auth, faults, recording. Thread-safe."""

    def __init__(
        self,
        config: OfflineConfig | None = None,
        *,
        window: int | None = None,
        max_output: int | None = None,
        clock: Clock = time.monotonic,
        policy: Policy | None = None,
    ) -> None:
        config = config or OfflineConfig()
        self.config = dataclasses.replace(
            config,
            window=window if window is not None else config.window,
            max_output=max_output if max_output is not None else config.max_output,
        )
        """What the model looks like; read by every call, so a test may swap it between calls."""
        self.policy = policy or Policy()
        """How the model answers; read by every call, so a test may swap it between calls."""
        self._lock = threading.Lock()
        self._faults: deque[str] = deque()
        self._random: RandomFaults | None = None
        self._records: deque[RecordedRequest] = deque(maxlen=KEPT_REQUESTS)
        self._bodies: deque[tuple[int, RecordedRequest]] = deque()
        """(raw bytes, record) of the records still holding their body, oldest first."""
        self._body_bytes = 0
        self._request_count = 0
        """Numbers the request-id header of every API call."""
        self.endpoint = MessagesEndpoint(clock, self._next_fault)
        """The Messages endpoint: a test clears its `cache` to stand for a server that lost a prefix;
        its `stall_release` lets stalled streams finish (servers set it when they stop)."""

    # --- what tests read and steer ---

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request so far, oldest first (a copy)."""
        with self._lock:
            return list(self._records)

    def counts(self) -> Counter[str]:
        """Requests by kind: normal / compaction / memory (model calls) and other."""
        with self._lock:
            return _kinds(self._records)

    def model_calls(self, kind: str | None = None) -> int:
        """Calls to /v1/messages, all of them or those of one kind."""
        with self._lock:
            return sum(1 for r in self._records if r.path == "/v1/messages" and kind in (None, r.kind))

    def reset(self) -> None:
        """Forget the recorded requests (the cache and queued faults stay)."""
        with self._lock:
            self._forget()

    @property
    def kept_body_bytes(self) -> int:
        """The raw request bytes whose bodies are kept now (at most KEPT_BODY_BYTES)."""
        with self._lock:
            return self._body_bytes

    def _forget(self) -> None:
        self._records.clear()
        self._bodies.clear()
        self._body_bytes = 0

    def _record(self, record: RecordedRequest, size: int) -> None:
        """Keep `record`, dropping the oldest bodies while those kept are over KEPT_BODY_BYTES."""
        self._records.append(record)
        if record.body is None:
            return
        self._bodies.append((size, record))
        self._body_bytes += size
        while self._body_bytes > KEPT_BODY_BYTES:
            dropped, old = self._bodies.popleft()
            self._body_bytes -= dropped
            old.drop_body()

    def inject(self, *faults: str) -> None:
        """Queue faults for the next calls to /v1/messages, one fault per call."""
        check_faults(faults)
        with self._lock:
            self._faults.extend(faults)

    def random_faults(self, rate: float, seed: int, names: tuple[str, ...] | None = None) -> None:
        """From now on a call meets a fault with probability `rate` (seeded), after any queued
        one; a rate of 0 stops them."""
        with self._lock:
            self._random = RandomFaults(rate, seed, *([names] if names else [])) if rate > 0 else None

    @property
    def pending_faults(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._faults)

    def _next_fault(self) -> str | None:
        """The fault a valid model call meets: the first queued one, else a random draw, if any
        (the endpoint calls it under the lock)."""
        return self._faults.popleft() if self._faults else (self._random.draw() if self._random else None)

    # --- the HTTP surface ---

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> HttpReply:
        """Answer one request; records it when it is an API call (/v1/...)."""
        method = method.upper()
        route = urllib.parse.urlsplit(path).path
        lowered = {k.lower(): v for k, v in headers.items()}
        with self._lock:
            if route.startswith("/_offline/"):
                auth_error = _check_auth(lowered, self.config.credential) if self.config.credential else None
                return error_reply(auth_error) if auth_error is not None else self._control(method, route, body)
            outcome = self._api(method, route, lowered, body)
            reply = outcome.reply
            record = RecordedRequest(
                method, route, outcome.body, outcome.kind, outcome.input_tokens, reply.status, outcome.fault,
                outcome.provider, outcome.betas, thinking_mismatches=outcome.thinking_mismatches,
            )
            self._record(record, len(body))
            self._request_count += 1
            request_id = ("request-id", f"req_offline_{self._request_count:06d}")
            return dataclasses.replace(reply, headers=(*reply.headers, request_id))

    def _control(self, method: str, route: str, body: bytes) -> HttpReply:
        if route == "/_offline/requests" and method == "GET":
            records = [r.to_json() for r in self._records]
            return json_reply(200, {"requests": records, "counts": dict(_kinds(self._records))})
        if route == "/_offline/requests" and method == "DELETE":
            self._forget()
            return json_reply(200, {"cleared": True})
        if route == "/_offline/faults" and method == "POST":
            try:
                faults = tuple(json.loads(body or b"{}").get("faults", []))
                check_faults(faults)
            except (ValueError, AttributeError, TypeError) as error:
                return error_reply(ApiError(400, "invalid_request_error", str(error)))
            self._faults.extend(faults)
            return json_reply(200, {"queued": list(self._faults)})
        return error_reply(ApiError(404, "not_found_error", f"no offline control endpoint {method} {route}"))

    def _api(self, method: str, route: str, headers: Mapping[str, str], body: bytes) -> Outcome:
        where = providers.route(method, route)
        if where is not None:
            return self._provider(where, headers, body)
        auth_error = _check_auth(headers, self.config.credential)
        if auth_error is not None:
            return Outcome(error_reply(auth_error))
        if method == "POST" and route == "/v1/messages":
            return self.endpoint.messages(body, self.config, self.policy, betas=_betas(headers))
        if method == "POST" and route == "/v1/messages/count_tokens":
            return self.endpoint.count_tokens(body, self.config)
        if method == "GET" and route == "/v1/models":
            return Outcome(models.models_page(self.config))
        if method == "GET" and route.startswith("/v1/models/"):
            model_id = urllib.parse.unquote(route.removeprefix("/v1/models/"))
            return Outcome(models.model_reply(self.config, model_id))
        return Outcome(error_reply(ApiError(404, "not_found_error", f"Not found: {method} {route}")))

    def _provider(self, where: providers.Route, headers: Mapping[str, str], body: bytes) -> Outcome:
        """A request as Bedrock's or Vertex's SDK client sends it (providers.py)."""
        auth_error = providers.auth_error(where.provider, headers)
        if auth_error is not None:
            return Outcome(provider_error(where.provider, auth_error), provider=where.provider)
        try:
            body, body_betas = providers.first_party_body(where, body)
        except ValueError as error:
            failed = ApiError(400, "invalid_request_error", str(error))
            return Outcome(provider_error(where.provider, failed), provider=where.provider)
        if where.operation == "count":
            return self.endpoint.count_tokens(body, self.config, provider=where.provider)
        return self.endpoint.messages(body, self.config, self.policy, betas=body_betas or _betas(headers),
                                       provider=where.provider)


def _check_auth(headers: Mapping[str, str], accepted: str | None) -> ApiError | None:
    """An x-api-key header or an `Authorization: Bearer` token, as the API and LLM gateways take
    them; none is refused, and so is the key `invalid` or, when `accepted` is set, any other."""
    key = headers.get("x-api-key", "").strip()
    bearer = headers.get("authorization", "")
    token = bearer[len("Bearer "):].strip() if bearer.startswith("Bearer ") else ""
    given = key or token
    if not given:
        return ApiError(401, "authentication_error", "x-api-key header is required")
    if given == "invalid" or (accepted is not None and given != accepted):
        return ApiError(401, "authentication_error", "invalid x-api-key" if key else "Invalid bearer token")
    return None
