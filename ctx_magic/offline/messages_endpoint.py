"""POST /v1/messages and /v1/messages/count_tokens: the request checked, the fault drawn, the answer built."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ctx_magic.offline import models, providers
from ctx_magic.offline.cache import Clock, PromptCache
from ctx_magic.offline.conversation import content_blocks, messages
from ctx_magic.offline.counting import (
    CALIBRATED,
    Unit,
    canonical,
    fit_output,
    input_tokens,
    output_tokens,
    request_segments,
    unit_named,
)
from ctx_magic.offline.faults import (
    HTML_PAGE,
    STATUS_FAULTS,
    STREAM_ONLY_FAULTS,
    ApiError,
    faulty_content,
    prompt_too_long,
    reply_past_window,
    stream_body,
)
from ctx_magic.offline.policy import Answer, Policy
from ctx_magic.offline.prefix_check import BINDING_BETA, check_block_binding, check_prefixes
from ctx_magic.offline.server_context import (
    BETA_OF,
    ON_DEMAND_BETA,
    Managed,
    check_compaction_blocks,
    check_compaction_param,
    check_context_management,
    manage,
    with_management,
)
from ctx_magic.offline.shapes import (
    HTML_HEADERS,
    MAX_REQUEST_BYTES,
    SSE_HEADERS,
    HttpReply,
    OfflineConfig,
    Outcome,
    json_reply,
    known_model,
    provider_error,
)
from ctx_magic.offline.thinking import should_think, thinking_blocks
from ctx_magic.offline.validate import InvalidRequest, check_request
from ctx_magic.offline.wire import message_json, stream_events


def parse_request(body: bytes, *, max_output: int | None, betas: tuple[str, ...] = (),
                  provider: str = "anthropic") -> tuple[Any, ApiError | None]:
    """The body as JSON, checked by the API's rules: a 413 over 32 MB, a 400 naming the place
    of the first broken rule, a 404 for an unknown model (the request still comes back, to be
    recorded)."""
    if len(body) > MAX_REQUEST_BYTES:
        return None, STATUS_FAULTS["413"]
    try:
        request = json.loads(body or b"null")
        check_request(request, max_output=max_output, provider=provider)
        check_context_management(request, betas)
        check_block_binding(request, betas)
        check_compaction_param(request, betas)
        check_compaction_blocks(request, betas)
    except (ValueError, InvalidRequest) as error:
        return None, ApiError(400, "invalid_request_error", str(error))
    if not known_model(request["model"]):
        return request, ApiError(404, "not_found_error", f"model: {request['model']}")
    return request, None


class MessagesEndpoint:
    """The Messages API's two endpoints. Not thread-safe alone: OfflineAPI calls it under its lock.

    `config` and `policy` come with each call, as the app holds them then (tests swap them
    between calls); the prompt cache, the stall release and the message counter live here.
    """

    def __init__(self, clock: Clock, next_fault: Callable[[], str | None]) -> None:
        self.cache = PromptCache(clock)
        self.stall_release = threading.Event()
        """Set to let stalled streams finish (servers set it when they stop)."""
        self._next_fault = next_fault
        """The fault the next model call meets, if any (drawn only once a request is valid)."""
        self._message_count = 0
        """Numbers the message ids, so the same request asked twice gets two ids."""

    def count_tokens(self, body: bytes, config: OfflineConfig, *, provider: str = "anthropic") -> Outcome:
        """POST /v1/messages/count_tokens: the same count the usage of a reply reports."""
        # count_tokens takes the betas' parameters and counts the conversation as sent
        request, error = parse_request(body, max_output=None, betas=(*BETA_OF.values(), ON_DEMAND_BETA, BINDING_BETA),
                                       provider=provider)
        if error is not None:
            return Outcome(provider_error(provider, error), body=request, provider=provider)
        count = functools.partial(input_tokens, unit=unit_named(config.unit))
        tokens = count(manage(request, count).request if request.get("context_management") else request)
        return Outcome(json_reply(200, providers.count_body(provider, tokens)), input_tokens=tokens, body=request,
                       provider=provider)

    def messages(self, body: bytes, config: OfflineConfig, policy: Policy, *, betas: tuple[str, ...] = (),
                 provider: str = "anthropic") -> Outcome:
        """POST /v1/messages: the policy's answer, plain or streamed, or the error the request
        (or the fault it meets) earns."""
        request, error = parse_request(body, max_output=config.max_output, betas=betas, provider=provider)
        if error is not None:
            return Outcome(provider_error(provider, error), body=request, provider=provider)
        kind = "compaction" if request.get("compaction") is not None else policy.kind(request)
        prefixes = check_prefixes(request, config.account)
        refusal = prefixes.refusal
        if refusal is not None:
            return Outcome(provider_error(provider, ApiError(400, "invalid_request_error", str(refusal))), kind=kind,
                           body=request, provider=provider, betas=betas,
                           thinking_mismatches=tuple(prefixes.mismatches()))
        unit = unit_named(config.unit)
        count = functools.partial(input_tokens, unit=unit)
        sizing = getattr(policy, "compaction_summary", None)  # a benchmark's policy sizes summaries as a model's
        sized = functools.partial(sizing, request) if sizing is not None else None
        managed = manage(prefixes.shown(request), count, prefixes.seal, sized)  # the check read it as sent
        seen = managed.compacted_from or managed.request  # what the model reads before any compaction
        segments = request_segments(seen, unit)
        tokens = sum(s.tokens for s in segments)
        fault = self._next_fault()
        streaming = bool(request.get("stream"))
        failed = STATUS_FAULTS.get(fault or "")
        if fault == "overloaded_midstream" and not streaming:
            failed = STATUS_FAULTS["529"]  # no stream to break: the overload comes as a status
        window = models.window(config, request["model"], betas)
        if failed is None and (fault == "ptl" or tokens > window):
            failed = prompt_too_long(max(tokens, window + 1), window)
        if failed is None and managed.compaction is None and tokens + int(request["max_tokens"]) > window:
            failed = reply_past_window(tokens, int(request["max_tokens"]), window)
        outcome = functools.partial(Outcome, kind=kind, input_tokens=tokens, fault=fault, body=request,
                                    provider=provider, betas=betas,
                                    thinking_mismatches=tuple(prefixes.mismatches()))
        if failed is not None:
            return outcome(provider_error(provider, failed))
        if fault == "html_body":
            return outcome(HttpReply(200, HTML_HEADERS, [HTML_PAGE]))
        minimum = config.cache_minimum(request["model"])
        if managed.compaction is not None and not managed.on_demand:  # the answer reads the summary
            segments = request_segments(managed.request, unit)
        usage = self.cache.account(segments, minimum).to_json()
        message = self._message(request, policy, usage, fault, managed, unit, prefixes.next_prefix)
        if BINDING_BETA in betas:
            message["input_transformations"] = prefixes.transformations()
        if streaming:
            stream = stream_body(fault, stream_events(message), self.stall_release)
            if provider == "bedrock":
                return outcome(HttpReply(200, providers.BEDROCK_STREAM_HEADERS, providers.bedrock_frames(stream)))
            return outcome(HttpReply(200, SSE_HEADERS, stream))
        if fault in ("drop", "reset") or fault in STREAM_ONLY_FAULTS:  # a plain body cut short is a dropped one
            return outcome(HttpReply(200, (), [], dropped=True, reset=fault == "reset"))
        return outcome(json_reply(200, message))

    def _message(self, request: Mapping[str, Any], policy: Policy, usage: dict[str, Any], fault: str | None,
                 managed: Managed | None = None, unit: Unit = CALIBRATED, prefix: bytes = b"") -> dict[str, Any]:
        """The policy's answer (after its thinking, bound to `prefix`), cut to max_tokens, with ids
        and usage; with the server's compaction block first, and its edits, when context
        management ran."""
        # An on-demand compaction is answered with the summary alone: the policy is not asked.
        answer = Answer((), "end_turn") if managed is not None and managed.on_demand else policy.answer(request)
        thinking = (thinking_blocks(request, redacted=fault == "redacted_thinking", prefix=prefix)
                    if should_think(request) else [])
        content, cut = fit_output([*thinking, *(dict(b) for b in answer.content)], int(request["max_tokens"]),
                                  request.get("model"))
        if fault in ("empty_reply", "whitespace_reply"):
            content, cut = faulty_content(fault, content), False
        if managed is not None and managed.pause and managed.compaction is not None:
            content, cut = [], False
        # Ids come from a digest of the request's messages: deterministic (whatever side calls ran
        # in between, wherever the cache breakpoints sit: two clients sending the same conversation
        # get the same ids, so the same token counts), and unique across server runs (a session
        # resumed in a new kernel must not get the tool ids its history already holds). The
        # message id adds the server's counter, so the same request asked twice still gets two
        # ids, as from the real API.
        unmarked = [{**m, "content": [canonical(b) for b in content_blocks(m)]} for m in messages(request)]
        digest = hashlib.sha256(json.dumps(unmarked, sort_keys=True).encode()).hexdigest()[:12]
        self._message_count += 1
        calls = 0
        for block in content:
            if block["type"] == "tool_use":
                calls += 1
                block["id"] = f"toolu_offline_{digest}_{calls:02d}"
        stop = "max_tokens" if cut else "tool_use" if calls else answer.stop_reason.replace("tool_use", "end_turn")
        usage = {**usage, "output_tokens": output_tokens(content, request.get("model"), unit)}
        if managed is not None and managed.on_demand and thinking:  # the thinking before the summary is billed
            walk = getattr(policy, "compaction_thinking", None)  # a benchmark's policy sizes it as a model's walk
            usage["output_tokens"] = walk(request) if walk is not None else output_tokens(thinking, request.get(
                "model"), unit)
        extra: dict[str, Any] = {}
        if managed is not None:
            content, stop, usage, extra = with_management(managed, request, content, stop, usage,
                                                          functools.partial(input_tokens, unit=unit))
        return {**message_json(f"msg_offline_{digest}_{self._message_count:06d}", request["model"], content, stop,
                               usage), **extra}
