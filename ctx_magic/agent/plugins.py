"""What plugs into a session: the compaction hooks, the session's notes and whatever else
listens at turn ends and keeps a little state in state.json."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctx_magic.context.compaction_state import CompactionState
from ctx_magic.events import Compacted

if TYPE_CHECKING:
    from ctx_magic.agent.notes import NotesKeeper


@dataclass(frozen=True)
class Veto:
    """What a PreCompact hook returns to hold back an automatic compaction, with its reason.

    Honoured for automatic compactions below the blocking limit only: one the user or the agent
    asked for, one the API's refusal forces, or one past the blocking limit goes ahead, and the
    user is told the veto was overridden."""

    reason: str


@dataclass(frozen=True)
class PreCompactVerdict:
    """What the PreCompact hooks said: the instructions they added, and the first veto."""

    instructions: str | None
    veto: Veto | None = None


def takes_context(hook: Callable[..., Any]) -> bool:
    """Whether a hook accepts the context's figures: a `context` parameter, or **kwargs. Hooks
    written for (trigger, instructions) alone are called as before."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable says nothing of its parameters
        return False
    return any(p.name == "context" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


@dataclass
class Hooks:
    """PreCompact, PostCompact and SessionStart callables, plain Python registered with `add`."""

    pre_compact: list[Callable[..., str | Veto | None]] = field(default_factory=list)
    """(trigger, user instructions[, context=ContextReport]) -> extra instructions, a `Veto`, or None.
    A hook with a `context` parameter (or **kwargs) gets the figures `ctx_magic.context()` returns."""
    post_compact: list[Callable[[Compacted], None]] = field(default_factory=list)
    session_start: list[Callable[[str], str | None]] = field(default_factory=list)
    """(source: 'compact' | 'resume' | 'new') -> text added to the context, or None."""
    _veto_said_in: int | None = field(default=None, init=False, repr=False)
    """The turn whose veto of the automatic compaction was said last."""

    def add(self, name: str, fn: Callable[..., Any]) -> None:
        lists = {"PreCompact": self.pre_compact, "PostCompact": self.post_compact,
                 "SessionStart": self.session_start}
        if name not in lists:
            raise ValueError(f"unknown hook {name!r}; use one of {', '.join(lists)}")
        lists[name].append(fn)

    def run_pre_compact(self, trigger: str, instructions: str | None, context: Any) -> PreCompactVerdict:
        """Every PreCompact hook in turn: the instructions they add joined to the user's, and the
        first veto any of them returned."""
        veto = None
        for hook in self.pre_compact:
            said = hook(trigger, instructions, context=context) if takes_context(hook) else hook(trigger, instructions)
            if isinstance(said, Veto):
                veto = veto or said
            elif said:
                instructions = f"{instructions}\n{said}" if instructions else said
        return PreCompactVerdict(instructions, veto)

    def veto_news(self, state: CompactionState) -> bool:
        """Whether a veto of the automatic compaction in the turn `state` counts is still to be said:
        once a turn, as each call of the turn asks the hooks again."""
        news, self._veto_said_in = self._veto_said_in != state.turns, state.turns
        return news


class Plugins:
    """A session's plug-in slots. The notes keeper, for one, attaches here."""

    def __init__(self) -> None:
        self.notes: NotesKeeper | None = None
        self._turn_listeners: list[Callable[[Any, Any], None]] = []
        self._state: dict[str, Any] = {}

    def attach_notes(self, keeper: NotesKeeper) -> None:
        self.notes = keeper

    def on_turn_end(self, callback: Callable[[Any, Any], None]) -> None:
        """Called at each turn end with (session, turn result)."""
        self._turn_listeners.append(callback)

    def turn_ended(self, session: Any, result: Any) -> list[str]:
        """Run the turn-end listeners; what failed, one line each (a listener never fails a turn)."""
        problems = []
        for callback in list(self._turn_listeners):
            try:
                callback(session, result)
            except Exception as error:  # noqa: BLE001 - reported as a notice by the session
                problems.append(f"An after-turn task failed: {error}")
        return problems

    def remember(self, key: str, value: Any) -> None:
        """Keep a plug-in's small state in state.json under its own key."""
        self._state[key] = value

    def recalled(self, key: str, default: Any = None) -> Any:
        return self._state.get(key, default)

    def saved(self) -> dict[str, Any]:
        return dict(self._state)

    def restore(self, state: Mapping[str, Any]) -> None:
        self._state.update(state)
