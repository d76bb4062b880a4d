"""L5, reactive compaction (SPEC L5): when the API still says the prompt is too long.

Compact once, keeping the last five messages with their pairs intact, and retry the call
once per turn. A 413 for bytes (request_too_large) is not a token problem: images and
documents go instead of a summary.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctx_magic.context.snip import safe_cuts
from ctx_magic.messages import Message

REACTIVE_KEEP_MESSAGES = 5  # s08: the tail the model needs to carry on after the summary
IMAGE_REMOVED = "[image removed: the request was larger than the API accepts]"


def reactive_split(messages: Sequence[Message], keep: int = REACTIVE_KEEP_MESSAGES) -> int:
    """Index where the kept tail starts: about `keep` messages, never splitting a pair."""
    cut = max(0, len(messages) - keep)
    safe = safe_cuts(messages)
    while cut > 0 and not safe[cut]:
        cut -= 1
    return cut


def strip_images(messages: Sequence[Message], note: str = IMAGE_REMOVED) -> tuple[list[Message], list[str]]:
    """Messages with every image and document replaced by a short note (for a 413), plus
    the uuids of the messages that changed."""
    out: list[Message] = []
    changed: list[str] = []
    for message in messages:
        new_blocks, touched = [], False
        for block in message.content:
            kind = block.get("type")
            if kind in ("image", "document"):
                new_blocks.append({"type": "text", "text": note})
                touched = True
            elif kind == "tool_result" and isinstance(block.get("content"), list):
                inner = [
                    {"type": "text", "text": note} if b.get("type") in ("image", "document") else b
                    for b in block["content"]
                ]
                touched = touched or inner != block["content"]
                new_blocks.append({**block, "content": inner})
            else:
                new_blocks.append(block)
        if touched:
            changed.append(message.uuid)
            message = message.with_content(new_blocks)
        out.append(message)
    return out, changed
