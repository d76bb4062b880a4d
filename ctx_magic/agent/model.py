"""The Model seam and its implementation on the official `anthropic` SDK.

The loop only sees `Model`: stream a request, count its tokens, tell the window. Everything
the SDK can raise is mapped to ctx_magic's own errors, each with one clear line (`api_errors`).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctx_magic.agent.api_errors import api_message, broken, incomplete, map_error
from ctx_magic.agent.catalog import provider_model_id, table_limits
from ctx_magic.errors import ModelError, StreamDropped, UnknownModel
from ctx_magic.messages import Block, Usage, usable_content
from ctx_magic.settings import CONTEXT_EDITS, DEFAULTS, ModelLimits


def quiet_sdk_advice() -> None:
    """The SDK warns, pointing at ctx_magic's own call, where a model takes a thinking budget only
    as deprecated: ctx_magic says it itself, once, in one line (RequestFrame.take_advice). Done on
    import; idempotent."""
    warnings.filterwarnings("ignore", message=r"Using Claude with \S+ and 'thinking\.type=enabled' is deprecated",
                            category=UserWarning, module=r"ctx_magic\.")


quiet_sdk_advice()

STREAM_ATTEMPTS = 3  # a reply that broke off mid-stream is asked for again, twice at most
STREAM_BACKOFF_SECONDS = 0.5  # the SDK's first retry wait, doubled at each retry after an overload
THINKING_TYPES = ("enabled", "adaptive")  # the order ModelLimits lists them in
BEDROCK_VERSION = "bedrock-2023-05-31"  # the anthropic_version Bedrock's InvokeModel bodies carry
BINDING_BETA = "thinking-binding-controls-2026-08-01"  # lets a request choose what a failed prefix check does
# input_transformations entries for thinking blocks that failed the prefix check: removed by the
# API, or (an account that does not enforce the check) shown to the model all the same.
INVALID_THINKING_TRANSFORMATIONS = ("thinking_dropped", "thinking_mismatch_allowed")


@dataclass(frozen=True)
class ModelRequest:
    """One Messages-API call, already in the API's shape."""

    system: Sequence[Block]
    tools: Sequence[Mapping[str, Any]]
    messages: Sequence[Mapping[str, Any]]
    max_tokens: int
    tool_choice: Mapping[str, Any] | None = None
    purpose: str = "main"  # main | compact | memory: for logs and recursion guards
    thinking: Mapping[str, Any] | None = None
    """The `thinking` parameter ({'type': 'enabled', 'budget_tokens': N} or {'type': 'adaptive'})."""
    betas: tuple[str, ...] = ()
    """Beta headers (the long window, context management, server compaction)."""
    context_management: Mapping[str, Any] | None = None
    """Server-side context edits and compaction (the 'server' strategy)."""
    compaction: Mapping[str, Any] | None = None
    """On-demand compaction ({'type': 'summarize', 'instructions': ...}): the answer is the API's
    summary alone, a compaction block (agent/on_demand.py)."""

    def params(self, model: str) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": self.max_tokens,
            "system": list(self.system),
            "messages": list(self.messages),
        }
        if self.tools:
            params["tools"] = list(self.tools)
        if self.tool_choice is not None:
            params["tool_choice"] = dict(self.tool_choice)
        if self.thinking is not None:
            params["thinking"] = dict(self.thinking)
        if self.context_management is not None:
            params["context_management"] = dict(self.context_management)
        if self.compaction is not None:
            params["compaction"] = dict(self.compaction)
        return params

    @property
    def beta(self) -> bool:
        """Whether the call goes to the beta endpoint (betas, context management or compaction asked)."""
        return bool(self.betas) or self.context_management is not None or self.compaction is not None

    def dropping_invalid_thinking(self) -> ModelRequest:
        """The same request, asking the API to drop the thinking blocks that fail its prefix check
        (and list them in `input_transformations`) instead of refusing the request. Thinking
        stays as asked: adaptive where no `thinking` was sent, as the models with the check
        think by default, and where it was 'disabled', which takes no such choice."""
        thinking = dict(self.thinking if self.thinking and self.thinking.get("type") != "disabled"
                        else {"type": "adaptive"})
        thinking["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
        betas = self.betas if BINDING_BETA in self.betas else (*self.betas, BINDING_BETA)
        return dataclasses.replace(self, thinking=thinking, betas=betas)


@dataclass(frozen=True)
class ModelReply:
    api_id: str
    content: tuple[Block, ...]
    stop_reason: str
    usage: Usage
    model: str = ""
    applied_edits: tuple[Mapping[str, Any], ...] = ()
    """The server's context edits applied to this request (context_management.applied_edits)."""
    compaction_usage: tuple[Usage, ...] = ()
    """Usage of server compaction iterations, billed beside `usage` (which sizes the context)."""
    invalid_thinking: tuple[str, ...] = ()
    """Where the request's thinking blocks that failed the prefix check were ('messages.3.content.0'),
    as the reply's input_transformations listed them."""

    @property
    def tool_uses(self) -> list[Block]:
        return [b for b in self.content if b.get("type") == "tool_use"]


class Model(Protocol):
    """What the loop needs from a model (the Messages API, or anything that speaks like it)."""

    name: str
    provider: str
    """Who serves it ('anthropic', 'bedrock', 'vertex'): a thinking block is bound to the model and its provider."""
    backend: str
    """How it is reached, as `%ctx status` shows it ('anthropic', 'offline', ...)."""

    def limits(self) -> ModelLimits: ...

    def stream(self, request: ModelRequest, on_text: Callable[[str], None] | None = None, *,
               on_thinking: Callable[[str], None] | None = None) -> ModelReply:
        """One streamed call, whole or not at all: a stream that began and did not reach
        `message_stop` (it ended early, or its connection broke or was reset) raises StreamDropped
        (a half reply, or a tool call with half its input, is never taken for a whole one)."""
        ...

    def count_tokens(self, request: ModelRequest) -> int: ...


def stream_reply(model: Model, request: ModelRequest, *, on_text: Callable[[str], None] | None = None,
                 on_thinking: Callable[[str], None] | None = None,
                 restarted: Callable[[int, int, StreamDropped], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep, attempts: int = STREAM_ATTEMPTS) -> ModelReply:
    """A whole reply: one that broke off mid-stream is asked for again (the SDK retries only a
    request that failed to start; a broken reply left nothing anywhere, so asking again is safe),
    after a wait when the server said it was overloaded. `restarted(attempt, attempts, error)`
    hears each new attempt, so what the broken one showed can be withdrawn."""
    for attempt in range(1, attempts + 1):
        try:
            return model.stream(request, on_text, on_thinking=on_thinking)
        except StreamDropped as error:
            if attempt == attempts:
                raise
            if restarted is not None:
                restarted(attempt + 1, attempts, error)
            if error.backoff:
                sleep(STREAM_BACKOFF_SECONDS * 2 ** (attempt - 1))
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class AnthropicModel:
    """A Model on the official SDK: streaming, usage with cache fields, count_tokens, limits.

    `client` is an `anthropic.Anthropic`, `AnthropicBedrock` or `AnthropicVertex`; `provider`
    says which, so the model id is mapped to the provider's and tokens are counted its way.
    """

    client: Any
    name: str = DEFAULTS.model
    provider: str = "anthropic"
    backend: str = "anthropic"
    """Which server answers: 'anthropic', 'bedrock', 'vertex' or 'offline' (shown in the status)."""
    _limits: ModelLimits | None = field(default=None, repr=False)

    @property
    def wire_name(self) -> str:
        """The id the provider knows the model by."""
        return provider_model_id(self.name, self.provider)

    def limits(self) -> ModelLimits:
        """The model's window and output cap: the Models API's, else the built-in table's."""
        if self._limits is None:
            self._limits = self._lookup_limits()
        return self._limits

    def _lookup_limits(self) -> ModelLimits:
        import anthropic

        table = table_limits(self.name)
        models = getattr(self.client, "models", None)  # Bedrock's and Vertex's clients have no Models API
        if models is None:
            return table
        try:
            info = models.retrieve(self.wire_name)
        except anthropic.NotFoundError as error:
            raise UnknownModel.named(self.name, api_message(error)) from error
        except anthropic.AuthenticationError as error:
            raise map_error(error, self.name) from error
        except Exception:  # noqa: BLE001 - any other failure: fall back to the table
            return table
        window = getattr(info, "max_input_tokens", None) or table.window
        max_output = getattr(info, "max_tokens", None) or table.max_output
        thinking, edits = _capabilities(getattr(info, "capabilities", None), table)
        return ModelLimits(int(window), int(max_output), "models-api", thinking_types=thinking,
                           long_window=table.long_window, long_context_beta=table.long_context_beta,
                           context_edits=edits, prefix_check=table.prefix_check, thinking_off=table.thinking_off,
                           budget_deprecated=table.budget_deprecated)

    def stream(self, request: ModelRequest, on_text: Callable[[str], None] | None = None, *,
               on_thinking: Callable[[str], None] | None = None) -> ModelReply:
        params = request.params(self.wire_name)
        messages = self.client.beta.messages if request.beta else self.client.messages
        if request.betas:
            params["betas"] = list(request.betas)
        seen: set[str] = set()
        try:
            with messages.stream(**params) as stream:
                for event in _events(stream):
                    seen.add(event.type)
                    if on_text is not None and event.type == "text":
                        on_text(event.text)
                    elif on_thinking is not None and event.type == "thinking":
                        on_thinking(event.thinking)
                if "message_stop" not in seen:
                    raise incomplete(seen, stream.response)
                final = stream.get_final_message()
        except ModelError:
            raise
        except Exception as error:  # noqa: BLE001 - mapped to one clear error
            raise map_error(error, self.name) from error
        edits = getattr(getattr(final, "context_management", None), "applied_edits", None) or []
        iterations = getattr(final.usage, "iterations", None) or []
        return ModelReply(
            api_id=final.id,
            content=usable_content(block.model_dump(exclude_none=True) for block in final.content),
            stop_reason=final.stop_reason or "end_turn",
            usage=_usage(final.usage),
            model=final.model,
            applied_edits=tuple(edit.model_dump(exclude_none=True) for edit in edits),
            compaction_usage=tuple(_usage(i) for i in iterations if getattr(i, "type", "") == "compaction"),
            invalid_thinking=_invalid_thinking(final),
        )

    def count_tokens(self, request: ModelRequest) -> int:
        """The API's count of a request (the exact count): the count endpoint of the provider (Bedrock's
        CountTokens operation, which its SDK client does not wrap, through the same signed client)."""
        params = request.params(self.wire_name)
        params.pop("max_tokens", None)
        if params["messages"] and params["messages"][-1].get("role") == "assistant":
            # Between turns the context ends with the model's answer, which the API would read as a
            # prefill that must open with thinking; the thinking setting does not change the count.
            params.pop("thinking", None)
        try:
            if self.provider == "bedrock":
                return _bedrock_count(self.client, self.wire_name, params, request.betas)
            if request.beta:
                return int(self.client.beta.messages.count_tokens(**params, betas=list(request.betas)).input_tokens)
            return int(self.client.messages.count_tokens(**params).input_tokens)
        except Exception as error:  # noqa: BLE001
            raise map_error(error, self.name) from error


def _events(stream: Any) -> Iterator[Any]:
    """The stream's events; a failure while reading them, once the stream has begun, is a broken
    reply (StreamDropped), whatever the SDK calls it: the request reached the API and its answer
    had started, so the SDK's retries of a request that failed to start are long over, and only
    asking again brings the whole reply. An `error` event the API sent is the API's word, mapped
    as such."""
    import anthropic

    events = iter(stream)
    while True:
        try:
            event = next(events)
        except StopIteration:
            return
        except anthropic.APIStatusError:
            raise
        except Exception as error:  # noqa: BLE001 - any failure of a begun stream is the same fact
            raise broken(error) from error
        yield event


def _invalid_thinking(final: Any) -> tuple[str, ...]:
    """The paths of the thinking blocks the reply's input_transformations report as failing the
    prefix check (the SDK types the entries; an SDK that does not know the field keeps it as extra)."""
    entries = getattr(final, "input_transformations", None) or (getattr(final, "model_extra", None) or {}).get(
        "input_transformations") or []
    found = []
    for entry in entries:
        kind, path = (entry.get("type"), entry.get("path")) if isinstance(entry, Mapping) else (
            getattr(entry, "type", None), getattr(entry, "path", None))
        if kind in INVALID_THINKING_TRANSFORMATIONS and path:
            found.append(str(path))
    return tuple(found)


def _usage(usage: Any) -> Usage:
    creation = getattr(usage, "cache_creation", None)
    return Usage(
        input_tokens=getattr(usage, "input_tokens", 0) or 0,
        output_tokens=getattr(usage, "output_tokens", 0) or 0,
        cache_creation_input_tokens=getattr(usage, "cache_creation_input_tokens", 0) or 0,
        cache_read_input_tokens=getattr(usage, "cache_read_input_tokens", 0) or 0,
        cache_creation_1h_input_tokens=getattr(creation, "ephemeral_1h_input_tokens", 0) or 0,
    )


def _supported(capability: Any) -> bool:
    return bool(getattr(capability, "supported", False))


def _capabilities(capabilities: Any, table: ModelLimits) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The thinking types and context edits the Models API reports (the table's when it reports none)."""
    if capabilities is None:
        return table.thinking_types, table.context_edits
    thinking = getattr(capabilities, "thinking", None)
    types = getattr(thinking, "types", None)
    accepted = tuple(t for t in THINKING_TYPES if _supported(getattr(types, t, None))) if types is not None else None
    if thinking is not None and not _supported(thinking):
        accepted = ()
    managed = getattr(capabilities, "context_management", None)
    edits = tuple(e for e in CONTEXT_EDITS if _supported(getattr(managed, e, None))) if managed is not None else None
    return (table.thinking_types if accepted is None else accepted), (table.context_edits if edits is None else edits)


def _bedrock_count(client: Any, model_id: str, params: dict[str, Any], betas: Sequence[str]) -> int:
    """Bedrock's CountTokens: POST /model/{id}/count-tokens with the InvokeModel body, base64."""
    import base64
    import json
    import urllib.parse

    body = {k: v for k, v in params.items() if k != "model"}
    body["anthropic_version"] = BEDROCK_VERSION
    body.setdefault("max_tokens", 1)  # the InvokeModel body requires it; it does not change the count
    if betas:
        body["anthropic_beta"] = list(betas)
    encoded = base64.b64encode(json.dumps(body).encode()).decode("ascii")
    path = f"/model/{urllib.parse.quote(model_id, safe=':')}/count-tokens"
    answer = client.post(path, body={"input": {"invokeModel": {"body": encoded}}}, cast_to=object)
    return int(answer["inputTokens"])
