"""The error every request rule raises, and the walk over a request's blocks the rules share.

A rule names the offending place by its path in the request body, as the API does:
`messages.3.content.0`, `system.1`, `tools.2`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


class InvalidRequest(ValueError):
    """The request breaks a rule of the Messages API; str() is the API's message."""


def at(path: str, message: str) -> InvalidRequest:
    """An InvalidRequest whose message starts with the path it is about."""
    return InvalidRequest(f"{path}: {message}" if path else message)


@dataclass(frozen=True)
class Located:
    """A content block with its path, its message's index and role; `parent` for nested ones."""

    path: str
    block: Mapping[str, Any]
    message_index: int
    role: str
    parent: Mapping[str, Any] | None = None


def message_content(message: Mapping[str, Any], index: int) -> Iterator[Located]:
    """A message's blocks with their paths (a plain string is one text block at `.content`)."""
    role = str(message.get("role", ""))
    content = message.get("content")
    if isinstance(content, str):
        yield Located(f"messages.{index}.content", {"type": "text", "text": content}, index, role)
        return
    for j, block in enumerate(content if isinstance(content, list) else []):
        if isinstance(block, Mapping):
            yield Located(f"messages.{index}.content.{j}", block, index, role)


def nested_content(located: Located) -> Iterator[Located]:
    """The blocks inside a tool_result's list content, with their paths."""
    content = located.block.get("content")
    if located.block.get("type") != "tool_result" or not isinstance(content, list):
        return
    for k, inner in enumerate(content):
        if isinstance(inner, Mapping):
            yield Located(f"{located.path}.content.{k}", inner, located.message_index, located.role, located.block)


def all_blocks(history: list[Any]) -> Iterator[Located]:
    """Every block of every message, each tool_result followed by the blocks inside it."""
    for index, message in enumerate(history):
        if not isinstance(message, Mapping):
            continue
        for located in message_content(message, index):
            yield located
            yield from nested_content(located)
