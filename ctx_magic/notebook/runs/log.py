"""A background run's log and the json beside it: `tasks/<id>.log` gets what the run prints as it
is produced (it survives a kernel crash, has no size limit, and is read by byte offset, so nobody
reads what they have read before); `tasks/<id>.json` keeps its state (running, stalled,
finished, failed, stopped, ended with the kernel) for `%ctx tasks`, the panel and a resumed session.
"""

from __future__ import annotations

import codecs
import dataclasses
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ctx_magic.errors import StorageError
from ctx_magic.notebook.outputs import KERNEL_RUN, printed
from ctx_magic.store.files import atomic_write_json, read_json

LIVE = ("running", "stalled")
READ_MAX_BYTES = 100_000  # one read of a log: twice the largest tool result kept inline, the rest persisted
RUN_ID = re.compile(r"^t(\d+)$")
CODE_KEPT_CHARS = 2_000  # the code in a run's json: enough to recognize it


@dataclass(frozen=True)
class RunInfo:
    """A run as its json file keeps it (a run of this kernel, or one a dead kernel left)."""

    id: str
    state: str
    detail: str = ""
    started_at: float = 0.0
    ended_at: float | None = None
    kernel: str = ""
    reported: str = "running"
    read_to: int = 0
    silent_for: float = 0.0
    code: str = ""


def write_info(path: Path, info: RunInfo) -> None:
    """A run's json, replaced whole; a full disk loses the state, never the run."""
    try:
        atomic_write_json(path, dataclasses.asdict(info))
    except (OSError, StorageError):
        pass


def stored_info(path: Path) -> RunInfo | None:
    """A run's json read back (None when it is not a run's or cannot be read)."""
    data = read_json(path, None)
    if not isinstance(data, dict) or not RUN_ID.match(str(data.get("id", ""))):
        return None
    try:
        return RunInfo(str(data["id"]), str(data.get("state", "ended")), str(data.get("detail", "")),
                       float(data.get("started_at") or 0.0),
                       float(data["ended_at"]) if data.get("ended_at") is not None else None,
                       str(data.get("kernel", "")), str(data.get("reported", "running")),
                       int(data.get("read_to") or 0), float(data.get("silent_for") or 0.0), str(data.get("code", "")))
    except (TypeError, ValueError):
        return None


def kept_info(path: Path) -> RunInfo | None:
    """A run's json read back; one another kernel left running has ended with that kernel (and is saved so)."""
    info = stored_info(path)
    if info is not None and info.state in LIVE and info.kernel != KERNEL_RUN:
        info = replace(info, state="ended", detail="")
        write_info(path, info)
    return info


def write_told(path: Path, info: RunInfo, read_to: int | None) -> None:
    """What the agent was told of a run no object of this kernel holds (one a dead kernel left)."""
    write_info(path, replace(info, reported=info.state, read_to=read_to if read_to is not None else info.read_to))


def read_log(path: Path, offset: int, limit: int = READ_MAX_BYTES) -> tuple[str, int, int]:
    """(text, end offset, log size): the log from `offset`, at most `limit` bytes, cut back to a
    whole UTF-8 character, as a terminal leaves it (carriage returns rewrite their line)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as log:
            log.seek(min(offset, size))
            data = log.read(limit)
    except OSError:
        return "", offset, 0
    start = min(offset, size)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=start + len(data) >= size)  # a character cut in two waits for the next read
    end = start + len(data) - len(decoder.getstate()[0])
    return printed([text]), end, size


def log_tail(path: Path | None, size: int = 2_000) -> str:
    """The end of a log (a run another kernel left has no tail in memory)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, path.stat().st_size - size))
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""
