"""The request's cache_control markers, checked as the API checks them.

At most MAX_BREAKPOINTS blocks carry cache_control in the whole request (tools, system, message
blocks, blocks inside tool results, and the top-level `cache_control`, which marks the last
block). Each is `{"type": "ephemeral"}` with an optional `ttl` of "5m" or "1h". In prefix order
(tools, system, messages, then the top-level one) no 1-hour marker may come after a 5-minute
one: a longer-lived prefix cannot extend a shorter-lived one. `cache_control: null` marks nothing,
as the API reads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ctx_magic.offline.conversation import Request
from ctx_magic.offline.invalid import InvalidRequest, all_blocks, at

MAX_BREAKPOINTS = 4  # the API's limit of blocks with cache_control in one request
CACHE_TTLS = ("5m", "1h")  # the two lifetimes the API offers
CONTROL_KEYS = {"type", "ttl"}


def cache_controls(request: Request) -> Iterator[tuple[str, Any]]:
    """(path, cache_control) of every marker, in prefix order."""
    for i, tool in enumerate(request.get("tools") or []):
        if isinstance(tool, Mapping) and tool.get("cache_control") is not None:
            yield f"tools.{i}", tool["cache_control"]
    system = request.get("system")
    for i, block in enumerate(system if isinstance(system, list) else []):
        if isinstance(block, Mapping) and block.get("cache_control") is not None:
            yield f"system.{i}", block["cache_control"]
    history = request.get("messages")
    for located in all_blocks(history if isinstance(history, list) else []):
        if located.block.get("cache_control") is not None:
            yield located.path, located.block["cache_control"]
    if request.get("cache_control") is not None:
        yield "", request["cache_control"]


def _check_control(path: str, control: Any) -> str:
    """One marker's shape; returns its lifetime."""
    where = f"{path}.cache_control" if path else "cache_control"
    if not isinstance(control, Mapping):
        raise at(where, "Input should be a valid dictionary")
    if control.get("type") != "ephemeral":
        raise at(f"{where}.type", "Input should be 'ephemeral'")
    extra = set(control) - CONTROL_KEYS
    if extra:
        raise at(f"{where}.{sorted(extra)[0]}", "Extra inputs are not permitted")
    ttl = control.get("ttl", "5m")
    if ttl not in CACHE_TTLS:
        raise at(f"{where}.ttl", "Input should be '5m' or '1h'")
    return str(ttl)


def check_cache_controls(request: Request) -> None:
    controls = list(cache_controls(request))
    if len(controls) > MAX_BREAKPOINTS:
        raise InvalidRequest(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(controls)}."
        )
    first_short: str | None = None
    for path, control in controls:
        ttl = _check_control(path, control)
        if ttl == "5m" and first_short is None:
            first_short = path or "cache_control"
        elif ttl == "1h" and first_short is not None:
            raise at(path or "cache_control",
                     f"a cache_control block with ttl='1h' cannot come after one with ttl='5m' ({first_short}); "
                     "blocks are processed in the order `tools`, `system`, `messages`, and longer lifetimes "
                     "must come first")
