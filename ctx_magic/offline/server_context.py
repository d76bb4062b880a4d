"""The API's own context management in the stand-in: context editing and server compaction,
deterministic, as the context-editing and compaction docs describe them.

- `context_management.edits` needs its beta header (`context-management-2025-06-27` for the
  clear edits, `compact-2026-01-12` for compaction), otherwise the request is refused.
- **Compaction blocks sent back**: a `compaction` block must verify (its signature covers its
  content) and come with a compaction beta header; every message block before the last one is
  dropped before anything else, as the API drops them.
- `clear_thinking_20251015`: `keep` is "all" or `{"type": "thinking_turns", "value": N}` (1 by
  default); thinking blocks of older assistant messages are removed.
- `clear_tool_uses_20250919`: when the prompt is over `trigger` (100,000 input tokens by
  default), every tool result but the `keep` most recent (3 by default), and but those of
  `exclude_tools`, is replaced by a placeholder (and its call's input emptied when
  `clear_tool_inputs` says so); if that frees less than `clear_at_least`, nothing is cleared.
- `compact_20260112`: when the prompt (after the edits) is over `trigger` (150,000 by default,
  50,000 at least), the answer opens with a `compaction` block summarizing the conversation and
  is written with that summary as its context; the usage carries the compaction's own iteration.
- `applied_edits` lists the edits that cleared something, with what they cleared.
- **On-demand compaction** (top-level `compaction: {"type": "summarize"}`, beta
  `compact-2026-09-04`, not with `context_management`, on the models the docs list): the answer is
  the `compaction` block alone, stop reason `compaction`, billed as one call that read the
  conversation and wrote the summary. `instructions` replace the server's prompt: ones that ask
  for an <analysis> and numbered <summary> sections get them, as a message asking so would;
  otherwise the summary is the stand-in's own extractive one.
- A compaction block's signature seals what it stands for, the state of the conversation it
  summarized and its last role, so the prefix check lets kept turns keep valid thinking
  (prefix_check.py); only a compaction run on a model with preserved thinking is sealed so.

Edits apply to what the model sees; the client's history is not changed (the API is stateless),
and the prefix check has read it as sent, before any edit.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctx_magic.context import model_families
from ctx_magic.context.tokens import count_text
from ctx_magic.offline.compaction import on_demand_summary, server_summary
from ctx_magic.offline.conversation import Block, Request, content_blocks, messages
from ctx_magic.offline.invalid import InvalidRequest, at
from ctx_magic.offline.thinking import SERVER_SECRET, THINKING_BLOCK_TYPES, UNBOUND_PREFIX

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
COMPACTION_BETA = "compact-2026-01-12"
ON_DEMAND_BETA = "compact-2026-09-04"  # the top-level `compaction` parameter
# The models the on-demand compaction docs list (exact ids, a date suffix allowed).
ON_DEMAND_MODELS = (
    "claude-fable-5-1", "claude-mythos-5-1", "claude-fable-5", "claude-mythos-5", "claude-mythos-preview",
    "claude-opus-5-5", "claude-opus-5", "claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6",
    "claude-sonnet-5-5", "claude-sonnet-5", "claude-sonnet-4-6", "claude-haiku-5-5",
)
DATE_SUFFIX = re.compile(r"-\d{8}$")
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"
BETA_OF = {CLEAR_TOOL_USES: CONTEXT_MANAGEMENT_BETA, CLEAR_THINKING: CONTEXT_MANAGEMENT_BETA, COMPACT: COMPACTION_BETA}
DEFAULT_TOOL_TRIGGER = 100_000  # the docs' defaults for clear_tool_uses
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1
DEFAULT_COMPACT_TRIGGER = 150_000  # the docs' default compaction trigger...
MIN_COMPACT_TRIGGER = 50_000  # ...and its minimum
CLEARED_RESULT = "[Tool result cleared by context management]"


ROLE_CODES = {"user": b"u", "assistant": b"a", "system": b"s", "": b"-"}  # the last summarized message's role


def _compaction_mac(content: str, seal: bytes) -> bytes:
    return hmac.new(SERVER_SECRET, b"compaction\0" + seal + content.encode("utf-8"), hashlib.sha256).digest()


def sign_compaction(content: str, boundary: bytes = UNBOUND_PREFIX, last_role: str = "") -> str:
    """A compaction block's signature: the state of the conversation it summarized and the role of
    its last message (so the prefix check accepts the summary in place of what it replaced, see
    prefix_check.py), and a MAC over them and the summary."""
    seal = boundary + ROLE_CODES.get(last_role, b"-")
    return base64.b64encode(seal + _compaction_mac(content, seal)).decode("ascii")


@dataclass(frozen=True)
class Seal:
    """What a compaction block the stand-in signed stands for."""

    boundary: bytes
    """The state of the conversation it summarized (prefix_check.py)."""
    last_role: str
    """The role of the last message it summarized ("" when unknown)."""


UNSEALED = Seal(UNBOUND_PREFIX, "")  # a summary that stands for no conversation the prefix check knows


def compaction_block(summary: str, seal: Seal) -> Block:
    return {"type": "compaction", "content": summary,
            "signature": sign_compaction(summary, seal.boundary, seal.last_role)}


def compaction_seal(block: Mapping[str, Any]) -> Seal | None:
    """What a compaction block stands for; None when its signature does not verify (or it has no
    summary: a failed compaction, a no-op)."""
    content, signature = block.get("content"), block.get("signature")
    if not isinstance(content, str) or not isinstance(signature, str):
        return None
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return None
    width = len(UNBOUND_PREFIX)
    seal, mac = raw[:-width], raw[-width:]
    roles = {code: role for role, code in ROLE_CODES.items()}
    if len(seal) != width + 1 or seal[-1:] not in roles or not hmac.compare_digest(_compaction_mac(content, seal), mac):
        return None
    return Seal(seal[:width], roles[seal[-1:]])


@dataclass
class Managed:
    """What the model is shown of a request, and what the server did to it."""

    request: dict[str, Any]
    applied_edits: list[dict[str, Any]] = field(default_factory=list)
    compaction: Block | None = None
    """The compaction block the answer opens with (None: no compaction this time)."""
    compacted_from: dict[str, Any] | None = None
    """The request the compaction iteration read (for its usage)."""
    pause: bool = False
    on_demand: bool = False
    """The request asked for the summary alone (`compaction`): the answer is the block, billed as
    one call that read the conversation and wrote the summary."""

    def edited(self, request: dict[str, Any]) -> None:
        """The request as an edit of the server left it."""
        self.request = request

    def compact(self, pause: bool, seal: Seal, *, on_demand: bool = False, summary: str | None = None) -> None:
        """The conversation becomes one summary (the server's own unless given): the answer opens
        with it and is written after it."""
        before = self.request
        summary = server_summary(messages(before)) if summary is None else summary
        self.compaction = compaction_block(summary, seal)
        self.compacted_from = before
        self.pause = pause
        self.on_demand = self.on_demand or on_demand  # a later compaction of the same request keeps it
        self.request = {**before, "messages": [{"role": "user", "content": [{"type": "text", "text": summary}]}]}


def _edits(request: Request) -> list[Mapping[str, Any]]:
    managed = request.get("context_management")
    if managed is None:
        return []
    edits = managed.get("edits") if isinstance(managed, Mapping) else None
    if not isinstance(edits, list):
        raise at("context_management.edits", "Input should be a valid list")
    return edits


def _value(spec: Any, kind: str, default: int, path: str) -> int:
    if spec is None:
        return default
    if not isinstance(spec, Mapping) or spec.get("type") != kind or not isinstance(spec.get("value"), int):
        raise at(path, f"Input should be {{'type': '{kind}', 'value': <integer>}}")
    return int(spec["value"])


def check_context_management(request: Request, betas: Sequence[str]) -> None:
    """The edits are known, their beta headers were sent, and their settings are in range."""
    for i, edit in enumerate(_edits(request)):
        kind = edit.get("type") if isinstance(edit, Mapping) else None
        if kind not in BETA_OF:
            raise at(f"context_management.edits.{i}.type", f"Input tag '{kind}' does not match the expected tags")
        if BETA_OF[kind] not in betas:
            raise InvalidRequest(f"context_management.edits.{i}: {kind} requires the beta header "
                                 f"'anthropic-beta: {BETA_OF[kind]}'")
        if kind == COMPACT:
            trigger = _value(edit.get("trigger"), "input_tokens", DEFAULT_COMPACT_TRIGGER,
                             f"context_management.edits.{i}.trigger")
            if trigger < MIN_COMPACT_TRIGGER:
                raise at(f"context_management.edits.{i}.trigger.value",
                         f"Input should be greater than or equal to {MIN_COMPACT_TRIGGER}")


def takes_on_demand_compaction(model: str) -> bool:
    """Whether the model takes the `compaction` parameter (an id naming no family, the stand-in's
    own test ids, takes it too)."""
    return DATE_SUFFIX.sub("", model) in ON_DEMAND_MODELS or model_families.model_version(model) is None


def check_compaction_param(request: Request, betas: Sequence[str]) -> None:
    """On-demand compaction: `{"type": "summarize", "instructions": ...}` with its beta header, not
    with `context_management`, on a model that takes it, and not right after a tool call left
    without its result."""
    config = request.get("compaction")
    if config is None:
        return
    if ON_DEMAND_BETA not in betas:
        raise InvalidRequest(f"compaction: requires the beta header 'anthropic-beta: {ON_DEMAND_BETA}'")
    if not isinstance(config, Mapping) or config.get("type") != "summarize":
        raise at("compaction.type", "Input should be 'summarize'")
    extra = sorted(set(config) - {"type", "instructions"})
    if extra:
        raise at(f"compaction.{extra[0]}", "Extra inputs are not permitted")
    if config.get("instructions") is not None and not isinstance(config["instructions"], str):
        raise at("compaction.instructions", "Input should be a valid string")
    if request.get("context_management") is not None:
        raise InvalidRequest("`compaction` cannot be combined with `context_management`.")
    if not takes_on_demand_compaction(str(request.get("model", ""))):
        raise InvalidRequest(f"compaction: on-demand compaction is not supported for model {request.get('model')}")
    history = messages(request)
    if history and history[-1].get("role") == "assistant" and any(
            b.get("type") == "tool_use" for b in content_blocks(history[-1])):
        raise at(f"messages.{len(history) - 1}", "a compaction request cannot end with a tool call that has no "
                 "result: compact where every tool call has its result")


def check_compaction_blocks(request: Request, betas: Sequence[str]) -> None:
    """Every compaction block sent back is in an assistant message, verifies, and comes with a
    compaction beta header (the on-demand page: on every later request that carries the block)."""
    for i, message in enumerate(messages(request)):
        for j, block in enumerate(content_blocks(message)):
            if block.get("type") != "compaction":
                continue
            if message.get("role") != "assistant":
                raise at(f"messages.{i}.content.{j}", "`compaction` blocks are only allowed in assistant messages")
            if ON_DEMAND_BETA not in betas and COMPACTION_BETA not in betas:
                raise at(f"messages.{i}.content.{j}", "`compaction` blocks require the beta header "
                         f"'anthropic-beta: {ON_DEMAND_BETA}' (or '{COMPACTION_BETA}' with its context management)")
            content = block.get("content")
            if content is None:
                continue  # a failed compaction: a no-op, the docs say
            if compaction_seal(block) is None:
                raise at(f"messages.{i}.content.{j}", "Invalid `signature` in `compaction` block")


def _from_last_compaction(request: dict[str, Any]) -> None:
    """Drop every message block before the last compaction block (in place)."""
    history = messages(request)
    for i in range(len(history) - 1, -1, -1):
        blocks = content_blocks(history[i])
        for j in range(len(blocks) - 1, -1, -1):
            if blocks[j].get("type") == "compaction":
                request["messages"] = [{**history[i], "content": blocks[j:]}, *history[i + 1:]]
                return


def _clear_thinking(request: dict[str, Any], edit: Mapping[str, Any]) -> int:
    keep_spec = edit.get("keep", {"type": "thinking_turns", "value": DEFAULT_KEEP_THINKING_TURNS})
    if keep_spec == "all" or (isinstance(keep_spec, Mapping) and keep_spec.get("type") == "all"):
        return 0
    keep = _value(keep_spec, "thinking_turns", DEFAULT_KEEP_THINKING_TURNS, "keep")
    turns = [m for m in request["messages"] if m.get("role") == "assistant"
             and any(b.get("type") in THINKING_BLOCK_TYPES for b in content_blocks(m))]
    old = turns[: max(0, len(turns) - keep)]
    for message in old:
        message["content"] = [b for b in content_blocks(message) if b.get("type") not in THINKING_BLOCK_TYPES]
    return len(old)


def _tool_pairs(request: dict[str, Any]) -> list[tuple[Block, Block | None, str]]:
    """(tool_use, its tool_result, tool name) in order."""
    results = {b.get("tool_use_id"): b for m in request["messages"] for b in content_blocks(m)
               if b.get("type") == "tool_result"}
    return [(b, results.get(b.get("id")), str(b.get("name", ""))) for m in request["messages"]
            for b in content_blocks(m) if b.get("type") == "tool_use"]


def _clear_tool_uses(request: dict[str, Any], edit: Mapping[str, Any], tokens: Callable[[dict[str, Any]], int]
                     ) -> tuple[dict[str, Any], int]:
    """The request with old tool results cleared, and how many were (0: nothing changed)."""
    trigger = _value(edit.get("trigger"), "input_tokens", DEFAULT_TOOL_TRIGGER, "trigger")
    before = tokens(request)
    if before <= trigger:
        return request, 0
    keep = _value(edit.get("keep"), "tool_uses", DEFAULT_KEEP_TOOL_USES, "keep")
    at_least = _value(edit.get("clear_at_least"), "input_tokens", 0, "clear_at_least")
    excluded = set(edit.get("exclude_tools") or ())
    inputs = edit.get("clear_tool_inputs") or False
    edited = copy.deepcopy(request)
    pairs = [p for p in _tool_pairs(edited) if p[2] not in excluded and p[1] is not None]
    old = pairs[: max(0, len(pairs) - keep)]
    cleared = 0
    for use, result, name in old:
        if result is not None and result.get("content") != CLEARED_RESULT:
            result["content"] = CLEARED_RESULT
            cleared += 1
        if inputs is True or (isinstance(inputs, list) and name in inputs):
            use["input"] = {}
    if not cleared or before - tokens(edited) < at_least:
        return request, 0
    return edited, cleared


def manage(request: Mapping[str, Any], tokens: Callable[[Mapping[str, Any]], int], seal: Seal | None = None,
           sized: Callable[[str], str] | None = None) -> Managed:
    """What the model sees of `request` once the server's context management ran (`seal`: what a
    compaction block made here stands for, the conversation as sent; see prefix_check.py; `sized`:
    what an on-demand summary becomes, for a policy that sizes its replies)."""
    seen = copy.deepcopy(dict(request))
    seen.pop("context_management", None)
    seen.pop("compaction", None)
    _from_last_compaction(seen)
    managed = Managed(seen)
    for edit in _edits(request):
        kind = edit["type"]
        if kind == CLEAR_THINKING:
            before = tokens(managed.request)
            turns = _clear_thinking(managed.request, edit)
            if turns:
                managed.applied_edits.append({"type": kind, "cleared_thinking_turns": turns,
                                              "cleared_input_tokens": before - tokens(managed.request)})
        elif kind == CLEAR_TOOL_USES:
            before = tokens(managed.request)
            request_left, cleared = _clear_tool_uses(managed.request, edit, tokens)
            managed.edited(request_left)
            if cleared:
                managed.applied_edits.append({"type": kind, "cleared_tool_uses": cleared,
                                              "cleared_input_tokens": before - tokens(managed.request)})
    if request.get("compaction") is not None:  # on demand: the answer is the summary alone
        asked = request["compaction"].get("instructions") if isinstance(request["compaction"], Mapping) else None
        summary = on_demand_summary(messages(managed.request), asked, int(request.get("max_tokens") or 0))
        managed.compact(True, seal or UNSEALED, on_demand=True, summary=sized(summary) if sized else summary)
    for edit in _edits(request):
        if edit["type"] == COMPACT:
            trigger = _value(edit.get("trigger"), "input_tokens", DEFAULT_COMPACT_TRIGGER, "trigger")
            if tokens(managed.request) > trigger:
                managed.compact(bool(edit.get("pause_after_compaction")), seal or UNSEALED)
    return managed


def with_management(managed: Managed, request: Mapping[str, Any], content: list[Block], stop: str,
                    usage: dict[str, Any], tokens: Callable[[Mapping[str, Any]], int]
                    ) -> tuple[list[Block], str, dict[str, Any], dict[str, Any]]:
    """An answer with what the server's context management adds to it: the compaction block
    first and its iteration in the usage, `context_management.applied_edits`."""
    extra: dict[str, Any] = {}
    if managed.on_demand and managed.compaction is not None:  # billed: the thinking before it, then the summary
        written = count_text(managed.compaction["content"])
        usage = {**usage, "output_tokens": int(usage.get("output_tokens") or 0) + written}
        return [dict(managed.compaction)], "compaction", usage, extra
    if managed.compaction is not None:
        compaction = managed.compaction
        stop = "compaction" if managed.pause else stop
        usage = {**usage, "iterations": [
            {"type": "compaction", "input_tokens": tokens(managed.compacted_from or request),
             "output_tokens": count_text(compaction["content"]), "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0},
            {"type": "message", **{k: v for k, v in usage.items() if k != "cache_creation"}},
        ]}
        content = [dict(compaction), *content]
    if request.get("context_management") is not None:
        extra["context_management"] = {"applied_edits": managed.applied_edits}
    return content, stop, usage, extra
