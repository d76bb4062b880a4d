"""A memory folder that several processes, people and machines write to (the team's, or a
project folder on a network drive): what its filesystem's locks can be trusted for, and the
short lock its index is rebuilt under.

An OS lock (`filelock`, flock underneath) dies with its process, so a crashed holder never
blocks anyone. It holds across machines only where the filesystem sends locks to the server:
a local disk, NFS with its lock manager, SMB with byte-range locks. NFS mounted `nolock` or
`local_lock=flock|all`, SMB mounted `nobrl`, and FUSE or virtual-machine shares (sshfs, rclone,
s3fs, 9p, virtiofs, ...) keep locks inside each machine; there a lock *file* created with
O_EXCL (atomic on NFSv3+ and SMB) is the only lock that every machine sees.

Anyone who can write the folder can put anything in it: a FIFO (whose `open()` waits for a writer
for ever), a link to `/dev/zero` or to another member's private file, a file of gigabytes. So a
file there is read only when it is a regular file of its own (no link, one name), no larger than a
memory file can be (`read_regular_file`).
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

MOUNTS = Path("/proc/mounts")
SHARED_FILE_MODE = 0o664  # every member of the folder's group reads and replaces a memory
LOCK_FILE_MODE = 0o666  # a lock file another member must open for writing to take the lock
INDEX_LOCK_NAME = ".index.lock"
INDEX_LOCK_SECONDS = 10.0  # a rebuild takes milliseconds; past this the holder is stuck, rebuild anyway
# A memory file is a sentence or two under a front matter, well under a kilobyte (extraction keeps
# 600 characters at most); 64 KiB leaves room for any hand-written one while a file read per
# member per turn stays cheap, where a planted 200 MB file cost 7 s and 1 GB each turn.
MAX_FILE_BYTES = 64 * 1024
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_NOCTTY", 0))  # never wait on a FIFO, never follow a link swapped in meanwhile

LockTrust = Literal["shared", "local-only", "unknown"]
"""shared: an OS lock here is seen by every process that reaches the folder; local-only: only by
processes on the same machine; unknown: no mount table to tell (macOS, Windows)."""

_LOCAL_ONLY_TYPES = ("9p", "virtiofs", "vboxsf", "davfs", "fuse")  # fuse.sshfs, fuse.rclone, ...
_OCTAL = re.compile(r"\\([0-7]{3})")
_OBJECT_STORES = ("s3fs", "gcsfuse", "goofys", "mountpoint-s3", "rclone", "blobfuse")


@dataclass(frozen=True)
class LockSupport:
    """What the filesystem of a folder gives: how far its OS locks reach, and why not further."""

    trust: LockTrust
    fs_type: str = ""
    caveat: str = ""
    """One line for the user where the locks do not hold across machines (empty otherwise)."""

    @property
    def os_locks(self) -> bool:
        """Whether taking an OS lock here is worth it (it is not where it stays on this machine)."""
        return self.trust != "local-only"


def _unescape(field: str) -> str:
    """/proc/mounts writes a space in a path as \\040 (octal escapes)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: Path, mounts_text: str) -> tuple[str, str, str]:
    """(mount point, fs type, options) of the mount `path` is on, from a /proc/mounts text;
    ("", "", "") when none matches. The longest mount point wins, and the later of equals (an
    over-mount hides the one beneath)."""
    target = str(path)
    best = ("", "", "")
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = _unescape(fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, fields[2], fields[3])
    return best


def judge(fs_type: str, options: str) -> LockSupport:
    """How far OS locks reach on a filesystem of this type mounted with these options (pure)."""
    opts = set(options.split(","))
    kind = fs_type.lower()
    if kind.startswith("nfs"):
        local = "nolock" in opts or "local_lock=flock" in opts or "local_lock=all" in opts
        if local:
            flag = next(o for o in ("nolock", "local_lock=flock", "local_lock=all") if o in opts)
            return LockSupport("local-only", fs_type, f"the folder is on NFS mounted with {flag}: its locks stay on "
                                                      "each machine")
        return LockSupport("shared", fs_type)
    if kind in ("cifs", "smb3", "smbfs"):
        if "nobrl" in opts:
            return LockSupport("local-only", fs_type, "the folder is on SMB mounted with nobrl: its locks stay on "
                                                      "each machine")
        return LockSupport("shared", fs_type)
    if any(store in kind for store in _OBJECT_STORES):
        return LockSupport("local-only", fs_type, f"the folder is on {fs_type}, an object store: it has no locks "
                                                  "and its renames are not atomic, so two members writing at once "
                                                  "can lose a memory; use a shared disk, NFS or SMB")
    if kind.split(".")[0] in _LOCAL_ONLY_TYPES:
        return LockSupport("local-only", fs_type, f"the folder is on {fs_type}: its locks stay on each machine")
    return LockSupport("shared", fs_type)


