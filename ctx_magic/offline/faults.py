"""Injected faults: the failures of the real API, on demand, one per call to /v1/messages.

`OfflineAPI.inject("529", "drop")` makes the next call answer 529 overloaded and the one after
lose its connection mid-stream. Each name is a failure ctx_magic must survive (SPEC N5, L5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# "ok" answers normally: it lets a test aim a fault at the second or third call from now.
# "stall" starts a stream and then waits (bounded) before the rest: a slow model to interrupt.
Fault = Literal["ok", "429", "500", "529", "401", "413", "ptl", "drop", "stall"]
FAULTS: frozenset[str] = frozenset({"ok", "429", "500", "529", "401", "413", "ptl", "drop", "stall"})
STALL_SECONDS = 60.0  # the longest a stalled stream waits to be released or cut

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


class ConnectionDropped(Exception):
    """Raised by a reply's body to say: close the connection now, mid-response."""


def check_faults(names: tuple[str, ...]) -> None:
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}; known: {sorted(FAULTS)}")
