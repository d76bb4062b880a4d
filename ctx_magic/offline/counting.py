"""How the offline server measures a request: the prompt as an ordered list of segments.

A segment is one cacheable unit of the prompt, in the order the API builds its cache prefix:
tool definitions, then system blocks, then every content block of every message. Each carries
its token count (through `ctx_magic.context.tokens.count_text` on a canonical text rendering),
a running hash of the prefix that ends with it (cache_control left out, so marking a block does
not change what it is) and its cache breakpoint, if any. The input tokens of a request are the
sum over its segments, so `count_tokens` and the usage of a reply always agree.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.context.tokens import IMAGE_TOKENS, count_text
from ctx_magic.messages import result_text
from ctx_magic.offline.conversation import Block, Request, content_blocks, messages, system_blocks

# The API bills images and documents by size; a flat figure keeps the count deterministic and
# matches the client's own estimate (SPEC T2).
FLAT_BLOCK_TYPES = frozenset({"image", "document"})
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}  # the API's two prompt-cache lifetimes
DEFAULT_TTL = "5m"
COUNT_MEMO_SIZE = 16_384  # blocks remembered: a growing conversation re-sends the same ones each turn


@functools.lru_cache(maxsize=COUNT_MEMO_SIZE)
def _count(text: str) -> int:
    """count_text, remembered: every request re-counts the whole conversation before it."""
    return count_text(text)


@dataclass(frozen=True)
class Segment:
    """One block of the prompt: its tokens, the hash of the prefix ending here, its breakpoint."""

    tokens: int
    prefix_hash: str
    ttl: str | None  # "5m" / "1h" when the block carries cache_control, else None


def canonical(block: Mapping[str, Any]) -> str:
    """The block as sorted JSON without cache_control: what the cache hashes."""
    return json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)


def render_block(block: Block) -> str:
    """The text a content block is counted by (its words, not its JSON wrapping)."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return f"{block.get('name', '')} {json.dumps(block.get('input', {}), ensure_ascii=False)}"
    if kind == "tool_result":
        return f"result {block.get('tool_use_id', '')}: {result_text(block)}"
    if kind == "thinking":
        return str(block.get("thinking", ""))
    if kind == "redacted_thinking":
        return str(block.get("data", ""))
    return canonical(block)


def render_tool(tool: Mapping[str, Any]) -> str:
    """A tool definition as counted: name, description and input schema."""
    schema = json.dumps(tool.get("input_schema", {}), sort_keys=True, ensure_ascii=False)
    return f"tool {tool.get('name', '')}: {tool.get('description', '')}\n{schema}"


def block_count(block: Block) -> int:
    if block.get("type") in FLAT_BLOCK_TYPES:
        return IMAGE_TOKENS
    tokens = _count(render_block(block))
    content = block.get("content")
    if block.get("type") == "tool_result" and isinstance(content, list):
        tokens += IMAGE_TOKENS * sum(1 for b in content if b.get("type") in FLAT_BLOCK_TYPES)
    return tokens


def breakpoint_ttl(block: Mapping[str, Any]) -> str | None:
    control = block.get("cache_control")
    if not isinstance(control, Mapping):
        return None
    ttl = control.get("ttl", DEFAULT_TTL)
    return ttl if ttl in TTL_SECONDS else DEFAULT_TTL


def request_segments(request: Request) -> list[Segment]:
    """The prompt's segments in cache order: tools, system, then message blocks.

    The first block of each message also counts its role marker, as the API frames messages.
    """
    units: list[tuple[str, int, Mapping[str, Any]]] = []
    for tool in request.get("tools") or []:
        units.append((f"tool:{canonical(tool)}", _count(render_tool(tool)), tool))
    for block in system_blocks(request):
        units.append((f"system:{canonical(block)}", _count(str(block.get("text", ""))), block))
    for message in messages(request):
        role = str(message.get("role", ""))
        for i, block in enumerate(content_blocks(message)):
            marker = _count(f"{role}:") if i == 0 else 0
            units.append((f"{role}:{i}:{canonical(block)}", marker + block_count(block), block))
    segments: list[Segment] = []
    running = hashlib.sha256()
    for key, tokens, block in units:
        data = key.encode("utf-8")
        running.update(len(data).to_bytes(8, "big") + data)  # length-prefixed: no ambiguous joins
        segments.append(Segment(tokens, running.copy().hexdigest(), breakpoint_ttl(block)))
    return segments


def input_tokens(request: Request) -> int:
    """Tokens of the whole prompt, as count_tokens and the usage of a reply report them."""
    return sum(s.tokens for s in request_segments(request))


def output_tokens(content: list[Block]) -> int:
    """Tokens of generated content: text as written, a tool call as name plus JSON input."""
    return sum(count_text(render_block(b)) for b in content)


def truncate_text(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` (by characters) that counts at most `max_tokens`."""
    if count_text(text) <= max_tokens:
        return text
    low, high = 0, len(text)  # invariant: text[:low] fits, text[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if count_text(text[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle
    return text[:low]


def fit_output(content: list[Block], max_tokens: int) -> tuple[list[Block], bool]:
    """Content cut to `max_tokens` (text shortened, tool calls that do not fit dropped).

    Returns the content and whether anything was cut (then the stop reason is max_tokens).
    """
    kept: list[Block] = []
    left = max_tokens
    for block in content:
        tokens = count_text(render_block(block))
        if tokens <= left:
            kept.append(block)
            left -= tokens
            continue
        if block.get("type") == "text" and left > 0:
            cut = truncate_text(str(block.get("text", "")), left)
            if cut:
                kept.append({**block, "text": cut})
        return kept, True
    return kept, False
