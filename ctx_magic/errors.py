"""ctx_magic's own error types: every failure a user can meet maps to one of these, each with
one clear line of text. They sit at the bottom so the engine, the loop and the
notebook can all raise and catch them.

Lower floors never name a magic: an error (or a notice) carries a `Remedy`, and the notebook
layer words it with its own commands (notebook/wording.py).
"""

from __future__ import annotations

import re
from enum import Enum


class Remedy(str, Enum):
    """What the user can do next, said in the frontend's own words."""

    NONE = ""
    COMPACT = "compact"
    """Compact by hand."""
    COMPACT_OR_NEW = "compact_or_new"
    """Compact by hand, or start a new session."""
    COMPACT_WITH_INSTRUCTIONS_OR_NEW = "compact_with_instructions_or_new"
    SNIP_OR_NEW = "snip_or_new"
    """Snip without a summary, or start a new session."""
    NEW_SESSION = "new_session"
    RUN_AGAIN = "run_again"
    """Send the next message: the conversation is intact."""
    UNPIN_OR_RAISE_PIN_BUDGET = "unpin_or_raise_pin_budget"
    """Remove a pin, or raise the pins' token budget."""


class CtxMagicError(Exception):
    """Base of every error ctx_magic reports to a user; str() is the one line shown, and
    `remedy` what the frontend adds about what to do next."""

    def __init__(self, *args: object, remedy: Remedy = Remedy.NONE) -> None:
        super().__init__(*args)
        self.remedy = remedy


class NoSession(CtxMagicError):
    """There is no agent session to read or act on (none started yet, or ctx_magic not loaded).

    Raised from a function a user calls in their own code (`ctx_magic.context()`), it is shown
    as its one line, not a traceback through ctx_magic (IPython's `_render_traceback_`)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class InvariantError(CtxMagicError, ValueError):
    """A conversation breaks the Messages-API invariants (the API's rules)."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(f"message {index} breaks the API invariants: {reason}")


class ModelError(CtxMagicError):
    """A call to the model failed."""


_PTL_NUMBERS = re.compile(r"(\d[\d,]*)\s*tokens?\s*>\s*(\d[\d,]*)\s*maximum", re.IGNORECASE)
# "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease ..."
_OVER_LIMIT_NUMBERS = re.compile(r"exceed context limit:\s*(\d[\d,]*)\s*\+\s*(\d[\d,]*)\s*>\s*(\d[\d,]*)",
                                 re.IGNORECASE)


class PromptTooLong(ModelError):
    """The API refused the prompt as longer than the window (HTTP 400/413, "prompt is too long")."""

    def __init__(self, message: str, actual: int | None = None, limit: int | None = None) -> None:
        self.actual = actual
        self.limit = limit
        super().__init__(message)

    @property
    def gap(self) -> int | None:
        """How many tokens over the limit the prompt was, when the message says so."""
        if self.actual is None or self.limit is None:
            return None
        return max(0, self.actual - self.limit)

    @classmethod
    def from_api_message(cls, message: str) -> PromptTooLong:
        over = _OVER_LIMIT_NUMBERS.search(message)
        if over:  # the prompt fits, but not with the reply it asks room for: the same remedy
            prompt, reply, limit = (int(g.replace(",", "")) for g in over.groups())
            return cls(f"The prompt and the room asked for the reply exceed the window: {prompt:,} + {reply:,} tokens "
                       f"> {limit:,}.", prompt + reply, limit)
        match = _PTL_NUMBERS.search(message)
        if not match:
            return cls(f"The prompt is too long for the model's window ({message}).")
        actual, limit = (int(g.replace(",", "")) for g in match.groups())
        return cls(f"The prompt is too long: {actual:,} tokens > {limit:,} maximum.", actual, limit)


def is_prompt_too_long(status: int, message: str) -> bool:
    lowered = message.lower()
    return status in (400, 413) and ("prompt is too long" in lowered or "exceed context limit" in lowered)


class RequestTooLarge(ModelError):
    """The request body was over the API's byte limit (413 request_too_large)."""


class Overloaded(ModelError):
    pass


class RateLimited(ModelError):
    pass


class ServerError(ModelError):
    pass


class AuthenticationFailed(ModelError):
    pass


class NetworkError(ModelError):
    pass


class StreamDropped(NetworkError):
    """The reply broke off before it was whole (the connection closed, the stream ended before
    `message_stop`, or the body was not a reply at all): the SDK does not retry this itself,
    the loop asks again."""

    backoff = False
    """Whether a wait should come before asking again (an overloaded server needs one)."""


class StreamOverloaded(StreamDropped):
    """The stream carried an `error` event mid-reply (overloaded, an API error): asked again,
    after a wait, like a 529 the SDK would retry."""

    backoff = True


class UnknownModel(ModelError):
    """The API answered 404 for the model: it does not offer that id (to this key, on this platform)."""

    @classmethod
    def named(cls, model: str, message: str) -> UnknownModel:
        return cls(f"Unknown model {model!r}: the API does not offer it ({message.strip().rstrip('.')}). Set "
                   "CtxMagic.model to a model it offers.")


# "messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound to a different
# conversation. ...": the prefix check of a model with preserved thinking refused a block sent back.
_BOUND_ELSEWHERE = re.compile(r"messages\.(\d+)\.content\.(\d+):[^.]*\bblock\b.*bound to a different conversation",
                              re.IGNORECASE | re.DOTALL)


class ThinkingRefused(ModelError):
    """The API refused a thinking block sent back: what came before it (system, tools or an earlier
    message) is not what it was when the block was written. That block and every later thinking
    block are invalid; sending the same request again cannot work."""

    def __init__(self, message: str, message_index: int, block_index: int) -> None:
        super().__init__(message)
        self.message_index = message_index
        self.block_index = block_index

    @classmethod
    def from_api_message(cls, message: str) -> ThinkingRefused | None:
        """The refusal the API's 400 message describes, or None when it is another error."""
        found = _BOUND_ELSEWHERE.search(message)
        if found is None:
            return None
        return cls(f"The API refused a thinking block sent back ({message.split(':', 1)[0]}): the conversation "
                   "before it changed after it was written.", int(found.group(1)), int(found.group(2)))


# "messages.0.content.0: Invalid `signature` in `compaction` block", or one naming its beta: the API
# refused a compaction block sent back.
_COMPACTION_BLOCK = re.compile(r"messages\.(\d+)\.content\.(\d+):[^\n]*`?compaction`? block", re.IGNORECASE)


class SummaryBlockRefused(ModelError):
    """The API refused the compaction block it wrote (its summary) when it was sent back: the same
    request cannot work; the summary can go as text."""

    @classmethod
    def from_api_message(cls, message: str) -> SummaryBlockRefused | None:
        """The refusal the API's 400 message describes, or None when it is another error."""
        if _COMPACTION_BLOCK.search(message) is None:
            return None
        return cls(f"The API refused the summary it wrote, sent back ({message.strip().rstrip('.')}).")


class ContextFull(CtxMagicError):
    """The context is past the blocking limit and could not be compacted."""


class CompactionFailed(CtxMagicError):
    """A compaction could not produce a summary; the conversation is left as it was."""


class StorageError(CtxMagicError):
    """The session folder could not be written (disk full, permissions)."""


class SessionInUse(CtxMagicError):
    """Another live kernel has this session open."""

