"""The cuts the engine makes: a snip of the middle and a fold of old notebook cells, where markers
replace runs of messages. After a cut the context is indexed again and what it freed in front of
the anchoring response is counted; the automatic snip is measured and priced (`SnipCut`) before the
decision says whether it is made (engine.prepare)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctx_magic.context.index import sync_index, with_freed
from ctx_magic.context.microcompact import clearable
from ctx_magic.context.snip import fold_cells, snip_middle
from ctx_magic.context.snip_price import SnipPrice
from ctx_magic.context.state import ContextState
from ctx_magic.context.thinking import is_thinking
from ctx_magic.context.tokens import block_tokens, estimate_family, find_anchor, message_tokens
from ctx_magic.events import Snipped
from ctx_magic.messages import Message

if TYPE_CHECKING:
    from ctx_magic.context.engine import ContextSettings


def snip_to(messages: list[Message], state: ContextState, settings: ContextSettings, now: float,
          max_messages: int, trigger: str = "auto", target: int | None = None):
    snipped, events = snip_middle(
        messages, max_messages, transcript_path=settings.transcript_path, now=now, trigger=trigger, target=target
    )
    if not events:
        return messages, state, []
    return _after_cut(messages, snipped, state, settings, events)


@dataclass(frozen=True)
class SnipCut:
    """A snip the engine could make now: the messages it would leave, its event and its price."""

    messages: list[Message]
    events: list[Snipped]
    price: SnipPrice


def snip_cut(messages: list[Message], settings: ContextSettings, now: float, overhead_tokens: int = 0
             ) -> SnipCut | None:
    """The automatic snip past `snip_max_messages`, measured but not made (None: no snip frees anything)."""
    snipped, events = snip_middle(messages, settings.snip_max_messages, transcript_path=settings.transcript_path,
                                  now=now)
    if not events:
        return None
    marker = next(i for i, m in enumerate(snipped) if m.uuid == events[0].marker_uuid)
    prefix = overhead_tokens + sum(message_tokens(m) for m in snipped[:marker] if m.sent)
    lost = thinking_tokens_from(snipped, marker + 1) if settings.append_only else 0
    return SnipCut(snipped, events, SnipPrice(events[0].tokens_freed, prefix, lost, events[0].count))


def make_snip(messages: list[Message], state: ContextState, settings: ContextSettings, cut: SnipCut):
    return _after_cut(messages, cut.messages, state, settings, cut.events)


def _after_cut(old: Sequence[Message], new: list[Message], state: ContextState, settings: ContextSettings,
               events: Sequence[Snipped]):
    """Index the context again after markers replaced runs of messages, and count what that freed
    in front of the response that anchors the count afterwards (its figure still holds it). A cut
    that took the last response leaves an earlier one anchoring: what went came after that one."""
    removed = {u for e in events for u in e.removed_uuids}
    markers = {e.marker_uuid for e in events}
    anchor = max(0, find_anchor(new))  # no response left: nothing anchors, nothing was freed before one
    before = next((i for i, m in enumerate(old) if anchor and m.uuid == new[anchor].uuid), 0)
    family = estimate_family(old)  # freed tokens come off the API's figure: the anchored count's unit
    freed = sum(message_tokens(m, family) for m in old[:before] if m.uuid in removed and m.sent)
    freed -= sum(message_tokens(m, family) for m in new[:anchor] if m.uuid in markers)
    new, state, _ = sync_index(new, dataclasses.replace(state, indexed=0), compactable_tools=settings.compactable_tools)
    return new, with_freed(state, new, freed), list(events)


def fold_old_cells(messages: list[Message], state: ContextState, settings: ContextSettings, now: float):
    """Runs of old notebook cells (older than the most recent results clearing keeps) fold into a
    line each; the caller folds after an idle gap, when the rewrite costs nothing."""
    foldable = {*state.cleared, *clearable(state.compactable, settings.keep_recent)}
    folded, events = fold_cells(messages, foldable, state.cleared, transcript_path=settings.transcript_path, now=now)
    if not events:
        return messages, state, []
    return _after_cut(messages, folded, state, settings, events)


def thinking_tokens_from(messages: Sequence[Message], start: int) -> int:
    """The thinking blocks' tokens at or after message `start` (what an edit there would drop)."""
    return sum(block_tokens(b) for m in messages[start:] if m.role == "assistant" and m.sent
               for b in m.content if is_thinking(b))
