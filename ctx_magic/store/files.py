"""Atomic file writes (SPEC M3): a temp file in the same folder, fsynced, then renamed."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ctx_magic.errors import StorageError


def describe_os_error(error: OSError, path: Path | str) -> str:
    if error.errno == errno.ENOSPC:
        return f"the disk is full: could not write {path}"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied writing {path}"
    return f"could not write {path}: {error.strerror or error}"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        _remove_quietly(tmp)
        raise StorageError(describe_os_error(error, path)) from error
    except BaseException:
        _remove_quietly(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=1) + "\n")


def read_json(path: Path, default: Any = None) -> Any:
    """The JSON in `path`, or `default` when the file is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def snapshot_folder(folder: Path, *, skip: Callable[[str], bool] = lambda name: False) -> dict[str, bytes]:
    """Every file of `folder` (not its subfolders, nor those `skip` names), by name."""
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not skip(p.name)}


def restore_folder(folder: Path, snapshot: Mapping[str, bytes], *,
                   skip: Callable[[str], bool] = lambda name: False) -> None:
    """Put `folder` back as the snapshot saw it: new files removed, changed ones rewritten."""
    for path in list(folder.iterdir()) if folder.is_dir() else []:
        if path.is_file() and not skip(path.name) and path.name not in snapshot:
            path.unlink(missing_ok=True)
    for name, data in snapshot.items():
        path = folder / name
        if not path.is_file() or path.read_bytes() != data:
            atomic_write_bytes(path, data)
