"""A side call fitted to the window (beyond Claude Code): 0 API calls.

A summary, a session-notes update or a memory extraction sends the conversation, then its
prompt, and asks for a reply of up to max_tokens. The API refuses a request whose input and
max_tokens together exceed the window ("input length and `max_tokens` exceed context limit"),
and a conversation at the compaction threshold is exactly one that nearly fills it; in a small
window the prompt alone can be larger than the buffers left (they scale with the window). So the conversation such a
call sends is cut to the room it has, in this order:

1. nothing changes when it fits (the call then reads the main call's cached prefix);
2. thinking blocks go (they do not help a summary and may be the largest part);
3. long blocks are shortened to a shared cap, keeping their start and end around a line that
   says how much was left out (the transcript keeps every word): tool results first, then the
   model's text, and the user's own words and earlier summaries only when that is not enough;
4. when even MIN_KEPT_TOKENS of every block would not fit, the oldest API rounds go first (as
   a too-long compaction request drops them), then step 3 again.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctx_magic.context.api_count import ROLE_CHANGE
from ctx_magic.context.autocompact import api_round_groups
from ctx_magic.context.prompts import PTL_RETRY_MARKER
from ctx_magic.context.thinking import without_thinking
from ctx_magic.context.tokens import block_tokens, message_tokens
from ctx_magic.messages import Block, Message, text_block

FIT_MARGIN_SHARE = 0.05  # of the window, kept free: what the local estimate may be off by
MIN_KEPT_TOKENS = 200  # a block cut shorter than this says too little: older rounds go first
HEAD_SHARE = 2 / 3  # of what a shortened block keeps, its start (the end holds errors and totals)
CUT_NOTE = "\n[… {chars:,} characters left out so that this call fits the window; the transcript keeps them …]\n"


def fit_messages(messages: Sequence[Message], room_tokens: int) -> list[Message]:
    """The sent messages cut to at most `room_tokens` (by the local estimate)."""
    sent = [m for m in messages if m.sent]
    if sum(message_tokens(m) for m in sent) <= room_tokens:
        return list(messages)
    budget = room_tokens
    for _ in range(FIT_ATTEMPTS):  # a cut is proportional in characters: check it, tighten if over
        fitted = _fitted(sent, budget)
        over = sum(message_tokens(m) for m in fitted) - room_tokens
        if over <= 0:
            break
        budget -= 2 * over  # twice the excess: a cut saves fewer tokens than its share of characters
    return fitted


FIT_ATTEMPTS = 3


def _fitted(sent: list[Message], room_tokens: int) -> list[Message]:
    groups = api_round_groups([without_thinking(m) for m in sent])
    while True:
        kept = [m for group in groups for m in group]
        caps = tier_caps(kept, room_tokens)
        if caps is not None or len(groups) == 1:
            fitted = [_shortened(m, caps or (1, 1, 1)) for m in kept]
            break
        groups = groups[1:]
    if fitted[0].role != "user":
        fitted.insert(0, Message("user", (text_block(PTL_RETRY_MARKER),), meta={"ptl_retry_marker": True}))
    return fitted


def tier(message: Message, block: Block) -> int | None:
    """Which blocks are cut first: tool results (0), then the model's text (1), then the user's
    own words and earlier summaries (2); None for blocks that cannot be cut (tool calls, images)."""
    if block.get("type") == "tool_result" and _texts(block):
        return 0
    if block.get("type") == "text":
        return 1 if message.role == "assistant" else 2
    return None


def _texts(block: Block) -> list[str]:
    content = block.get("content", "")
    if isinstance(content, str):
        return [content] if content else []
    return [b.get("text", "") for b in content if b.get("type") == "text" and b.get("text")]


def tier_caps(messages: Sequence[Message], room_tokens: int) -> tuple[int, int, int] | None:
    """A size cap per tier such that every block cut to its tier's cap fits `room_tokens`: the
    first tier is cut as far as MIN_KEPT_TOKENS before the next is touched. None when even
    MIN_KEPT_TOKENS of every block do not fit (older rounds must go)."""
    sizes: list[list[int]] = [[], [], []]
    left = room_tokens
    for message in messages:
        left -= ROLE_CHANGE  # each message's header, which no cut makes smaller
        for block in message.content:
            level = tier(message, block)
            if level is None:
                left -= block_tokens(block)
            else:
                sizes[level].append(block_tokens(block))
    caps = [max(s, default=0) for s in sizes]
    floors = [sum(min(size, MIN_KEPT_TOKENS) for size in s) for s in sizes]
    for level in range(3):
        later = sum(sum(s) for s in sizes[level + 1:])
        cap = shared_cap(sizes[level], left - later)
        if cap >= MIN_KEPT_TOKENS:
            caps[level] = cap
            return caps[0], caps[1], caps[2]
        caps[level] = MIN_KEPT_TOKENS
        left -= floors[level]
    return None


def shared_cap(sizes: Sequence[int], room_tokens: int) -> int:
    """The largest cap such that `sizes`, each cut to it, sum to at most `room_tokens`."""
    if room_tokens <= 0:
        return 0
    left = room_tokens
    ordered = sorted(sizes)
    for index, size in enumerate(ordered):
        share = left // (len(ordered) - index)
        if size > share:
            return share
        left -= size
    return max(ordered, default=0) if ordered else room_tokens


def _shortened(message: Message, caps: tuple[int, int, int]) -> Message:
    blocks = []
    for block in message.content:
        level = tier(message, block)
        if level is not None and block_tokens(block) > caps[level]:
            block = _cut_block(block, max(1, caps[level]))
        blocks.append(block)
    if all(a is b for a, b in zip(blocks, message.content)):
        return message
    return message.with_content(blocks)


def _cut_block(block: Block, cap: int) -> Block:
    if block.get("type") == "text":
        return {**block, "text": cut_text(block["text"], cap, block_tokens(block))}
    content = block.get("content", "")
    wrapper = block_tokens({**block, "content": ""})  # the tool result's own tags stay
    cap = max(1, cap - wrapper)
    if isinstance(content, str):
        return {**block, "content": cut_text(content, cap, block_tokens(block) - wrapper)}
    texts = {id(b) for b in content if b.get("type") == "text" and b.get("text")}
    share = max(1, cap // max(1, len(texts)))
    return {**block, "content": [{**b, "text": cut_text(b["text"], share, block_tokens(b))} if id(b) in texts else b
                                 for b in content]}


def cut_text(text: str, cap: int, tokens: int) -> str:
    """About `cap` tokens of `text` (of `tokens`): its start and its end around a note."""
    if tokens <= cap:
        return text
    keep = max(1, int(len(text) * cap / tokens) - len(CUT_NOTE))
    head = round(keep * HEAD_SHARE)
    tail = keep - head
    note = CUT_NOTE.format(chars=len(text) - keep)
    return text[:head] + note + (text[-tail:] if tail else "")
