"""How the offline server measures a request: the prompt as an ordered list of segments.

A segment is one cacheable unit of the prompt, in the order the API builds its cache prefix:
tool definitions, then system blocks, then every content block of every message. Each carries
its token count (through `ctx_magic.context.tokens.count_text` on a canonical text rendering),
a running hash of the prefix that ends with it (cache_control left out, so marking a block does
not change what it is) and its cache breakpoint, if any. The input tokens of a request are the
sum over its segments, so `count_tokens` and the usage of a reply always agree.

The hash of every message block also covers three request-level facts (`message_context`):
the tool_choice, the thinking settings and whether the prompt holds any image. Anthropic's
prompt-caching docs say a change in any of them invalidates every cached message block while
tools and system stay cached; folding them in where the messages start gives exactly that.
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
    if kind == "compaction":
        return str(block.get("content") or "")
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


def control_ttl(control: Any) -> str | None:
    """The lifetime a cache_control asks for ("5m" unless it says "1h"), None without one."""
    if not isinstance(control, Mapping):
        return None
    ttl = control.get("ttl", DEFAULT_TTL)
    return ttl if ttl in TTL_SECONDS else DEFAULT_TTL


def breakpoint_ttl(block: Mapping[str, Any]) -> str | None:
    """A block's breakpoint: its own cache_control, or one on a block nested in its content
    (a tool_result's text), which marks the same boundary."""
    own = control_ttl(block.get("cache_control"))
    if own is not None:
        return own
    nested = block.get("content")
    if isinstance(nested, list):
        for inner in nested:
            if isinstance(inner, Mapping) and control_ttl(inner.get("cache_control")) is not None:
                return control_ttl(inner.get("cache_control"))
    return None


def _normalized_choice(request: Request) -> Any:
    choice = request.get("tool_choice")
    return {"type": "auto"} if choice is None else choice  # leaving it out means auto


def _normalized_thinking(request: Request) -> Any:
    thinking = request.get("thinking")
    return {"type": "disabled"} if thinking is None else thinking  # leaving it out means disabled


def has_images(request: Request) -> bool:
    """Whether any message (or tool result in one) holds an image."""
    for message in messages(request):
        for block in content_blocks(message):
            if block.get("type") == "image":
                return True
            nested = block.get("content")
            if isinstance(nested, list) and any(isinstance(b, Mapping) and b.get("type") == "image" for b in nested):
                return True
    return False


def message_context(request: Request) -> str:
    """The request-level facts every cached message prefix depends on (see the module doc)."""
    facts = {"tool_choice": _normalized_choice(request), "thinking": _normalized_thinking(request),
             "images": has_images(request)}
    return "context:" + json.dumps(facts, sort_keys=True)


def _units(request: Request) -> list[tuple[str, int, str | None]]:
    """(hash key, tokens, breakpoint) per block in cache order: tools, system, messages."""
    units: list[tuple[str, int, str | None]] = []
    for tool in request.get("tools") or []:
        units.append((f"tool:{canonical(tool)}", _count(render_tool(tool)), breakpoint_ttl(tool)))
    for block in system_blocks(request):
        units.append((f"system:{canonical(block)}", _count(str(block.get("text", ""))), breakpoint_ttl(block)))
    context = message_context(request)  # folded into the first message block, so into all after it
    for message in messages(request):
        role = str(message.get("role", ""))
        for i, block in enumerate(content_blocks(message)):
            marker = _count(f"{role}:") if i == 0 else 0
            key = f"{context}\n{role}:{i}:{canonical(block)}"
            context = ""
            units.append((key, marker + block_count(block), breakpoint_ttl(block)))
    automatic = control_ttl(request.get("cache_control"))
    if automatic is not None and units:  # top-level cache_control: a breakpoint on the last block
        key, tokens, own = units[-1]
        units[-1] = (key, tokens, own or automatic)
    return units


def request_segments(request: Request) -> list[Segment]:
    """The prompt's segments in cache order: tools, system, then message blocks.

    The first block of each message also counts its role marker, as the API frames messages.
    """
    segments: list[Segment] = []
    running = hashlib.sha256()
    for key, tokens, ttl in _units(request):
        data = key.encode("utf-8")
        running.update(len(data).to_bytes(8, "big") + data)  # length-prefixed: no ambiguous joins
        segments.append(Segment(tokens, running.copy().hexdigest(), ttl))
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
