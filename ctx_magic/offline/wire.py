"""What goes on the wire: Message JSON, the server-sent events of a stream, error bodies.

The shapes are the Messages API's, as the anthropic SDK parses them: a stream is
message_start, ping, then per content block a content_block_start, several
content_block_delta (text_delta, input_json_delta, for thinking thinking_delta then one
signature_delta, for the server's compaction one compaction_delta) and a content_block_stop,
then a message_delta with the stop reason and the output tokens, and message_stop. A
redacted_thinking block arrives whole in its content_block_start. An `error` event carries an
error body, as mid-stream failures do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from ctx_magic.offline.conversation import Block

TEXT_PIECE_CHARS = 48  # a text delta's size: small enough that every reply streams in pieces
JSON_PIECE_CHARS = 16  # tool input JSON arrives in pieces too, so clients must reassemble it


def message_json(
    message_id: str,
    model: str,
    content: list[Block],
    stop_reason: str | None,
    usage: Mapping[str, Any],
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage),
    }


def error_json(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def pieces(text: str, size: int) -> list[str]:
    """`text` cut into consecutive pieces of at most `size` characters (at least one piece)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def error_event(error_type: str, message: str) -> bytes:
    """The `error` event a stream carries when the API fails after the stream began."""
    return sse("error", error_json(error_type, message))


def _delta(index: int, delta: Mapping[str, Any]) -> bytes:
    return sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _start(index: int, block: Mapping[str, Any]) -> bytes:
    return sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _thinking_events(index: int, block: Block) -> Iterator[bytes]:
    if block["type"] == "redacted_thinking":
        yield _start(index, block)
        return
    yield _start(index, {"type": "thinking", "thinking": "", "signature": ""})
    for part in pieces(block.get("thinking", ""), TEXT_PIECE_CHARS):
        yield _delta(index, {"type": "thinking_delta", "thinking": part})
    yield _delta(index, {"type": "signature_delta", "signature": block.get("signature", "")})


def _block_events(index: int, block: Block) -> Iterator[bytes]:
    if block["type"] in ("thinking", "redacted_thinking"):
        yield from _thinking_events(index, block)
    elif block["type"] == "compaction":  # the server's summary: its start, then its content in one delta
        yield _start(index, {"type": "compaction", "content": None, "signature": block.get("signature")})
        yield _delta(index, {"type": "compaction_delta", "content": block.get("content")})
    elif block["type"] == "tool_use":
        yield _start(index, {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
        for part in pieces(json.dumps(block["input"], ensure_ascii=False), JSON_PIECE_CHARS):
            yield _delta(index, {"type": "input_json_delta", "partial_json": part})
    else:
        yield _start(index, {"type": "text", "text": ""})
        for part in pieces(block.get("text", ""), TEXT_PIECE_CHARS):
            yield _delta(index, {"type": "text_delta", "text": part})
    yield sse("content_block_stop", {"type": "content_block_stop", "index": index})


def stream_events(message: Mapping[str, Any]) -> list[bytes]:
    """A finished message as the list of SSE chunks that stream it, one event per chunk."""
    usage = dict(message["usage"])
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    chunks = [sse("message_start", {"type": "message_start", "message": start}), sse("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        chunks.extend(_block_events(index, block))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    final_usage = {k: v for k, v in usage.items() if k != "cache_creation"}
    chunks.append(sse("message_delta", {"type": "message_delta", "delta": delta, "usage": final_usage}))
    chunks.append(sse("message_stop", {"type": "message_stop"}))
    return chunks
