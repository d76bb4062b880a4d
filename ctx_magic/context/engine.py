"""`prepare()`: the zero-call layers in their order, budget -> the decision -> its clearing or snip, before every
model call.

Idle thinking clearing (context/thinking.py) is a fixed rule like the budget: after an idle gap over the
cache TTL only the last thinking turn stays, before the decision looks at the count. A snip past the
message limit is measured (cuts.py) and made only when the decision finds that it pays (snip_price.py).

Everything here is a pure function of (messages, state, clock, settings): it returns the new
messages, the new state and the events that describe the change; writing files and the
transcript is the caller's job. The state carries the frozen decisions (what was persisted,
what was cleared) and an index of what was already checked (context/index.py), so that a pass after one new
message costs in proportion to the new messages, not to the history.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ctx_magic.context.budget import BudgetSettings, apply_tool_result_budget, scaled_budget
from ctx_magic.context.cuts import fold_old_cells, make_snip, snip_cut, snip_to, thinking_tokens_from
from ctx_magic.context.decide import NO_FACTS, Plan, SessionFacts, Situation, decide
from ctx_magic.context.index import freed_before_anchor, measure, sync_index, with_freed
from ctx_magic.context.microcompact import COMPACTABLE_TOOLS, clear_results, clearable, cleared_text, idle_gap
from ctx_magic.context.notes import tail_limits
from ctx_magic.context.snip import KEEP_HEAD
from ctx_magic.context.snip_price import SnipPrice
from ctx_magic.context.state import ContextState, result_counts
from ctx_magic.context.thinking import (
    IMAGES_TRIGGER,
    KEEP_THINKING_TURNS,
    clear_old_thinking,
    drop_thinking_from,
    keep_valid_thinking,
)
from ctx_magic.context.thresholds import DEFAULT_WINDOW, Thresholds, compute_thresholds
from ctx_magic.context.tokens import (
    ContextCount,
    block_tokens,
    find_anchor,
    message_tokens,
)
from ctx_magic.events import Cleared, ContextMeasured, Event, Persisted, Snipped, ThinkingCleared
from ctx_magic.figures import ContextFigures
from ctx_magic.images import left_out_per_message
from ctx_magic.messages import Message
from ctx_magic.settings import CLEAR_AT_LEAST, DEFAULTS, Settings
from ctx_magic.store.session import safe_name


@dataclass(frozen=True)
class ContextSettings:
    """Everything the engine's rules depend on, one value per rule: the user's `Settings` made
    concrete for one window (`create`), in tokens and seconds."""

    thresholds: Thresholds = field(default_factory=lambda: compute_thresholds(
        DEFAULT_WINDOW, DEFAULTS.max_output_tokens, env={}))
    keep_recent: int = DEFAULTS.keep_recent
    """Compactable results that microcompact always keeps (the most recent ones)."""
    idle_seconds: float = DEFAULTS.idle_seconds
    """Idle gap after which old results are cleared: the prompt-cache TTL by default."""
    clear_at_least: int = 0
    """Pressure clearing only fires when it frees this much; 0 means 20,000 scaled for small
    windows like the other buffers. A value someone set is used as it is."""
    snip_max_messages: int = DEFAULTS.snip_max_messages
    """Live messages past which the middle is snipped."""
    compactable_tools: frozenset[str] = COMPACTABLE_TOOLS
    """Tools whose results may be cleared (the loop's tool registry says which)."""
    budget: BudgetSettings = BudgetSettings()
    """Per-result and per-message character limits of the tool-result budget."""
    tool_results_dir: str = "tool-results"
    """Folder named in persisted-output blocks (where read_file finds the full text)."""
    transcript_path: str = "transcript.jsonl"
    """Transcript named in snip markers."""
    clear_idle_thinking: bool = True
    """After an idle gap, keep only the last thinking turn."""
    append_only: bool = False
    """The model checks each thinking block's prefix: an edit of what was sent drops the thinking
    after it (idle thinking clearing then keeps none: the last turn's follows the first cleared)."""

    @classmethod
    def create(cls, window: int, reply_cap: int, settings: Settings | None = None, *,
               env: Mapping[str, str] | None = None, thinking_budget: int = 0, append_only: bool = False,
               **where: object) -> ContextSettings:
        """The engine's settings for a window, reply cap and thinking budget; `where` sets the
        paths and the compactable tools."""
        settings = settings or DEFAULTS
        thresholds = compute_thresholds(window, reply_cap, autocompact_pct=settings.autocompact_pct or None, env=env,
                                        thinking_budget=thinking_budget)
        return cls(thresholds=thresholds, keep_recent=settings.keep_recent, idle_seconds=settings.idle_seconds,
                   clear_at_least=settings.clear_at_least, snip_max_messages=settings.snip_max_messages,
                   budget=scaled_budget(thresholds.scale), append_only=append_only, **where)  # type: ignore[arg-type]

    @property
    def clear_threshold(self) -> int:
        """What a pressure clearing must free: the setting, else 20,000 scaled to the window."""
        return self.clear_at_least or max(1, round(CLEAR_AT_LEAST * self.thresholds.scale))

    def persisted_path(self, tool_use_id: str) -> str:
        return f"{self.tool_results_dir.rstrip('/')}/{safe_name(tool_use_id)}.txt"


@dataclass(frozen=True)
class Prepared:
    """The context ready for a call: the zero-call layers applied, the decision made."""

    messages: list[Message]
    state: ContextState
    events: list[Event]
    count: ContextCount
    situation: Situation
    """What the decision saw after the clearing step (asked again with an exact count)."""
    plan: Plan



# -- prepare --------------------------------------------------------------------------------


def _budget(messages: list[Message], state: ContextState, settings: ContextSettings, start: int):
    old = messages
    messages, decided, persisted = apply_tool_result_budget(
        messages, start, state.decided, dict(state.tool_names), settings.persisted_path, settings.budget
    )
    if not persisted:
        return messages, dataclasses.replace(state, decided=decided), []
    anchor = find_anchor(messages)
    freed = freed_before_anchor(old, messages, (state.positions[e.tool_use_id] for e in persisted), anchor)
    state = dataclasses.replace(state, decided=decided).with_persisted(persisted)
    return messages, with_freed(state, messages, freed), persisted


def _clear_thinking(messages: list[Message], state: ContextState, settings: ContextSettings, now: float):
    """Claude Code's thinking clearing: after an idle gap longer than the cache TTL, only the last
    thinking turn stays (the cache is cold, so removing the rest costs nothing)."""
    gap = idle_gap(messages, now)
    if not settings.clear_idle_thinking or gap is None or gap <= settings.idle_seconds:
        return messages, state, []
    old = messages
    messages, event = clear_old_thinking(messages, keep_turns=0 if settings.append_only else KEEP_THINKING_TURNS)
    if event is None:
        return old, state, []
    changed = {u for u in event.message_uuids}
    indices = [i for i, m in enumerate(old) if m.uuid in changed]
    freed = freed_before_anchor(old, messages, indices, find_anchor(messages))
    return messages, with_freed(state, messages, freed), [event]


def _keep_valid_thinking(before: Sequence[Message], messages: list[Message], state: ContextState,
                         settings: ContextSettings):
    """Append-only: the thinking after the first edit of what was sent leaves (its prefix changed)."""
    if not settings.append_only:
        return messages, state, []
    out, event = keep_valid_thinking(before, messages)
    if event is None:
        return messages, state, []
    changed = set(event.message_uuids)
    indices = [i for i, m in enumerate(messages) if m.uuid in changed]
    freed = freed_before_anchor(messages, out, indices, find_anchor(out))
    return out, with_freed(state, out, freed), [event]


def _images_left_out(messages: list[Message], state: ContextState, settings: ContextSettings):
    """Append-only: past the API's count of images per request the oldest are left out of the request
    (images.limit_images), which changes what came before the thinking after them. When the images
    left out change (once every 20 new ones), the thinking after the first message they change
    leaves the live context, said once; the thinking written since was written after the request as
    sent, and stays while the same images are left out."""
    if not settings.append_only:
        return messages, state, []
    now, before = left_out_per_message(messages), state.left_out_images
    if now == before:
        return messages, state, []
    state = dataclasses.replace(state, left_out_images=now)
    start = next((i for i, m in enumerate(messages) if m.sent and now.get(m.uuid, 0) != before.get(m.uuid, 0)),
                 None)
    out, event = drop_thinking_from(messages, start, IMAGES_TRIGGER) if start is not None else (messages, None)
    if event is None:
        return messages, state, []
    changed = set(event.message_uuids)
    freed = freed_before_anchor(messages, out, [i for i, m in enumerate(messages) if m.uuid in changed],
                                find_anchor(out))
    return out, with_freed(state, out, freed), [event]


def _clear(messages: list[Message], state: ContextState, ids: Sequence[str], trigger: str,
           freed: Mapping[str, int] | None = None):
    old = messages
    messages, event = clear_results(
        messages, state.positions, ids, trigger=trigger, persisted_paths=state.persisted_paths, freed=freed
    )
    if event is None:
        return messages, state, []
    anchor = find_anchor(messages)
    freed = freed_before_anchor(old, messages, (state.positions[i] for i in event.replacements), anchor)
    state = dataclasses.replace(
        state,
        cleared={**state.cleared, **event.replacements},
        compactable=tuple(i for i in state.compactable if i not in event.replacements),
    )
    return messages, with_freed(state, messages, freed), [event]


def _result_tokens(messages: Sequence[Message], state: ContextState, tool_use_id: str) -> int:
    message = messages[state.positions[tool_use_id]]
    memo = message.memo.setdefault("result_tokens", {})
    if tool_use_id not in memo:
        block = next(b for b in message.blocks("tool_result") if b["tool_use_id"] == tool_use_id)
        memo[tool_use_id] = block_tokens(block)
    return memo[tool_use_id]


def _clearable_sizes(messages: list[Message], state: ContextState, settings: ContextSettings) -> dict[str, int]:
    """Old compactable results and what clearing each would free (a result smaller than its
    stub stays: clearing it would grow the context)."""
    sizes = {i: _result_tokens(messages, state, i) - _stub_tokens(state.persisted_paths.get(i))
             for i in clearable(state.compactable, settings.keep_recent)}
    return {i: size for i, size in sizes.items() if size > 0}


def _tokens_before(messages: Sequence[Message], state: ContextState, ids: Sequence[str], overhead: int) -> int:
    """What the request holds before the first of these results: a clearing leaves it cached."""
    if not ids:
        return 0
    first = min(state.positions[i] for i in ids)
    return overhead + sum(message_tokens(m) for m in messages[:first] if m.sent)


def situation(messages: Sequence[Message], state: ContextState, now: float, settings: ContextSettings, *,
              overhead_tokens: int = 0, facts: SessionFacts = NO_FACTS,
              may_clear: bool = True, snip: SnipPrice | None = None) -> tuple[Situation, dict[str, int]]:
    """What the decision looks at (decide.py), measured on the live context, and the results a
    clearing would change with what each frees (sized only when a clearing can happen: after an
    idle gap, or past the warning level)."""
    count = measure(messages, state, overhead_tokens)
    gap = idle_gap(messages, now)
    idle = gap is not None and gap > settings.idle_seconds
    warm_pressure = not idle and count.tokens >= settings.thresholds.warning
    wanted = may_clear and state.compactable and (idle or warm_pressure)
    clearable = _clearable_sizes(messages, state, settings) if wanted else {}
    thinking_after = 0
    if warm_pressure and settings.append_only and clearable:
        thinking_after = thinking_tokens_from(messages, min(state.positions[i] for i in clearable))
    seen = Situation(
        tokens=count.tokens, estimated_tokens=count.estimated_tokens, thresholds=settings.thresholds,
        idle_seconds=gap, idle_limit_seconds=settings.idle_seconds,
        clearable_tokens=sum(clearable.values()),
        clear_prefix=_tokens_before(messages, state, list(clearable), overhead_tokens) if warm_pressure else 0,
        clear_at_least=settings.clear_threshold, overhead=overhead_tokens,
        notes_tail=tail_limits(settings.thresholds.autocompact)[0] if facts.notes_tokens else 0,
        may_clear=may_clear, facts=facts, thinking_after_clear=thinking_after, snip=snip,
    )
    return seen, clearable


@functools.lru_cache(maxsize=1024)
def _stub_tokens(persisted_path: str | None) -> int:
    """The cleared result as sent: the stub in the same tool_result wrapper."""
    return block_tokens({"type": "tool_result", "content": cleared_text(persisted_path)})


def figures(messages: Sequence[Message], state: ContextState, settings: ContextSettings, tokens: int,
            plan: str = "", counts: tuple[int, int, int] | None = None) -> ContextFigures:
    """The context's figures for the status line and the panel; `counts` (live, cleared,
    persisted results) when the state has no index yet."""
    th = settings.thresholds
    live, cleared, persisted = counts or result_counts(state)
    indexed = state.indexed == len(messages) and (not messages or messages[-1].uuid == state.indexed_uuid)
    sent = state.sent_messages if indexed else sum(1 for m in messages if m.sent)
    return ContextFigures(
        tokens=tokens, threshold=th.autocompact, warning=th.warning, blocking=th.blocking, window=th.window,
        zone=th.zone(tokens), percent_left=th.percent_left(tokens), messages=sent,
        live_results=live, cleared_results=cleared, persisted_results=persisted, plan=plan,
    )


def prepare(
    messages: Sequence[Message],
    state: ContextState,
    now: float,
    settings: ContextSettings,
    *,
    overhead_tokens: int = 0,
    facts: SessionFacts = NO_FACTS,
    may_clear: bool = True,
) -> Prepared:
    """Run the tool-result budget, let `decide` choose, carry out its clearing (microcompact) or snip.

    The loop carries out the rest of the plan (compaction). The order matters: the budget
    persists a large result before microcompact could replace it by a stub, so its full text
    is always on disk (Claude Code runs them in this order too).
    """
    msgs, state, start = sync_index(messages, state, compactable_tools=settings.compactable_tools)
    msgs, state, persisted = _budget(msgs, state, settings, start)
    msgs, state, thinned = _clear_thinking(msgs, state, settings, now)
    cut = snip_cut(msgs, settings, now, overhead_tokens)
    seen, sizes = situation(msgs, state, now, settings, overhead_tokens=overhead_tokens, facts=facts,
                            may_clear=may_clear, snip=cut.price if cut else None)
    plan = decide(seen)
    cleared: list[Cleared] = []
    snipped: list[Snipped] = []
    if plan.clear:
        msgs, state, cleared = _clear(msgs, state, list(sizes), plan.clear, freed=sizes)
    if plan.snip and cut is not None:
        msgs, state, snipped = make_snip(msgs, state, settings, cut)
    folded: list[Snipped] = []
    if may_clear and seen.idle:  # the cache has expired: folding old cells costs nothing either
        msgs, state, folded = fold_old_cells(msgs, state, settings, now)
    msgs, state, invalidated = _keep_valid_thinking(messages, msgs, state, settings)
    count = measure(msgs, state, overhead_tokens)
    seen = dataclasses.replace(seen, tokens=count.tokens, estimated_tokens=count.estimated_tokens, may_clear=False,
                               clearable_tokens=0 if cleared else seen.clearable_tokens, snip=None)
    if cleared or folded or snipped:  # what follows is decided on the context as it now is
        # After a clearing or a fold the snip is priced again on what they left, and made in the same
        # pass when it pays: the next call would see the same figures and make it then.
        cut = None if snipped else snip_cut(msgs, settings, now, overhead_tokens)
        plan = decide(dataclasses.replace(seen, snip=cut.price if cut else None)).after(plan)
        if plan.snip and cut is not None and not snipped:
            before = msgs
            msgs, state, snipped = make_snip(msgs, state, settings, cut)
            msgs, state, more = _keep_valid_thinking(before, msgs, state, settings)
            invalidated = [*invalidated, *more]
            count = measure(msgs, state, overhead_tokens)
            seen = dataclasses.replace(seen, tokens=count.tokens, estimated_tokens=count.estimated_tokens)
    msgs, state, left_out = _images_left_out(msgs, state, settings)
    if left_out:
        count = measure(msgs, state, overhead_tokens)
        seen = dataclasses.replace(seen, tokens=count.tokens, estimated_tokens=count.estimated_tokens)
    measured = ContextMeasured(figures(msgs, state, settings, count.tokens, plan.reason))
    events: list[Event] = [*persisted, *thinned, *cleared, *snipped, *folded, *invalidated, *left_out, measured]
    return Prepared(msgs, state, events, count, seen, plan)


def clear_now(
    messages: Sequence[Message], state: ContextState, tool_use_ids: Sequence[str], trigger: str,
    compactable_tools: frozenset[str] = COMPACTABLE_TOOLS, append_only: bool = False,
) -> tuple[list[Message], ContextState, list[Cleared | ThinkingCleared], list[str]]:
    """Clear named results at once (the model's snip tool, the user). Returns unknown ids too.

    Only results that are live and not cleared yet can be cleared; protected tools' results
    (memory, questions to the user) are refused like unknown ones.
    """
    msgs, state, _ = sync_index(messages, state, pending_ok=True,  # called while tools run
                                compactable_tools=compactable_tools)
    live = set(state.compactable)
    ids = [i for i in tool_use_ids if i in live]
    unknown = [i for i in tool_use_ids if i not in live]
    before = msgs
    msgs, state, events = _clear(msgs, state, ids, trigger)
    msgs, state, invalidated = _keep_valid_thinking(before, msgs, state, ContextSettings(append_only=append_only))
    return msgs, state, [*events, *invalidated], unknown


def snip_now(
    messages: Sequence[Message], state: ContextState, now: float, settings: ContextSettings, keep_last: int
) -> tuple[list[Message], ContextState, list[Persisted | Snipped | ThinkingCleared]]:
    """Snip the middle at once, keeping the head and about `keep_last` recent messages.

    Results no call has seen yet (an interrupted turn's) meet the tool-result budget first: once
    indexed here, the next call's budget would never look at them again."""
    msgs, state, start = sync_index(messages, state, compactable_tools=settings.compactable_tools)
    msgs, state, persisted = _budget(msgs, state, settings, start)
    keep = KEEP_HEAD + 1 + keep_last
    msgs, state, snipped = snip_to(msgs, state, settings, now, keep, trigger="user", target=keep)
    msgs, state, invalidated = _keep_valid_thinking(messages, msgs, state, settings)
    return msgs, state, [*persisted, *snipped, *invalidated]
