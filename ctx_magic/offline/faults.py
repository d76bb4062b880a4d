"""Injected faults: the failures of the real API, on demand, one per call to /v1/messages.

`OfflineAPI.inject("529", "drop")` (or POST /_offline/faults {"faults": [...]}) makes the next
call answer 529 overloaded and the one after lose its connection mid-stream. Each name is a
failure ctx_magic must survive (one clear message, reactive compaction, no dead end), answered as the API or the network
would answer it:

- "ok": answers normally (aims a fault at the second or third call from now);
- "429", "500", "529", "401", "413": that HTTP status with the API's error body;
- "400": an invalid_request_error of no kind ctx_magic knows (a parameter a backend refuses);
- "ptl": the 400 prompt-too-long, whatever the prompt's size;
- "drop": the connection closes mid-stream (or, for a plain request, before any answer);
- "reset": like "drop", but the connection is reset (a TCP RST, as a proxy or a load balancer
  that gives up sends), not closed: the client reads "connection reset by peer";
- "stall": a stream starts, then waits (bounded) before the rest: a slow model to interrupt;
- "empty_reply": 200, stop_reason end_turn, zero content blocks;
- "whitespace_reply": 200, end_turn, the only text is whitespace ("\\n\\n");
- "overloaded_midstream": a stream sends some deltas, then an `error` event of type
  overloaded_error, and ends (a plain request gets the 529 it would have had);
- "early_close": a stream ends cleanly, without error, before message_delta and message_stop;
- "early_close_tool": a stream ends cleanly right after a tool_use block starts (after the first
  block start when the answer calls no tool);
  (a plain request cannot end early without breaking its framing: both are "drop" there)
- "html_body": 200 with an HTML page as body (a proxy's error page), stream or not;
- "redacted_thinking": with thinking on, the answer's thinking comes as a redacted_thinking
  block (without thinking, the answer is normal).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from ctx_magic.offline.conversation import Block
from ctx_magic.offline.wire import error_event

Fault = Literal[
    "ok", "400", "429", "500", "529", "401", "413", "ptl", "drop", "reset", "stall", "empty_reply", "whitespace_reply",
    "overloaded_midstream", "early_close", "early_close_tool", "html_body", "redacted_thinking",
]
FAULTS: frozenset[str] = frozenset(get_args(Fault))
# What a soak draws from: every fault a session must come through on its own ("stall" waits for a
# release no soak gives, "redacted_thinking" is an answer, not a failure).
SURVIVABLE_FAULTS: tuple[str, ...] = (
    "429", "500", "529", "401", "413", "ptl", "drop", "reset", "empty_reply", "whitespace_reply",
    "overloaded_midstream", "early_close", "early_close_tool", "html_body",
)
STREAM_ONLY_FAULTS = frozenset({"overloaded_midstream", "early_close", "early_close_tool"})
STALL_SECONDS = 60.0  # the longest a stalled stream waits to be released or cut
DROP_AFTER_MIN_CHUNKS = 4  # a cut stream still sends message_start, ping, a block start, a delta
DELTAS_BEFORE_ERROR = 2  # "overloaded_midstream" lets this many deltas through first
WHITESPACE_TEXT = "\n\n"  # what a whitespace-only reply says
HTML_PAGE = (  # what a proxy in front of the API answers with when something upstream broke
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
    b"<body><h1>Bad Gateway</h1><p>The upstream server returned an invalid response.</p></body></html>\n"
)

# The SDK waits `retry-after` seconds before a retry, but treats 0 as "no advice" and backs
# off ~0.5 s instead; `retry-after-ms`, read first, makes the wait one millisecond.
RETRY_NOW_HEADERS: tuple[tuple[str, str], ...] = (("retry-after", "0"), ("retry-after-ms", "1"))


@dataclass(frozen=True)
class ApiError:
    """An error answer: HTTP status, the API's error type and message, extra headers."""

    status: int
    error_type: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()


STATUS_FAULTS: dict[str, ApiError] = {
    "400": ApiError(400, "invalid_request_error", "Invalid request (offline fault injection)."),
    "429": ApiError(429, "rate_limit_error", "Rate limited (offline fault injection).", RETRY_NOW_HEADERS),
    "500": ApiError(500, "api_error", "Internal server error (offline fault injection).", RETRY_NOW_HEADERS),
    "529": ApiError(529, "overloaded_error", "Overloaded (offline fault injection).", RETRY_NOW_HEADERS),
    "401": ApiError(401, "authentication_error", "invalid x-api-key (offline fault injection)"),
    "413": ApiError(413, "request_too_large", "Request exceeds the maximum allowed number of bytes."),
}
"""Faults that are a plain error answer; "ptl" and "drop" depend on the request."""


