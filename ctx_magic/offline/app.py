"""The offline stand-in for the Anthropic Messages API, independent of any transport.

`OfflineAPI.handle(method, path, headers, body)` answers one HTTP request with an `HttpReply`
whose body is an iterator of byte chunks, so a stream goes out event by event. The in-process
transport (transport.py) and the real HTTP server (server.py) both run it. Endpoints:

- POST /v1/messages, plain JSON or `"stream": true` server-sent events; the request is checked
  by the API's rules first (validate.py: a 400 naming the place; a body over 32 MB is a 413);
  the answer comes from the deterministic policy (policy.py), opened by a signed thinking block
  when thinking is on (thinking.py); usage from counting.py and the prompt cache (cache.py);
- POST /v1/messages/count_tokens -> {"input_tokens": N}, the same count the usage reports;
- the same two as Bedrock and Vertex serve them (providers.py), for the SDK's AnthropicBedrock
  and AnthropicVertex clients;
- `context_management` (with its beta header): the API's context edits and server compaction,
  deterministic (server_context.py);
- GET /v1/models and /v1/models/{id} (any id starting with "claude-" is known), with the
  model's capabilities (models.py);
- GET /_offline/requests (every request recorded, counts by kind), DELETE it to reset,
  POST /_offline/faults {"faults": [...]} to queue faults (faults.py).

Nothing in an answer depends on randomness or the wall clock: ids come from counters, and
the cache's clock is injected.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import threading
import time
import urllib.parse
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.offline import providers
from ctx_magic.offline.cache import Clock, PromptCache
from ctx_magic.offline.counting import fit_output, input_tokens, output_tokens, request_segments
from ctx_magic.offline.faults import (
    HTML_PAGE,
    STATUS_FAULTS,
    STREAM_ONLY_FAULTS,
    ApiError,
    RandomFaults,
    check_faults,
    faulty_content,
    prompt_too_long,
    reply_past_window,
    stream_body,
)
from ctx_magic.offline.models import capabilities
from ctx_magic.offline.policy import Policy
from ctx_magic.offline.server_context import (
    BETA_OF,
    Managed,
    check_compaction_blocks,
    check_context_management,
    manage,
    with_management,
)
from ctx_magic.offline.shapes import (
    DEFAULT_MAX_OUTPUT as DEFAULT_MAX_OUTPUT,
)
from ctx_magic.offline.shapes import (
    DEFAULT_WINDOW as DEFAULT_WINDOW,
)
from ctx_magic.offline.shapes import (
    HTML_HEADERS,
    KNOWN_MODEL_PREFIX,
    LONG_CONTEXT_BETA,
    MAX_REQUEST_BYTES,
    MODEL_CREATED_AT,
    SSE_HEADERS,
    STANDARD_WINDOW,
    STANDARD_WINDOW_MODELS,
)
from ctx_magic.offline.shapes import (
    HttpReply as HttpReply,
)
from ctx_magic.offline.shapes import (
    OfflineConfig as OfflineConfig,
)
from ctx_magic.offline.shapes import (
    Outcome as _Outcome,
)
from ctx_magic.offline.shapes import (
    RecordedRequest as RecordedRequest,
)
from ctx_magic.offline.shapes import (
    error_reply as _error_reply,
)
from ctx_magic.offline.shapes import (
    json_reply as _json_reply,
)
from ctx_magic.offline.shapes import (
    provider_error as _provider_error,
)
from ctx_magic.offline.thinking import should_think, thinking_blocks
from ctx_magic.offline.validate import InvalidRequest, check_request
from ctx_magic.offline.wire import message_json, stream_events


def _tokens(request: Mapping[str, Any]) -> int:
    return input_tokens(request)


def _kinds(records: Iterable[RecordedRequest]) -> Counter[str]:
    return Counter(r.kind for r in records)


@dataclass
class _Counters:
    """The sequence numbers ids are made of (deterministic, never random)."""

    request: int = 0
    message: int = 0


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
        self.policy = policy or Policy()
        self.cache = PromptCache(clock)
        self._lock = threading.Lock()
        self._faults: deque[str] = deque()
        self._random: RandomFaults | None = None
        self._records: list[RecordedRequest] = []
        self._counters = _Counters()
        self.stall_release = threading.Event()
        """Set to let stalled streams finish (servers set it when they stop)."""

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
            self._records.clear()

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

    # --- the HTTP surface ---

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> HttpReply:
        """Answer one request; records it when it is an API call (/v1/...)."""
        method = method.upper()
        route = urllib.parse.urlsplit(path).path
        lowered = {k.lower(): v for k, v in headers.items()}
        with self._lock:
            if route.startswith("/_offline/"):
                return self._control(method, route, body)
            outcome = self._api(method, route, lowered, body)
            reply = outcome.reply
            record = RecordedRequest(
                method, route, outcome.body, outcome.kind, outcome.input_tokens, reply.status, outcome.fault,
                outcome.provider, outcome.betas,
            )
            self._records.append(record)
            self._counters.request += 1
            request_id = ("request-id", f"req_offline_{self._counters.request:06d}")
            return HttpReply(reply.status, (*reply.headers, request_id), reply.body, reply.dropped)

    def _control(self, method: str, route: str, body: bytes) -> HttpReply:
        if route == "/_offline/requests" and method == "GET":
            records = [r.to_json() for r in self._records]
            return _json_reply(200, {"requests": records, "counts": dict(_kinds(self._records))})
        if route == "/_offline/requests" and method == "DELETE":
            self._records.clear()
            return _json_reply(200, {"cleared": True})
        if route == "/_offline/faults" and method == "POST":
            try:
                faults = tuple(json.loads(body or b"{}").get("faults", []))
                check_faults(faults)
            except (ValueError, AttributeError, TypeError) as error:
                return _error_reply(ApiError(400, "invalid_request_error", str(error)))
            self._faults.extend(faults)
            return _json_reply(200, {"queued": list(self._faults)})
        return _error_reply(ApiError(404, "not_found_error", f"no offline control endpoint {method} {route}"))

    def _api(self, method: str, route: str, headers: Mapping[str, str], body: bytes) -> _Outcome:
        where = providers.route(method, route)
        if where is not None:
            return self._provider(where, headers, body)
        auth_error = self._check_auth(headers)
        if auth_error is not None:
            return _Outcome(_error_reply(auth_error))
        betas = tuple(b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip())
        if method == "POST" and route == "/v1/messages":
            return self._messages(body, betas=betas)
        if method == "POST" and route == "/v1/messages/count_tokens":
            return self._count_tokens(body)
        if method == "GET" and route == "/v1/models":
            return _Outcome(self._list_models())
        if method == "GET" and route.startswith("/v1/models/"):
            return _Outcome(self._model(urllib.parse.unquote(route.removeprefix("/v1/models/"))))
        return _Outcome(_error_reply(ApiError(404, "not_found_error", f"Not found: {method} {route}")))

    def _provider(self, where: providers.Route, headers: Mapping[str, str], body: bytes) -> _Outcome:
        """A request as Bedrock's or Vertex's SDK client sends it (providers.py)."""
        auth_error = providers.auth_error(where.provider, headers)
        if auth_error is not None:
            return _Outcome(_provider_error(where.provider, auth_error), provider=where.provider)
        try:
            body, body_betas = providers.first_party_body(where, body)
        except ValueError as error:
            failed = ApiError(400, "invalid_request_error", str(error))
            return _Outcome(_provider_error(where.provider, failed), provider=where.provider)
        header_betas = tuple(b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip())
        if where.operation == "count":
            return self._count_tokens(body, provider=where.provider)
        return self._messages(body, betas=body_betas or header_betas, provider=where.provider)

    @staticmethod
    def _check_auth(headers: Mapping[str, str]) -> ApiError | None:
        """No x-api-key (nor bearer token) is refused, and so is the key `invalid`."""
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not key:
            return ApiError(401, "authentication_error", "x-api-key header is required")
        if key == "invalid":
            return ApiError(401, "authentication_error", "invalid x-api-key")
        return None

    # --- endpoints ---

    def _parse(self, body: bytes, *, max_output: int | None,
               betas: tuple[str, ...] = ()) -> tuple[Any, ApiError | None]:
        if len(body) > MAX_REQUEST_BYTES:
            return None, STATUS_FAULTS["413"]
        try:
            request = json.loads(body or b"null")
            check_request(request, max_output=max_output)
            check_context_management(request, betas)
            check_compaction_blocks(request)
        except (ValueError, InvalidRequest) as error:
            return None, ApiError(400, "invalid_request_error", str(error))
        if not request["model"].startswith(KNOWN_MODEL_PREFIX):
            return request, ApiError(404, "not_found_error", f"model: {request['model']}")
        return request, None

    def _count_tokens(self, body: bytes, *, provider: str = "anthropic") -> _Outcome:
        request, error = self._parse(body, max_output=None, betas=tuple(BETA_OF.values()))
        if error is not None:
            return _Outcome(_provider_error(provider, error), body=request, provider=provider)
        tokens = _tokens(manage(request, _tokens).request) if request.get("context_management") else _tokens(request)
        return _Outcome(_json_reply(200, providers.count_body(provider, tokens)), input_tokens=tokens, body=request,
                        provider=provider)

    def _messages(self, body: bytes, *, betas: tuple[str, ...] = (), provider: str = "anthropic") -> _Outcome:
        request, error = self._parse(body, max_output=self.config.max_output, betas=betas)
        if error is not None:
            return _Outcome(_provider_error(provider, error), body=request, provider=provider)
        kind = self.policy.kind(request)
        managed = manage(request, _tokens)
        seen = managed.compacted_from or managed.request  # what the model reads before any compaction
        segments = request_segments(seen)
        tokens = sum(s.tokens for s in segments)
        fault = self._faults.popleft() if self._faults else (self._random.draw() if self._random else None)
        streaming = bool(request.get("stream"))
        failed = STATUS_FAULTS.get(fault or "")
        if fault == "overloaded_midstream" and not streaming:
            failed = STATUS_FAULTS["529"]  # no stream to break: the overload comes as a status
        window = self._window(request["model"], betas)
        if failed is None and (fault == "ptl" or tokens > window):
            failed = prompt_too_long(max(tokens, window + 1), window)
        if failed is None and managed.compaction is None and tokens + int(request["max_tokens"]) > window:
            failed = reply_past_window(tokens, int(request["max_tokens"]), window)
        outcome = functools.partial(_Outcome, kind=kind, input_tokens=tokens, fault=fault, body=request,
                                    provider=provider, betas=betas)
        if failed is not None:
            return outcome(_provider_error(provider, failed))
        if fault == "html_body":
            return outcome(HttpReply(200, HTML_HEADERS, [HTML_PAGE]))
        minimum = self.config.cache_minimum(request["model"])
        if managed.compaction is not None:  # the compaction read everything; the answer reads the summary
            segments = request_segments(managed.request)
        usage = self.cache.account(segments, minimum).to_json()
        message = self._message(request, usage, fault, managed)
        if streaming:
            stream = stream_body(fault, stream_events(message), self.stall_release)
            if provider == "bedrock":
                return outcome(HttpReply(200, providers.BEDROCK_STREAM_HEADERS, providers.bedrock_frames(stream)))
            return outcome(HttpReply(200, SSE_HEADERS, stream))
        if fault == "drop" or fault in STREAM_ONLY_FAULTS:  # a plain body cut short is a dropped one
            return outcome(HttpReply(200, (), [], dropped=True))
        return outcome(_json_reply(200, message))

    def _window(self, model: str, betas: tuple[str, ...]) -> int:
        """The window in force: Sonnet 4 and 4.5 keep the standard 200,000 unless the request
        carries the 1M-context beta header."""
        if STANDARD_WINDOW_MODELS.match(model) and LONG_CONTEXT_BETA not in betas:
            return min(self.config.window, STANDARD_WINDOW)
        return self.config.window

    def _message(self, request: Mapping[str, Any], usage: dict[str, Any], fault: str | None,
                 managed: Managed | None = None) -> dict[str, Any]:
        """The policy's answer (after its thinking), cut to max_tokens, with ids and usage; with
        the server's compaction block first, and its edits, when context management ran."""
        answer = self.policy.answer(request)
        thinking = thinking_blocks(request, redacted=fault == "redacted_thinking") if should_think(request) else []
        content, cut = fit_output([*thinking, *(dict(b) for b in answer.content)], int(request["max_tokens"]))
        if fault in ("empty_reply", "whitespace_reply"):
            content, cut = faulty_content(fault, content), False
        if managed is not None and managed.pause and managed.compaction is not None:
            content, cut = [], False
        # Ids come from a digest of the request: deterministic (whatever side calls ran in
        # between), and unique across server runs (a session resumed in a new kernel must not get
        # the tool ids its history already holds). The message id adds the server's counter, so
        # the same request asked twice still gets two ids, as from the real API.
        digest = hashlib.sha256(json.dumps(request.get("messages"), sort_keys=True).encode()).hexdigest()[:12]
        self._counters.message += 1
        calls = 0
        for block in content:
            if block["type"] == "tool_use":
                calls += 1
                block["id"] = f"toolu_offline_{digest}_{calls:02d}"
        stop = "max_tokens" if cut else "tool_use" if calls else answer.stop_reason.replace("tool_use", "end_turn")
        usage = {**usage, "output_tokens": output_tokens(content)}
        extra: dict[str, Any] = {}
        if managed is not None:
            content, stop, usage, extra = with_management(managed, request, content, stop, usage, _tokens)
        return {**message_json(f"msg_offline_{digest}_{self._counters.message:06d}", request["model"], content, stop,
                               usage), **extra}

    # --- models ---

    def _model_info(self, model_id: str) -> dict[str, Any]:
        return {
            "id": model_id,
            "type": "model",
            "display_name": f"{model_id} (offline stand-in)",
            "created_at": MODEL_CREATED_AT,
            "lifecycle": "active",
            "max_input_tokens": self._window(model_id, ()),  # Sonnet 4 / 4.5: 200,000 without the 1M beta
            "max_tokens": self.config.max_output,
            "capabilities": capabilities(self.config.thinking_types, self.config.context_edits),
        }

    def _model(self, model_id: str) -> HttpReply:
        if not model_id.startswith(KNOWN_MODEL_PREFIX):
            message = f"model: {model_id} is not known to the offline stand-in (ids start with '{KNOWN_MODEL_PREFIX}')"
            return _error_reply(ApiError(404, "not_found_error", message))
        return _json_reply(200, self._model_info(model_id))

    def _list_models(self) -> HttpReply:
        data = [self._model_info(m) for m in self.config.listed_models]
        page = {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None}
        page["last_id"] = data[-1]["id"] if data else None
        return _json_reply(200, page)

