"""Calls made beside the conversation: the compaction summary (SPEC C3), session notes and
long-term memory (S2, X2). Each sends the main loop's system prompt and tools, so the cached
prefix is shared, and forbids tool use.

`busy` is SPEC L4's recursion guard: no auto-compaction is decided while a summary is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ctx_magic.agent.model import Model, ModelRequest
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.thresholds import MAX_OUTPUT_TOKENS_FOR_SUMMARY
from ctx_magic.errors import CompactionFailed
from ctx_magic.messages import Message, user_text
from ctx_magic.settings import Window

SIDE_CALL_MAX_OUTPUT = 8_000  # notes and memories: a few thousand tokens of text at most
NO_TOOLS = {"type": "none"}


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
        request = session.request([*messages, user_text(prompt)], purpose=purpose, tool_choice=NO_TOOLS,
                                  max_tokens=min(max_tokens, session.window.reply_cap))
        reply = session.model.stream(request)
        session.meter.add(reply.usage)
        return "\n".join(b.get("text", "") for b in reply.content if b.get("type") == "text")

    def summarize(self, messages: Sequence[Message], prompt: str) -> str:
        """The compaction call (the engine's Summarizer): a reply that calls a tool is a failure."""
        session = self._session
        request = session.request([*messages, user_text(prompt)], purpose="compact", tool_choice=NO_TOOLS,
                                  max_tokens=min(MAX_OUTPUT_TOKENS_FOR_SUMMARY, session.window.reply_cap))
        self.busy = True
        try:
            reply = session.model.stream(request)
        finally:
            self.busy = False
        session.meter.add(reply.usage)
        if reply.tool_uses:
            raise CompactionFailed("The summary reply tried to call a tool.")
        return "\n".join(b.get("text", "") for b in reply.content if b.get("type") == "text")
