"""The file tools: read_file, list_files, grep, confined to the session's root folder.

Paths outside the root, and symlinks that lead out of it, are refused with a clear tool
error. read_file remembers what it read: re-reading an unchanged file returns a short stub
while the earlier result is still in context, and the most recent reads are re-read fresh
after a compaction (rehydration).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import stat as stat_mode
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctx_magic.agent.tools import Tool, ToolCall, ToolContext, ToolError, ToolOutput
from ctx_magic.messages import decode_output

READ_DEFAULT_LINES = 2_000
READ_MAX_LINE_CHARS = 2_000
LIST_MAX_ENTRIES = 500
GREP_MAX_MATCHES = 200
GREP_MAX_FILE_BYTES = 5_000_000
SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".ipynb_checkpoints", ".venv", "venv"})

UNCHANGED_STUB = (
    "File unchanged since it was last read with the same offset and limit; its content is in "
    "the earlier read_file result ({tool_use_id}), still in context."
)


@dataclass(frozen=True)
class FileRead:
    path: str  # as resolved, absolute
    mtime_ns: int
    size: int
    offset: int
    limit: int
    tool_use_id: str


@dataclass
class FileTools:
    """read_file / list_files / grep over `root` (plus read-only `extra_roots`)."""

    root: Path
    extra_roots: Sequence[Path] = ()
    reads: dict[str, FileRead] = field(default_factory=dict)
    """Most recent read of each file, insertion-ordered oldest first."""

    def _roots(self) -> list[Path]:
        return [self.root.resolve(), *(r.resolve() for r in self.extra_roots)]

    def resolve(self, raw: str | None, *, must_exist: bool = True) -> Path:
        """The absolute path for `raw`, refused when it (or a symlink in it) leaves the roots."""
        text = (raw or ".").strip() or "."
        candidate = Path(text).expanduser()
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError, ValueError) as error:  # symlink loop, NUL byte
            raise ToolError(f"{text} cannot be resolved: {error}") from error
        if not any(resolved.is_relative_to(r) for r in self._roots()):
            raise ToolError(
                f"{text} is outside the session folder ({self.root}); only files under it can be read."
            )
        if must_exist and not resolved.exists():
            raise ToolError(f"{text} does not exist.")
        return resolved

    def read_file(self, path: str, offset: int | None = None, limit: int | None = None, *,
                  tool_use_id: str = "", is_live: Callable[[str], bool] = lambda _id: False) -> str:
        target = self.resolve(path)
        if target.is_dir():
            raise ToolError(f"{path} is a folder; use list_files to see what it holds.")
        if not target.is_file():  # a FIFO or device would block or never end
            raise ToolError(f"{path} is not a regular file; read_file reads files.")
        start = max(1, int(offset or 1))
        count = max(1, int(limit or READ_DEFAULT_LINES))
        stat = target.stat()
        key = str(target)
        previous = self.reads.get(key)
        if (previous and previous.mtime_ns == stat.st_mtime_ns and previous.size == stat.st_size
                and (previous.offset, previous.limit) == (start, count)
                and previous.tool_use_id and is_live(previous.tool_use_id)):
            self.reads[key] = self.reads.pop(key)  # still the most recent read (rehydration order)
            return UNCHANGED_STUB.format(tool_use_id=previous.tool_use_id)
        text = self._numbered(target, start, count)
        self.reads.pop(key, None)
        self.reads[key] = FileRead(key, stat.st_mtime_ns, stat.st_size, start, count, tool_use_id)
        return text

    @staticmethod
    def _numbered(target: Path, start: int, count: int) -> str:
        try:
            data = target.read_bytes()
        except OSError as error:
            raise ToolError(f"could not read {target}: {error.strerror or error}") from error
        lines = decode_output(data).splitlines()
        if not lines:
            return "(empty file)"
        if start > len(lines):
            raise ToolError(f"offset {start} is past the end of the file ({len(lines)} lines).")
        chosen = lines[start - 1 : start - 1 + count]
        width = len(str(start + len(chosen)))
        out = [f"{n:>{width}}\t{line[:READ_MAX_LINE_CHARS]}" for n, line in enumerate(chosen, start)]
        end = start + len(chosen) - 1
        if end < len(lines):
            out.append(f"[lines {start}-{end} of {len(lines)}; read on with offset={end + 1}]")
        return "\n".join(out)

    def _walk(self, base: Path) -> Iterator[Path]:
        roots = self._roots()
        for folder, dirs, files in os.walk(base, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in sorted(files):
                path = Path(folder) / name
                try:
                    real = path.resolve()
                except (OSError, RuntimeError):  # a symlink loop: nothing to list or search
                    continue
                if any(real.is_relative_to(r) for r in roots):
                    yield path

    def list_files(self, path: str | None = None, pattern: str | None = None) -> str:
        base = self.resolve(path)
        if base.is_file():
            root = self.root.resolve()
            return str(base.relative_to(root)) if base.is_relative_to(root) else str(base)
        entries = []
        for file in self._walk(base):
            rel = file.relative_to(base).as_posix()
            if pattern and not (fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(file.name, pattern)):
                continue
            entries.append(rel)
            if len(entries) > LIST_MAX_ENTRIES:
                break
        if not entries:
            return "(no files match)"
        more = len(entries) > LIST_MAX_ENTRIES
        listing = "\n".join(entries[:LIST_MAX_ENTRIES])
        return listing + (f"\n[more than {LIST_MAX_ENTRIES} files; narrow the pattern]" if more else "")

    def grep(self, pattern: str, path: str | None = None) -> str:
        try:
            regex = re.compile(pattern)
        except re.error as error:
            raise ToolError(f"bad regular expression {pattern!r}: {error}") from error
        base = self.resolve(path)
        files = [base] if base.is_file() else list(self._walk(base))
        matches = []
        for file in files:
            try:
                info = file.stat()
                if not stat_mode.S_ISREG(info.st_mode) or info.st_size > GREP_MAX_FILE_BYTES:
                    continue  # a FIFO would block; a huge file is not worth it
                data = file.read_bytes()
            except OSError:
                continue
            if b"\0" in data[:4096]:
                continue  # binary
            shown = file.relative_to(base).as_posix() if file != base else file.name
            for number, line in enumerate(decode_output(data).splitlines(), 1):
                if regex.search(line):
                    matches.append(f"{shown}:{number}: {line[:300]}")
                    if len(matches) >= GREP_MAX_MATCHES:
                        return "\n".join(matches) + f"\n[stopped at {GREP_MAX_MATCHES} matches]"
        return "\n".join(matches) if matches else "(no matches)"

    def recent_reads(self, count: int) -> list[FileRead]:
        return list(self.reads.values())[-count:][::-1]

    def saved_reads(self) -> list[dict[str, Any]]:
        """The reads as state.json keeps them."""
        return [dataclasses.asdict(r) for r in self.reads.values()]

    def restore_reads(self, saved: Sequence[Mapping[str, Any]]) -> None:
        """The reads state.json kept, after those made since (none, at resume)."""
        self.reads.update({r.path: r for r in (FileRead(**read) for read in saved)})

    def invalidate_stubs(self) -> None:
        """Post-compact cleanup: no stub may point at a result the summary replaced.

        The reads themselves stay, most recent last, so the next compaction can still
        rehydrate the files the work is about.
        """
        self.reads = {k: dataclasses.replace(r, tool_use_id="") for k, r in self.reads.items()}


READ_FILE_SPEC = {
    "name": "read_file",
    "description": (
        "Read a text file under the session folder, with line numbers. Use offset (first line, "
        "1-based) and limit (number of lines) to read part of a long file, e.g. a persisted output."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
    },
}
LIST_FILES_SPEC = {
    "name": "list_files",
    "description": "List files under a folder of the session (recursively), optionally matching a glob pattern.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}},
    },
}
GREP_SPEC = {
    "name": "grep",
    "description": "Search files under the session folder for a regular expression; prints path:line: text.",
    "input_schema": {
        "type": "object",
        "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
        "required": ["pattern"],
    },
}


def file_tools(files: FileTools) -> list[Tool]:
    """read_file, list_files and grep over `files`; their results can be read again, so cleared."""

    def read_file(call: ToolCall, context: ToolContext) -> ToolOutput:
        args = call.input
        return ToolOutput(files.read_file(str(args.get("path", "")), args.get("offset"), args.get("limit"),
                                          tool_use_id=call.id, is_live=context.is_live_result))

    def list_files(call: ToolCall, _context: ToolContext) -> ToolOutput:
        return ToolOutput(files.list_files(call.input.get("path"), call.input.get("pattern")))

    def grep(call: ToolCall, _context: ToolContext) -> ToolOutput:
        return ToolOutput(files.grep(str(call.input.get("pattern", "")), call.input.get("path")))

    return [Tool(READ_FILE_SPEC, read_file), Tool(LIST_FILES_SPEC, list_files), Tool(GREP_SPEC, grep)]
