"""The session transcript (SPEC M2): every message before any layer changes it, and every
durable event, one JSON object a line. Lines are written through to the OS as they come and
fsynced at each turn end; a corrupt or truncated line is reported on load and skipped."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ctx_magic.errors import StorageError
from ctx_magic.events import Event
from ctx_magic.messages import Message
from ctx_magic.store.files import describe_os_error


def encode_record(record: dict[str, Any]) -> bytes:
    try:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        return (line + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8; \u escapes round-trip them exactly through json.
        return (json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


@dataclass
class LoadedTranscript:
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def messages(self) -> Iterator[Message]:
        for record in self.records:
            if record.get("type") == "message":
                yield Message.from_json(record)


class Transcript:
    """Append-only writer for one session's transcript.jsonl."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: BinaryIO | None = None

    def _open(self) -> BinaryIO:
        if self._handle is None or self._handle.closed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "ab")  # noqa: SIM115 - kept open across appends
        return self._handle

    def append(self, record: dict[str, Any]) -> None:
        """Write one record; on failure the file is cut back so no partial line remains."""
        data = encode_record(record)
        try:
            handle = self._open()
            start = handle.tell()
        except OSError as error:
            raise StorageError(describe_os_error(error, self.path)) from error
        try:
            handle.write(data)
            handle.flush()
        except OSError as error:
            self._truncate(start)
            raise StorageError(describe_os_error(error, self.path)) from error

    def gone(self) -> bool:
        """The open file was deleted or replaced behind our back: appends would go nowhere."""
        if self._handle is None or self._handle.closed:
            return False
        try:
            on_disk = os.stat(self.path)
            mine = os.fstat(self._handle.fileno())
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return (on_disk.st_ino, on_disk.st_dev) != (mine.st_ino, mine.st_dev)

    def reopen(self) -> None:
        """Let go of the open file; the next append creates the path again."""
        if self._handle is not None and not self._handle.closed:
            try:
                self._handle.close()
            except OSError:
                pass
        self._handle = None

    def append_message(self, message: Message) -> None:
        self.append({"type": "message", **message.to_json()})

    def append_event(self, event: Event) -> None:
        self.append({"type": "event", **event.to_json()})

    def sync(self) -> None:
        """Make everything written so far durable (called at each turn end)."""
        if self._handle is None or self._handle.closed:
            return
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as error:
            raise StorageError(describe_os_error(error, self.path)) from error

    def close(self) -> None:
        if self._handle is not None and not self._handle.closed:
            try:
                self.sync()
            finally:
                self._handle.close()

    def _truncate(self, size: int) -> None:
        try:
            assert self._handle is not None
            self._handle.close()
            os.truncate(self.path, size)
        except (OSError, AssertionError):
            pass
        self._handle = None

    @staticmethod
    def load(path: Path) -> LoadedTranscript:
        loaded = LoadedTranscript()
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return loaded
        except OSError as error:
            loaded.problems.append(f"could not read {path}: {error.strerror or error}")
            return loaded
        lines = raw.split(b"\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            if number == len(lines):
                loaded.problems.append(f"line {number}: truncated (no newline), skipped")
                continue
            try:
                record = json.loads(line.decode("utf-8"))
                if not isinstance(record, dict) or "type" not in record:
                    raise ValueError("not a transcript record")
                if record["type"] == "message":
                    Message.from_json(record)  # validate now so readers can trust it
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
                loaded.problems.append(f"line {number}: corrupt record skipped ({error})")
                continue
            loaded.records.append(record)
        return loaded
