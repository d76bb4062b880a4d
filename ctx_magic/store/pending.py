"""The user's cells waiting for the next agent turn, kept on disk (across a restart).

Each cell the user runs between agent turns is appended to the session's
`pending-cells.jsonl` as soon as it finishes: one JSON line, written through to the OS (a kernel
restart kills the process, not the machine, so a line the OS has survives it). The next turn
loads them, writes them to the transcript as notebook_cell pairs whose tool_use message carries
the cell's pending id in its meta, then consumes them. A crash between those two steps cannot
bring a cell in twice: `load(absorbed=absorbed_ids(transcript records))` skips the ids the
transcript already holds.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctx_magic.errors import StorageError
from ctx_magic.store.files import atomic_write_bytes, describe_os_error, open_private_append
from ctx_magic.store.transcript import encode_record

PENDING_ID_KEY = "pending_id"
"""Meta key, on the notebook_cell tool_use message, naming the pending cell it came from."""


@dataclass(frozen=True)
class PendingCell:
    """One recorded cell: `cell` is the capture side's JSON of it (CellRecord.to_json)."""

    id: str
    cell: dict[str, Any]
    recorded_at: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "recorded_at": self.recorded_at, "cell": self.cell}


@dataclass
class LoadedPending:
    cells: list[PendingCell] = field(default_factory=list)
    """Oldest first, without those already absorbed."""
    problems: list[str] = field(default_factory=list)


class PendingCells:
    """Append-only file of one session's pending cells."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, cell: dict[str, Any], *, now: float) -> PendingCell:
        """Record one cell now (a partial line a crash left is closed first, so it stays alone)."""
        pending = PendingCell(uuid.uuid4().hex, cell, now)
        data = encode_record(pending.to_json(), default=str)  # a value JSON cannot hold: its str(), not a failure
        try:
            with open_private_append(self.path) as handle:
                if handle.tell() and not _ends_with_newline(self.path):
                    data = b"\n" + data
                handle.write(data)
                handle.flush()
        except OSError as error:
            raise StorageError(describe_os_error(error, self.path)) from error
        return pending

    def load(self, absorbed: Collection[str] = frozenset()) -> LoadedPending:
        """The cells still waiting, oldest first; unreadable lines are reported and skipped."""
        loaded = LoadedPending()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return loaded
        except OSError as error:
            loaded.problems.append(f"could not read {self.path}: {error.strerror or error}")
            return loaded
        for number, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line.decode("utf-8"))
                cell = PendingCell(str(data["id"]), dict(data["cell"]), float(data.get("recorded_at", 0.0)))
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                loaded.problems.append(f"{self.path.name} line {number}: a cell record cut off or unreadable "
                                       f"({len(line):,} bytes); that cell is left out")
                continue
            if cell.id not in absorbed:
                loaded.cells.append(cell)
        return loaded

    def consume(self, ids: Iterable[str]) -> None:
        """These cells are in the transcript now: drop them (the file goes when none is left)."""
        gone = set(ids)
        if not gone:
            return
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as error:
            raise StorageError(describe_os_error(error, self.path)) from error
        lines = [(line, _line_id(line)) for line in raw.split(b"\n") if line.strip()]
        damaged = [line for line, cell_id in lines if cell_id is None]
        kept = [line for line, cell_id in lines if cell_id is not None and cell_id not in gone]
        if damaged:  # reported when loaded; kept aside, not reported at every turn from now on
            try:
                with open_private_append(self.path.with_suffix(".damaged")) as side:
                    side.write(b"\n".join(damaged) + b"\n")
            except OSError as error:
                raise StorageError(describe_os_error(error, self.path)) from error
        if not kept:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as error:
                raise StorageError(describe_os_error(error, self.path)) from error
            return
        atomic_write_bytes(self.path, b"\n".join(kept) + b"\n")


def _line_id(line: bytes) -> str | None:
    try:
        data = json.loads(line.decode("utf-8"))
        return str(data["id"]) if isinstance(data, dict) else None
    except (ValueError, KeyError, UnicodeDecodeError):
        return None


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def absorbed_ids(records: Iterable[Mapping[str, Any]]) -> set[str]:
    """The pending ids the transcript's messages carry: those cells are in the context already."""
    ids = set()
    for record in records:
        meta = record.get("meta") if record.get("type") == "message" else None
        if isinstance(meta, Mapping) and isinstance(meta.get(PENDING_ID_KEY), str):
            ids.add(meta[PENDING_ID_KEY])
    return ids