def prompt_too_long(tokens: int, window: int) -> ApiError:
    """The API's 400 for a prompt over the window, in its exact wording."""
    return ApiError(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {window} maximum")


def reply_past_window(tokens: int, max_tokens: int, window: int) -> ApiError:
    """The API's 400 for a prompt that fits but leaves less than max_tokens for the reply, in its
    exact wording (current models refuse it rather than cut the reply short)."""
    return ApiError(400, "invalid_request_error", f"input length and `max_tokens` exceed context limit: {tokens} + "
                    f"{max_tokens} > {window}, decrease input length or `max_tokens` and try again")


class ConnectionDropped(Exception):
    """Raised by a reply's body to say: close the connection now, mid-response."""


class ConnectionReset(ConnectionDropped):
    """Raised by a reply's body to say: reset the connection now (no orderly close), mid-response."""


@dataclass
class RandomFaults:
    """A fault on a share of the calls, drawn from `names` by a seeded generator: the same
    sequence of calls meets the same faults."""

    rate: float
    seed: int
    names: tuple[str, ...] = SURVIVABLE_FAULTS
    _dice: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_faults(self.names)
        self._dice = random.Random(self.seed)

    def draw(self) -> str | None:
        roll, name = self._dice.random(), self._dice.choice(self.names)  # two draws a call, whatever comes
        return name if roll < self.rate else None


def check_faults(names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}; known: {sorted(FAULTS)}")


def faulty_content(fault: str | None, content: list[Block]) -> list[Block]:
    """The answer's blocks as a reply fault changes them (thinking kept for whitespace)."""
    if fault == "empty_reply":
        return []
    if fault == "whitespace_reply":
        kept = [b for b in content if b["type"] in ("thinking", "redacted_thinking")]
        return [*kept, {"type": "text", "text": WHITESPACE_TEXT}]
    return content


# --- streams ---


def event_name(chunk: bytes) -> str:
    """The SSE event name a chunk carries (each chunk is one `event: ...\\ndata: ...` pair)."""
    first = chunk.split(b"\n", 1)[0]
    return first.removeprefix(b"event: ").decode("ascii", "replace")


def stalling(chunks: list[bytes], release: threading.Event) -> Iterator[bytes]:
    """Send the start of a stream, then wait (bounded) until released before the rest."""
    cut = min(DROP_AFTER_MIN_CHUNKS, len(chunks) - 1)
    yield from chunks[:cut]
    release.wait(STALL_SECONDS)
    yield from chunks[cut:]


def dropping(chunks: list[bytes], *, reset: bool = False) -> Iterator[bytes]:
    """Send about half of a stream (never its end), then drop (or reset) the connection."""
    cut = min(max(DROP_AFTER_MIN_CHUNKS, len(chunks) // 2), len(chunks) - 2)
    yield from chunks[:cut]
    if reset:
        raise ConnectionReset("offline fault injection: connection reset mid-stream")
    raise ConnectionDropped("offline fault injection: connection dropped mid-stream")


def error_midstream(chunks: list[bytes]) -> list[bytes]:
    """The stream up to a few deltas, then an overloaded `error` event; nothing after it."""
    deltas = [i for i, c in enumerate(chunks) if event_name(c) == "content_block_delta"]
    cut = deltas[DELTAS_BEFORE_ERROR - 1] + 1 if len(deltas) >= DELTAS_BEFORE_ERROR else 2
    return [*chunks[:cut], error_event("overloaded_error", "Overloaded")]


def closed_early(chunks: list[bytes]) -> list[bytes]:
    """About half of the stream, ending cleanly: never message_delta nor message_stop."""
    ends = [i for i, c in enumerate(chunks) if event_name(c) == "message_delta"]
    last = ends[0] if ends else len(chunks)
    return chunks[: min(max(DROP_AFTER_MIN_CHUNKS, len(chunks) // 2), last)]


def closed_after_tool_start(chunks: list[bytes]) -> list[bytes]:
    """The stream up to the first tool_use block start (or the first block start), then the end."""
    starts = [i for i, c in enumerate(chunks) if event_name(c) == "content_block_start"]
    tools = [i for i in starts if b'"type": "tool_use"' in chunks[i]]
    cut = (tools or starts or [1])[0] + 1
    return chunks[:cut]


def stream_body(fault: str | None, chunks: list[bytes], release: threading.Event) -> Iterator[bytes]:
    """A stream's chunks as the fault shapes them (all of them, in order, without one)."""
    if fault == "stall":
        return stalling(chunks, release)
    if fault in ("drop", "reset"):
        return dropping(chunks, reset=fault == "reset")
    shapers = {"overloaded_midstream": error_midstream, "early_close": closed_early,
               "early_close_tool": closed_after_tool_start}
    shaper = shapers.get(fault or "")
    return iter(shaper(chunks) if shaper else chunks)
