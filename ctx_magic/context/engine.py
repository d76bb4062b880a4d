"""`prepare()`: the zero-call layers in their order, L1 -> L2 -> L3, before every model call.

Everything here is a pure function of (messages, state, clock, settings): it returns the new
messages, the new state and the events that describe the change; writing files and the
transcript is the caller's job. The state carries the frozen decisions (what was persisted,
what was cleared) and an index of what was already checked, so that a pass after one new
message costs in proportion to the new messages, not to the history.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ctx_magic.context.budget import BudgetSettings, apply_tool_result_budget, replace_result
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.microcompact import (
    CACHE_TTL_MINUTES,
    CLEAR_AT_LEAST,
    COMPACTABLE_TOOLS,
    MicrocompactSettings,
    clear_results,
    clearable,
    cleared_text,
    idle_gap,
    microcompact_trigger,
)
from ctx_magic.context.snip import DEFAULT_SNIP_MAX_MESSAGES, KEEP_HEAD, snip_middle
from ctx_magic.context.thresholds import Thresholds, compute_thresholds
from ctx_magic.context.tokens import (
    ContextCount,
    Correction,
    block_tokens,
    count_context,
    count_text,
    find_anchor,
    message_tokens,
)
from ctx_magic.events import Cleared, ContextMeasured, Event, Persisted, Snipped
from ctx_magic.messages import Message, result_text
from ctx_magic.store.session import safe_name


@dataclass(frozen=True)
class ContextSettings:
    """Everything the engine's rules depend on, one value per rule."""

    thresholds: Thresholds = field(default_factory=lambda: compute_thresholds(200_000, 32_000, env={}))
    keep_recent: int = 5
    """Compactable results that microcompact always keeps (the most recent ones)."""
    idle_minutes: float = CACHE_TTL_MINUTES["5m"]
    """Idle gap after which old results are cleared: the prompt-cache TTL by default."""
    clear_at_least: int = 0
    """Pressure clearing only fires when it frees this much; 0 means 20,000 scaled for small
    windows like the other buffers (T5). A value someone set is used as it is."""
    snip_max_messages: int = DEFAULT_SNIP_MAX_MESSAGES
    """Live messages past which the middle is snipped."""
    budget: BudgetSettings = BudgetSettings()
    """Per-result and per-message character limits of L1."""
    tool_results_dir: str = "tool-results"
    """Folder named in persisted-output blocks (where read_file finds the full text)."""
    transcript_path: str = "transcript.jsonl"
    """Transcript named in snip markers."""

    @classmethod
    def create(
        cls,
        window: int,
        max_output: int,
        *,
        autocompact_pct: float | None = None,
        env: Mapping[str, str] | None = None,
        cache_ttl: str = "5m",
        idle_minutes: float | None = None,
        **rules: object,
    ) -> ContextSettings:
        thresholds = compute_thresholds(window, max_output, autocompact_pct=autocompact_pct, env=env)
        idle = idle_minutes if idle_minutes else CACHE_TTL_MINUTES.get(cache_ttl, 5.0)
        return cls(thresholds=thresholds, idle_minutes=idle, **rules)  # type: ignore[arg-type]

    @property
    def microcompact(self) -> MicrocompactSettings:
        return MicrocompactSettings(
            keep_recent=self.keep_recent,
            idle_minutes=self.idle_minutes,
            clear_at_least=self.clear_at_least or max(1, round(CLEAR_AT_LEAST * self.thresholds.scale)),
        )

    def persisted_path(self, tool_use_id: str) -> str:
        return f"{self.tool_results_dir.rstrip('/')}/{safe_name(tool_use_id)}.txt"


