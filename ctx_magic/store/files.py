"""Atomic file writes (a temp file in the same folder, fsynced, then renamed), and the private
modes every file and folder of the storage folder is created with."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from ctx_magic.errors import StorageError

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
HASH_NAME_CHARS = 12  # of a sha256, in the name a replaced file is kept under: unique within one session
# A session holds what was typed and printed (a token typed in a cell, a password a run printed): its
# owner's alone, on a shared server too, whatever the umask says.
PRIVATE_FILE_MODE = 0o600
PRIVATE_FOLDER_MODE = 0o700
IGNORE_FILE = ".gitignore"
IGNORE_EVERYTHING = "# ctx_magic's sessions and memories: never committed\n*\n"  # `git add -A` beside the notebook


def safe_name(name: str) -> str:
    """`name` as one file name: every character but letters, digits and `_.-` becomes `_`."""
    return _UNSAFE.sub("_", name)[:120] or "_"


def describe_os_error(error: OSError, path: Path | str) -> str:
    if error.errno == errno.ENOSPC:
        return f"the disk is full: could not write {path}"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied writing {path}"
    return f"could not write {path}: {error.strerror or error}"


def make_private_folder(folder: Path) -> None:
    """Create `folder` and its missing parents, each 0700 whatever the umask; folders that exist
    are left as they are (the user's own, or a team's)."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for each in reversed(missing):
        try:
            each.mkdir(mode=PRIVATE_FOLDER_MODE)
        except FileExistsError:  # made meanwhile by another kernel (or a file there: the next step says so)
            continue
        with contextlib.suppress(OSError):  # the umask may take even the owner's bits; some shares refuse
            os.chmod(each, PRIVATE_FOLDER_MODE)


def make_storage_folder(storage: Path) -> None:
    """The storage folder beside the notebook, created private with a .gitignore that keeps all of
    it out of git. A folder that exists is left alone: a storage_dir the user named may be theirs."""
    if storage.is_dir():
        return
    make_private_folder(storage)
    with contextlib.suppress(StorageError):  # the sessions matter more than the ignore file
        atomic_write_text(storage / IGNORE_FILE, IGNORE_EVERYTHING)


def open_private_append(path: Path) -> BinaryIO:
    """`path` opened to append, 0600 whatever the umask (one an older version made 0644 too), its
    missing folders made private."""
    make_private_folder(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE)
    with contextlib.suppress(OSError):  # some shares (SMB) refuse or ignore permission bits
        os.fchmod(fd, PRIVATE_FILE_MODE)
    return os.fdopen(fd, "ab")


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace `path` with `data` so that a reader sees the old file or the new one, never half.
    The file is private (0600, its new folders 0700); `mode` replaces that for a folder other
    people read (a team's), whose new folders then follow the umask too."""
    try:  # a folder this user may not write (a team's, of a group they are not in) is one clear error too
        if mode is None:
            make_private_folder(path.parent)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise StorageError(describe_os_error(error, path)) from error
    try:
        with os.fdopen(fd, "wb") as handle:
            with contextlib.suppress(OSError):  # some shares (SMB) refuse or ignore permission bits
                os.fchmod(handle.fileno(), PRIVATE_FILE_MODE if mode is None else mode)
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


def hashed_path(path: Path, sha256: str) -> Path:
    """Where a file whose content has this sha256 is kept once another content took its name."""
    return path.with_name(f"{path.stem}.{sha256[:HASH_NAME_CHARS]}{path.suffix}")


def write_once(path: Path, data: bytes) -> Path:
    """Write `data` at `path`; a no-op when the file already holds exactly these bytes (a large
    output is stored once however many times it is written). A file there with other bytes is
    never lost: it is first moved to `hashed_path` (its own sha256), where a reader that knows
    the hash finds it."""
    try:
        old: bytes | None = path.read_bytes()
    except FileNotFoundError:
        old = None
    except OSError as error:
        raise StorageError(describe_os_error(error, path)) from error
    if old == data:
        return path
    if old is not None:
        try:
            os.replace(path, hashed_path(path, hashlib.sha256(old).hexdigest()))
        except OSError as error:
            raise StorageError(describe_os_error(error, path)) from error
    atomic_write_bytes(path, data)
    return path


def atomic_write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(path: Path, data: Any, *, mode: int | None = None) -> None:
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=1) + "\n", mode=mode)


def read_json(path: Path, default: Any = None) -> Any:
    """The JSON in `path`, or `default` when the file is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def snapshot_folder(folder: Path, *, skip: Callable[[str], bool] = lambda name: False) -> dict[str, bytes]:
    """Every file of `folder` (not its subfolders, nor those `skip` names), by name."""
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not skip(p.name)}
