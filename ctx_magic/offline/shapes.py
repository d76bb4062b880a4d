"""The stand-in's values: its settings, the requests it records, the HTTP answers it gives."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ctx_magic.context import model_families
from ctx_magic.offline import providers
from ctx_magic.offline.cache import minimum_cacheable_tokens
from ctx_magic.offline.counting import environment_unit
from ctx_magic.offline.faults import ApiError
from ctx_magic.offline.wire import error_json

DEFAULT_WINDOW = 200_000  # the API's standard context window
DEFAULT_MAX_OUTPUT = 64_000  # a current model's output limit
MAX_REQUEST_BYTES = 32_000_000  # the API refuses bodies over 32 MB with 413 request_too_large
KNOWN_MODEL_PREFIX = "claude-"
TEST_MODEL_PREFIX = "claude-offline"  # ids tests make up for the stand-in itself
ACCOUNTS = ("new", "old")  # created on or after 2026-08-31 00:00 UTC (the prefix check enforced by default), or before


def known_model(model_id: str) -> bool:
    """An id the stand-in answers for: a Claude model family's name (opus, sonnet, haiku, fable,
    mythos: a misspelt one is a 404, as from the API) or one of the stand-in's own test ids."""
    return model_id.startswith(TEST_MODEL_PREFIX) or (
        model_id.startswith(KNOWN_MODEL_PREFIX) and model_families.names_a_family(model_id))
LISTED_MODELS = ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5")
JSON_HEADERS = (("content-type", "application/json"),)
HTML_HEADERS = (("content-type", "text/html; charset=utf-8"),)
SSE_HEADERS = (("content-type", "text/event-stream"), ("cache-control", "no-cache"))



@dataclass(frozen=True)
class HttpReply:
    """One HTTP answer; `dropped` means: close the connection without answering at all (with a
    TCP reset when `reset`)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: Iterable[bytes]
    dropped: bool = False
    reset: bool = False


@dataclass
class RecordedRequest:
    """A request as the server saw it, for tests to read. Not frozen: the stand-in drops the body
    of an old record to bound what it keeps (app.KEPT_BODY_BYTES)."""

    method: str
    path: str
    body: Any  # the parsed JSON body, None when there was none or it did not parse
    kind: str  # "normal" / "compaction" / "memory" for /v1/messages, "other" for the rest
    input_tokens: int | None
    status: int
    fault: str | None = None
    provider: str = "anthropic"
    """anthropic | bedrock | vertex: whose paths and body the request came in."""
    betas: tuple[str, ...] = ()
    """The beta headers it carried (for Bedrock, its body's anthropic_beta)."""
    body_dropped: bool = False
    """Its body was dropped (None now) to keep the recorded bodies within their bound."""

    def drop_body(self) -> None:
        """Forget the body (the stand-in keeps only the newest ones), saying it was there."""
        self.body, self.body_dropped = None, True
    thinking_mismatches: tuple[dict[str, str], ...] = ()
    """The thinking blocks that failed the prefix check, each {type, path, reason}: type is
    `thinking_dropped`, `thinking_mismatch_allowed` (let through, on an old account) or
    `thinking_refused` (the request got the 400), whether or not the answer reported them."""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class OfflineConfig:
    """What the stand-in model looks like from outside."""

    window: int = DEFAULT_WINDOW
    """Context window in tokens: longer prompts get the API's prompt-too-long 400."""
    max_output: int = DEFAULT_MAX_OUTPUT
    """Largest max_tokens accepted; reported as the model's max_tokens."""
    listed_models: tuple[str, ...] = LISTED_MODELS
    """Ids returned by GET /v1/models (any claude- id is known)."""
    min_cacheable_tokens: int | None = None
    """Shortest prefix the prompt cache stores, in tokens; None: the model's own minimum
    (cache.minimum_cacheable_tokens, e.g. 1,024 for Sonnet). Tests with tiny prompts set 0."""
    thinking_types: tuple[str, ...] = ("enabled", "adaptive")
    """The thinking types the Models API reports the model takes."""
    context_edits: tuple[str, ...] = ("clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112")
    """The context-management strategies the Models API reports the model takes."""
    credential: str | None = None
    """The one API key or bearer token accepted, as a gateway configured with a key accepts only
    it; None: any non-empty credential but the key `invalid`."""
    account: str = "new"
    """How old the account is, for the prefix check of the models with preserved thinking: "new"
    (created on or after 2026-08-31, where a failing thinking block earns a 400 by default) or
    "old" (the check is not enforced unless the request asks for it; the blocks are let through)."""
    unit: str = field(default_factory=environment_unit)
    """How the server counts tokens: "calibrated" (like the real API), or on purpose otherwise
    ("x1.3", "x0.8", "noisy"; counting.UNITS) to test a client that counts differently.
    Defaults to the CTX_MAGIC_OFFLINE_UNIT environment variable, else "calibrated"."""

    def __post_init__(self) -> None:
        if self.account not in ACCOUNTS:
            raise ValueError(f"account must be one of {', '.join(ACCOUNTS)}, not {self.account!r}")

    def cache_minimum(self, model: str) -> int:
        """The minimum cacheable length in force for `model`."""
        return minimum_cacheable_tokens(model) if self.min_cacheable_tokens is None else self.min_cacheable_tokens


@dataclass(frozen=True)
class Outcome:
    reply: HttpReply
    kind: str = "other"
    input_tokens: int | None = None
    fault: str | None = None
    body: Any = None
    provider: str = "anthropic"
    betas: tuple[str, ...] = ()
    thinking_mismatches: tuple[dict[str, str], ...] = ()


def json_reply(status: int, data: Any, headers: tuple[tuple[str, str], ...] = ()) -> HttpReply:
    return HttpReply(status, JSON_HEADERS + headers, [json.dumps(data, ensure_ascii=False).encode()])


def error_reply(error: ApiError) -> HttpReply:
    return json_reply(error.status, error_json(error.error_type, error.message), error.headers)


def provider_error(provider: str, error: ApiError) -> HttpReply:
    """An error in the shape of the provider the request came through."""
    body, headers = providers.error_body(provider, error)
    return json_reply(error.status, body, headers)
