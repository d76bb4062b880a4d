"""The rules on `messages`, as the API applies them: roles, content blocks, tool pairs, ids.

- every message has the role user or assistant and non-empty content (only a final assistant
  message may be empty); models of the newest family (Opus 4.8, Sonnet 5 and on) also take a
  `system` message between turns, of text, as the real API did in recorded traffic; the first
  message is a user message on Bedrock and Vertex, while Anthropic's own API accepts an
  assistant first (recorded: answered 200); Vertex, a platform the on-demand compaction page lists,
  also takes the assistant message that opens with the compaction block the API wrote;
- text blocks hold text that is not empty and not whitespace only, in messages and inside
  tool results; a final assistant message (a prefill) does not end in whitespace, and the
  Claude 4.6 models and later take none at all: their conversation ends with a user message;
- tool_use blocks only in assistant messages, with an id of letters, digits, `_` and `-`,
  unique within a turn; tool_result blocks only in user messages, before anything else in
  their message, each answering a tool_use of the turn just before, every tool_use answered in
  the next turn (consecutive messages of one role make one turn, as the API joins them); a
  tool_result's content is not an empty string, and not empty at all when `is_error` is true;
- images and thinking blocks have their own modules (images.py, thinking.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctx_magic.context import model_families
from ctx_magic.offline.conversation import Block, content_blocks
from ctx_magic.offline.images import check_images
from ctx_magic.offline.invalid import InvalidRequest, Located, all_blocks, at, message_content
from ctx_magic.offline.thinking import THINKING_BLOCK_TYPES, check_thinking_block

TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # the API's pattern for tool_use ids
# Block types a request may carry (the API's, including server-tool and context blocks).
MESSAGE_BLOCK_TYPES = frozenset({
    "text", "image", "document", "search_result", "tool_use", "tool_result", "thinking", "redacted_thinking",
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "mcp_tool_use",
    "mcp_tool_result", "container_upload", "compaction", "tool_search_tool_result", "advisor_tool_result",
    "tool_addition",
})
SYSTEM_MESSAGE_TYPES = frozenset({"text", "tool_addition"})  # tool search's "this tool is now loaded"
# What a tool_result may hold: the last is tool search's pointer to a deferred tool.
TOOL_RESULT_CONTENT_TYPES = frozenset({"text", "image", "document", "search_result", "tool_reference"})
NESTED_WORDS = "text, image, document, search_result or tool_reference"


def check_text(path: str, block: Mapping[str, Any]) -> None:
    text = block.get("text")
    if not isinstance(text, str):
        raise at(f"{path}.text", "Input should be a valid string")
    if not text:
        raise at(path, "text content blocks must be non-empty")
    if not text.strip():
        raise at(path, "text content blocks must contain non-whitespace text")


def _check_tool_use(located: Located) -> None:
    path, block = located.path, located.block
    if located.role != "assistant":
        raise at(path, "`tool_use` blocks are only allowed in assistant messages")
    if not isinstance(block.get("id"), str) or not TOOL_USE_ID.match(block["id"]):
        raise at(f"{path}.id", f"String should match pattern '{TOOL_USE_ID.pattern}'")
    if not isinstance(block.get("name"), str) or not block["name"]:
        raise at(f"{path}.name", "Field required")
    if not isinstance(block.get("input"), Mapping):
        raise at(f"{path}.input", "Input should be a valid dictionary")


def _check_tool_result(located: Located) -> None:
    path, block = located.path, located.block
    if located.role != "user":
        raise at(path, "`tool_result` blocks are only allowed in user messages")
    if not isinstance(block.get("tool_use_id"), str):
        raise at(f"{path}.tool_use_id", "Field required")
    content = block.get("content")
    if block.get("is_error") and not content:
        raise at(f"{path}.tool_result", "content cannot be empty if `is_error` is true")
    if isinstance(content, str):
        if not content:
            raise at(f"{path}.tool_result", "content cannot be an empty string; leave it out for an empty result")
        if not content.strip():
            raise at(f"{path}.content", "text content blocks must contain non-whitespace text")
    elif content is not None and not isinstance(content, list):
        raise at(f"{path}.content", "Input should be a valid string or list of content blocks")


def _check_nested(located: Located) -> None:
    if located.block.get("type") not in TOOL_RESULT_CONTENT_TYPES:
        raise at(f"{located.path}.type", f"tool_result content may only hold {NESTED_WORDS}")
    if located.block.get("type") == "text":
        check_text(located.path, located.block)


def _check_block(located: Located, model: str) -> None:
    if located.parent is not None:
        _check_nested(located)
        return
    kind = located.block.get("type")
    if kind not in MESSAGE_BLOCK_TYPES:
        raise at(f"{located.path}.type", f"Input tag '{kind}' found using 'type' does not match the expected tags")
    if kind == "text":
        check_text(located.path, located.block)
    elif kind == "tool_use":
        _check_tool_use(located)
    elif kind == "tool_result":
        _check_tool_result(located)
    elif kind in THINKING_BLOCK_TYPES:
        check_thinking_block(located, model)


def _roles(model: str) -> tuple[str, ...]:
    """Mid-conversation system messages: from Claude Opus 4.8 on (the newest tokenizer family;
    Opus 4.7, counted in a family of its own, is not among the models the docs list)."""
    if model_families.family_of(model) is model_families.CLAUDE_5:
        return ("user", "assistant", "system")
    return ("user", "assistant")


def _may_open(message: Mapping[str, Any], provider: str) -> bool:
    """Whether a conversation may open with this message: a user's anywhere, an assistant's on
    Anthropic's API, and on Vertex the one that opens with a compaction block (on-demand
    compaction's summary, which goes first in `messages`)."""
    if message["role"] == "user":
        return True
    if message["role"] != "assistant":
        return False
    blocks = content_blocks(message)
    return provider == "anthropic" or (provider == "vertex" and bool(blocks) and isinstance(blocks[0], Mapping)
                                       and blocks[0].get("type") == "compaction")


