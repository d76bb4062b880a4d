"""Large tool outputs stored once, beside the transcript.

A tool_result whose text is over `EXTERNAL_MIN_CHARS` is written to its file in the session's
`tool-results/` (the very file the tool-result budget persists the same output to, so that write becomes a no-op)
and the transcript line keeps a reference: the file's path relative to the session folder, the
number of characters and the sha256 of its UTF-8 bytes. Loading inflates every reference back,
so readers see the message exactly as it was written; a file that is missing or changed is
reported in one line and the message keeps a note saying where its output was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctx_magic.store.files import hashed_path, write_once

# The tool-result budget's per-result limit (Claude Code's): an output this large gets a persisted file anyway, so
# keeping it there instead of in the transcript line costs nothing and halves the disk it takes.
EXTERNAL_MIN_CHARS = 50_000
STORED_KEY = "_stored"  # bookkeeping keys start with "_": request building never sends them


def stored_note(path: str, chars: int) -> str:
    """What the transcript line says in place of an output kept in a file."""
    return f"[{chars:,} characters of output stored in {path}]"


def missing_note(path: str, chars: int) -> str:
    """What a message holds when its stored output cannot be read back."""
    return (f"[{chars:,} characters of output were stored in {path}, which is missing or changed; "
            "the transcript cannot give them back]")


def _text_part(block: dict[str, Any]) -> tuple[str, int | None] | None:
    """(text, index in a content list or None for string content) of a tool_result with exactly
    one text part: the shape whose text is the same bytes the budget writes to the persisted file."""
    content = block.get("content")
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        return None
    texts = [i for i, b in enumerate(content) if isinstance(b, dict) and b.get("type") == "text"]
    if len(texts) != 1:
        return None
    return str(content[texts[0]].get("text", "")), texts[0]


def externalize(record: dict[str, Any], root: Path, path_for: Callable[[str], Path],
                min_chars: int = EXTERNAL_MIN_CHARS) -> dict[str, Any]:
    """The message record with each large tool_result text written to `path_for(tool_use_id)`
    and replaced by a reference. Raises StorageError when a file cannot be written."""
    content = record.get("content")
    if not isinstance(content, list):
        return record
    blocks = []
    for block in content:
        blocks.append(_externalize_block(block, root, path_for, min_chars) if isinstance(block, dict)
                      and block.get("type") == "tool_result" else block)
    return {**record, "content": blocks}


def _externalize_block(block: dict[str, Any], root: Path, path_for: Callable[[str], Path],
                       min_chars: int) -> dict[str, Any]:
    part = _text_part(block)
    if part is None or len(part[0]) <= min_chars:
        return block
    text, index = part
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: the JSON line keeps them exactly, a file could not
        return block
    sha = hashlib.sha256(data).hexdigest()
    path = write_once(path_for(str(block.get("tool_use_id", ""))), data)
    ref = {"path": path.relative_to(root).as_posix(), "chars": len(text), "sha256": sha}
    note = stored_note(ref["path"], len(text))
    if index is None:
        return {**block, "content": note, STORED_KEY: ref}
    parts = list(block["content"])
    parts[index] = {**parts[index], "text": note, STORED_KEY: ref}
    return {**block, "content": parts}


def inflate(record: dict[str, Any], root: Path) -> tuple[dict[str, Any], list[str]]:
    """The message record with every reference replaced by the text it points to, and a line for
    each output that could not be read back (the message then keeps `missing_note`)."""
    content = record.get("content")
    if not isinstance(content, list) or not any(_has_ref(b) for b in content):
        return record, []
    problems: list[str] = []
    blocks = [_inflate_block(b, root, problems) if _has_ref(b) else b for b in content]
    return {**record, "content": blocks}, problems


def _has_ref(block: Any) -> bool:
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return False
    inner = block.get("content")
    return STORED_KEY in block or (isinstance(inner, list) and any(isinstance(b, dict) and STORED_KEY in b
                                                                   for b in inner))


def _inflate_block(block: dict[str, Any], root: Path, problems: list[str]) -> dict[str, Any]:
    tool_use_id = block.get("tool_use_id")
    if STORED_KEY in block:
        out = {k: v for k, v in block.items() if k != STORED_KEY}
        out["content"] = _read_back(block[STORED_KEY], root, tool_use_id, problems)
        return out
    parts = []
    for part in block["content"]:
        if isinstance(part, dict) and STORED_KEY in part:
            text = _read_back(part[STORED_KEY], root, tool_use_id, problems)
            part = {**{k: v for k, v in part.items() if k != STORED_KEY}, "text": text}
        parts.append(part)
    return {**block, "content": parts}


def _read_back(ref: Any, root: Path, tool_use_id: Any, problems: list[str]) -> str:
    """The stored text, checked against its sha256 (then at its hash name, where a later write
    of the same name moved it); the missing note when neither holds it."""
    if not isinstance(ref, dict) or not isinstance(ref.get("path"), str):
        problems.append(f"the output of {tool_use_id} has an unreadable storage reference; a note stands in")
        return missing_note("tool-results", 0)
    relative, chars, sha = ref["path"], int(ref.get("chars") or 0), str(ref.get("sha256", ""))
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):  # a reference never reads outside its session
        problems.append(f"the output of {tool_use_id} points outside the session folder ({relative}); ignored")
        return missing_note(relative, chars)
    for candidate in (path, hashed_path(path, sha)):
        try:
            data = candidate.read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() == sha:
            return data.decode("utf-8")
    problems.append(f"the output of {tool_use_id} ({chars:,} characters) should be in {relative}, but that file "
                    "is missing or was changed; the agent sees a note in its place")
    return missing_note(relative, chars)
