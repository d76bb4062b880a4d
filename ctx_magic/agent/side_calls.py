"""Calls made beside the conversation: the compaction summary, session notes and long-term
memory. Each sends exactly what the main loop sends before its prompt: the
same system prompt, tools and tool_choice (none), so the whole cached conversation is read
from the cache. Changing tool_choice would invalidate every cached message block (Anthropic's
prompt-caching docs), so tool use is forbidden in the prompt instead, and a tool call that
comes back anyway is dropped, as Claude Code does. The prompt itself, which no later request
repeats, comes after the last cache breakpoint: billed as plain input, not written to the cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.model import ModelReply, ModelRequest, stream_reply
from ctx_magic.agent.request import CallSetup, RequestFrame
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.fit import FIT_MARGIN_SHARE, fit_messages
from ctx_magic.context.invariants import without_empty
from ctx_magic.context.thinking import keep_valid_thinking, side_call_view, without_thinking
from ctx_magic.context.thresholds import MAX_OUTPUT_TOKENS_FOR_SUMMARY
from ctx_magic.context.tokens import count_context, count_text
from ctx_magic.errors import CompactionFailed, SummaryBlockRefused, ThinkingRefused
from ctx_magic.messages import Block, Message, user_text
from ctx_magic.store.session import SessionDir

SIDE_CALL_MAX_OUTPUT = 8_000  # notes and memories: a few thousand tokens of text at most
# A summary call whose conversation fits only with less reply room than its cap is asked for that
# room, down to this, rather than cut: a cut (thinking first) changes the start of the conversation,
# which is then written to the cache again instead of read (about 12 times the price), and loses
# what it shortens. Claude Code's recorded compaction replies run to 4,235-5,670 tokens.
SUMMARY_LEAST_REPLY = 6_000
MEASURED_MARGIN_SHARE = 0.02  # of the window: what a count anchored on the API's usage may be off by


class SideCalls:
    """One session's side calls: the request the main call makes, another prompt at its end;
    usage goes to the session's totals."""

    def __init__(self, frame: RequestFrame, live: LiveContext, meter: UsageMeter, store: SessionDir, *,
                 clock: Callable[[], float], sleep: Callable[[float], None] = time.sleep) -> None:
        self._frame = frame
        self._live = live
        self._meter = meter
        self._store = store
        self._clock = clock
        self._sleep = sleep
        self.busy = False
        """A summary is being asked for: no auto-compaction is decided meanwhile (no recursion)."""

    def text(self, messages: Sequence[Message], prompt: str, *, purpose: str = "memory",
             max_tokens: int = SIDE_CALL_MAX_OUTPUT) -> str:
        """A text-only answer to `prompt` after `messages`. Safe from any thread: it reads the
        given messages, never the live context."""
        return _text(self._ask(messages, prompt, max_tokens, purpose).content)

    def summarize(self, messages: Sequence[Message], prompt: str) -> str:
        """The compaction call (the engine's summarizer); a reply with a tool call and no text is a
        failure (with text, the tool call is dropped and the text must hold the summary)."""
        self.busy = True
        try:
            reply = self._ask(messages, prompt, MAX_OUTPUT_TOKENS_FOR_SUMMARY, "compact", least=SUMMARY_LEAST_REPLY)
        finally:
            self.busy = False
        text = _text(reply.content)
        if reply.tool_uses and not text.strip():
            raise CompactionFailed("The summary reply called a tool instead of writing the summary.")
        return text

    def _ask(self, messages: Sequence[Message], prompt: str, max_tokens: int, purpose: str, *,
             least: int | None = None) -> ModelReply:
        """One whole reply (a stream that broke off is asked for again, as in the main loop), its
        usage added to the session's totals. Thinking the API refuses (its prefix check) is sent
        no more: the call is asked again without any, which its answer does not need (its last
        message is a new prompt) and a request without thinking has nothing to check; so too when the
        API refused a summary of its own (it goes as text from then on). With
        `least`, the reply room may shrink to it where that keeps the messages whole."""
        setup = self._frame.setup(messages, self._store)
        reply_tokens = min(max_tokens, setup.window.reply_cap)
        reply_tokens = self._reply_room(setup, messages, prompt, reply_tokens, min(least or reply_tokens, reply_tokens))
        request = self._request(setup, messages, prompt, reply_tokens, purpose)
        try:
            reply = stream_reply(self._frame.model, request, sleep=self._sleep)
        except (ThinkingRefused, SummaryBlockRefused) as error:
            if isinstance(error, SummaryBlockRefused):
                self._frame.summaries.refuse(error)
            request = self._request(setup, [without_thinking(m) for m in messages], prompt, reply_tokens, purpose)
            reply = stream_reply(self._frame.model, request, sleep=self._sleep)
        self._meter.add(reply.usage)
        return reply

    def _request(self, setup: CallSetup, messages: Sequence[Message], prompt: str, reply_tokens: int,
                 purpose: str) -> ModelRequest:
        """The messages as the call may send them, `prompt` after them, seen as a side call sees
        them (context/thinking.side_call_view)."""
        sent = [*self._fitted(setup, messages, reply_tokens, prompt), user_text(prompt)]
        if setup.window.append_only:  # what the call changed of the conversation voids the thinking after it
            sent, _ = keep_valid_thinking(self._live.messages, sent)
        warm = self._live.cache_warm(self._clock(), setup.settings.cache_ttl_seconds)
        return self._frame.build(side_call_view(sent, cache_warm=warm), setup, purpose=purpose,
                                 max_tokens=reply_tokens, prompt_once=True)

    def _measured_spare(self, setup: CallSetup, messages: Sequence[Message], reply_tokens: int,
                        prompt: str) -> int | None:
        """Tokens left over when the messages go whole beside `prompt` and a reply of
        `reply_tokens`, by the count anchored on the API's usage (negative: they do not fit);
        None under the 'server' strategy, where that count is of the context after the API's
        edits, which a side call does not carry."""
        if setup.server is not None:
            return None
        sendable, _ = without_empty(messages)
        window, correction = setup.window, self._live.state.correction
        measured = count_context(sendable, overhead_tokens=setup.overhead_tokens, correction=correction).tokens
        free = window.tokens * (1 - MEASURED_MARGIN_SHARE) - reply_tokens - window.thinking_budget
        return int(free - measured - count_text(prompt) * max(1.0, correction.ratio))

    def _reply_room(self, setup: CallSetup, messages: Sequence[Message], prompt: str, reply_tokens: int,
                    least: int) -> int:
        """The reply room to ask for: `reply_tokens`, or less (down to `least`) when that is what
        lets the messages go whole, so the call reads the main call's cached conversation."""
        if least >= reply_tokens:
            return reply_tokens
        spare = self._measured_spare(setup, messages, reply_tokens, prompt)
        if spare is None or spare >= 0 or reply_tokens + spare < least:
            return reply_tokens
        return reply_tokens + spare

    def _fitted(self, setup: CallSetup, messages: Sequence[Message], reply_tokens: int,
                prompt: str) -> list[Message]:
        """The messages as the call may send them: never an empty one, and cut to the room the
        window leaves beside the prompt and the reply (context/fit.py). When the API's own count
        of the last response says they fit, they go unchanged: the call then reads the main
        call's cached prefix, which any cut would lose. Under the 'server' strategy that count is
        of the context after the API's edits, which a side call does not carry: the local
        estimate decides."""
        sendable, _ = without_empty(messages)
        spare = self._measured_spare(setup, sendable, reply_tokens, prompt)
        if spare is not None and spare >= 0:
            return sendable
        return fit_messages(sendable, room(setup, reply_tokens, prompt, self._live.state.correction.ratio))


def room(setup: CallSetup, reply_tokens: int, prompt: str, ratio: float) -> int:
    """What a side call's messages may take, by the local estimate: the window less the reply
    (and thinking) it asks room for, the system prompt and tools, its own prompt, and a margin
    for the estimate's error, padded as the main count is padded (by `ratio`, at least 1)."""
    window = setup.window
    free = window.tokens * (1 - FIT_MARGIN_SHARE) - reply_tokens - window.thinking_budget
    return int(free / max(1.0, ratio)) - setup.overhead_tokens - count_text(prompt)


def _text(content: Sequence[Block]) -> str:
    """The reply's text; tool calls (forbidden by the prompt) are dropped."""
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
