"""A request's body from the messages: boundaries and meta messages are dropped, consecutive
messages of one role are merged into one turn (notebook cells arrive as synthetic tool calls
after the assistant's own reply), and prompt-cache breakpoints go on the system prompt and on
the latest message, so each call reads the previous call's prefix from the cache.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctx_magic.agent.model import ModelRequest
from ctx_magic.images import count_images, limit_images
from ctx_magic.messages import Block, Message
from ctx_magic.settings import ALWAYS_THINKS, DEFAULTS, MODEL_DEFAULT, TURNED_DOWN, Window


def thinking_param(window: Window) -> dict[str, Any] | None:
    """The `thinking` parameter for the window's thinking type. None where nothing is asked for,
    but 'off' on a model that thinks unasked: the type that turns that down ('disabled', or
    Sonnet 5.5's 'between_tools')."""
    if window.thinking == "enabled":
        return {"type": "enabled", "budget_tokens": window.thinking_budget}
    if window.thinking == "adaptive":
        return {"type": "adaptive"}
    if window.thinking_off in TURNED_DOWN:
        return {"type": window.thinking_off}
    return None


def thinks_up_front(window: Window) -> bool:
    """Whether the model thinks before it answers: thinking on, or a model that does unasked."""
    return window.thinking != "off" or window.thinking_off in (ALWAYS_THINKS, MODEL_DEFAULT)


def cache_control(ttl: str) -> dict[str, str]:
    control = {"type": "ephemeral"}
    if ttl == "1h":
        control["ttl"] = "1h"
    return control


def _api_block(block: Block) -> Block:
    """The block as the API takes it: our own bookkeeping keys never leave."""
    if not any(k.startswith("_") or k == "cache_control" for k in block):
        return block
    return {k: v for k, v in block.items() if not k.startswith("_") and k != "cache_control"}


def _api_blocks(message: Message) -> tuple[list[Block], bool]:
    """A message's blocks in the API's shape, worked out once per message, and whether its
    tool_result blocks already come first. The blocks are shared, not copied: messages are
    values and requests are read-only (a breakpoint is put on a copy); copying 30,000 blocks
    each turn cost more than JSON-encoding the request (benchmarks/scale.py)."""
    memo = message.memo
    if "api_blocks" not in memo:
        blocks = tuple(_api_block(b) for b in message.content)
        kinds = [b.get("type") == "tool_result" for b in blocks]
        memo["api_blocks"] = blocks, kinds == sorted(kinds, reverse=True)
    blocks, ordered = memo["api_blocks"]
    return list(blocks), ordered


ApiTurn = dict[str, Any]
"""One message in the API's shape: a role and its blocks, same-role runs merged."""


def _add_turns(turns: list[ApiTurn], messages: Iterable[Message]) -> list[ApiTurn]:
    """`turns` with `messages` after them: same-role runs merged, tool results first in each
    user turn (the API wants them before anything else in it). Changes only the last turn of
    `turns` (replaced, not edited) and the turns it adds."""
    unordered: set[int] = set()
    for message in messages:
        if not message.sent:
            continue
        blocks, ordered = _api_blocks(message)
        if turns and turns[-1]["role"] == message.role:
            turns[-1] = {"role": message.role, "content": [*turns[-1]["content"], *blocks]}
            ordered = False  # merged: its results may now follow another message's text
        else:
            turns.append({"role": message.role, "content": blocks})
        if message.role == "user" and not ordered:
            unordered.add(len(turns) - 1)
    for index in unordered:
        content = turns[index]["content"]
        turns[index] = {**turns[index], "content": [b for b in content if b.get("type") == "tool_result"]
                        + [b for b in content if b.get("type") != "tool_result"]}
    return turns


def _with_breakpoints(turns: list[ApiTurn], cache_ttl: str | None, tail: Message | None,
                      end: Message | None = None, *, prompt_once: bool = False) -> list[ApiTurn]:
    """The turns with cache breakpoints on the last block (with `prompt_once`, on `end`'s last
    block instead) and on `tail`'s last block; only the turns they touch are copied."""
    if not cache_ttl or not turns:
        return turns
    control = cache_control(cache_ttl)
    marked = list(turns)
    targets = [_api_blocks(end)[0][-1]] if prompt_once and end is not None and end.content else []
    if not prompt_once:
        targets.append(turns[-1]["content"][-1])
    if tail is not None and tail.sent and tail.content:
        targets.append(_api_blocks(tail)[0][-1])
    for target in targets:
        for index in range(len(marked) - 1, -1, -1):
            content = marked[index]["content"]
            hit = next((i for i in range(len(content) - 1, -1, -1) if content[i] is target), None)
            if hit is not None:
                copied = [*content[:hit], {**target, "cache_control": control}, *content[hit + 1:]]
                marked[index] = {**marked[index], "content": copied}
                break
    return marked


class TurnCache:
    """The last request's turns and image count, reused when the next request starts with the
    same messages: a turn adds a few messages at the end, and rebuilding 10,000 messages' turns
    (or counting their images) each call cost more than the rest of the pipeline together
    (benchmarks/scale.py)."""

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._turns: list[ApiTurn] = []
        self._counted: list[Message] = []
        self._images = 0
        self._lock = threading.Lock()

    def image_count(self, messages: Sequence[Message]) -> int:
        """`count_images(messages)`, counting only what follows the last request's messages."""
        with self._lock:
            known = len(self._counted)
            reuse = 0 < known <= len(messages) and all(map(operator.is_, messages, self._counted))
            total = (self._images if reuse else 0) + count_images(messages[known:] if reuse else messages)
            self._counted, self._images = list(messages), total
            return total

    def turns(self, messages: Sequence[Message]) -> list[ApiTurn]:
        with self._lock:
            known = len(self._messages)
            # The same objects up to `known` (compared in C: this runs over every message each call).
            reuse = 0 < known <= len(messages) and all(map(operator.is_, messages, self._messages))
            turns = _add_turns(list(self._turns) if reuse else [], messages[known:] if reuse else messages)
            self._messages, self._turns = list(messages), turns
            return list(turns)


def system_blocks(system_prompt: str, *, cache_ttl: str | None = DEFAULTS.cache_ttl) -> list[Block]:
    block: Block = {"type": "text", "text": system_prompt}
    if cache_ttl:
        block["cache_control"] = cache_control(cache_ttl)
    return [block]


def build_request(messages: Sequence[Message], *, system: str, tools: Sequence[Mapping[str, Any]], max_tokens: int,
                  cache_ttl: str, cached_tail: str | None = None, turns: TurnCache | None = None,
                  prompt_once: bool = False) -> ModelRequest:
    """One Messages-API call: the system prompt and tools every call shares, then the messages
    (at most 100 images of them: the oldest become a line saying so), same-role runs merged,
    tool results first in each user turn, and the cache breakpoints: on the last block, and on
    the last block of `cached_tail` (the message the previous request ended with) when it is
    still there.

    The API looks for an earlier cache entry only about 20 blocks back from a breakpoint; a
    user who ran many cells between two turns adds more than that, and the whole cached
    conversation would be written again. A breakpoint where the previous request ended finds
    its entry wherever it is (two breakpoints here, one on the system prompt: 3 of the API's 4).
    An image left out changes what came before the thinking after it: in an append-only conversation
    the engine removed that thinking when the images left out changed (engine._images_left_out).

    `prompt_once`: the last message is a side call's own prompt, which no later request repeats.
    The breakpoint goes on the block before it: the conversation is still cached for the calls
    after, and the prompt is billed as plain input instead of a cache write (1.25 or 2 times).
    """
    messages, _ = limit_images(messages, total=turns.image_count(messages) if turns is not None else None)
    tail = next((m for m in reversed(messages) if m.uuid == cached_tail), None) if cached_tail else None
    built = turns.turns(messages) if turns is not None else _add_turns([], messages)
    return ModelRequest(
        system=system_blocks(system, cache_ttl=cache_ttl),
        tools=list(tools),
        messages=_with_breakpoints(built, cache_ttl, tail, _before_last(messages), prompt_once=prompt_once),
        max_tokens=max_tokens,
    )


def _before_last(messages: Sequence[Message]) -> Message | None:
    """The last sent message before the last sent one (None when there is none)."""
    sent = (m for m in reversed(messages) if m.sent)
    next(sent, None)
    return next(sent, None)
