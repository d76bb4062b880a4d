"""The SDK's errors as ctx_magic's own: one clear line for each thing the API or the transport
can raise, and the two ways a begun reply stream can break off."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    StreamOverloaded,
    SummaryBlockRefused,
    ThinkingRefused,
    UnknownModel,
    is_prompt_too_long,
)


def map_error(error: BaseException, model: str = "") -> ModelError:
    """One ctx_magic error, with one clear line, for anything the SDK or transport raised."""
    import anthropic

    if isinstance(error, ModelError):
        return error
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        message = api_message(error)
        if status == 200:  # an `error` event in a stream that had begun with HTTP 200
            return _midstream(_api_error_type(error), message)
        if is_prompt_too_long(status, message):
            return PromptTooLong.from_api_message(message)
        refused = (ThinkingRefused.from_api_message(message) or SummaryBlockRefused.from_api_message(message)
                   if status == 400 else None)
        if refused is not None:
            return refused
        if status == 413:
            return RequestTooLarge(f"The request is larger than the API accepts (413): {message}")
        if status == 401:
            return AuthenticationFailed(
                "The API rejected the credential (401). Check ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, a gateway's "
                "bearer token), or unset it to use the offline backend."
            )
        if status == 403:
            return AuthenticationFailed(f"The API refused access (403): {message}")
        if status == 404 and model:
            return UnknownModel.named(model, message)
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
        return NetworkError(f"The connection to the API failed ({text}).")
    return ModelError(f"The model call failed: {type(error).__name__}: {text}")


# Error events a stream can carry that asking again would not cure: the request itself is at fault.
CLIENT_ERROR_TYPES = frozenset({"invalid_request_error", "authentication_error", "permission_error",
                                "not_found_error", "request_too_large"})


def _midstream(error_type: str, message: str) -> ModelError:
    """An `error` event after the stream began: overloaded and server errors are asked again
    (like the 529 or 500 the SDK retries before a stream starts), the others are the request's fault."""
    sentence = message.rstrip(". ") or error_type
    if error_type in CLIENT_ERROR_TYPES:
        return ModelError(f"The API stopped the reply with an error ({error_type}): {sentence}.")
    return StreamOverloaded(f"The API stopped the reply mid-stream ({error_type or 'error'}: {sentence}).")


def _api_error_type(error: Any) -> str:
    body = getattr(error, "body", None)
    inner = body.get("error") if isinstance(body, Mapping) else None
    return str(inner.get("type") or "") if isinstance(inner, Mapping) else ""


def api_message(error: Any) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):  # Bedrock's shape: {"message": "..."}
            return str(body["message"])
    return str(getattr(error, "message", "") or error)


def broken(error: BaseException) -> StreamDropped:
    """A reply that broke off mid-stream, in one line naming what the transport said."""
    cause = error
    while isinstance(cause.__cause__, Exception) and not str(cause):
        cause = cause.__cause__
    text = str(cause) or type(cause).__name__
    return StreamDropped(f"The connection to the API broke while the reply was streaming ({text}).")


def incomplete(seen: set[str], response: Any) -> StreamDropped:
    """What a stream that never reached `message_stop` was: a reply cut short, or no reply at all."""
    kind = str(getattr(response, "headers", {}).get("content-type", "") or "no content type").split(";")[0]
    if "message_start" in seen or kind == "text/event-stream":
        return StreamDropped("The reply stream ended before the reply was complete (no message_stop).")
    return StreamDropped(f"The API answered with {kind} instead of a reply stream (HTTP "
                         f"{getattr(response, 'status_code', '?')}): a proxy or gateway on the way may have failed.")
