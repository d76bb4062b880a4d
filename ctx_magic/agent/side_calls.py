"""Calls made beside the conversation: the compaction summary (SPEC C3), session notes and
long-term memory (S2, X2). Each sends exactly what the main loop sends before its prompt: the
same system prompt, tools and tool_choice (none), so the whole cached conversation is read
from the cache. Changing tool_choice would invalidate every cached message block (Anthropic's
prompt-caching docs), so tool use is forbidden in the prompt instead, and a tool call that
comes back anyway is dropped, as Claude Code does.

`busy` is SPEC L4's recursion guard: no auto-compaction is decided while a summary is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ctx_magic.agent.model import Model, ModelRequest
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.thresholds import MAX_OUTPUT_TOKENS_FOR_SUMMARY
from ctx_magic.errors import CompactionFailed
from ctx_magic.messages import Block, Message, user_text
from ctx_magic.settings import Window

SIDE_CALL_MAX_OUTPUT = 8_000  # notes and memories: a few thousand tokens of text at most


class Caller(Protocol):
    """What a side call needs of its session: the model, the request it shares, the meter."""

    model: Model
    meter: UsageMeter

    @property
    def window(self) -> Window: ...

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
        request = session.request([*messages, user_text(prompt)], purpose=purpose,
                                  max_tokens=min(max_tokens, session.window.reply_cap))
        reply = session.model.stream(request)
        session.meter.add(reply.usage)
        return _text(reply.content)

    def summarize(self, messages: Sequence[Message], prompt: str) -> str:
        """The compaction call (the engine's Summarizer); a reply with a tool call and no text is a
        failure (with text, the tool call is dropped and the text must hold the summary)."""
        session = self._session
        request = session.request([*messages, user_text(prompt)], purpose="compact",
                                  max_tokens=min(MAX_OUTPUT_TOKENS_FOR_SUMMARY, session.window.reply_cap))
        self.busy = True
        try:
            reply = session.model.stream(request)
        finally:
            self.busy = False
        session.meter.add(reply.usage)
        text = _text(reply.content)
        if reply.tool_uses and not text.strip():
            raise CompactionFailed("The summary reply called a tool instead of writing the summary.")
        return text


def _text(content: Sequence[Block]) -> str:
    """The reply's text; tool calls (forbidden by the prompt) are dropped."""
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
