"""The idle trigger between turns. ipykernel runs no background asyncio task between
cells, so the idle gap is checked lazily at the next cell (writes included) and, optionally,
by a timer thread that changes only the in-memory context; its transcript writes wait for
the kernel's main thread. Changes made between turns are shown at the next agent turn."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.request import RequestFrame
from ctx_magic.context.microcompact import last_assistant_time
from ctx_magic.errors import CtxMagicError
from ctx_magic.events import Cleared, Event, Notice, Persisted, Snipped, ThinkingCleared, listening
from ctx_magic.messages import Message
from ctx_magic.notebook.host import SessionHost

IDLE_TIMER_SLACK = 1.0  # seconds after the TTL before the timer looks
SHOWN_LATER = (Cleared, Snipped, Persisted, Notice, ThinkingCleared)


class IdleWatch:
    def __init__(self, lock: threading.RLock, host: SessionHost, *, on_cold: Callable[[], None] = lambda: None) -> None:
        self._lock = lock
        self._host = host
        """Whose current session the watch looks at."""
        self._on_cold = on_cold
        """Called by the timer once the gap has passed: the panel shows the cold cache and the
        price of the next call before the user runs a cell."""
        self.timer: threading.Timer | None = None
        self.deferred: list[Message | Event] = []
        """Writes the timer thread's clearing left for the main thread."""
        self._unshown: list[Event] = []
        self._live: LiveContext | None = None
        self._frame: RequestFrame | None = None
        self._listeners: list[Callable[[Event], None]] = []
        self._prepare: Callable[..., Any] = lambda **_: None
        self._clock: Callable[[], float] = lambda: 0.0
        self._passed_after: float | None = None
        """When the answer was given after which the zero-call layers last ran between turns: until
        the next answer, another pass would find nothing more to do."""

    def attach(self, live: LiveContext, frame: RequestFrame, listeners: list[Callable[[Event], None]],
               prepare: Callable[..., Any], clock: Callable[[], float]) -> None:
        """A session opened: its live context, its request frame (the idle settings in force), its
        listeners, its `prepare` (which runs the zero-call layers) and its clock are the ones watched."""
        self.cancel()
        self.deferred = []  # what the last session's timer cleared is that session's
        self._live, self._frame, self._listeners, self._prepare = live, frame, listeners, prepare
        self._clock, self._passed_after = clock, None

    def _watched(self) -> LiveContext | None:
        """The live context watched, while a session is current."""
        return self._live if self._host.session is not None else None

    def check(self) -> bool:
        """At the next cell: the zero-call layers run if the idle gap passed; True if they changed the
        context (the panel then loads the session's figures again; otherwise its events sufficed).
        Before the gap, whatever they would do the next call's own preparation does: a cell of the
        user's costs no pass over the conversation; after it, one pass until the model answers again."""
        live = self._watched()
        if live is None or not self._lock.acquire(blocking=False):
            return False
        try:
            self.flush()
            if self._gap_passed(live):
                return self._between_turns(live, self._prepare)
        except CtxMagicError:
            pass
        finally:
            self._lock.release()
        return False

    def _gap_passed(self, live: LiveContext) -> bool:
        """Whether the model last answered longer ago than the idle limit in force, and the layers
        have not run since."""
        answered = last_assistant_time(live.messages)
        if answered is None or answered == self._passed_after or self._frame is None:
            return False
        return self._clock() - answered > self._frame.settings.idle_seconds

    def schedule(self) -> None:
        settings = self._frame.settings if self._frame is not None else None
        if settings is None or not settings.idle_timer:
            return
        self.timer = threading.Timer(settings.idle_seconds + IDLE_TIMER_SLACK, self._fired)
        self.timer.daemon = True
        self.timer.start()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _fired(self) -> None:
        """From the timer thread: clear in memory only; the transcript is written at the next cell."""
        live, prepare = self._watched(), self._prepare
        if live is None or not self._lock.acquire(blocking=False):
            return
        try:
            if any(m.sent for m in live.messages):
                self._between_turns(live, lambda: self.deferred.extend(prepare(write=False)[1]))
                self._on_cold()
        except Exception:  # noqa: BLE001 - a timer must never raise into the kernel
            pass
        finally:
            self._lock.release()

    def flush(self) -> None:
        """Write what the timer deferred (main thread only)."""
        if self.deferred and self._live is not None:
            self._live.write_changes(self.deferred)
            self.deferred = []

    def take_unshown(self) -> list[Event]:
        """Context changes made between turns, to show at the next agent turn."""
        unshown, self._unshown = self._unshown, []
        return unshown

    def _between_turns(self, live: LiveContext, act: Callable[[], object]) -> bool:
        """Run `act`, keeping the context changes it made to show at the next turn; whether it made any."""
        seen: list[Event] = []
        with listening(self._listeners, seen.append):
            act()
        self._passed_after = last_assistant_time(live.messages)
        changes = [e for e in seen if isinstance(e, SHOWN_LATER)]
        self._unshown += changes
        return bool(changes)
