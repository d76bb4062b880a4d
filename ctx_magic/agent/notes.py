"""The session's notes file, kept current by a side call in a background thread.

At each turn end the keeper decides (context/notes.py) whether an extraction is due: once a
compaction is in sight, then as the context grows with enough tool calls or a quiet turn, and
at once after the user corrects the agent or settles a decision. The thread
reads a snapshot of the conversation, never the live list, and writes only the notes file and
its own small state: a cell is never blocked and the live context never edited concurrently.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from ctx_magic.agent.loop import TurnResult
from ctx_magic.agent.session import Session
from ctx_magic.context.notes import (
    NOTES_UPDATE_TAG,
    ExtractionState,
    apply_update,
    empty_template,
    enforce_caps,
    extraction_due,
    is_correction_or_decision,
    is_empty,
    notes_prompt,
    rebaselined,
)
from ctx_magic.context.tokens import count_text
from ctx_magic.store.files import atomic_write_text

NOTES_MAX_OUTPUT = 16_000  # room for a full 12,000-token rewrite when every section changes
STATE_KEY = "session_memory"


class NotesKeeper:
    """Plugs into a Session (as its `plugins.notes`): decides at turn ends, extracts in the
    background, serves the notes to the compaction from notes."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._live, self._side_calls, self._plugins = session.live, session.side_calls, session.plugins
        store = session.store
        self.path = store.notes_path
        saved = self._plugins.recalled(STATE_KEY) or {}
        self.state = ExtractionState(**{f.name: saved[f.name] for f in dataclasses.fields(ExtractionState)
                                        if f.name in saved})
        self.last_error: str | None = None
        self.extractions = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        kept = self.current()  # a resumed session's notes
        self._tokens = count_text(kept[0]) if kept else 0
        self._plugins.attach_notes(self)
        self._plugins.on_turn_end(self.after_turn)
        self._plugins.remember(STATE_KEY, dataclasses.asdict(self.state))

    # -- deciding (main thread) ----------------------------------------------------------------

    def after_turn(self, session: Session, result: TurnResult) -> None:
        correction = bool(result.prompt) and is_correction_or_decision(result.prompt)
        tool_calls = result.tool_calls
        setup = session.setup()
        tokens = self._live.tokens(setup.overhead_tokens)
        with self._lock:
            self.state = rebaselined(self.state, tokens)
        reason = extraction_due(self.state, tokens, setup.context.thresholds,
                                last_turn_tool_calls=tool_calls, correction=correction)
        if reason is None or not self.start(reason):
            with self._lock:
                self.state = dataclasses.replace(self.state, tool_calls_since=self.state.tool_calls_since + tool_calls)

    def start(self, reason: str) -> bool:
        """Start an extraction in the background; False when one is already running."""
        if self.running:
            return False
        snapshot = [m for m in self._live.messages if m.sent]
        if not snapshot:
            return False
        tokens = self.session.tokens()
        self._thread = threading.Thread(target=self._extract, args=(snapshot, tokens, reason),
                                        name="ctx-magic-session-notes", daemon=True)
        self._thread.start()
        return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- extracting (background thread) --------------------------------------------------------

    def _extract(self, snapshot: list[Any], tokens: int, reason: str) -> None:
        try:
            current = self.path.read_text(encoding="utf-8") if self.path.exists() else empty_template()
            reply = self._side_calls.text(snapshot, notes_prompt(current), purpose="memory",
                                                 max_tokens=NOTES_MAX_OUTPUT)
            notes = apply_update(current, reply)
            if notes is None:
                raise ValueError(f"the reply had no <{NOTES_UPDATE_TAG}>")
            notes = enforce_caps(notes)
            atomic_write_text(self.path, notes)
        except Exception as error:  # noqa: BLE001 - reported, never raised into a cell
            self.last_error = f"session notes were not updated ({reason}): {error}"
            return
        with self._lock:
            self.state = ExtractionState(True, tokens, 0, snapshot[-1].uuid)
            self._plugins.remember(STATE_KEY, dataclasses.asdict(self.state))
            self.extractions += 1
            self.last_error = None
            self._tokens = 0 if is_empty(notes) else count_text(notes)

    # -- serving the compaction ------------------------------------------------------------------

    def wait(self, timeout: float) -> None:
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)

    def current(self) -> tuple[str, str | None] | None:
        try:
            notes = self.path.read_text(encoding="utf-8")
        except OSError:
            return None
        if is_empty(notes):
            return None
        with self._lock:
            return notes, self.state.covered_uuid

    def text(self) -> str:
        current = self.current()
        return current[0] if current else ""

    def tokens(self) -> int:
        return self._tokens
