"""The Model seam and its implementation on the official `anthropic` SDK.

The loop only sees `Model`: stream a request, count its tokens, tell the window. Everything
the SDK can raise is mapped here to ctx_magic's own errors, each with one clear line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctx_magic.errors import (
    AuthenticationFailed,
    ModelError,
    NetworkError,
    Overloaded,
    PromptTooLong,
    RateLimited,
    RequestTooLarge,
    ServerError,
    StreamDropped,
    UnknownModel,
    is_prompt_too_long,
)
from ctx_magic.messages import Block, Usage
from ctx_magic.settings import DEFAULT_MODEL, ModelLimits

# Used when the Models API cannot be asked (older servers, errors): (window, max output).
MODEL_TABLE: tuple[tuple[str, int, int], ...] = (
    ("claude-opus-4-1", 200_000, 32_000),
    ("claude-opus-4", 200_000, 32_000),
    ("claude-sonnet-4", 200_000, 64_000),
    ("claude-haiku-4", 200_000, 64_000),
    ("claude-3-7-sonnet", 200_000, 64_000),
    ("claude-3-5-haiku", 200_000, 8_192),
    ("claude-3-5-sonnet", 200_000, 8_192),
)
FALLBACK_LIMITS = (200_000, 32_000)


@dataclass(frozen=True)
class ModelRequest:
    """One Messages-API call, already in the API's shape."""

    system: Sequence[Block]
    tools: Sequence[Mapping[str, Any]]
    messages: Sequence[Mapping[str, Any]]
    max_tokens: int
    tool_choice: Mapping[str, Any] | None = None
    purpose: str = "main"  # main | compact | memory: for logs and recursion guards

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
        return params


@dataclass(frozen=True)
class ModelReply:
    api_id: str
    content: tuple[Block, ...]
    stop_reason: str
    usage: Usage
    model: str = ""

    @property
    def tool_uses(self) -> list[Block]:
        return [b for b in self.content if b.get("type") == "tool_use"]


class Model(Protocol):
    """What the loop needs from a model (the Messages API, or anything that speaks like it)."""

    name: str

    def limits(self) -> ModelLimits: ...

    def stream(self, request: ModelRequest, on_text: Callable[[str], None] | None = None) -> ModelReply: ...

    def count_tokens(self, request: ModelRequest) -> int: ...


def table_limits(model: str) -> ModelLimits:
    for prefix, window, max_output in MODEL_TABLE:
        if model.startswith(prefix):
            return ModelLimits(window, max_output, "table")
    return ModelLimits(*FALLBACK_LIMITS, "table")


def map_error(error: BaseException, model: str = "") -> ModelError:
    """One ctx_magic error, with one clear line, for anything the SDK or transport raised."""
    import anthropic

    if isinstance(error, ModelError):
        return error
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        message = _api_message(error)
        if is_prompt_too_long(status, message):
            return PromptTooLong.from_api_message(message)
        if status == 413:
            return RequestTooLarge(f"The request is larger than the API accepts (413): {message}")
        if status == 401:
            return AuthenticationFailed(
                "The API rejected the key (401). Check ANTHROPIC_API_KEY, or unset it to use the offline backend."
            )
        if status == 403:
            return AuthenticationFailed(f"The API refused access (403): {message}")
        if status == 404 and model:
            return UnknownModel(f"Unknown model {model!r}: the API does not offer it ({message}).")
        sentence = message.rstrip(". ")  # the API's own message often ends with a full stop already
        if status == 429:
            return RateLimited(f"Rate limited by the API (429) after retries: {sentence}. Wait a moment and rerun.")
        if status == 529:
            return Overloaded(f"The API is overloaded (529) after retries: {sentence}. Try again shortly.")
        if status >= 500:
            return ServerError(f"The API failed ({status}) after retries: {message}")
        return ModelError(f"The API refused the request ({status}): {message}")
    if isinstance(error, anthropic.APITimeoutError):
        return NetworkError("The API did not answer in time (timeout) after retries.")
    if isinstance(error, anthropic.APIConnectionError):
        return NetworkError(f"Could not reach the API after retries: {error}")
    text = str(error) or type(error).__name__
    if type(error).__module__.startswith(("httpx", "httpcore", "h11")) or isinstance(error, OSError):
        return StreamDropped(f"The connection to the API broke while the reply was streaming ({text}).")
    return ModelError(f"The model call failed: {type(error).__name__}: {text}")


def _api_message(error: Any) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(error, "message", "") or error)


@dataclass
class AnthropicModel:
    """A Model on the official SDK: streaming, usage with cache fields, count_tokens, limits."""

    client: Any  # anthropic.Anthropic
    name: str = DEFAULT_MODEL
    _limits: ModelLimits | None = field(default=None, repr=False)

    def limits(self) -> ModelLimits:
        """The model's window and output cap: the Models API's, else the built-in table's."""
        if self._limits is None:
            self._limits = self._lookup_limits()
        return self._limits

    def _lookup_limits(self) -> ModelLimits:
        import anthropic

        try:
            info = self.client.models.retrieve(self.name)
        except anthropic.NotFoundError as error:
            raise UnknownModel(f"Unknown model {self.name!r}: {_api_message(error)}") from error
        except anthropic.AuthenticationError as error:
            raise map_error(error, self.name) from error
        except Exception:  # noqa: BLE001 - any other failure: fall back to the table
            found = table_limits(self.name)
        else:
            window = getattr(info, "max_input_tokens", None) or table_limits(self.name).window
            max_output = getattr(info, "max_tokens", None) or table_limits(self.name).max_output
            found = ModelLimits(int(window), int(max_output), "models-api")
        return found

    def stream(self, request: ModelRequest, on_text: Callable[[str], None] | None = None) -> ModelReply:
        try:
            with self.client.messages.stream(**request.params(self.name)) as stream:
                for event in stream:
                    if on_text is not None and event.type == "text":
                        on_text(event.text)
                final = stream.get_final_message()
        except ModelError:
            raise
        except Exception as error:  # noqa: BLE001 - mapped to one clear error
            raise map_error(error, self.name) from error
        usage = final.usage
        return ModelReply(
            api_id=final.id,
            content=tuple(block.model_dump(exclude_none=True) for block in final.content),
            stop_reason=final.stop_reason or "end_turn",
            usage=Usage(
                input_tokens=usage.input_tokens or 0,
                output_tokens=usage.output_tokens or 0,
                cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
                cache_read_input_tokens=usage.cache_read_input_tokens or 0,
            ),
            model=final.model,
        )

    def count_tokens(self, request: ModelRequest) -> int:
        params = request.params(self.name)
        params.pop("max_tokens", None)
        try:
            return int(self.client.messages.count_tokens(**params).input_tokens)
        except Exception as error:  # noqa: BLE001
            raise map_error(error, self.name) from error
