"""Extended thinking in the stand-in: the `thinking` parameter, signed thinking blocks, their rules.

The request's `thinking` is `{"type": "enabled", "budget_tokens": N}` (1,024 <= N < max_tokens),
`{"type": "adaptive"}` (the model decides; optional `display` and `block_binding`),
`{"type": "between_tools"}` or `{"type": "disabled"}`. With thinking on, the answer opens with a
thinking block whose `signature` the stand-in makes itself: an HMAC of the thinking text under a
fixed server secret, base64. A redacted_thinking block carries its text and such a MAC together,
base64, as opaque `data`. Blocks that come back are checked against their MAC, so one whose text
was changed, or made up, is refused.

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
  of another model does not verify on them (Haiku 5.5's blocks name no model).

The models with preserved thinking (PRESERVED_THINKING_MODELS, the one list of them) add:
- they think adaptively when the request has no `thinking` parameter; none takes a budget
  (`enabled`), only Haiku 5.5 takes `disabled` (at an effort of high or lower), only Sonnet 5.5
  takes `between_tools` (no up-front thinking, only between tool calls): the refusal is the API's
  "`thinking.type.X` is not supported for this model" 400;
- the thinking between tool calls (after tool results) comes back with empty text unless
  `display` asks for text, and `display: "omitted"` empties every block: such a block is still
  signed and must go back exactly as returned;
- a block is also bound to its conversation: its signature carries a digest of everything before
  it (`system`, `tools`, earlier messages), which the prefix check compares (prefix_check.py).
Fable 5, Mythos 5 and Mythos Preview (ADAPTIVE_ONLY_MODELS) also think without a `thinking`
parameter and refuse a budget and `disabled`, with no prefix check.

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
THINKING_TYPES = ("enabled", "adaptive", "disabled", "between_tools")
DISPLAY_VALUES = ("summarized", "omitted", "updates")
UNFORCED_CHOICES = ("auto", "none")  # the tool_choice types thinking allows
QUOTE_CHARS = 80  # how much of the latest user text the deterministic thinking quotes
THINKING_BLOCK_TYPES = ("thinking", "redacted_thinking")
# The models with preserved thinking (by id prefix): they think adaptively by default and run the
# prefix check on every thinking block sent back (prefix_check.py). The one list of them.
PRESERVED_THINKING_MODELS = ("claude-sonnet-5-5", "claude-opus-5-5", "claude-haiku-5-5", "claude-fable-5-1",
                             "claude-fable-5-2", "claude-mythos-5-1", "claude-mythos-5-2")
# Those whose blocks are also bound to the model that wrote them: Haiku 5.5's blocks replay
# unchanged on other models, so its signatures do not name it.
BOUND_THINKING_MODELS = tuple(m for m in PRESERVED_THINKING_MODELS if m != "claude-haiku-5-5")
PREFIX_BYTES = 32  # a SHA-256 of the block's prefix, carried in the signature of a preserved-thinking block
UNBOUND_PREFIX = bytes(PREFIX_BYTES)  # a block bound to no conversation: it fails every prefix check
# The models that take no `thinking: {"type": "disabled"}` (thinking is always on, or, on Sonnet
# 5.5, turned down with "between_tools"); Haiku 5.5 takes it at an effort of high or lower.
# Fable 5, Mythos 5 and Mythos Preview think on every request as well (adaptive is their only
# mode: a budget and "disabled" are refused), without the prefix check.
ADAPTIVE_ONLY_MODELS = ("claude-fable-5", "claude-mythos-5", "claude-mythos-preview")
ALWAYS_THINKING_MODELS = (*(m for m in PRESERVED_THINKING_MODELS if m != "claude-haiku-5-5"), *ADAPTIVE_ONLY_MODELS)
BETWEEN_TOOLS_MODELS = ("claude-sonnet-5-5",)
EFFORTS_WITHOUT_DISABLED = ("xhigh", "max")  # Haiku 5.5 refuses "disabled" with these


def thinks_unasked(model: str) -> bool:
    """Whether `model` thinks (adaptively) when a request has no `thinking` parameter."""
    return model.startswith((*PRESERVED_THINKING_MODELS, *ADAPTIVE_ONLY_MODELS))


def preserves_thinking(model: str) -> bool:
    """Whether `model` has preserved thinking (adaptive by default, the prefix check)."""
    return model.startswith(PRESERVED_THINKING_MODELS)


def binding(model: str) -> bytes:
    """What a signature covers beside the text: the model id for models that bind their blocks."""
    return model.encode("utf-8") if model.startswith(BOUND_THINKING_MODELS) else b""


def _prefix_of(model: str, prefix: bytes) -> bytes:
    """The prefix digest a signature carries: 32 bytes for a preserved-thinking model, else none."""
    return (prefix or UNBOUND_PREFIX) if preserves_thinking(model) else b""


def _mac(kind: bytes, text: bytes, model: str = "", prefix: bytes = b"") -> bytes:
    message = kind + b"\0" + binding(model) + b"\0" + prefix + text
    return hmac.new(SERVER_SECRET, message, hashlib.sha256).digest()


def sign(thinking: str, model: str = "", prefix: bytes = b"") -> str:
    """The signature the stand-in gives a thinking text written by `model`: its MAC, and for a
    model with preserved thinking the digest of the block's prefix before it, covered by the MAC."""
    carried = _prefix_of(model, prefix)
    return base64.b64encode(carried + _mac(b"thinking", thinking.encode("utf-8"), model, carried)).decode("ascii")


