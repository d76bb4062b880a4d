"""The messages a compaction replaced, read back from the transcript and shown as a conversation:
the user's cells with their source and output, the user's and the agent's words, the agent's
tool calls and their results, each under the role that produced it."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctx_magic.messages import Message, notebook_cell_code, result_text

PREVIEW_CHARS = 1_500  # of one block: the transcript holds the rest
MAX_BLOCKS = 200  # a compaction of a very long session: the first ones, then a count


def _cut(text: str) -> str:
    if len(text) <= PREVIEW_CHARS:
        return text
    return f"{text[:PREVIEW_CHARS]}… [{len(text) - PREVIEW_CHARS:,} more characters in the transcript]"


def _entry(role: str, who: str, body: str) -> str:
    return (f'<div class="ctx-magic-msg" data-role="{role}"><div class="ctx-magic-msg-who">{html.escape(who)}</div>'
            f"{body}</div>")


def _pre(text: str, kind: str = "text") -> str:
    return f'<pre class="ctx-magic-pre" data-kind="{kind}">{html.escape(_cut(text))}</pre>'


def _input_text(tool_input: Mapping[str, Any]) -> str:
    if isinstance(tool_input.get("code"), str) and len(tool_input) == 1:
        return tool_input["code"]
    return json.dumps(dict(tool_input), ensure_ascii=False, indent=1)


def _cell_label(tool_input: Mapping[str, Any]) -> str:
    count = tool_input.get("execution_count")
    return f"cell [{count}]" if count else "a cell"


def render_block(block: Mapping[str, Any], message: Message, calls: Mapping[str, Mapping[str, Any]]) -> str:
    """One content block under its role: `calls` maps tool_use ids to their call blocks."""
    kind = block.get("type")
    agent = message.role == "assistant"
    if kind == "text":
        if message.kind == "summary":
            return _entry("summary", "Earlier summary", _pre(block.get("text", "")))
        if message.kind == "attachment":
            return _entry("attachment", "Attached to the conversation", _pre(block.get("text", "")))
        return _entry("agent" if agent else "user", "Agent" if agent else "You", _pre(block.get("text", "")))
    if kind == "tool_use":
        tool_input = block.get("input") or {}
        if block.get("name") == "notebook_cell":
            return _entry("user", f"You ran {_cell_label(tool_input)}", _pre(notebook_cell_code(tool_input), "code"))
        return _entry("agent", f"Agent called {block.get('name')}", _pre(_input_text(tool_input), "code"))
    if kind == "tool_result":
        call = calls.get(block.get("tool_use_id", ""), {})
        name = call.get("name", "a tool")
        error = " (error)" if block.get("is_error") else ""
        if name == "notebook_cell":
            who = f"Output of {_cell_label(call.get('input') or {})}{error}"
            return _entry("user", who, _pre(result_text(block), "output"))
        return _entry("tool", f"Result of {name}{error}", _pre(result_text(block), "output"))
    if kind == "compaction":  # the API's summary
        return _entry("summary", "Earlier summary", _pre(str(block.get("content") or "")))
    if kind in ("thinking", "redacted_thinking"):
        return _entry("agent", "Agent (thinking)", _pre(block.get("thinking", "") or "[redacted]"))
    return _entry("agent" if agent else "user", "Agent" if agent else "You", _pre(f"[{kind}]"))


def originals_html(records: Iterable[Mapping[str, Any]], uuids: Sequence[str]) -> str:
    """The named messages, in transcript order, as a conversation."""
    wanted = set(uuids)
    messages: list[Message] = []
    calls: dict[str, Mapping[str, Any]] = {}
    for record in records:
        if record.get("type") != "message":
            continue
        try:
            message = Message.from_json(record)
        except (KeyError, TypeError, ValueError):
            continue
        for block in message.blocks("tool_use"):
            calls[block["id"]] = block
        if message.uuid in wanted:
            messages.append(message)
    blocks = [(block, message) for message in messages for block in message.content]
    if not blocks:
        return '<div class="ctx-magic-originals"><i>The transcript holds none of these messages.</i></div>'
    parts = [render_block(block, message, calls) for block, message in blocks[:MAX_BLOCKS]]
    if len(blocks) > MAX_BLOCKS:
        parts.append(f"<i>… and {len(blocks) - MAX_BLOCKS:,} more blocks in the transcript.</i>")
    return f'<div class="ctx-magic-originals">{"".join(parts)}</div>'
