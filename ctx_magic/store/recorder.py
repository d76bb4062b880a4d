"""A session's durability: every message and durable event written to the
transcript as it happens, tool results persisted by the budget written to their files, the transcript
fsynced and state.json saved at each turn end.

Two faults are absorbed here. A full disk keeps a message out of the transcript: it waits, in
order, and is written before anything else once there is room. A transcript deleted while the
session runs is started again from the live context, and a notice says what was lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ctx_magic.errors import StorageError
from ctx_magic.events import Event, Persisted
from ctx_magic.messages import Message
from ctx_magic.store.session import SessionDir


class Recorder:
    """Writes one session's transcript, tool-result files and state.json."""

    def __init__(self, store: SessionDir, *, live: Callable[[], Sequence[Message]],
                 notice: Callable[[str, str], None]) -> None:
        self.store = store.create()
        self.transcript = store.transcript()
        self._live = live
        self._notice = notice
        self.unwritten: list[Message] = []
        """Live messages a full disk kept out of the transcript, oldest first."""

    def message(self, message: Message) -> None:
        """Write a message that is about to become live (before any layer can change it).

        On a full disk the message waits to be written and the StorageError is raised: the
        caller still makes it live (a tool call keeps its results, as the API requires) and ends the turn.
        """
        try:
            self._ensure_transcript()  # before the message is live: a new transcript must not hold it twice
            self._flush_unwritten()
            self.transcript.append_message(message)
        except StorageError:
            self.unwritten.append(message)
            raise

    def event(self, event: Event) -> None:
        """A persisted result's file first, then the event itself when it is durable."""
        if isinstance(event, Persisted):
            self._ensure_transcript()
            self.store.write_tool_result(event.tool_use_id, event.content)
        if event.durable:
            self._flush_unwritten()
            self.transcript.append_event(event)

    def changes(self, changes: Sequence[Message | Event]) -> None:
        """Messages and events a context change made (written later when it ran off the main thread)."""
        self._flush_unwritten()
        for change in changes:
            if isinstance(change, Message):
                self.transcript.append_message(change)
            else:
                if isinstance(change, Persisted):
                    self.store.write_tool_result(change.tool_use_id, change.content)
                self.transcript.append_event(change)

    def end_turn(self, state: dict[str, Any]) -> None:
        """Make the transcript durable and save state.json (each turn end); a failure is a notice."""
        try:
            self._flush_unwritten()
            self.transcript.sync()
            self.store.save_state(state)
        except StorageError as error:
            waiting = f" ({len(self.unwritten)} message(s) wait to be written)" if self.unwritten else ""
            self._notice(f"ctx_magic could not save the session{waiting}: {error}", "error")

    def close(self) -> None:
        self.transcript.close()

    def _flush_unwritten(self) -> None:
        """Write the messages a full disk held back; raises StorageError while there is no room."""
        self._ensure_transcript()
        while self.unwritten:
            self.transcript.append_message(self.unwritten[0])
            self.unwritten.pop(0)

    def _ensure_transcript(self) -> None:
        """If the session folder or its transcript was deleted while the session ran, start a
        new transcript from the live context (what only the old file held is gone), and say so."""
        if not self.transcript.gone():
            return
        self.transcript.reopen()
        self.store.create()
        waiting = {m.uuid for m in self.unwritten}
        written = [m for m in self._live() if m.uuid not in waiting]
        for message in written:
            self.transcript.append_message(message)
        self.transcript.sync()
        self._notice(f"The transcript {self.store.transcript_path} was removed while the session ran; a new one "
                     f"was started from the live context ({len(written)} messages). Earlier records are gone.",
                     "warning")
