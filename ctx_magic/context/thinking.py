"""Thinking blocks in the live context (0 API calls).

With extended thinking on, each answer opens with `thinking` (or `redacted_thinking`) blocks
carrying a signature. The API wants them back byte for byte inside a tool loop, and refuses a
block that was changed; so this module never edits a block, it only removes whole ones:

- **Thinking clearing** (as Claude Code does it): old thinking is the largest
  tokens-per-message part of a conversation. During active use every thinking turn stays (the
  prompt cache holds them, clearing would only break it); after an idle gap longer than the
  cache TTL (the cache is cold anyway) only the last thinking turn is kept.
- **A model switch** removes the blocks another model made: signatures are bound to the model
  that wrote them, and the new one refuses the others (its earlier turns do not need them).
- **A refused prefix** (models with preserved thinking): the API refuses, or drops, a thinking
  block whose earlier context changed after it was written; that block and every later thinking
  block are invalid, so all of them leave the live context (`drop_refused_thinking`).
- **Side calls** (summary, notes, memories) see no thinking when the cache is cold; while it is
  warm they get the live context as it is, so their request starts with the main call's cached
  prefix (see `side_call_view`).

A "thinking turn" is everything the model said between two prompts of the user: a tool loop's
answers together. Keeping the last whole turn keeps every block a loop in progress needs.

- **Append-only conversations** (models that check each block's prefix: the system prompt, the
  tools and every message before it must be what they were when the block was written): an edit
  of anything already sent invalidates every thinking block after it, so `keep_valid_thinking`
  removes exactly those, and the thinking before the edit stays.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

from ctx_magic.context.tokens import message_tokens
from ctx_magic.events import ThinkingCleared
from ctx_magic.messages import Block, Message, text_block

THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
KEEP_THINKING_TURNS = 1  # Claude Code: after an idle gap, only the last thinking turn is kept
THINKING_OMITTED = "[earlier reasoning omitted]"  # stands in for an answer that was only thinking
PREFIX_META = "prefix"  # an answer's meta: the system prompt and tools it was written after (CallSetup.signature)


def is_thinking(block: Block) -> bool:
    return block.get("type") in THINKING_BLOCKS


def has_thinking(message: Message) -> bool:
    return message.role == "assistant" and any(is_thinking(b) for b in message.content)


def first_written_after_another_prefix(messages: Sequence[Message], signature: str) -> int | None:
    """Where the first answer with thinking written after another system prompt or other tools than
    `signature` is (a model that checks the prefix refuses its thinking, and all after it); None
    when there is none (an answer stored before the mark was kept counts as written after these)."""
    return next((i for i, m in enumerate(messages)
                 if m.meta.get(PREFIX_META, signature) != signature and m.sent and has_thinking(m)), None)


def without_thinking(message: Message) -> Message:
    """The message without its thinking blocks (an answer that was nothing else keeps a short
    note instead, so no message is ever empty, as the API requires)."""
    if not has_thinking(message):
        return message
    kept = [b for b in message.content if not is_thinking(b)]
    return message.with_content(kept or [text_block(THINKING_OMITTED)])


def is_prompt(message: Message) -> bool:
    """A message of the user that starts a turn (not only tool results, not bookkeeping)."""
    return (message.role == "user" and message.sent and message.kind == "normal"
            and any(b.get("type") != "tool_result" for b in message.content))


def thinking_turns(messages: Sequence[Message]) -> list[list[int]]:
    """Indices of the messages with thinking, grouped by the user's turn they answer."""
    turns: list[list[int]] = []
    current: list[int] = []
    for index, message in enumerate(messages):
        if is_prompt(message) and current:
            turns.append(current)
            current = []
        if message.sent and has_thinking(message):
            current.append(index)
    if current:
        turns.append(current)
    return turns


def strip_thinking(messages: Sequence[Message], indices: Sequence[int], trigger: str
                   ) -> tuple[list[Message], ThinkingCleared | None]:
    """The messages with the thinking of `indices` removed, and the event that says so."""
    out = list(messages)
    uuids: list[str] = []
    blocks = freed = 0
    for index in indices:
        old = out[index]
        if not has_thinking(old):
            continue
        out[index] = without_thinking(old)
        uuids.append(old.uuid)
        blocks += sum(1 for b in old.content if is_thinking(b))
        freed += message_tokens(old) - message_tokens(out[index])
    if not uuids:
        return out, None
    return out, ThinkingCleared(trigger, tuple(uuids), blocks, max(0, freed))