def _check_message(index: int, message: Any, is_last: bool, model: str, provider: str) -> None:
    roles = _roles(model)
    if not isinstance(message, Mapping) or message.get("role") not in roles:
        raise at(f"messages.{index}", "each message needs a role of " + " or ".join(f"'{r}'" for r in roles))
    if index == 0 and not _may_open(message, provider):
        raise at("messages.0.role", "the first message must use the `user` role")
    if message["role"] == "system" and not all(
            isinstance(b, Mapping) and b.get("type") in SYSTEM_MESSAGE_TYPES for b in content_blocks(message)):
        raise at(f"messages.{index}.content", "a system message holds text and tool_addition blocks only")
    content = message.get("content")
    if not isinstance(content, (str, list)):
        raise at(f"messages.{index}.content", "Input should be a valid string or list of content blocks")
    if isinstance(content, list) and not content and not (is_last and message["role"] == "assistant"):
        raise at(f"messages.{index}",
                 "all messages must have non-empty content except for the optional final assistant message")
    blocks = list(message_content(message, index))
    if isinstance(content, list) and len(blocks) != len(content):
        raise at(f"messages.{index}.content", "every content block must be an object with a `type`")
    seen_other = False
    for located in blocks:
        if located.block.get("type") == "tool_result" and seen_other:
            raise at(located.path, "`tool_result` blocks must come first in a user message, before any other content")
        seen_other = seen_other or located.block.get("type") != "tool_result"
    if is_last and message["role"] == "assistant" and blocks and blocks[-1].block.get("type") == "text":
        text = str(blocks[-1].block.get("text", ""))
        if text and text != text.rstrip():
            raise at(blocks[-1].path, "final assistant content cannot end with trailing whitespace")


def _ends_in_server_tool_use(message: Any) -> bool:
    blocks = content_blocks(message) if isinstance(message, Mapping) else []
    return bool(blocks) and blocks[-1].get("type") in ("server_tool_use", "mcp_tool_use")


def _check_system_placement(history: list[Any]) -> None:
    """Where a mid-conversation system message may stand (Anthropic's page on them): right after a
    user message, or after an assistant message that ends in a server tool's call, and then either
    last or before the assistant's answer. A run of system messages stands as one."""
    roles = [m.get("role") if isinstance(m, Mapping) else None for m in history]
    for index, role in enumerate(roles):
        if role != "system" or index == 0:
            continue
        before = roles[index - 1]
        if before == "assistant" and not _ends_in_server_tool_use(history[index - 1]):
            raise at(f"messages.{index}", "a system message must follow a user message (or an assistant message "
                                          "ending in a server tool call), not an assistant's answer")
        after = roles[index + 1] if index + 1 < len(roles) else None
        if after == "user":
            raise at(f"messages.{index}", "a system message must be the last message or be followed by an "
                                          "assistant message")


def _turns(history: list[Mapping[str, Any]]) -> list[tuple[int, str, list[Block]]]:
    """The conversation as the API reads it: consecutive messages of one role joined into one
    turn (index of its first message, role, blocks); system messages sit between turns."""
    turns: list[tuple[int, str, list[Block]]] = []
    for index, message in enumerate(history):
        role = str(message.get("role"))
        if role == "system":
            continue
        if turns and turns[-1][1] == role:
            turns[-1][2].extend(content_blocks(message))
        else:
            turns.append((index, role, list(content_blocks(message))))
    return turns


