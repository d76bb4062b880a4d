"""The request checks the offline server makes before answering, as the API makes them.

Only the rules a client of the Messages API can break by building its conversation wrongly
(SPEC M5): required fields, non-empty content, every tool_result answering a tool_use of the
message just before, and no tool_use left without its result. A broken request is answered
with HTTP 400 invalid_request_error naming the message, like the API does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctx_magic.offline.conversation import content_blocks


class InvalidRequest(ValueError):
    """The request breaks a rule of the Messages API; str() is the API's message."""


def _check_fields(request: Mapping[str, Any], max_output: int | None) -> None:
    if not isinstance(request.get("model"), str) or not request["model"]:
        raise InvalidRequest("model: Field required")
    history = request.get("messages")
    if not isinstance(history, list) or not history:
        raise InvalidRequest("messages: at least one message is required")
    if max_output is None:
        return
    max_tokens = request.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Field required (an integer of at least 1)")
    if max_tokens > max_output:
        raise InvalidRequest(
            f"max_tokens: {max_tokens} > {max_output}, which is the maximum allowed number of "
            f"output tokens for {request['model']}"
        )


def _check_content(index: int, message: Any, is_last: bool) -> None:
    if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
        raise InvalidRequest(f"messages.{index}: each message needs a role of 'user' or 'assistant'")
    blocks = content_blocks(message)
    if not blocks and not (is_last and message["role"] == "assistant"):
        raise InvalidRequest(
            f"messages.{index}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    for j, block in enumerate(blocks):
        if block.get("type") == "text" and not str(block.get("text", "")).strip():
            raise InvalidRequest(f"messages.{index}.content.{j}: text content blocks must be non-empty")


def _tool_use_ids(message: Mapping[str, Any]) -> list[str]:
    return [str(b.get("id")) for b in content_blocks(message) if b.get("type") == "tool_use"]


def _check_tool_pairs(history: list[Mapping[str, Any]]) -> None:
    for index, message in enumerate(history):
        previous = history[index - 1] if index else None
        offered = _tool_use_ids(previous) if previous and previous.get("role") == "assistant" else []
        answered = [str(b.get("tool_use_id")) for b in content_blocks(message) if b.get("type") == "tool_result"]
        stray = [i for i in answered if i not in offered]
        if stray:
            raise InvalidRequest(
                f"messages.{index}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{stray[0]}. Each `tool_result` block must have a corresponding `tool_use` block in "
                "the previous message."
            )
        if message.get("role") == "assistant" and index + 1 < len(history):
            missing = [i for i in _tool_use_ids(message) if i not in _answered(history[index + 1])]
            if missing:
                raise InvalidRequest(
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )


def _answered(message: Mapping[str, Any]) -> set[str]:
    if message.get("role") != "user":
        return set()
    return {str(b.get("tool_use_id")) for b in content_blocks(message) if b.get("type") == "tool_result"}


def check_request(request: Any, *, max_output: int | None) -> None:
    """Raise InvalidRequest with the API's wording if the request breaks a rule.

    `max_output` is the model's output limit; None for count_tokens, which takes no max_tokens.
    """
    if not isinstance(request, Mapping):
        raise InvalidRequest("the request body must be a JSON object")
    _check_fields(request, max_output)
    history = request["messages"]
    for index, message in enumerate(history):
        _check_content(index, message, index == len(history) - 1)
    _check_tool_pairs(history)
