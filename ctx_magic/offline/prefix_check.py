"""The prefix check of the models with preserved thinking (thinking.PRESERVED_THINKING_MODELS).

A thinking or redacted_thinking block sent back to such a model is usable only if its prefix
(the top-level `system`, `tools`, and every message block before it) is what was sent when the
block was produced. The stand-in checks that without keeping any state: a block's signature
carries a digest of its prefix, under the same MAC as its text (thinking.py), and the check
recomputes the digest from the request in hand.

The digest is a chain, so a change invalidates only the thinking after it: the head is a hash of
`system` and `tools`; every message block, in order, is folded into a running state (its role and
its content). What does not count as a change: `cache_control` (a caching marker, not content),
fields sent as null, and a string content (of a message or a tool result) against the one text
block it stands for (the API reads them alike). A thinking block left out or moved changes the
state every later block was bound to, so those fail; the blocks before it stay valid, and so does
thinking produced later (its prefix is the history as sent now). A compaction block the stand-in
signed carries the state of the conversation it summarized, and the chain resumes from it: turns
kept after a summary the API wrote keep valid thinking. Blocks before the last compaction block
are not read at all.

What a failure does, as the docs give it:
- `thinking.block_binding.prefix_mismatch_behavior` (beta header
  `thinking-binding-controls-2026-08-01`, else the request is refused) chooses: "error" answers
  400 naming the first invalid block, "drop_block" removes the invalid blocks and proceeds;
- without it, accounts created on or after 2026-08-31 (the stand-in's `account="new"`, the
  default) get the 400, older ones (`account="old"`) are not checked: the blocks are shown to
  the model all the same;
- the first invalid block makes every later thinking block invalid too;
- with the beta header, the answer's `input_transformations` lists each dropped block
  (`thinking_dropped`) or each let through (`thinking_mismatch_allowed`), `[]` when none;
  dropped blocks count nothing in `usage.input_tokens`, blocks left in place count as sent.

Server context editing and compaction act on what the model is shown, after this check: the
check reads the history as sent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.offline.conversation import Request, content_blocks, messages, system_blocks
from ctx_magic.offline.invalid import InvalidRequest, at
from ctx_magic.offline.server_context import UNSEALED, Seal, compaction_seal
from ctx_magic.offline.thinking import THINKING_BLOCK_TYPES, UNBOUND_PREFIX, preserves_thinking, signed_prefix

BINDING_BETA = "thinking-binding-controls-2026-08-01"
MISMATCH_BEHAVIORS = ("error", "drop_block")
REASON = "prefix_binding_mismatch"
START = hashlib.sha256(b"ctx-magic offline stand-in: conversation start").digest()


def _content(value: Any) -> Any:
    """A value as the check compares it: without cache_control and without null fields, a tool
    result's string content as the one text block it stands for."""
    if isinstance(value, Mapping):
        if value.get("type") == "tool_result" and isinstance(value.get("content"), str):
            value = {**value, "content": [{"type": "text", "text": value["content"]}]}
        return {k: _content(v) for k, v in value.items() if k != "cache_control" and v is not None}
    if isinstance(value, list):
        return [_content(v) for v in value]
    return value


def _hash(*parts: Any) -> bytes:
    data = b"".join(p if isinstance(p, bytes) else json.dumps(p, sort_keys=True).encode("utf-8") for p in parts)
    return hashlib.sha256(data).digest()


def head(request: Request) -> bytes:
    """The digest of what precedes every message: `system` and `tools`."""
    return _hash(_content(system_blocks(request)), _content(list(request.get("tools") or [])))


@dataclass(frozen=True)
class SentThinking:
    """A thinking block of the request, where it is, and the prefix it is checked against."""

    path: str
    message_index: int
    block_index: int
    kind: str
    signed: bytes
    """The prefix digest its signature carries."""
    expected: bytes
    """The digest of its prefix in this request."""


OUT_OF_PLACE = b"a kept turn that does not follow the summarized messages"


@dataclass(frozen=True)
class ThinkingChain:
    """A request's thinking, read against the prefix chain: what each block carries and what it
    should, and where the chain stands at the end."""

    thinking: tuple[SentThinking, ...]
    """The thinking blocks after the last compaction block, in order."""
    seal: Seal
    """The chain's state after the last block, and the last message's role: what a compaction
    of this conversation stands for."""
    next_prefix: bytes
    """The prefix digest of a block the answer adds at the end."""