@functools.lru_cache(maxsize=32)
def _support_of(resolved: str) -> LockSupport:
    try:
        mounts = MOUNTS.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return LockSupport("unknown")
    _, fs_type, options = mount_of(Path(resolved), mounts)
    return judge(fs_type, options) if fs_type else LockSupport("unknown")


def lock_support(folder: Path) -> LockSupport:
    """What the filesystem of `folder` gives (read once per folder and process)."""
    return _support_of(os.path.realpath(folder))


@contextmanager
def index_lock(folder: Path, support: LockSupport) -> Iterator[bool]:
    """Held while the index is rebuilt, so the last rebuild saw every file written before it.
    Yields whether the lock is held: where the filesystem gives none, or the holder is stuck,
    the rebuild goes ahead unlocked (the index is a view of the files, which every reader uses)."""
    if not support.os_locks:
        yield False
        return
    import filelock

    lock = filelock.FileLock(str(folder / INDEX_LOCK_NAME), timeout=INDEX_LOCK_SECONDS, mode=LOCK_FILE_MODE)
    try:
        lock.acquire()
    except (filelock.Timeout, OSError):
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


class RefusedFile(OSError):
    """A file of a memory folder that is not read: not a regular file of its own, or too large. Its
    message names what the file is, never what it holds."""


_KINDS = ((stat.S_ISLNK, "a symbolic link (memory files are never links; not followed)"),
          (stat.S_ISFIFO, "a FIFO (named pipe), not a regular file"),
          (stat.S_ISCHR, "a character device, not a regular file"),
          (stat.S_ISBLK, "a block device, not a regular file"),
          (stat.S_ISSOCK, "a socket, not a regular file"),
          (stat.S_ISDIR, "a folder, not a file"))


def file_kind(mode: int) -> str | None:
    """What a directory entry is when it is not a regular file ("a FIFO, ..."); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for is_kind, kind in _KINDS if is_kind(mode)), "not a regular file")


@dataclass(frozen=True)
class RegularFile:
    """A file's bytes and its owner as the filesystem says (the owner is the one fact about who
    wrote a file that no writer can forge)."""

    data: bytes
    owner_uid: int


def read_regular_file(path: Path, limit: int = MAX_FILE_BYTES) -> RegularFile:
    """The bytes of `path` when it is a regular file with one name and at most `limit` bytes;
    RefusedFile otherwise, without opening anything but a regular file and without waiting.

    Checked before opening (lstat: a link, a FIFO or a device is never opened; the size), opened
    without following a link and without blocking (in case it was swapped meanwhile), and checked
    again on the open file (fstat: still the same regular file); at most `limit` + 1 bytes are read.
    OSError (a missing file, no permission) passes through as it is.
    """
    before = os.lstat(path)
    kind = file_kind(before.st_mode)
    if kind is not None:
        raise RefusedFile(kind)
    if before.st_nlink > 1:  # a hard link to someone's private file reads as theirs
        raise RefusedFile("a hard link (a memory file has one name); not read")
    if before.st_size > limit:
        raise RefusedFile(f"{before.st_size:,} bytes, over the {limit:,} a memory file may hold; not read")
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as error:
        if os.path.islink(path):
            raise RefusedFile(_KINDS[0][1]) from None
        raise error
    try:
        after = os.fstat(fd)
        if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise RefusedFile("replaced by something else while being opened; not read")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise RefusedFile(f"grew past the {limit:,} bytes a memory file may hold while being read; not read")
        return RegularFile(b"".join(chunks), after.st_uid)
    finally:
        os.close(fd)
