"""The session's notes file, kept current by a side call in a background thread (SPEC S1-S2).

At each turn end the keeper decides (context/session_memory.py) whether an extraction is due:
at 10,000 tokens first, then every 5,000 more with enough tool calls or a quiet turn, and at
once after the user corrects the agent or settles a decision (beyond the seeds). The thread
reads a snapshot of the conversation, never the live list, and writes only the notes file and
its own small state: a cell is never blocked and the live context never edited concurrently.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from typing import Any

from ctx_magic.agent.session import Session
from ctx_magic.context.session_memory import (
    MAX_SECTION_TOKENS,
    MAX_TOTAL_TOKENS,
    ExtractionState,
    empty_template,
    extraction_due,
    is_correction_or_decision,
    is_empty,
    rebaselined,
    sections,
)
from ctx_magic.context.tokens import count_text
from ctx_magic.memory.prompts import NOTES_UPDATE_TAG, notes_prompt
from ctx_magic.store.files import atomic_write_text

NOTES_MAX_OUTPUT = 16_000  # room for a full 12,000-token rewrite when every section changes
STATE_KEY = "session_memory"
_UPDATE = re.compile(rf"<{NOTES_UPDATE_TAG}>(.*?)(?:</{NOTES_UPDATE_TAG}>|\Z)", re.DOTALL)
_CHANGE = re.compile(r'<(section|append) title="([^"]+)">\n?(.*?)\n?</\1>', re.DOTALL)


def apply_update(current: str, reply: str) -> str | None:
    """The notes with a reply's changes made (rewritten and appended sections), every section
    present in its place; None when the reply holds no update at all."""
    match = _UPDATE.search(reply)
    if not match:
        return None
    template = sections(empty_template())
    bodies = {title: body for title, body in sections(current).items() if title in template} or dict(template)
    bodies = {title: bodies.get(title, template[title]) for title in template}
    for kind, title, text in _CHANGE.findall(match.group(1)):
        title = title.strip()
        if title not in bodies:
            continue  # a section that does not exist is not invented
        description = template[title].splitlines()[0]
        text = text.strip("\n")
        if kind == "append":
            bodies[title] = f"{bodies[title].rstrip()}\n{text}" if text else bodies[title]
        else:
            bodies[title] = text if text.startswith(description) else f"{description}\n{text}"
    return "\n\n".join(f"# {title}\n{body}" for title, body in bodies.items()) + "\n"


def enforce_caps(notes: str) -> str:
    """Cut sections past 2,000 tokens, then the longest ones until the file is under 12,000."""
    bodies = sections(notes)
    for title, body in bodies.items():
        while count_text(body) > MAX_SECTION_TOKENS:
            body = body[: int(len(body) * 0.8)] + "\n[condensed: cut to fit]"
        bodies[title] = body
    while sum(count_text(b) for b in bodies.values()) > MAX_TOTAL_TOKENS:
        longest = max(bodies, key=lambda t: len(bodies[t]))
        bodies[longest] = bodies[longest][: int(len(bodies[longest]) * 0.8)] + "\n[condensed: cut to fit]"
    return "\n\n".join(f"# {title}\n{body}" for title, body in bodies.items()) + "\n"


class NotesKeeper:
    """Plugs into a Session: decides at turn ends, extracts in the background, serves the notes
    to session-memory compaction (the session's `notes_source`)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.path = session.store.session_memory_path
        saved = session.plugins.recalled(STATE_KEY) or {}
        self.state = ExtractionState(**{f.name: saved[f.name] for f in dataclasses.fields(ExtractionState)
                                        if f.name in saved})
        self.last_error: str | None = None
        self.extractions = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        kept = self.current()  # a resumed session's notes
        self._tokens = count_text(kept[0]) if kept else 0
        session.plugins.attach_notes(self)
        session.plugins.on_turn_end(self.after_turn)
        session.plugins.remember(STATE_KEY, dataclasses.asdict(self.state))

    # -- deciding (main thread) ----------------------------------------------------------------

    def after_turn(self, session: Session, result: Any) -> None:
        correction = bool(getattr(result, "prompt", "")) and is_correction_or_decision(result.prompt)
        tool_calls = int(getattr(result, "tool_calls", 0))
        setup = session.setup()
        tokens = session.live.tokens(setup.overhead_tokens)
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
        snapshot = [m for m in self.session.live.messages if m.sent]
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
            reply = self.session.side_calls.text(snapshot, notes_prompt(current), purpose="memory",
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
            self.session.plugins.remember(STATE_KEY, dataclasses.asdict(self.state))
            self.extractions += 1
            self.last_error = None
            self._tokens = 0 if is_empty(notes) else count_text(notes)

    # -- serving (NotesSource) -----------------------------------------------------------------

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
