"""The message model every layer shares.

A message is the Messages-API shape (`role` plus a tuple of content blocks, each a plain
dict exactly as the API takes it) wrapped with the metadata ctx_magic needs: a uuid, a
timestamp, the API message id and usage of the response that produced it, and a kind.
Messages are values: layers never mutate one, they build a new one with `with_content`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid as uuidlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

Role = Literal["user", "assistant"]
Kind = Literal["normal", "summary", "attachment", "boundary", "meta"]
Block = dict[str, Any]

KINDS: tuple[Kind, ...] = ("normal", "summary", "attachment", "boundary", "meta")
# Boundaries and meta messages are bookkeeping for ctx_magic and never reach the API.
UNSENT_KINDS: frozenset[str] = frozenset({"boundary", "meta"})


def new_uuid() -> str:
    return str(uuidlib.uuid4())


@dataclass(frozen=True)
class Usage:
    """Token usage the API reported for one response."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0
    """The part of `cache_creation_input_tokens` written for an hour (billed at the 1h rate)."""

    @property
    def prompt_tokens(self) -> int:
        """Size of the request that produced the response (all input, cached or not)."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def context_tokens(self) -> int:
        """What the conversation occupies once the response is appended (the anchored count)."""
        return self.prompt_tokens + self.output_tokens

    def to_json(self) -> dict[str, int]:
        data = dataclasses.asdict(self)
        if not self.cache_creation_1h_input_tokens:
            del data["cache_creation_1h_input_tokens"]  # records from before the split read the same
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Usage:
        return cls(**{f.name: int(data.get(f.name) or 0) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Message:
    """One message of the canonical conversation with its metadata."""

    role: Role
    content: tuple[Block, ...]
    kind: Kind = "normal"
    uuid: str = field(default_factory=new_uuid)
    timestamp: float = 0.0
    api_id: str | None = None
    usage: Usage | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def sent(self) -> bool:
        """Whether the message goes to the API (boundaries and meta messages never do)."""
        return self.kind not in UNSENT_KINDS

    def with_content(self, content: Iterable[Block]) -> Message:
        return dataclasses.replace(self, content=tuple(content))

    def blocks(self, block_type: str) -> Iterator[Block]:
        return (b for b in self.content if b.get("type") == block_type)

    @cached_property
    def memo(self) -> dict[str, Any]:
        """Per-instance cache for values derived from this (immutable) message, e.g. its tokens."""
        return {}

    @cached_property
    def text(self) -> str:
        """The plain text of the message's text blocks, joined by newlines."""
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def shown_text(self) -> str:
        """The text a reader is shown: the text blocks, and the summary a compaction block holds."""
        return "\n".join(str(b.get("content") or "") if b.get("type") == "compaction" else b.get("text", "")
                         for b in self.content if b.get("type") in ("text", "compaction"))

    @property
    def tool_use_ids(self) -> list[str]:
        return [b["id"] for b in self.blocks("tool_use")]

    @property
    def tool_result_ids(self) -> list[str]:
        return [b["tool_use_id"] for b in self.blocks("tool_result")]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "uuid": self.uuid,
            "role": self.role,
            "kind": self.kind,
            "timestamp": self.timestamp,
            "content": list(self.content),
        }
        if self.api_id is not None:
            data["api_id"] = self.api_id
        if self.usage is not None:
            data["usage"] = self.usage.to_json()
        if self.meta:
            data["meta"] = dict(self.meta)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        role = data["role"]
        kind = data.get("kind", "normal")
        if role not in ("user", "assistant") or kind not in KINDS:
            raise ValueError(f"bad role or kind: {role!r}, {kind!r}")
        content = data["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        timestamp = float(data.get("timestamp", 0.0))
        if not math.isfinite(timestamp):
            raise ValueError("timestamp is not a finite number")
        return cls(
            role=role,
            content=tuple(dict(b) for b in content),
            kind=kind,
            uuid=str(data["uuid"]),
            timestamp=timestamp,
            api_id=data.get("api_id"),
            usage=Usage.from_json(data["usage"]) if data.get("usage") else None,
            meta=dict(data.get("meta") or {}),
        )


# -- constructors used across the package -------------------------------------------------


def text_block(text: str) -> Block:
    return {"type": "text", "text": text}


THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def usable_content(blocks: Iterable[Block]) -> tuple[Block, ...]:
    """Blocks as they may be stored and sent: text blocks of only whitespace dropped, and the
    trailing whitespace of the last text block cut (the API refuses both in a later request)."""
    kept = [b for b in blocks if b.get("type") != "text" or str(b.get("text", "")).strip()]
    last = max((i for i, b in enumerate(kept) if b.get("type") == "text"), default=None)
    if last is not None and kept[last]["text"] != kept[last]["text"].rstrip():
        kept[last] = {**kept[last], "text": kept[last]["text"].rstrip()}
    return tuple(kept)


def says_something(content: Iterable[Block]) -> bool:
    """Whether a reply holds more than thinking: text, a tool call, a compaction. An answer of
    nothing (or only whitespace, or only thinking) must never be stored as a message."""
    return any(b.get("type") not in THINKING_TYPES for b in usable_content(content))


def user_text(text: str, *, kind: Kind = "normal", timestamp: float = 0.0, **meta: Any) -> Message:
    return Message("user", (text_block(text),), kind=kind, timestamp=timestamp, meta=meta)


def tool_result_block(tool_use_id: str, content: str | list[Block], *, is_error: bool = False) -> Block:
    block: Block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def tool_use_block(tool_use_id: str, name: str, tool_input: Mapping[str, Any]) -> Block:
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": dict(tool_input)}


# -- text helpers -------------------------------------------------------------------------


def result_text(block: Block) -> str:
    """The text of a tool_result block, whether its content is a string or a list of blocks."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def result_chars(block: Block) -> int:
    """Characters of text in a tool_result (images are not counted: the tool-result budget counts text)."""
    content = block.get("content", "")
    if isinstance(content, str):
        return len(content)
    return sum(len(b.get("text", "")) for b in content if b.get("type") == "text")


def clean_text(text: str) -> str:
    """Replace lone surrogates (from undecodable bytes) so the text can always be written as UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def decode_output(data: bytes | str) -> str:
    """Tool output as text: UTF-8 when it decodes, else a readable rendering of the bytes.

    Text in another encoding is decoded with replacement characters; binary output (NUL or
    many control bytes) becomes a short description and a hex preview, so nothing undecodable
    reaches the transcript or the model.
    """
    if isinstance(data, str):
        return clean_text(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    sample = data[:4096]
    controls = sum(b < 32 and b not in (9, 10, 12, 13) or b == 127 for b in sample)
    # Text in a legacy encoding has bytes over 127 but few control bytes; binary data has NULs.
    if b"\0" not in sample and controls <= 0.1 * len(sample):
        return data.decode("utf-8", "replace")
    head = data[:256]
    hexdump = "\n".join(head[i : i + 16].hex(" ") for i in range(0, len(head), 16))
    return f"[binary output: {len(data):,} bytes; first {len(head)} as hex]\n{hexdump}"


_CELL_ID = re.compile(r"^cell_(\d+)_[0-9a-f]+$")


def notebook_cell_id(execution_count: int | None, unique: str | None = None) -> str:
    """The tool_use id of a notebook cell entering the context: its execution count inside, and
    a random part, because counts start again at 1 after a kernel restart and ids must not repeat."""
    return f"cell_{execution_count or 0}_{unique or uuidlib.uuid4().hex[:12]}"


def notebook_cell_code(tool_input: Mapping[str, Any]) -> str:
    """What a notebook_cell call holds of the cell's code: its source; for a cell of the agent's own
    code run again, the diff of the user's edit, or which call's code ran unchanged."""
    if isinstance(tool_input.get("source"), str):
        return tool_input["source"]
    if isinstance(tool_input.get("diff"), str):
        return tool_input["diff"]
    if tool_input.get("ran_again"):
        return f"(the code of call {tool_input['ran_again']}, run again unchanged)"
    return ""


def cell_of(tool_use_id: str) -> int | None:
    """The execution count a notebook_cell tool_use id was made from, else None."""
    match = _CELL_ID.match(tool_use_id)
    return int(match.group(1)) if match and int(match.group(1)) else None
