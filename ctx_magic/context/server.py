"""The 'server' strategy: ctx_magic's own rules, handed to the API's context management.

With `strategy = 'server'` every main call carries `context_management.edits` built here from
the same settings the client-side layers use, and ctx_magic stops doing what the API then does:

- `clear_tool_uses_20250919` replaces microcompact's pressure clearing: it fires at ctx_magic's warning
  level (`trigger`), keeps the `keep_recent` most recent tool uses (`keep`), clears only when it
  frees `clear_at_least` tokens (the same 20,000 scaled to the window), and never touches the
  results of tools ctx_magic never clears (`exclude_tools`: memory, questions, ...).
- `clear_thinking_20251015` with `keep: "all"`: Claude Code keeps every thinking turn during active
  use (the cache holds them). The API's own default would keep only the last turn and break the
  cache at each new turn. The idle rule (keep the last turn after the cache expired) stays on
  the client (context/thinking.py): the API forgets between requests, so a rule that depends on
  the previous request would bring cleared blocks back and break the cache again.
- `compact_20260112` replaces auto-compaction when the model takes it and the trigger is at least the API's
  minimum: it fires at ctx_magic's auto-compact threshold. Otherwise ctx_magic still compacts.

What the API does not do stays on the client: the tool-result budget (huge outputs to disk), snip, the
transcript, session notes, long-term memory, the panel, and manual `%compact`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"  # context editing (clear_tool_uses, clear_thinking)
COMPACTION_BETA = "compact-2026-01-12"  # server compaction (compact_20260112)
ON_DEMAND_BETA = "compact-2026-09-04"  # on-demand compaction (the top-level `compaction` parameter)
MIN_SERVER_COMPACTION_TRIGGER = 50_000  # the API refuses a compaction trigger below 50,000 input tokens
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"


@dataclass(frozen=True)
class ServerPlan:
    """What a main call sends under the 'server' strategy, and what the API takes over."""

    edits: tuple[dict[str, Any], ...] = ()
    betas: tuple[str, ...] = ()
    server_compacts: bool = False
    """The API compacts: ctx_magic's auto-compaction stands down (manual %compact still works)."""
    server_clears: bool = False
    """The API clears old tool results: ctx_magic's pressure and idle clearing stand down."""
    notes: tuple[str, ...] = field(default=())
    """Why a strategy the user asked for is not sent (the model lacks it, the window is small)."""

    @property
    def context_management(self) -> dict[str, Any] | None:
        return {"edits": [dict(e) for e in self.edits]} if self.edits else None


def _tokens(value: int) -> dict[str, Any]:
    return {"type": "input_tokens", "value": int(value)}


def server_plan(*, warning: int, autocompact: int, keep_recent: int, clear_at_least: int, thinking: bool,
                supported: Iterable[str], tools: Sequence[str], clearable_tools: Iterable[str]) -> ServerPlan:
    """The edits for one session's settings (pure: the same settings give the same request)."""
    supported = set(supported)
    clearable = set(clearable_tools)
    edits: list[dict[str, Any]] = []
    notes: list[str] = []
    if thinking and CLEAR_THINKING in supported:
        edits.append({"type": CLEAR_THINKING, "keep": "all"})  # the API wants it before clear_tool_uses
    clears = CLEAR_TOOL_USES in supported
    if clears:
        edits.append({
            "type": CLEAR_TOOL_USES, "trigger": _tokens(warning), "keep": {"type": "tool_uses", "value": keep_recent},
            "clear_at_least": _tokens(clear_at_least), "exclude_tools": sorted(t for t in tools if t not in clearable),
        })
    else:
        notes.append("the model does not take the server's tool-result clearing: ctx_magic clears")
    compacts = COMPACT in supported and autocompact >= MIN_SERVER_COMPACTION_TRIGGER
    if compacts:
        edits.append({"type": COMPACT, "trigger": _tokens(autocompact)})
    elif COMPACT not in supported:
        notes.append("the model does not take server compaction: ctx_magic compacts")
    else:
        notes.append(f"the compaction threshold {autocompact:,} is under the API's minimum "
                     f"{MIN_SERVER_COMPACTION_TRIGGER:,}: ctx_magic compacts")
    betas = []
    if any(e["type"] != COMPACT for e in edits):
        betas.append(CONTEXT_MANAGEMENT_BETA)
    if compacts:
        betas.append(COMPACTION_BETA)
    return ServerPlan(tuple(edits), tuple(betas), compacts, clears, tuple(notes))


def cleared_tokens(applied_edits: Iterable[dict[str, Any]]) -> int:
    """Input tokens the server's edits removed from one request."""
    return sum(int(edit.get("cleared_input_tokens") or 0) for edit in applied_edits)