def read(request: Request) -> ThinkingChain:
    """The request's thinking blocks with their prefixes, and the state at its end. After a
    compaction block the chain resumes from the state it stands for; the first message after it
    must not have the role of the last one it summarized, nor be a system message (a kept turn
    follows the summarized messages directly), else every later block fails."""
    model = str(request.get("model", ""))
    top = head(request)
    state, found, summarized_role = START, [], None
    for i, message in enumerate(messages(request)):
        role = str(message.get("role", ""))
        for j, block in enumerate(content_blocks(message)):
            if block.get("type") == "compaction":
                seal = compaction_seal(block)
                if seal is not None:
                    state, found, summarized_role = seal.boundary, [], seal.last_role
                continue  # a failed compaction (no summary) is a no-op
            if summarized_role is not None:
                if role in (summarized_role, "system"):
                    state = _hash(state, OUT_OF_PLACE)
                summarized_role = None
            if block.get("type") in THINKING_BLOCK_TYPES and role == "assistant":
                found.append(SentThinking(f"messages.{i}.content.{j}", i, j, str(block["type"]),
                                          signed_prefix(block, model), _hash(top, state)))
            state = _hash(state, [role, _content(block)])
    history = messages(request)
    last_role = str(history[-1].get("role", "")) if history else ""
    return ThinkingChain(tuple(found), Seal(state, last_role), _hash(top, state))


def _behavior(request: Request) -> str | None:
    thinking = request.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, Mapping) else None
    return binding.get("prefix_mismatch_behavior") if isinstance(binding, Mapping) else None


def check_block_binding(request: Request, betas: Sequence[str]) -> None:
    """`thinking.block_binding` is an object, its behavior a known one, and its beta header sent."""
    thinking = request.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("block_binding") is None:
        return
    kind, binding = thinking.get("type"), thinking["block_binding"]
    if not isinstance(binding, Mapping) or set(binding) - {"prefix_mismatch_behavior"}:
        raise at(f"thinking.{kind}.block_binding", "Input should be an object with `prefix_mismatch_behavior` only")
    if binding.get("prefix_mismatch_behavior") not in (None, *MISMATCH_BEHAVIORS):
        raise at(f"thinking.{kind}.block_binding.prefix_mismatch_behavior", "Input should be 'error' or 'drop_block'")
    if BINDING_BETA not in betas:
        raise at("thinking.block_binding",
                 f"This setting requires the value `{BINDING_BETA}` in the `anthropic-beta` header.")


def _refusal(block: SentThinking) -> str:
    field = "`signature` in `thinking`" if block.kind == "thinking" else "`data` in `redacted_thinking`"
    return (f"{block.path}: Invalid {field} block. The block is bound to a different conversation. Remove the "
            'block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".')


@dataclass(frozen=True)
class PrefixCheck:
    """What the check found in a request and what it does about it."""

    invalid: tuple[SentThinking, ...] = ()
    behavior: str = "allow"
    """"error" (a 400), "drop_block" (removed) or "allow" (not enforced: shown all the same)."""
    next_prefix: bytes = UNBOUND_PREFIX
    seal: Seal = UNSEALED
    """What a compaction made by this request stands for (unsealed where the model has no
    preserved thinking: the check accepts only a summary such a model wrote)."""

    @property
    def refusal(self) -> InvalidRequest | None:
        """The 400 the request earns, if any."""
        return InvalidRequest(_refusal(self.invalid[0])) if self.invalid and self.behavior == "error" else None

    def mismatches(self) -> list[dict[str, str]]:
        """One entry per invalid block, in request order, typed by what became of it (the stand-in
        records them; a 400 is `thinking_refused`, the stand-in's own word)."""
        kind = {"drop_block": "thinking_dropped", "allow": "thinking_mismatch_allowed"}.get(self.behavior,
                                                                                           "thinking_refused")
        return [{"type": kind, "path": b.path, "reason": REASON} for b in self.invalid]

    def transformations(self) -> list[dict[str, str]]:
        """The answer's `input_transformations` entries (a refused request has no answer)."""
        return [] if self.behavior == "error" else self.mismatches()

    def shown(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The request as the model is shown it: without the blocks dropped."""
        if self.behavior != "drop_block" or not self.invalid:
            return dict(request)
        dropped = {(b.message_index, b.block_index) for b in self.invalid}
        history = [{**m, "content": [b for j, b in enumerate(content_blocks(m)) if (i, j) not in dropped]}
                   if any(d[0] == i for d in dropped) else m for i, m in enumerate(messages(request))]
        return {**request, "messages": history}


def check_prefixes(request: Request, account: str) -> PrefixCheck:
    """The prefix check of `request` for an account of that age ("new" or "old")."""
    if not preserves_thinking(str(request.get("model", ""))):  # nothing to check, no summary to seal
        history = messages(request)
        return PrefixCheck(seal=Seal(UNBOUND_PREFIX, str(history[-1].get("role", "")) if history else ""))
    conversation = read(request)
    first = next((n for n, b in enumerate(conversation.thinking) if b.signed != b.expected), None)
    invalid = conversation.thinking[first:] if first is not None else ()
    behavior = _behavior(request) or ("error" if account == "new" else "allow")
    return PrefixCheck(invalid, behavior, conversation.next_prefix, conversation.seal)
