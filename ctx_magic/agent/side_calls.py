"""Calls made beside the conversation: the compaction summary (SPEC C3), session notes and
long-term memory (S2, X2). Each sends exactly what the main loop sends before its prompt: the
same system prompt, tools and tool_choice (none), so the whole cached conversation is read
from the cache. Changing tool_choice would invalidate every cached message block (Anthropic's
prompt-caching docs), so tool use is forbidden in the prompt instead, and a tool call that
comes back anyway is dropped, as Claude Code does.

`busy` is SPEC L4's recursion guard: no auto-compaction is decided while a summary is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ctx_magic.agent.model import Model, ModelReply, ModelRequest, stream_reply
from ctx_magic.agent.request import RequestFrame
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.fit import FIT_MARGIN_SHARE, fit_messages
from ctx_magic.context.invariants import without_empty
from ctx_magic.context.state import ContextState
from ctx_magic.context.thresholds import MAX_OUTPUT_TOKENS_FOR_SUMMARY
from ctx_magic.context.tokens import count_context, count_text
from ctx_magic.errors import CompactionFailed
from ctx_magic.messages import Block, Message, user_text
from ctx_magic.settings import Window

SIDE_CALL_MAX_OUTPUT = 8_000  # notes and memories: a few thousand tokens of text at most
MEASURED_MARGIN_SHARE = 0.02  # of the window: what a count anchored on the API's usage (T1) may be off by


class Caller(Protocol):
    """What a side call needs of its session: the model, the request it shares, the meter."""

    model: Model
    meter: UsageMeter
    sleep: Callable[[float], None]

    frame: RequestFrame

    @property
    def window(self) -> Window: ...

    @property
    def state(self) -> ContextState: ...

    def request(self, messages: Sequence[Message] | None = None, *, purpose: str = "main",
                tool_choice: dict[str, Any] | None = None, max_tokens: int | None = None) -> ModelRequest: ...


class SideCalls:
    """One session's side calls; usage goes to the session's totals."""

    def __init__(self, session: Caller) -> None:
        self._session = session
        self.busy = False

    def text(self, messages: Sequence[Message], prompt: str, *, purpose: str = "memory",
             max_tokens: int = SIDE_CALL_MAX_OUTPUT) -> str:
        """A text-only answer to `prompt` after `messages`. Safe from any thread: it reads the
        given messages, never the live context."""
        session = self._session
        reply_tokens = min(max_tokens, session.window.reply_cap)
        request = session.request([*self._fitted(messages, reply_tokens, prompt), user_text(prompt)],
                                  purpose=purpose, max_tokens=reply_tokens)
        reply = self._stream(request)
        session.meter.add(reply.usage)
        return _text(reply.content)

    def summarize(self, messages: Sequence[Message], prompt: str) -> str:
        """The compaction call (the engine's Summarizer); a reply with a tool call and no text is a
        failure (with text, the tool call is dropped and the text must hold the summary)."""
        session = self._session
        reply_tokens = min(MAX_OUTPUT_TOKENS_FOR_SUMMARY, session.window.reply_cap)
        request = session.request([*self._fitted(messages, reply_tokens, prompt), user_text(prompt)],
                                  purpose="compact", max_tokens=reply_tokens)
        self.busy = True
        try:
            reply = self._stream(request)
        finally:
            self.busy = False
        session.meter.add(reply.usage)
        text = _text(reply.content)
        if reply.tool_uses and not text.strip():
            raise CompactionFailed("The summary reply called a tool instead of writing the summary.")
        return text

    def _fitted(self, messages: Sequence[Message], reply_tokens: int, prompt: str) -> list[Message]:
        """The messages as the call may send them: never an empty one, and cut to the room the
        window leaves beside the prompt and the reply (context/fit.py). When the API's own count
        of the last response (T1) says they fit, they go unchanged: the call then reads the main
        call's cached prefix, which any cut would lose."""
        sendable, _ = without_empty(messages)
        session = self._session
        window = session.window
        measured = count_context(sendable, overhead_tokens=session.frame.overhead_tokens(),
                                 correction=session.state.correction).tokens
        free = window.tokens * (1 - MEASURED_MARGIN_SHARE) - reply_tokens - window.thinking_budget
        if measured + count_text(prompt) * max(1.0, session.state.correction.ratio) <= free:
            return sendable
        return fit_messages(sendable, self.room(reply_tokens, prompt))

    def room(self, reply_tokens: int, prompt: str) -> int:
        """What a side call's messages may take, by the local estimate: the window less the reply
        (and thinking) it asks room for, the system prompt and tools, its own prompt, and a margin
        for the estimate's error, padded as the main count is padded."""
        session = self._session
        window = session.window
        free = window.tokens * (1 - FIT_MARGIN_SHARE) - reply_tokens - window.thinking_budget
        ratio = max(1.0, session.state.correction.ratio)
        return int(free / ratio) - session.frame.overhead_tokens() - count_text(prompt)

    def _stream(self, request: ModelRequest) -> ModelReply:
        """A whole reply; a stream that broke off is asked for again, as in the main loop."""
        return stream_reply(self._session.model, request, sleep=self._session.sleep)


def _text(content: Sequence[Block]) -> str:
    """The reply's text; tool calls (forbidden by the prompt) are dropped."""
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
