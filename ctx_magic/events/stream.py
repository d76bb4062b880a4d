"""The turn as it streams: what the agent is doing, its text and thinking, its tools, its notices and
restarts, for the display (not written to the transcript)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ctx_magic.events.base import Event


@dataclass(frozen=True)
class Status(Event):
    """What the agent is doing now: thinking, running, compacting, waiting, idle."""

    name: ClassVar[str] = "status"
    state: str
    detail: str = ""


@dataclass(frozen=True)
class TextDelta(Event):
    name: ClassVar[str] = "text"
    text: str


@dataclass(frozen=True)
class ThinkingDelta(Event):
    """A piece of the model's thinking as it streams (shown collapsed in the cell)."""

    name: ClassVar[str] = "thinking"
    text: str


@dataclass(frozen=True)
class ToolStarted(Event):
    name: ClassVar[str] = "tool_started"
    tool_use_id: str
    tool: str
    input: Mapping[str, Any]


@dataclass(frozen=True)
class ToolFinished(Event):
    name: ClassVar[str] = "tool_finished"
    tool_use_id: str
    tool: str
    output: str
    is_error: bool


@dataclass(frozen=True)
class ToolOutputDelta(Event):
    """Text a running tool just printed (progress while it runs; the result comes at the end)."""

    name: ClassVar[str] = "tool_output_delta"
    text: str


@dataclass(frozen=True)
class ApprovalAsked(Event):
    """The agent's code waits for the person's approval (`ask` mode): shown before the question."""

    name: ClassVar[str] = "approval_asked"
    code: str


@dataclass(frozen=True)
class Notice(Event):
    """A line for the user: backend chosen, a retry, an error that ended the turn."""

    name: ClassVar[str] = "notice"
    level: str  # info | warning | error
    text: str
    remedy: str = ""
    """A `Remedy` value: what to do next, worded by the frontend."""


@dataclass(frozen=True)
class ReplyRestarted(Event):
    """A reply's stream broke off; what it had streamed is void and the call is made again."""

    name: ClassVar[str] = "reply_restarted"
    attempt: int  # the attempt about to start, from 2
    attempts: int
    reason: str


@dataclass(frozen=True)
class ReplyWithdrawn(Event):
    """A reply failed for good (its last attempt broke too): what it streamed is void, and the
    cell must not go on showing it as if the model had said it."""

    name: ClassVar[str] = "reply_withdrawn"
    reason: str