def clear_old_thinking(messages: Sequence[Message], keep_turns: int = KEEP_THINKING_TURNS,
                       trigger: str = "idle") -> tuple[list[Message], ThinkingCleared | None]:
    """Every thinking turn but the `keep_turns` most recent ones, removed."""
    turns = thinking_turns(messages)
    old = [index for turn in turns[: max(0, len(turns) - keep_turns)] for index in turn]
    return strip_thinking(messages, old, trigger)


def clear_foreign_thinking(messages: Sequence[Message], written_here: Callable[[Message], bool]
                           ) -> tuple[list[Message], ThinkingCleared | None]:
    """The thinking of every answer the new model (on its provider) did not write, removed."""
    foreign = [i for i, m in enumerate(messages) if has_thinking(m) and not written_here(m)]
    return strip_thinking(messages, foreign, "model-switch")


def _identity(block: Block) -> tuple[str, str] | None:
    """What tells one thinking block from every other: its signature (its data, redacted)."""
    if block.get("type") == "thinking" and block.get("signature"):
        return "thinking", str(block["signature"])
    if block.get("type") == "redacted_thinking" and block.get("data"):
        return "redacted_thinking", str(block["data"])
    return None


def drop_refused_thinking(messages: Sequence[Message], refused: Sequence[Block]
                          ) -> tuple[list[Message], ThinkingCleared | None]:
    """The messages without the thinking the prefix check refused: from the first message holding
    one of the `refused` blocks (as they were sent, found by signature) on, every answer loses its
    thinking. Removing only the refused block would not do: a change invalidates every thinking
    block after it, and a block left out between others invalidates those after it too. Thinking
    before that message stays. No event when none of the blocks is in `messages`."""
    keys = {key for key in map(_identity, refused) if key is not None}
    start = next((i for i, m in enumerate(messages) if has_thinking(m)
                  and any(_identity(b) in keys for b in m.content)), None)
    if start is None:
        return list(messages), None
    later = [i for i in range(start, len(messages)) if has_thinking(messages[i])]
    return strip_thinking(messages, later, "prefix-check")


def side_call_view(messages: Sequence[Message], *, cache_warm: bool) -> list[Message]:
    """What a side call (summary, notes, memories) is sent of the conversation.

    The choice, and why: a side call's last message is a new prompt, so the API ignores earlier
    thinking anyway; its only effect is on the prompt cache. While the cache is warm the call
    sends the live context unchanged (with the same thinking settings), so it reads the main
    call's prefix at a tenth of the input price; removing the blocks would make everything after
    the first of them a new prefix, written at 1.25x. Once the cache has expired there is nothing
    to read, and the blocks are removed: the tokens are not paid for at all.
    """
    if cache_warm:
        return list(messages)
    return [without_thinking(m) for m in messages]


EDIT_TRIGGER = "edit"  # thinking removed because an edit before it changed its prefix
IMAGES_TRIGGER = "images"  # thinking removed because older images began to be left out of the request before it


def _same(a: Message, b: Message) -> bool:
    return a is b or (a.role == b.role and a.content == b.content)


def first_change(before: Sequence[Message], after: Sequence[Message]) -> int | None:
    """Where `after` first sends something other than `before` did: the index in `after` of its
    first sent message that differs from `before`'s sent message at the same place. None when
    `after` sends what `before` sent with only messages added at the end (or taken from it)."""
    n = min(len(before), len(after))
    if all(map(operator.is_, before[:n], after[:n])):  # the common case: only appended (compared in C)
        return None
    old = [m for m in before if m.sent]
    new = [(i, m) for i, m in enumerate(after) if m.sent]
    for (index, message), previous in zip(new, old, strict=False):
        if not _same(previous, message):
            return index
    return None


def drop_thinking_from(messages: Sequence[Message], start: int, trigger: str = EDIT_TRIGGER
                       ) -> tuple[list[Message], ThinkingCleared | None]:
    """Every thinking block at or after message `start` removed (those an edit at `start` invalidates)."""
    return strip_thinking(messages, [i for i in range(start, len(messages)) if has_thinking(messages[i])], trigger)


def keep_valid_thinking(before: Sequence[Message], after: Sequence[Message], trigger: str = EDIT_TRIGGER
                        ) -> tuple[list[Message], ThinkingCleared | None]:
    """`after` (an edit of `before`) without the thinking blocks the edit invalidates: those after
    its first change. The model would refuse them (or drop them unannounced), and a thinking
    block between others may not be left out either, so all of them go; those before stay valid."""
    start = first_change(before, after)
    if start is None:
        return list(after), None
    return drop_thinking_from(after, start, trigger)
