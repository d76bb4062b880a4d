"""How the offline server measures a request: the prompt as an ordered list of segments.

A segment is one cacheable unit of the prompt, in the order the API builds its cache prefix:
tool definitions, then system blocks, then every content block of every message. Each carries
its token count (`ctx_magic.context.api_count`, the count calibrated on real Claude traffic;
the request's frame and hidden prompts go with the first segment), a running hash of the prefix
that ends with it (cache_control left out, so marking a block does not change what it is) and
its cache breakpoint, if any. The input tokens of a request are the sum over its segments, so
`count_tokens` and the usage of a reply always agree.

A `Unit` other than the calibrated one makes the server count differently on purpose (30 %
more, 20 % less, or each block off by a different amount), to test that a client learns the
server's unit instead of trusting its own.

The hash of every message block also covers three request-level facts (`message_context`):
the tool_choice, the thinking settings and whether the prompt holds any image. Anthropic's
prompt-caching docs say a change in any of them invalidates every cached message block while
tools and system stay cached; folding them in where the messages start gives exactly that.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.context import api_count, block_count, model_families
from ctx_magic.offline.conversation import Block, Request, content_blocks, messages, system_blocks

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}  # the API's two prompt-cache lifetimes
DEFAULT_TTL = "5m"
UNIT_VARIABLE = "CTX_MAGIC_OFFLINE_UNIT"  # the environment's choice of unit, for test rigs and the soak


@dataclass(frozen=True)
class Unit:
    """How the stand-in's count relates to the calibrated one."""

    name: str
    scale: float = 1.0
    """Every count times this."""
    noise: float = 0.0
    """Each block's count also off by up to this share either way, drawn from its digest (the
    same block always counts the same, so count_tokens, usage and the cache agree)."""

    def apply(self, tokens: int, key: str) -> int:
        if self.scale == 1.0 and not self.noise:
            return tokens
        factor = self.scale
        if self.noise:
            draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") / 2**32
            factor *= 1 + self.noise * (2 * draw - 1)
        return math.ceil(tokens * factor)


UNITS = {
    "calibrated": Unit("calibrated"),
    "x1.3": Unit("x1.3", 1.3),  # a client that undercounts by 30 % (e.g. a newer tokenizer)
    "x0.8": Unit("x0.8", 0.8),  # one that overcounts
    "noisy": Unit("noisy", 1.05, 0.3),  # blocks off by -25 % to +35 %, a little more on average
}
CALIBRATED = UNITS["calibrated"]


def unit_named(name: str | None) -> Unit:
    """The unit of that name (`UNITS`), the calibrated one for None or an empty name."""
    if not name:
        return CALIBRATED
    if name not in UNITS:
        raise ValueError(f"unknown token unit {name!r}: one of {', '.join(UNITS)}")
    return UNITS[name]


def environment_unit() -> str:
    """The unit the environment asks for (`CTX_MAGIC_OFFLINE_UNIT`), "calibrated" by default."""
    name = os.environ.get(UNIT_VARIABLE) or "calibrated"
    unit_named(name)  # an unknown name fails here, where the server starts
    return name


@dataclass(frozen=True)
class Segment:
    """One block of the prompt: its tokens, the hash of the prefix ending here, its breakpoint."""

    tokens: int
    prefix_hash: str
    ttl: str | None  # "5m" / "1h" when the block carries cache_control, else None


def canonical(block: Mapping[str, Any]) -> str:
    """The block as sorted JSON without cache_control: what the cache hashes."""
    return json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)


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


def _units(request: Request, unit: Unit) -> list[tuple[str, int, str | None]]:
    """(hash key, tokens, breakpoint) per block in cache order: tools, system, messages. The
    request's frame and hidden prompts (tool use, thinking, structured output) count with the
    first unit, where the API puts them."""
    family = model_families.family_of(request.get("model"))
    units: list[tuple[str, int, str | None]] = []
    for tool in request.get("tools") or []:
        units.append((f"tool:{canonical(tool)}", api_count.tool_tokens(tool, family), breakpoint_ttl(tool)))
    for block in system_blocks(request):
        units.append((f"system:{canonical(block)}", block_count.block_tokens(block, family), breakpoint_ttl(block)))
    context = message_context(request)  # folded into the first message block, so into all after it
    counts = api_count.message_counts(request, family)
    for message, row in zip(messages(request), counts):
        role = str(message.get("role", ""))
        for i, (block, tokens) in enumerate(zip(content_blocks(message), row)):
            key = f"{context}\n{role}:{i}:{canonical(block)}"
            context = ""
            units.append((key, tokens, breakpoint_ttl(block)))
    overhead = api_count.request_overhead(request, family)
    if units:
        key, tokens, ttl = units[0]
        units[0] = (key, tokens + overhead, ttl)
    else:
        units.append(("frame", overhead, None))
    automatic = control_ttl(request.get("cache_control"))
    if automatic is not None and units:  # top-level cache_control: a breakpoint on the last block
        key, tokens, own = units[-1]
        units[-1] = (key, tokens, own or automatic)
    return [(key, unit.apply(tokens, key), ttl) for key, tokens, ttl in units]


def request_segments(request: Request, unit: Unit = CALIBRATED) -> list[Segment]:
    """The prompt's segments in cache order: tools, system, then message blocks."""
    segments: list[Segment] = []
    running = hashlib.sha256()
    for key, tokens, ttl in _units(request, unit):
        data = key.encode("utf-8")
        running.update(len(data).to_bytes(8, "big") + data)  # length-prefixed: no ambiguous joins
        segments.append(Segment(tokens, running.copy().hexdigest(), ttl))
    return segments


def input_tokens(request: Request, unit: Unit = CALIBRATED) -> int:
    """Tokens of the whole prompt, as count_tokens and the usage of a reply report them."""
    return sum(s.tokens for s in request_segments(request, unit))


def output_tokens(content: list[Block], model: str | None = None, unit: Unit = CALIBRATED) -> int:
    """Tokens of generated content, counted as the API counts the same blocks sent back."""
    family = model_families.family_of(model)
    return sum(unit.apply(block_count.block_tokens(b, family), canonical(b)) for b in content)


def truncate_text(text: str, max_tokens: int, family: model_families.Family = model_families.CLAUDE_5) -> str:
    """The longest prefix of `text` (by characters) that counts at most `max_tokens`."""
    if model_families.text_tokens(text, family) <= max_tokens:
        return text
    low, high = 0, len(text)  # invariant: text[:low] fits, text[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if model_families.text_tokens(text[:middle], family) <= max_tokens:
            low = middle
        else:
            high = middle
    return text[:low]


def fit_output(content: list[Block], max_tokens: int, model: str | None = None) -> tuple[list[Block], bool]:
    """Content cut to `max_tokens` (text shortened, tool calls that do not fit dropped).

    Returns the content and whether anything was cut (then the stop reason is max_tokens).
    """
    family = model_families.family_of(model)
    kept: list[Block] = []
    left = max_tokens
    for block in content:
        tokens = block_count.block_tokens(block, family)
        if tokens <= left:
            kept.append(block)
            left -= tokens
            continue
        if block.get("type") == "text" and left > 0:
            cut = truncate_text(str(block.get("text", "")), left, family)
            if cut:
                kept.append({**block, "text": cut})
        return kept, True
    return kept, False
