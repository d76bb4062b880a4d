"""The messages a compaction replaced, read back from the transcript for the panel."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctx_magic.messages import Message, result_text

PREVIEW_CHARS = 1_500


def originals_html(records: Iterable[Mapping[str, Any]], uuids: Sequence[str]) -> str:
    """The named messages, in transcript order, as compact HTML."""
    wanted = set(uuids)
    parts = []
    for record in records:
        if record.get("type") != "message" or record.get("uuid") not in wanted:
            continue
        message = Message.from_json(record)
        who = "you" if message.role == "user" else "agent"
        for block in message.content:
            kind = block.get("type")
            if kind == "text":
                text = block.get("text", "")
            elif kind == "tool_use":
                text = f"[{block.get('name')}] {block.get('input')}"
            elif kind == "tool_result":
                text = f"[result] {result_text(block)}"
            else:
                text = f"[{kind}]"
            short = text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else "")
            parts.append(f'<div class="ctx-magic-original"><b>{who}</b> '
                         f'<pre style="white-space:pre-wrap;margin:0">{html.escape(short)}</pre></div>')
    if not parts:
        return "<i>The transcript holds none of these messages.</i>"
    return f'<div style="max-height:24em;overflow:auto">{"".join(parts)}</div>'