@dataclass(frozen=True)
class ContextState:
    """What the engine remembers between calls: frozen decisions and its index."""

    decided: frozenset[str] = frozenset()
    """tool_use_ids whose L1 decision is made (kept or persisted), never revisited."""
    persisted: Mapping[str, str] = field(default_factory=dict)
    """tool_use_id -> the persisted-output block that replaced it, byte for byte."""
    persisted_paths: Mapping[str, str] = field(default_factory=dict)
    cleared: Mapping[str, str] = field(default_factory=dict)
    """tool_use_id -> the stub that replaced it (microcompact, snip tool, user)."""
    tool_names: Mapping[str, str] = field(default_factory=dict)
    compactable: tuple[str, ...] = ()
    """Live compactable results not cleared yet, oldest first."""
    positions: Mapping[str, int] = field(default_factory=dict)
    """tool_use_id -> index of the message holding its result."""
    indexed: int = 0
    indexed_uuid: str | None = None
    freed_anchor: str | None = None
    freed_tokens: int = 0
    """Tokens removed before the anchoring response since it was billed (T1 correction)."""
    correction: Correction = Correction()

    def with_persisted(self, events: Sequence[Persisted]) -> ContextState:
        """These results' decisions made and frozen: persisted, with their stand-ins and paths."""
        if not events:
            return self
        return dataclasses.replace(
            self,
            decided=self.decided | {e.tool_use_id for e in events},
            persisted={**self.persisted, **{e.tool_use_id: e.replacement for e in events}},
            persisted_paths={**self.persisted_paths, **{e.tool_use_id: e.path for e in events}},
        )

    def to_json(self) -> dict[str, object]:
        return {
            "persisted": dict(self.persisted),
            "persisted_paths": dict(self.persisted_paths),
            "cleared": dict(self.cleared),
            "freed_anchor": self.freed_anchor,
            "freed_tokens": self.freed_tokens,
            "correction": {"ratio": self.correction.ratio, "observations": self.correction.observations},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ContextState:
        corr = data.get("correction") or {}
        return cls(
            persisted=dict(data.get("persisted") or {}),  # type: ignore[arg-type]
            persisted_paths=dict(data.get("persisted_paths") or {}),  # type: ignore[arg-type]
            cleared=dict(data.get("cleared") or {}),  # type: ignore[arg-type]
            freed_anchor=data.get("freed_anchor"),  # type: ignore[arg-type]
            freed_tokens=int(data.get("freed_tokens") or 0),  # type: ignore[arg-type]
            correction=Correction(float(corr.get("ratio", 4 / 3)), int(corr.get("observations", 0))),  # type: ignore[union-attr]
        )


@dataclass(frozen=True)
class Prepared:
    messages: list[Message]
    state: ContextState
    events: list[Event]
    count: ContextCount
    zone: str
    compact_due: bool

    @property
    def tokens(self) -> int:
        return self.count.tokens


# -- the index ------------------------------------------------------------------------------


def apply_decisions(message: Message, state: ContextState) -> Message:
    """The message with every frozen decision on its results re-applied, byte for byte."""
    if message.role != "user" or not (state.cleared or state.persisted):
        return message
    changed = False
    blocks = []
    for block in message.content:
        tool_use_id = block.get("tool_use_id")
        if block.get("type") == "tool_result":
            if tool_use_id in state.cleared:
                stub = state.cleared[tool_use_id]
                if block.get("content") != stub:
                    block, changed = {**block, "content": stub}, True
            elif tool_use_id in state.persisted:
                replacement = state.persisted[tool_use_id]
                if result_text(block) != replacement:
                    block, changed = replace_result(block, replacement), True
        blocks.append(block)
    return message.with_content(blocks) if changed else message


def sync_index(
    messages: Sequence[Message], state: ContextState, *, pending_ok: bool = False
) -> tuple[list[Message], ContextState, int]:
    """Check and index what is new since the last call; re-apply frozen decisions to it.

    Returns the messages, the state and the index where the new part starts. Raises
    InvariantError (SPEC M5) naming the first offending index.
    """
    start = state.indexed
    if not (0 < start <= len(messages) and messages[start - 1].uuid == state.indexed_uuid):
        start = 0
    check_invariants(messages, start, pending_ok=pending_ok)
    out = list(messages)
    names = dict(state.tool_names)
    positions = dict(state.positions) if start else {}
    compactable = list(state.compactable) if start else []
    for index in range(start, len(out)):
        message = out[index] = apply_decisions(out[index], state)
        for block in message.blocks("tool_use"):
            names[block["id"]] = block["name"]
        for tool_use_id in message.tool_result_ids:
            positions[tool_use_id] = index
            if names.get(tool_use_id) in COMPACTABLE_TOOLS and tool_use_id not in state.cleared:
                compactable.append(tool_use_id)
    new_state = dataclasses.replace(
        state,
        tool_names=names,
        positions=positions,
        compactable=tuple(compactable),
        indexed=len(out),
        indexed_uuid=out[-1].uuid if out else None,
    )
    return out, new_state, start


# -- prepare --------------------------------------------------------------------------------


def _freed_before_anchor(
    old: Sequence[Message], new: Sequence[Message], indices: Iterable[int], anchor: int
) -> int:
    return sum(message_tokens(old[i]) - message_tokens(new[i]) for i in set(indices) if i < anchor)


def _with_freed(state: ContextState, messages: Sequence[Message], freed: int) -> ContextState:
    anchor = find_anchor(messages)
    anchor_id = messages[anchor].api_id if anchor >= 0 else None
    base = state.freed_tokens if state.freed_anchor == anchor_id else 0
    return dataclasses.replace(state, freed_anchor=anchor_id, freed_tokens=base + freed)


def _freed_tokens(state: ContextState, messages: Sequence[Message]) -> int:
    anchor = find_anchor(messages)
    anchor_id = messages[anchor].api_id if anchor >= 0 else None
    return state.freed_tokens if anchor_id is not None and state.freed_anchor == anchor_id else 0


def measure(messages: Sequence[Message], state: ContextState, overhead_tokens: int = 0) -> ContextCount:
    """The live context's size (T1) with the engine's frozen corrections applied."""
    return count_context(
        messages,
        overhead_tokens=overhead_tokens,
        freed_since_anchor=_freed_tokens(state, messages),
        correction=state.correction,
    )


def _budget(messages: list[Message], state: ContextState, settings: ContextSettings, start: int):
    old = messages
    messages, decided, persisted = apply_tool_result_budget(
        messages, start, state.decided, dict(state.tool_names), settings.persisted_path, settings.budget
    )
    if not persisted:
        return messages, dataclasses.replace(state, decided=decided), []
    anchor = find_anchor(messages)
    freed = _freed_before_anchor(old, messages, (state.positions[e.tool_use_id] for e in persisted), anchor)
    state = dataclasses.replace(state, decided=decided).with_persisted(persisted)
    return messages, _with_freed(state, messages, freed), persisted


def _snip(messages: list[Message], state: ContextState, settings: ContextSettings, now: float,
          max_messages: int, trigger: str = "auto", target: int | None = None):
    anchor_before = find_anchor(messages)
    snipped, events = snip_middle(
        messages, max_messages, transcript_path=settings.transcript_path, now=now, trigger=trigger, target=target
    )
    if not events:
        return messages, state, []
    removed = set(events[0].removed_uuids)
    freed = sum(message_tokens(m) for m in messages[:anchor_before] if m.uuid in removed and m.sent)
    marker = next(m for m in snipped if m.uuid == events[0].marker_uuid)
    if snipped.index(marker) < find_anchor(snipped):
        freed -= message_tokens(marker)
    snipped, state, _ = sync_index(snipped, dataclasses.replace(state, indexed=0))
    return snipped, _with_freed(state, snipped, freed), events


def _clear(messages: list[Message], state: ContextState, ids: Sequence[str], trigger: str,
           freed: Mapping[str, int] | None = None):
    old = messages
    messages, event = clear_results(
        messages, state.positions, ids, trigger=trigger, persisted_paths=state.persisted_paths, freed=freed
    )
    if event is None:
        return messages, state, []
    anchor = find_anchor(messages)
    freed = _freed_before_anchor(old, messages, (state.positions[i] for i in event.replacements), anchor)
    state = dataclasses.replace(
        state,
        cleared={**state.cleared, **event.replacements},
        compactable=tuple(i for i in state.compactable if i not in event.replacements),
    )
    return messages, _with_freed(state, messages, freed), [event]


def _result_tokens(messages: Sequence[Message], state: ContextState, tool_use_id: str) -> int:
    message = messages[state.positions[tool_use_id]]
    memo = message.memo.setdefault("result_tokens", {})
    if tool_use_id not in memo:
        block = next(b for b in message.blocks("tool_result") if b["tool_use_id"] == tool_use_id)
        memo[tool_use_id] = block_tokens(block)
    return memo[tool_use_id]


def _microcompact(messages: list[Message], state: ContextState, settings: ContextSettings, now: float,
                  overhead_tokens: int, compaction_available: bool = True):
    mc = settings.microcompact
    older = clearable(state.compactable, mc.keep_recent)
    if not older:
        return messages, state, []
    gap = idle_gap(messages, now)
    idle = gap is not None and gap > mc.idle_minutes * 60
    tokens = measure(messages, state, overhead_tokens).tokens
    if not idle and tokens < settings.thresholds.warning:
        return messages, state, []  # neither trigger can fire: no need to size the results
    # A result smaller than its stub stays: clearing it would grow the context.
    sizes = {i: _result_tokens(messages, state, i) - _stub_tokens(state.persisted_paths.get(i)) for i in older}
    candidates = [i for i in older if sizes[i] > 0]
    trigger = microcompact_trigger(
        messages, candidates, sum(sizes[i] for i in candidates), now=now, tokens=tokens,
        warning=settings.thresholds.warning, settings=mc,
        threshold=settings.thresholds.autocompact if compaction_available else None,
    )
    if trigger is None:
        return messages, state, []
    return _clear(messages, state, candidates, trigger, freed={i: sizes[i] for i in candidates})


@functools.lru_cache(maxsize=1024)
def _stub_tokens(persisted_path: str | None) -> int:
    return count_text(cleared_text(persisted_path))


def result_counts(state: ContextState) -> tuple[int, int, int]:
    """(live, cleared, persisted) tool results in the live context."""
    cleared = sum(1 for i in state.positions if i in state.cleared)
    persisted = sum(1 for i in state.positions if i in state.persisted and i not in state.cleared)
    return len(state.positions) - cleared - persisted, cleared, persisted


def prepare(
    messages: Sequence[Message],
    state: ContextState,
    now: float,
    settings: ContextSettings,
    *,
    overhead_tokens: int = 0,
    compaction_available: bool = True,
) -> Prepared:
    """Run L1 (budget) -> L2 (snip) -> L3 (microcompact) and say whether L4 is due.

    `compaction_available` says whether auto-compaction could run next (breaker closed, not
    inside a side call); when it can, a pressure clearing that cannot avoid it is skipped.

    The order matters: the budget persists a large result before microcompact could replace
    it by a stub, so its full text is always on disk (seeds: query.ts runs them so).
    """
    msgs, state, start = sync_index(messages, state)
    msgs, state, persisted = _budget(msgs, state, settings, start)
    msgs, state, snipped = _snip(msgs, state, settings, now, settings.snip_max_messages)
    msgs, state, cleared = _microcompact(msgs, state, settings, now, overhead_tokens, compaction_available)
    count = measure(msgs, state, overhead_tokens)
    th = settings.thresholds
    live, n_cleared, n_persisted = result_counts(state)
    measured = ContextMeasured(
        tokens=count.tokens, threshold=th.autocompact, warning=th.warning, blocking=th.blocking,
        window=th.window, zone=th.zone(count.tokens), percent_left=th.percent_left(count.tokens),
        messages=sum(1 for m in msgs if m.sent), live_results=live,
        cleared_results=n_cleared, persisted_results=n_persisted,
    )
    events: list[Event] = [*persisted, *snipped, *cleared, measured]
    return Prepared(msgs, state, events, count, measured.zone, count.tokens >= th.autocompact)


def clear_now(
    messages: Sequence[Message], state: ContextState, tool_use_ids: Sequence[str], trigger: str
) -> tuple[list[Message], ContextState, list[Cleared], list[str]]:
    """Clear named results at once (the model's snip tool, the user). Returns unknown ids too.

    Only results that are live and not cleared yet can be cleared; protected tools' results
    (memory, questions to the user) are refused like unknown ones.
    """
    msgs, state, _ = sync_index(messages, state, pending_ok=True)  # called while tools run
    live = set(state.compactable)
    ids = [i for i in tool_use_ids if i in live]
    unknown = [i for i in tool_use_ids if i not in live]
    msgs, state, events = _clear(msgs, state, ids, trigger)
    return msgs, state, events, unknown


def snip_now(
    messages: Sequence[Message], state: ContextState, now: float, settings: ContextSettings, keep_last: int
) -> tuple[list[Message], ContextState, list[Snipped]]:
    """Snip the middle at once, keeping the head and about `keep_last` recent messages."""
    msgs, state, _ = sync_index(messages, state)
    keep = KEEP_HEAD + 1 + keep_last
    return _snip(msgs, state, settings, now, keep, trigger="user", target=keep)
