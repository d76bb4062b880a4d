"""The stand-in as Amazon Bedrock and Google Vertex AI serve Claude: their paths and bodies.

The anthropic SDK's `AnthropicBedrock` and `AnthropicVertex` clients send the Messages API's
request body to other paths, with small changes; this module reads them back into a first-party
request, and writes answers the way those clients read them:

- **Bedrock** (`bedrock-runtime`): `POST /model/{id}/invoke` and `/invoke-with-response-stream`;
  the body has no `model` (it is in the path) nor `stream` (the path says it), and carries
  `anthropic_version` and the betas as `anthropic_beta`. A stream is AWS's binary event stream:
  each frame a `chunk` event whose JSON payload holds one server-sent event's data, base64, in
  `bytes`; an error mid-stream is an `exception` frame. Errors are `{"message": ...}` with the
  `x-amzn-ErrorType` header. Token counting is the CountTokens operation, `POST
  /model/{id}/count-tokens` with `{"input": {"invokeModel": {"body": <base64 body>}}}` ->
  `{"inputTokens": N}`. Requests are signed with AWS SigV4 (or a Bedrock API key as a bearer).
- **Vertex**: `POST /projects/{p}/locations/{r}/publishers/anthropic/models/{id}:rawPredict`
  (`:streamRawPredict` to stream, server-sent events as from the API), the body without `model`
  and with `anthropic_version`; counting at `.../models/count-tokens:rawPredict` with the model in
  the body. Requests carry a Google OAuth bearer token.

Neither has a Models API: the SDK clients do not offer one, and ctx_magic's table stands in.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import urllib.parse
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.offline.faults import ApiError
from ctx_magic.prices import canonical_model

_BEDROCK = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>invoke|invoke-with-response-stream|count-tokens)$")
_VERTEX = re.compile(r"^/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/publishers/anthropic/models/"
                     r"(?P<model>[^/:]+):(?P<op>rawPredict|streamRawPredict)$")
SIGV4 = re.compile(r"^AWS4-HMAC-SHA256 Credential=[^/]+/\d{8}/[a-z0-9-]+/bedrock/aws4_request, SignedHeaders=\S+, "
                   r"Signature=[0-9a-f]{64}$")
VERTEX_COUNT_MODEL = "count-tokens"
BEDROCK_STREAM_ERROR = "modelStreamErrorException"
BEDROCK_ERROR_TYPES = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
                       429: "ThrottlingException", 529: "ServiceUnavailableException"}


@dataclass(frozen=True)
class Route:
    """Which provider a request came through and what it asks: messages or count."""

    provider: str  # anthropic | bedrock | vertex
    operation: str  # messages | count
    stream: bool | None = None  # for Bedrock and Vertex the path says it; None: the body's `stream`
    model: str = ""


def route(method: str, path: str) -> Route | None:
    """The provider route of a POST, None for anything else (first-party paths included)."""
    if method != "POST":
        return None
    found = _BEDROCK.match(path)
    if found:
        model = urllib.parse.unquote(found["model"])
        op = found["op"]
        return Route("bedrock", "count" if op == "count-tokens" else "messages", op == "invoke-with-response-stream",
                     model)
    found = _VERTEX.match(path)
    if found:
        model = urllib.parse.unquote(found["model"])
        if model == VERTEX_COUNT_MODEL:
            return Route("vertex", "count")
        return Route("vertex", "messages", found["op"] == "streamRawPredict", model)
    return None


def auth_error(provider: str, headers: Mapping[str, str]) -> ApiError | None:
    """Bedrock: a SigV4 signature for the bedrock service, or a bearer key; Vertex: a bearer token."""
    value = headers.get("authorization", "")
    if provider == "bedrock":
        if value.startswith("Bearer ") and value[7:].strip():
            return None
        if SIGV4.match(value) and headers.get("x-amz-date"):
            return None
        return ApiError(403, "AccessDeniedException", "Missing or malformed AWS SigV4 authentication for bedrock")
    if not (value.startswith("Bearer ") and value[7:].strip()):
        return ApiError(401, "authentication_error", "Request had invalid authentication credentials.")
    return None


def first_party_body(where: Route, body: bytes) -> tuple[bytes, tuple[str, ...]]:
    """The provider's body as a first-party request body, and the betas it carried.

    Raises ValueError (a 400) when the body is not what the provider takes.
    """
    data = json.loads(body or b"null")
    if where.provider == "bedrock" and where.operation == "count":
        try:
            inner = data["input"]["invokeModel"]["body"]
            data = json.loads(base64.b64decode(inner, validate=True))
        except (KeyError, TypeError, binascii.Error) as error:
            raise ValueError("input.invokeModel.body: a base64 InvokeModel body is required") from error
    if not isinstance(data, dict):
        raise ValueError("the request body must be a JSON object")
    if not isinstance(data.pop("anthropic_version", None), str):
        raise ValueError("anthropic_version: Field required")
    betas = data.pop("anthropic_beta", None) or ()
    if where.provider == "bedrock":
        if "model" in data or "stream" in data:
            raise ValueError(f"{'model' if 'model' in data else 'stream'}: Extra inputs are not permitted")
        if where.operation == "count":
            data.pop("max_tokens", None)  # the InvokeModel body carries it; counting does not take it
        else:
            data["stream"] = bool(where.stream)
    if where.model:
        if "model" in data and where.provider == "vertex":
            raise ValueError("model: Extra inputs are not permitted (the model is in the URL)")
        data["model"] = where.model
    if where.provider == "vertex" and where.operation == "messages":
        data["stream"] = bool(where.stream)
    if isinstance(data.get("model"), str):
        data["model"] = canonical_model(data["model"])
    return json.dumps(data).encode(), tuple(str(b) for b in betas)


def error_body(provider: str, error: ApiError) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
    """An error as the provider words it (Bedrock: `{"message"}` and its error-type header)."""
    if provider == "bedrock":
        kind = BEDROCK_ERROR_TYPES.get(error.status, "InternalServerException")
        return {"message": error.message}, (("x-amzn-errortype", f"{kind}:http://internal.amazon.com/coral/"),
                                             *error.headers)
    return {"type": "error", "error": {"type": error.error_type, "message": error.message}}, error.headers


def count_body(provider: str, tokens: int) -> dict[str, Any]:
    return {"inputTokens": tokens} if provider == "bedrock" else {"input_tokens": tokens}


# --- AWS event stream ---


def _header(name: str, value: str) -> bytes:
    key, raw = name.encode(), value.encode()
    return len(key).to_bytes(1, "big") + key + b"\x07" + len(raw).to_bytes(2, "big") + raw  # 7: a string value


def aws_frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (lengths and their CRC), headers, payload, CRC."""
    encoded = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(encoded) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def _sse_parts(chunk: bytes) -> tuple[str, bytes]:
    event, data = "", b""
    for line in chunk.split(b"\n"):
        if line.startswith(b"event: "):
            event = line[7:].decode()
        elif line.startswith(b"data: "):
            data = line[6:]
    return event, data


def bedrock_frames(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """A first-party SSE stream re-framed as Bedrock streams it (pings dropped, errors as exceptions)."""
    for chunk in chunks:
        event, data = _sse_parts(chunk)
        if event == "ping" or not data:
            continue
        if event == "error":
            message = json.loads(data).get("error", {}).get("message", "error")
            yield aws_frame({":exception-type": BEDROCK_STREAM_ERROR, ":content-type": "application/json",
                             ":message-type": "exception"}, json.dumps({"message": message}).encode())
            continue
        payload = json.dumps({"bytes": base64.b64encode(data).decode("ascii")}).encode()
        yield aws_frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
                        payload)


BEDROCK_STREAM_HEADERS = (("content-type", "application/vnd.amazon.eventstream"),)