def _tool_use_ids(blocks: list[Block]) -> list[str]:
    return [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]


def _answered(blocks: list[Block]) -> list[str]:
    return [str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"]


def _check_results_first(history: list[Mapping[str, Any]], index: int, blocks: list[Block]) -> None:
    """A user turn answering tool calls opens with all its tool_result blocks, also when it is
    made of several messages (the API joins them: a text message before the results' message
    puts text first)."""
    kinds = [b.get("type") == "tool_result" for b in blocks]
    first_other = kinds.index(False) if False in kinds else len(kinds)
    if any(kinds[first_other:]):
        raise at(f"messages.{index}.content",
                 "`tool_result` blocks must come first in a user message, before any other content (consecutive "
                 "user messages are joined into one)")


def _check_tool_pairs(history: list[Mapping[str, Any]]) -> None:
    turns = _turns(history)
    for position, (index, role, blocks) in enumerate(turns):
        previous = turns[position - 1] if position else None
        offered = _tool_use_ids(previous[2]) if previous and previous[1] == "assistant" else []
        answered = _answered(blocks) if role == "user" else []
        stray = [i for i in answered if i not in offered]
        if stray:
            raise InvalidRequest(
                f"messages.{index}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{stray[0]}. Each `tool_result` block must have a corresponding `tool_use` block in "
                "the previous message."
            )
        if role == "user" and answered:
            _check_results_first(history, index, blocks)
        if len(set(answered)) != len(answered):
            raise at(f"messages.{index}.content", "each `tool_use` may be answered by only one `tool_result`")
        if role == "assistant" and position + 1 < len(turns):
            following = turns[position + 1]
            missing = [i for i in _tool_use_ids(blocks) if i not in (_answered(following[2]) if following[1] == "user"
                                                                      else [])]
            if missing:
                raise InvalidRequest(
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )


def _check_unique_ids(history: list[Any]) -> None:
    """Within one assistant turn, every tool call has its own id (the API took a request that
    reused an id in a later turn, after the first call's result)."""
    for index, role, blocks in _turns([m for m in history if isinstance(m, Mapping)]):
        ids = _tool_use_ids(blocks) if role == "assistant" else []
        repeated = next((i for n, i in enumerate(ids) if i in ids[:n]), None)
        if repeated is not None:
            raise at(f"messages.{index}.content", f"`tool_use` ids must be unique: {repeated} appears more than once")


FIRST_WITHOUT_PREFILL = (4, 6)  # Claude 4.6 models and later refuse a prefilled answer
# Blocks of an answer the API paused (pause_turn, a paused compaction), sent back to go on.
PAUSED_TURN_BLOCKS = frozenset(MESSAGE_BLOCK_TYPES - {"text", "image", "document", "search_result", "tool_use",
                                                      "tool_result", "thinking", "redacted_thinking",
                                                      "container_upload", "tool_addition"})


def takes_prefill(model: str) -> bool:
    """Whether the model continues a final assistant message: Anthropic's migration guide for the
    4.6 models says a prefill is refused from them on (Fable and Mythos are newer still). An id
    naming no family (the stand-in's own test ids) takes one."""
    version = model_families.model_version(model)
    if version is None:
        return True
    name, major, minor = version
    return name not in ("fable", "mythos") and (major, minor) < FIRST_WITHOUT_PREFILL


def _continues_a_pause(message: Mapping[str, Any]) -> bool:
    """An answer the API paused and asks to have sent back as it is (a server tool's pause_turn,
    a compaction paused after its summary): continuing it is no prefill."""
    return any(b.get("type") in PAUSED_TURN_BLOCKS for b in content_blocks(message))


def check_no_prefill(history: list[Any], model: str) -> None:
    """A conversation sent to a model that takes no prefill ends with a user message (the
    Messages endpoint's rule; count_tokens is not documented to apply it)."""
    last = history[-1] if history else None
    if (isinstance(last, Mapping) and last.get("role") == "assistant" and not takes_prefill(model)
            and not _continues_a_pause(last)):
        raise InvalidRequest("This model does not support assistant message prefill. "
                             "The conversation must end with a user message.")


def check_messages(history: list[Any], model: str = "", provider: str = "anthropic") -> None:
    """Every rule of this module, in the order the API reports them (`model`: the request's,
    which thinking blocks are checked against; `provider`: whose rules on the first message)."""
    for index, message in enumerate(history):
        _check_message(index, message, index == len(history) - 1, model, provider)
    _check_system_placement(history)
    for located in all_blocks(history):
        _check_block(located, model)
    check_images(all_blocks(history))
    _check_unique_ids(history)
    _check_tool_pairs(history)

