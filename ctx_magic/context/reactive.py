"""Reactive compaction: when the API still says the prompt is too long.

Compact once, keeping the last five messages with their pairs intact, and retry the call
once per turn. A 413 for bytes (request_too_large) is not a token problem: images and
documents go instead of a summary, and so does any tool result still over the tool-result budget's single-result
limit (read_file results, which the budget never persists), saved to disk the way the budget saves outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctx_magic.context.budget import MAX_RESULT_CHARS, PREVIEW_CHARS, persist_result
from ctx_magic.context.snip import safe_cuts
from ctx_magic.events import Persisted
from ctx_magic.messages import Block, Message, result_text, text_block

REACTIVE_KEEP_MESSAGES = 5  # the tail the model needs to carry on after the summary
IMAGE_REMOVED = "[image removed: the request was larger than the API accepts]"


def reactive_split(messages: Sequence[Message], keep: int = REACTIVE_KEEP_MESSAGES) -> int:
    """Index where the kept tail starts: about `keep` messages, never splitting a pair."""
    cut = max(0, len(messages) - keep)
    safe = safe_cuts(messages)
    while cut > 0 and not safe[cut]:
        cut -= 1
    return cut


def without_media(block: Block, note: Callable[[str], str]) -> Block:
    """The block with every image and document in it (in a tool result too) replaced by the
    text `note(kind)`."""
    kind = block.get("type")
    if kind in ("image", "document"):
        return text_block(note(str(kind)))
    if kind == "tool_result" and isinstance(block.get("content"), list):
        return {**block, "content": [without_media(b, note) for b in block["content"]]}
    return block


def strip_images(messages: Sequence[Message], note: str = IMAGE_REMOVED) -> tuple[list[Message], list[str]]:
    """Messages with every image and document replaced by a short note (for a 413), plus
    the uuids of the messages that changed."""
    out: list[Message] = []
    changed: list[str] = []
    for message in messages:
        blocks = [without_media(b, lambda _kind: note) for b in message.content]
        if blocks != list(message.content):
            changed.append(message.uuid)
            message = message.with_content(blocks)
        out.append(message)
    return out, changed


def persist_oversized(messages: Sequence[Message], path_for: Callable[[str], str], *,
                      max_chars: int = MAX_RESULT_CHARS,
                      preview_chars: int = PREVIEW_CHARS) -> tuple[list[Message], list[Persisted]]:
    """For a 413: every tool result over `max_chars` becomes a `<persisted-output>` block, with
    one Persisted event each (carrying the full text for the file)."""
    out: list[Message] = []
    events: list[Persisted] = []
    for message in messages:
        blocks, touched = [], False
        for block in message.content:
            text = result_text(block) if block.get("type") == "tool_result" else ""
            if len(text) > max_chars:
                block, event = persist_result(block, path_for, preview_chars)
                events.append(event)
                touched = True
            blocks.append(block)
        out.append(message.with_content(blocks) if touched else message)
    return out, events