def _decoded(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _split(raw: bytes, model: str) -> tuple[bytes, bytes, bytes]:
    """(payload, prefix digest, MAC) of a signature or redacted data read for `model`."""
    width = PREFIX_BYTES if preserves_thinking(model) else 0
    return raw[:-(MAC_BYTES + width)], raw[len(raw) - MAC_BYTES - width:-MAC_BYTES], raw[-MAC_BYTES:]


def signature_valid(thinking: Any, signature: Any, model: str = "") -> bool:
    raw = _decoded(signature)
    if not isinstance(thinking, str) or raw is None or len(raw) != MAC_BYTES + len(_prefix_of(model, b"")):
        return False
    _, prefix, mac = _split(raw, model)
    return hmac.compare_digest(_mac(b"thinking", thinking.encode("utf-8"), model, prefix), mac)


def redact(thinking: str, model: str = "", prefix: bytes = b"") -> str:
    """A redacted_thinking block's opaque data: the text, the prefix digest (preserved-thinking
    models) and their MAC, base64."""
    payload, carried = thinking.encode("utf-8"), _prefix_of(model, prefix)
    return base64.b64encode(payload + carried + _mac(b"redacted", payload, model, carried)).decode("ascii")


def redacted_valid(data: Any, model: str = "") -> bool:
    raw = _decoded(data)
    if raw is None or len(raw) < MAC_BYTES + len(_prefix_of(model, b"")):
        return False
    payload, prefix, mac = _split(raw, model)
    return hmac.compare_digest(_mac(b"redacted", payload, model, prefix), mac)


def signed_prefix(block: Mapping[str, Any], model: str) -> bytes:
    """The prefix digest a (verified) thinking or redacted_thinking block carries, for `model`."""
    raw = _decoded(block.get("signature") if block.get("type") == "thinking" else block.get("data")) or b""
    return _split(raw, model)[1] if preserves_thinking(model) and len(raw) > MAC_BYTES else b""


def thinking_mode(request: Request) -> str:
    """"enabled", "adaptive", "between_tools" or "disabled". No thinking parameter means adaptive
    on a model that thinks unasked (preserved thinking, Fable 5, Mythos 5), disabled on the others."""
    thinking = request.get("thinking")
    if isinstance(thinking, Mapping):
        return str(thinking.get("type"))
    return "adaptive" if thinks_unasked(str(request.get("model", ""))) else "disabled"


# --- the parameter ---


def check_thinking_param(request: Request, max_tokens: int | None) -> None:
    """The `thinking` parameter and what it rules out (max_tokens None: count_tokens)."""
    thinking = request.get("thinking")
    if thinking is None:
        return
    if not isinstance(thinking, Mapping) or thinking.get("type") not in THINKING_TYPES:
        raise at("thinking.type", "Input should be 'enabled', 'adaptive', 'disabled' or 'between_tools'")
    kind = thinking["type"]
    allowed = {"type"} | ({"budget_tokens", "display", "block_binding"} if kind in ("enabled", "adaptive") else set())
    if kind == "between_tools":  # its notes between tool calls are bound thinking blocks too
        allowed.add("block_binding")
    extra = set(thinking) - allowed
    if extra or (kind != "enabled" and "budget_tokens" in thinking):
        raise at(f"thinking.{kind}.{sorted(extra or {'budget_tokens'})[0]}", "Extra inputs are not permitted")
    if "display" in thinking and thinking["display"] not in DISPLAY_VALUES:
        raise at(f"thinking.{kind}.display", "Input should be 'summarized', 'omitted' or 'updates'")
    _check_type_for_model(request, kind)
    if kind == "enabled":
        _check_budget(thinking.get("budget_tokens"), max_tokens)
    if kind not in ("disabled", "between_tools"):
        _check_compatible(request, kind)


def refused_types(model: str) -> frozenset[str]:
    """The thinking types `model` refuses at any effort: the models that think unasked take no
    budget and (but Haiku 5.5) no "disabled"; only Sonnet 5.5 takes "between_tools"."""
    refused = {"between_tools"} if not model.startswith(BETWEEN_TOOLS_MODELS) else set()
    if thinks_unasked(model):
        refused.add("enabled")
    if model.startswith(ALWAYS_THINKING_MODELS):
        refused.add("disabled")
    return frozenset(refused)


def _check_type_for_model(request: Request, kind: str) -> None:
    """The types a model refuses (Haiku 5.5 refuses "disabled" only at the highest efforts)."""
    model = str(request.get("model", ""))
    config = request.get("output_config")
    effort = config.get("effort") if isinstance(config, Mapping) else None
    if kind in refused_types(model) or (kind == "disabled" and preserves_thinking(model)
                                        and effort in EFFORTS_WITHOUT_DISABLED):
        raise InvalidRequest(f'"thinking.type.{kind}" is not supported for this model. Use "thinking.type.adaptive" '
                             'and "output_config.effort" to control thinking behavior.')


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


def _after_tool_results(request: Request) -> bool:
    history = messages(request)
    return bool(history) and history[-1].get("role") == "user" and is_tool_results_only(history[-1])


def should_think(request: Request) -> bool:
    """Whether the answer opens with thinking: thinking on, and (for `enabled`) a new turn; the
    model does not think again after tool results unless thinking is adaptive (interleaved);
    `between_tools` thinks only there."""
    mode = thinking_mode(request)
    if mode == "adaptive":
        return True
    if mode == "between_tools":
        return _after_tool_results(request)
    return mode == "enabled" and not _after_tool_results(request)


def _display(request: Request) -> str | None:
    thinking = request.get("thinking")
    return thinking.get("display") if isinstance(thinking, Mapping) else None


def thinking_text(request: Request) -> str:
    """Deterministic thinking: what the stand-in saw, in one short paragraph. Empty where the API
    returns a thinking block with empty text: with `display: "omitted"`, and, on a model with
    preserved thinking, the notes between tool calls (after tool results) unless `display` asks
    for text ("summarized" or "updates")."""
    display = _display(request)
    if display == "omitted" or (preserves_thinking(str(request.get("model", ""))) and _after_tool_results(request)
                                and display not in ("summarized", "updates")):
        return ""
    history = messages(request)
    latest = next((m for m in reversed(history) if m.get("role") == "user"), None)
    texts = [b.get("text", "") for b in content_blocks(latest or {}) if b.get("type") == "text"]
    quoted = brief(" ".join(texts), QUOTE_CHARS) if any(t.strip() for t in texts) else "tool results only"
    return (f"Offline stand-in thinking (deterministic, not a model): {len(history)} message(s) so far; "
            f"the latest user turn: {quoted}")


def thinking_blocks(request: Request, *, redacted: bool = False, prefix: bytes = b"") -> list[Block]:
    """The block(s) an answer opens with: signed thinking, or its redacted form. `prefix` is the
    digest of what comes before the block (prefix_check.py), which a preserved-thinking model's
    signature carries."""
    text = thinking_text(request)
    model = str(request.get("model", ""))
    if redacted:
        return [{"type": "redacted_thinking", "data": redact(text, model, prefix)}]
    return [{"type": "thinking", "thinking": text, "signature": sign(text, model, prefix)}]
