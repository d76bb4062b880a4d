"""The session transcript: every message before any layer changes it, and every
durable event, one JSON object a line. Lines are written through to the OS as they come and
fsynced at each turn end; a corrupt or truncated line is reported on load and skipped.

A kernel killed mid-write leaves a last line without its newline. Before the next append the
writer repairs it: a whole record only lacking its newline gets it; a cut-off one is moved to
`transcript.damaged` (recoverable bytes) and a `repair` record says so, which every later load
reports in one line. Without that, the next record would be glued onto the broken one and both
lost. Large tool outputs are kept once, in their tool-results file (external.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ctx_magic.errors import StorageError
from ctx_magic.events import Event
from ctx_magic.messages import Message
from ctx_magic.store.external import externalize, inflate
from ctx_magic.store.files import describe_os_error, open_private_append

DAMAGED_SUFFIX = ".damaged"  # transcript.jsonl -> transcript.damaged: the bytes a crash cut off
TAIL_CHUNK = 1 << 16  # read backwards this much at a time to find where the last line starts


def encode_record(record: dict[str, Any], default: Callable[[Any], Any] | None = None) -> bytes:
    """One JSON line; `default` makes a value JSON cannot hold into one it can (as json.dumps's)."""
    try:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=default)
        return (line + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8; \u escapes round-trip them exactly through json.
        return (json.dumps(record, ensure_ascii=True, separators=(",", ":"), default=default) + "\n").encode("ascii")


@dataclass
class LoadedTranscript:
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def messages(self) -> Iterator[Message]:
        for record in self.records:
            if record.get("type") == "message":
                yield Message.from_json(record)


def repair_line(record: dict[str, Any]) -> str:
    """One line for a load report: what a crash cut off and where its bytes are kept."""
    return (f"A record cut off by a crash ({int(record.get('dropped_bytes', 0)):,} bytes) was set aside in "
            f"{record.get('saved_to', 'transcript.damaged')} (from byte {int(record.get('saved_at_byte', 0)):,}); "
            "every whole record is kept.")


def _is_record(line: bytes) -> bool:
    try:
        record = json.loads(line.decode("utf-8"))
        if isinstance(record, dict) and record.get("type") == "message":
            Message.from_json(record)
        return isinstance(record, dict) and "type" in record
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return False


def _last_line_start(handle: BinaryIO, size: int) -> int:
    """Offset just after the last newline before `size` (0 when there is none)."""
    end = size
    while end > 0:
        start = max(0, end - TAIL_CHUNK)
        handle.seek(start)
        found = handle.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


class Transcript:
    """Append-only writer for one session's transcript.jsonl.

    `output_path` names the file of a tool_use_id's output (the session's tool-results): when
    given, outputs over EXTERNAL_MIN_CHARS are stored there once and referenced from the line.
    """

    def __init__(self, path: Path, output_path: Callable[[str], Path] | None = None) -> None:
        self.path = path
        self.output_path = output_path
        self._handle: BinaryIO | None = None
        self.repairs: list[str] = []
        """One line for each cut-off record this writer set aside (for a notice)."""

    @property
    def damaged_path(self) -> Path:
        return self.path.with_suffix(DAMAGED_SUFFIX)

    def _open(self) -> BinaryIO:
        if self._handle is None or self._handle.closed:
            repair = self._repair_tail()
            self._handle = open_private_append(self.path)  # kept open across appends
            if repair is not None:
                self._handle.write(encode_record(repair))
                self._handle.flush()
                self.repairs.append(repair_line(repair))
        return self._handle

    def _repair_tail(self) -> dict[str, Any] | None:
        """Make the file end with a whole line before anything is appended to it; returns the
        repair record to write when cut-off bytes were set aside."""
        try:
            with open(self.path, "r+b") as handle:
                size = handle.seek(0, os.SEEK_END)
                if size == 0:
                    return None
                handle.seek(size - 1)
                if handle.read(1) == b"\n":
                    return None
                start = _last_line_start(handle, size)
                handle.seek(start)
                tail = handle.read()
                if _is_record(tail):  # whole, only its newline was lost: nothing to set aside
                    handle.seek(size)
                    handle.write(b"\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                    return None
                with open_private_append(self.damaged_path) as side:
                    saved_at = side.seek(0, os.SEEK_END)
                    side.write(tail + b"\n")
                    side.flush()
                    os.fsync(side.fileno())
                handle.truncate(start)
                handle.flush()
                os.fsync(handle.fileno())
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StorageError(describe_os_error(error, self.path)) from error
        return {"type": "repair", "at_byte": start, "dropped_bytes": len(tail),
                "saved_to": self.damaged_path.name, "saved_at_byte": saved_at}

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
        record = {"type": "message", **message.to_json()}
        if self.output_path is not None:
            record = externalize(record, self.path.parent, self.output_path)
        self.append(record)

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
            if number == len(lines) and not _is_record(line):
                loaded.problems.append(
                    f"line {number}: the last record is truncated ({len(line):,} bytes without a newline: a "
                    f"crash mid-write?); skipped, and set aside in {path.with_suffix(DAMAGED_SUFFIX).name} at "
                    "the next write")
                continue
            try:
                record = json.loads(line.decode("utf-8"))
                if not isinstance(record, dict) or "type" not in record:
                    raise ValueError("not a transcript record")
                if record["type"] == "message":
                    record, missing = inflate(record, path.parent)
                    loaded.problems.extend(f"line {number}: {problem}" for problem in missing)
                    Message.from_json(record)  # validate now so readers can trust it
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
                loaded.problems.append(f"line {number}: corrupt record skipped ({error})")
                continue
            if record["type"] == "repair":
                loaded.problems.append(repair_line(record))
            loaded.records.append(record)
        return loaded
