"""Extended thinking in the stand-in: the `thinking` parameter, signed thinking blocks, their rules.

The request's `thinking` is `{"type": "enabled", "budget_tokens": N}` (1,024 <= N < max_tokens),
`{"type": "adaptive"}` (the model decides; optional `display`) or `{"type": "disabled"}`.
With thinking on, the answer opens with a thinking block whose `signature` the stand-in makes
itself: an HMAC of the thinking text under a fixed server secret, base64. A redacted_thinking
block carries its text and such a MAC together, base64, as opaque `data`. Blocks that come back
are checked against their MAC, so one whose text was changed, or made up, is refused.

The rules, as the API's extended-thinking docs give them:
- thinking on allows tool_choice auto or none only (the others force a tool call);
- thinking on takes no temperature other than 1, no top_k, a top_p of at least 0.95;
- with `enabled` thinking, a request continuing a tool loop (its last message is tool results)
  must send the assistant message that opened the loop starting with its thinking or
  redacted_thinking block, unchanged; and a final assistant message (prefill) must start with
  one too. (With `adaptive` thinking the model may skip thinking, so no block is required.)
- every thinking / redacted_thinking block sent back must verify, wherever it is;
- the 5.5 models (and Fable / Mythos 5.1 and later) bind a block to the model that wrote it:
  their signatures cover the model id, so such a block verifies only on that model, and a block
  of another model does not verify on them (the models' migration guides: "thinking blocks are
  bound to the model and the conversation"; the conversation part is not modelled).

The secret is a constant: signatures stay valid across stand-in restarts, as the API's do
across sessions.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from ctx_magic.offline.conversation import Block, Request, brief, content_blocks, is_tool_results_only, messages
from ctx_magic.offline.invalid import InvalidRequest, Located, at

SERVER_SECRET = b"ctx-magic offline stand-in: thinking signatures"  # fixed: valid across restarts
MIN_BUDGET_TOKENS = 1_024  # the API's smallest thinking budget
MIN_TOP_P_WITH_THINKING = 0.95  # the API's lowest top_p when thinking is on
MAC_BYTES = 32  # SHA-256
THINKING_TYPES = ("enabled", "adaptive", "disabled")
DISPLAY_VALUES = ("summarized", "omitted")
UNFORCED_CHOICES = ("auto", "none")  # the tool_choice types thinking allows
QUOTE_CHARS = 80  # how much of the latest user text the deterministic thinking quotes
THINKING_BLOCK_TYPES = ("thinking", "redacted_thinking")
# Models whose thinking blocks are bound to the model that wrote them (by id prefix).
BOUND_THINKING_MODELS = ("claude-opus-5-5", "claude-sonnet-5-5", "claude-fable-5-1", "claude-mythos-5-1",
                         "claude-fable-5-2", "claude-mythos-5-2")


def binding(model: str) -> bytes:
    """What a signature covers beside the text: the model id for models that bind their blocks."""
    return model.encode("utf-8") if model.startswith(BOUND_THINKING_MODELS) else b""


def _mac(kind: bytes, text: bytes, model: str = "") -> bytes:
    return hmac.new(SERVER_SECRET, kind + b"\0" + binding(model) + b"\0" + text, hashlib.sha256).digest()


def sign(thinking: str, model: str = "") -> str:
    """The signature the stand-in gives a thinking text (written by `model`)."""
    return base64.b64encode(_mac(b"thinking", thinking.encode("utf-8"), model)).decode("ascii")


def signature_valid(thinking: Any, signature: Any, model: str = "") -> bool:
    if not isinstance(thinking, str) or not isinstance(signature, str):
        return False
    return hmac.compare_digest(sign(thinking, model), signature)


def redact(thinking: str, model: str = "") -> str:
    """A redacted_thinking block's opaque data: the text and its MAC, base64."""
    payload = thinking.encode("utf-8")
    return base64.b64encode(payload + _mac(b"redacted", payload, model)).decode("ascii")


def redacted_valid(data: Any, model: str = "") -> bool:
    if not isinstance(data, str):
        return False
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    payload, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
    return len(raw) > MAC_BYTES and hmac.compare_digest(_mac(b"redacted", payload, model), mac)


def thinking_mode(request: Request) -> str:
    """"enabled", "adaptive" or "disabled" (no thinking parameter means disabled)."""
    thinking = request.get("thinking")
    return str(thinking.get("type")) if isinstance(thinking, Mapping) else "disabled"


# --- the parameter ---


def check_thinking_param(request: Request, max_tokens: int | None) -> None:
    """The `thinking` parameter and what it rules out (max_tokens None: count_tokens)."""
    thinking = request.get("thinking")
    if thinking is None:
        return
    if not isinstance(thinking, Mapping) or thinking.get("type") not in THINKING_TYPES:
        raise at("thinking.type", "Input should be 'enabled', 'adaptive' or 'disabled'")
    kind = thinking["type"]
    extra = set(thinking) - {"type", "budget_tokens", "display"}
    if extra or (kind != "enabled" and "budget_tokens" in thinking):
        raise at(f"thinking.{kind}.{sorted(extra or {'budget_tokens'})[0]}", "Extra inputs are not permitted")
    if "display" in thinking and (kind == "disabled" or thinking["display"] not in DISPLAY_VALUES):
        raise at(f"thinking.{kind}.display", "Input should be 'summarized' or 'omitted'")
    if kind == "enabled":
        _check_budget(thinking.get("budget_tokens"), max_tokens)
    if kind != "disabled":
        _check_compatible(request, kind)


