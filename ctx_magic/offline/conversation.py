"""Reading a Messages-API request body as a conversation: the views the offline policy needs.

Everything here takes the raw JSON of a request (plain dicts, as they arrived on the wire) and
never changes it. String content is read as one text block, the way the API reads it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.messages import Block, result_text

Request = Mapping[str, Any]

# A traceback or an exception line in a result marks it as an error even without is_error.
_ERROR_MARK = re.compile(r"Traceback \(most recent call last\)|^\w+(Error|Exception): ", re.MULTILINE)
_MARKDOWN_HEADING = re.compile(r"^#{1,6} \S.*$", re.MULTILINE)


def content_blocks(message: Mapping[str, Any]) -> list[Block]:
    """A message's content as a list of blocks (a plain string is one text block)."""
    content = message.get("content", [])
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)]


def system_blocks(request: Request) -> list[Block]:
    """The system prompt as a list of text blocks (a plain string is one block)."""
    system = request.get("system")
    if not system:
        return []
    if isinstance(system, str):
        return [{"type": "text", "text": system}]
    return [b for b in system if isinstance(b, dict)]


def messages(request: Request) -> list[Mapping[str, Any]]:
    return [m for m in request.get("messages", []) if isinstance(m, Mapping)]


def message_text(message: Mapping[str, Any]) -> str:
    """The text blocks of a message joined by blank lines (tool results left out)."""
    return "\n\n".join(b.get("text", "") for b in content_blocks(message) if b.get("type") == "text")


def latest_user(request: Request) -> Mapping[str, Any] | None:
    return next((m for m in reversed(messages(request)) if m.get("role") == "user"), None)


def latest_user_text(request: Request) -> str:
    message = latest_user(request)
    return message_text(message) if message is not None else ""


# Context a client puts around the user's ask (a compaction summary, re-read files, notes on the
# tools, a snip marker) is background, not a request: a model would not re-run code quoted there.
BACKGROUND_PREFIXES = (
    "This session is being continued",
    "The earlier part of this conversation was summarized",
    "<recent-file",
    "<context-refresh",
    "Tools available:",
    "Session notes are kept",
    "[earlier conversation truncated",
    "(Notebook cells the user ran before",
    "<pinned>",
    "[The user removed pin",
    "<background-runs>",
)


def is_background(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith(BACKGROUND_PREFIXES) or "earlier messages were snipped" in stripped[:200]


def asked_text(request: Request) -> str:
    """The latest user text without the background blocks around it."""
    message = latest_user(request)
    if message is None:
        return ""
    blocks = [b.get("text", "") for b in content_blocks(message) if b.get("type") == "text"]
    return "\n\n".join(t for t in blocks if not is_background(t))


def is_tool_results_only(message: Mapping[str, Any]) -> bool:
    """Whether a user message carries tool results and nothing but them."""
    blocks = content_blocks(message)
    return bool(blocks) and all(b.get("type") == "tool_result" for b in blocks)


def first_line(text: str, limit: int = 120) -> str:
    """The first non-empty line of a text, cut to `limit` characters."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def brief(text: str, limit: int = 120, separator: str = " ") -> str:
    """All of a text on one line (its lines stripped and joined), cut to `limit` characters."""
    line = separator.join(part.strip() for part in text.splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def last_line(text: str, limit: int = 200) -> str:
    """The last non-empty line (an exception's own line sits at the end of a traceback)."""
    for line in reversed(text.splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def requested_headings(text: str) -> list[str]:
    """The markdown headings (`# Title`, `## Title`) a prompt lists, in order, each once."""
    return list(dict.fromkeys(match.group(0).strip() for match in _MARKDOWN_HEADING.finditer(text)))


def is_error_result(block: Block) -> bool:
    return bool(block.get("is_error")) or bool(_ERROR_MARK.search(result_text(block)))


def tool_input_text(block: Block) -> str:
    """A tool call's input as text: the `code` field when there is one, else its JSON."""
    tool_input = block.get("input", {})
    if isinstance(tool_input, Mapping) and isinstance(tool_input.get("code"), str):
        return tool_input["code"]
    return json.dumps(tool_input, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Step:
    """One step of the conversation, in order: what the analysis walk reports."""

    kind: str  # "user", "assistant", "tool_call", "tool_result", "error"
    text: str
    name: str = ""  # the tool's name, for calls and results


def events(history: Sequence[Mapping[str, Any]]) -> Iterator[Step]:
    """Walk messages in order and yield user texts, assistant texts, tool calls and results."""
    names: dict[str, str] = {}
    for message in history:
        role = message.get("role")
        for block in content_blocks(message):
            kind = block.get("type")
            if kind == "text" and block.get("text", "").strip():
                yield Step("user" if role == "user" else "assistant", block["text"])
            elif kind == "tool_use":
                names[str(block.get("id"))] = str(block.get("name", ""))
                yield Step("tool_call", tool_input_text(block), str(block.get("name", "")))
            elif kind == "tool_result":
                name = names.get(str(block.get("tool_use_id")), "tool")
                outcome = "error" if is_error_result(block) else "tool_result"
                yield Step(outcome, result_text(block), name)