def _check_budget(budget: Any, max_tokens: int | None) -> None:
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise at("thinking.enabled.budget_tokens", "Field required")
    if budget < MIN_BUDGET_TOKENS:
        raise at("thinking.enabled.budget_tokens", f"Input should be greater than or equal to {MIN_BUDGET_TOKENS}")
    if max_tokens is not None and budget >= max_tokens:
        raise InvalidRequest(
            f"`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
            f"https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
            f" (max_tokens {max_tokens}, budget_tokens {budget})"
        )


def _check_compatible(request: Request, kind: str) -> None:
    choice = request.get("tool_choice")
    # With a budget, a forced tool call is refused; adaptive thinking takes one (the real API
    # answered such requests from Claude Opus 4.6 with 200).
    if kind == "enabled" and isinstance(choice, Mapping) and choice.get("type") not in UNFORCED_CHOICES:
        raise InvalidRequest("Thinking may not be enabled when tool_choice forces tool use.")
    temperature = request.get("temperature")
    if temperature is not None and temperature != 1:
        raise InvalidRequest("`temperature` may only be set to 1 when thinking is enabled.")
    if request.get("top_k") is not None:
        raise InvalidRequest("`top_k` may not be set when thinking is enabled.")
    top_p = request.get("top_p")
    if top_p is not None and top_p < MIN_TOP_P_WITH_THINKING:
        raise InvalidRequest(f"`top_p` must be greater than or equal to {MIN_TOP_P_WITH_THINKING} when thinking "
                             "is enabled, or unset.")


# --- the blocks ---


def check_thinking_block(located: Located, model: str = "") -> None:
    """A thinking or redacted_thinking block sent back to `model`: in an assistant message,
    unchanged (and, for a model that binds its blocks, written by that model)."""
    path, block = located.path, located.block
    if located.role != "assistant" or located.parent is not None:
        raise at(path, f"`{block['type']}` blocks are only allowed in assistant messages")
    if "cache_control" in block:
        raise at(f"{path}.cache_control", f"`{block['type']}` blocks cannot be cached with cache_control")
    if block["type"] == "thinking":
        if not isinstance(block.get("signature"), str):
            raise at(f"{path}.thinking.signature", "Field required")
        if not signature_valid(block.get("thinking"), block.get("signature"), model):
            raise at(path, "Invalid `signature` in `thinking` block")
    elif not redacted_valid(block.get("data"), model):
        raise at(path, "Invalid `data` in `redacted_thinking` block")


def _turn_start(history: list[Mapping[str, Any]]) -> int | None:
    """Index of the assistant message that opened the current tool loop, if the request
    continues one (its last message is tool results only)."""
    if not history or history[-1].get("role") != "user" or not is_tool_results_only(history[-1]):
        return None
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.get("role") == "user" and not is_tool_results_only(message):
            return index + 1 if index + 1 < len(history) else None
    return 0 if history[0].get("role") == "assistant" else None


def check_thinking_turn(request: Request) -> None:
    """With `enabled` thinking, the assistant message a tool loop (or a prefill) continues must
    start with its thinking."""
    if thinking_mode(request) != "enabled":
        return
    history = messages(request)
    last = len(history) - 1
    opener = last if history and history[-1].get("role") == "assistant" else _turn_start(history)
    if opener is None or history[opener].get("role") != "assistant":
        return
    blocks = content_blocks(history[opener])
    found = blocks[0].get("type") if blocks else "nothing"
    if found not in THINKING_BLOCK_TYPES:
        raise at(f"messages.{opener}.content.0.type",
                 f"Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is enabled, "
                 "a final `assistant` message must start with a thinking block (preceding the lastmost set of "
                 "`tool_use` and `tool_result` blocks). Send back the thinking blocks of the turn being "
                 "continued unchanged, or disable `thinking`.")


# --- the answer ---


def should_think(request: Request) -> bool:
    """Whether the answer opens with thinking: thinking on, and (for `enabled`) a new turn; the
    model does not think again after tool results unless thinking is adaptive (interleaved)."""
    if thinking_mode(request) == "adaptive":
        return True
    if thinking_mode(request) != "enabled":
        return False
    history = messages(request)
    return not (history and history[-1].get("role") == "user" and is_tool_results_only(history[-1]))


def thinking_text(request: Request) -> str:
    """Deterministic thinking: what the stand-in saw, in one short paragraph."""
    history = messages(request)
    latest = next((m for m in reversed(history) if m.get("role") == "user"), None)
    texts = [b.get("text", "") for b in content_blocks(latest or {}) if b.get("type") == "text"]
    quoted = brief(" ".join(texts), QUOTE_CHARS) if any(t.strip() for t in texts) else "tool results only"
    return (f"Offline stand-in thinking (deterministic, not a model): {len(history)} message(s) so far; "
            f"the latest user turn: {quoted}")


def thinking_blocks(request: Request, *, redacted: bool = False) -> list[Block]:
    """The block(s) an answer opens with: signed thinking, or its redacted form."""
    text = thinking_text(request)
    model = str(request.get("model", ""))
    if redacted:
        return [{"type": "redacted_thinking", "data": redact(text, model)}]
    return [{"type": "thinking", "thinking": text, "signature": sign(text, model)}]
