"""Recovery after a summary: the session's own transcript and saved outputs, searched.

A summary is lossy by design; the transcript is not (every message as first written), and
outputs too large for the conversation are saved beside it. The `search_transcript` tool reads
them: a text (case-insensitive) or a regex, optionally within one turn or one notebook cell;
each match comes with its turn and a ref (newest first), and a ref reads that message whole, page by page.

Turns are counted the way the user sees them: each message the user wrote starts the next one;
cells run before the first message are turn 0. Pure: records and file texts in, text out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.context.audit import REF_CHARS, SEARCH_TOOL
from ctx_magic.context.span_facts import is_user_prompt
from ctx_magic.messages import Message, cell_of, notebook_cell_code, result_text

MAX_HITS = 20  # matches listed at once: enough to choose from, small beside the context
READ_CHARS = 8_000  # one page of a message read by its ref (about 2,000 tokens)
LINE_CHARS = 200  # the part of a matching line shown
SKIPPED_KINDS = frozenset({"boundary", "meta"})


@dataclass(frozen=True)
class Entry:
    """One searchable message (or saved file)."""

    ref: str
    turn: int
    who: str
    text: str
    cell: int | None = None
    saved_at: str | None = None


def _render_use(block: Mapping[str, Any]) -> str:
    tool_input = block.get("input") or {}
    if block.get("name") == "notebook_cell":
        return f"[notebook cell {tool_input.get('execution_count')}]\n{notebook_cell_code(tool_input)}"
    code = tool_input.get("code") if isinstance(tool_input, dict) else None
    body = code if isinstance(code, str) else str(tool_input)
    return f"[{block.get('name')} call]\n{body}"


def entries(records: Iterable[Mapping[str, Any]], saved: Mapping[str, str] | None = None) -> list[Entry]:
    """The transcript's messages as entries in order, then the saved files not already in it."""
    out: list[Entry] = []
    names: dict[str, str] = {}  # tool_use_id -> tool name
    saved_at: dict[str, str] = {}  # tool_use_id -> the file a persisted result went to
    turn = 0
    messages: list[Message] = []
    for record in records:
        if record.get("type") == "event" and record.get("event") == "persisted":
            saved_at[str(record.get("tool_use_id"))] = str(record.get("path"))
        elif record.get("type") == "message":
            try:
                messages.append(Message.from_json(record))
            except (KeyError, TypeError, ValueError):
                continue
    for message in messages:
        if message.kind in SKIPPED_KINDS or (message.kind == "attachment" and "pins" not in message.meta):
            continue
        turn += is_user_prompt(message)
        parts: list[str] = []
        cell: int | None = None
        where: str | None = None
        for block in message.content:
            kind = block.get("type")
            if kind == "text":
                parts.append(block.get("text", ""))
            elif kind == "tool_use":
                names[block["id"]] = str(block.get("name"))
                if block.get("name") == SEARCH_TOOL:
                    continue  # earlier searches would match every later one
                if block.get("name") == "notebook_cell":
                    cell = (block.get("input") or {}).get("execution_count") or cell
                parts.append(_render_use(block))
            elif kind == "tool_result":
                tool_use_id = block.get("tool_use_id", "")
                if names.get(tool_use_id) == SEARCH_TOOL:
                    continue
                cell = cell_of(tool_use_id) or cell
                where = saved_at.get(tool_use_id, where)
                parts.append(f"[result of {names.get(tool_use_id, 'a tool')}]\n{result_text(block)}")
        text = "\n".join(p for p in parts if p)
        if not text.strip():
            continue
        who = "summary" if message.kind == "summary" else (
            "pin" if message.kind == "attachment" else (
                "user" if is_user_prompt(message) else ("tool results" if message.role == "user" else "assistant")))
        out.append(Entry(message.uuid[:REF_CHARS], turn, who, text, cell, where))
    for path, text in (saved or {}).items():
        out.append(Entry(f"file:{path.rsplit('/', 1)[-1]}", turn, "saved file", text, None, path))
    return out


def unrecorded_files(records: Iterable[Mapping[str, Any]], file_names: Sequence[str]) -> list[str]:
    """Saved files whose text the transcript does not hold (an oversized message of the user's):
    a persisted tool result is already in the transcript, as first written."""
    persisted = {str(r.get("path", "")).rsplit("/", 1)[-1] for r in records
                 if r.get("type") == "event" and r.get("event") == "persisted"}
    return [name for name in file_names if name not in persisted]


def _pattern(query: str, regex: bool) -> re.Pattern[str]:
    if not regex:
        return re.compile(re.escape(query), re.IGNORECASE)
    try:
        return re.compile(query, re.MULTILINE)
    except re.error as error:
        raise ValueError(f"bad regular expression {query!r}: {error}") from error


def _excerpt(text: str, start: int) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line = text[line_start: line_end if line_end >= 0 else len(text)]
    at = start - line_start
    if len(line) <= LINE_CHARS:
        return line.strip()
    left = max(0, at - LINE_CHARS // 2)
    return ("…" if left else "") + line[left: left + LINE_CHARS].strip() + "…"


def _label(entry: Entry) -> str:
    where = f" · cell {entry.cell}" if entry.cell is not None else ""
    saved = f" · saved at {entry.saved_at}" if entry.saved_at else ""
    return f"turn {entry.turn} · {entry.who}{where} · ref {entry.ref}{saved}"


def read(found: Sequence[Entry], ref: str, offset: int = 0) -> str:
    """One page of the message with this ref."""
    matches = [e for e in found if e.ref.startswith(ref.strip())] if ref.strip() else []
    if not matches:
        return f"No message has the ref {ref!r}; search first to get one."
    entry = matches[0]
    start = max(0, offset)
    if start and start >= len(entry.text):
        return (f"{_label(entry)}\n[offset {start:,} is past the end of this message: it has "
                f"{len(entry.text):,} characters; read from offset=0]")
    end = min(len(entry.text), start + READ_CHARS)
    page = entry.text[start:end]
    tail = (f"\n[characters {start:,}-{end:,} of {len(entry.text):,}; read on with ref={entry.ref!r} "
            f"offset={end}]") if end < len(entry.text) else ""
    return f"{_label(entry)}\n{page}{tail}"


def search(found: Sequence[Entry], query: str = "", *, regex: bool = False, turn: int | None = None,
           cell: int | None = None) -> str:
    """Matches with their turn and ref, newest first: what is looked for after a summary is most
    often the recent work, and a line repeated all session long must not hide it."""
    if not query and turn is None and cell is None:
        raise ValueError("give a query, a turn or a cell to search for")
    pattern = _pattern(query, regex) if query else None
    lines: list[str] = []
    hits = 0
    for entry in reversed(found):
        if (turn is not None and entry.turn != turn) or (cell is not None and entry.cell != cell):
            continue
        if pattern is None:
            hits += 1
            first = next((line for line in entry.text.splitlines() if line.strip()), "")
            shown = first[:LINE_CHARS]
            count = ""
        else:
            spots = [m.start() for m in pattern.finditer(entry.text)]
            if not spots:
                continue
            hits += 1
            shown = _excerpt(entry.text, spots[0])
            count = f" ({len(spots)} matches in it)" if len(spots) > 1 else ""
        if len(lines) < MAX_HITS:
            lines.append(f"- {_label(entry)}: {shown}{count}")
    scope = " and ".join(s for s in (f"turn {turn}" if turn is not None else "",
                                     f"cell {cell}" if cell is not None else "") if s)
    asked = (f"{query!r}" if query else "anything") + (f" in {scope}" if scope else "")
    if not hits:
        last = max((e.turn for e in found), default=0)
        return f"No match for {asked} in the transcript ({len(found):,} messages, turns 0-{last})."
    more = (f"\n[{hits - MAX_HITS:,} more matches: narrow the query, or give a turn or a cell]"
            if hits > MAX_HITS else "")
    return (f"{hits:,} message(s) match {asked} (newest first; ref reads one whole):\n" + "\n".join(lines) + more)


def answer(records: Iterable[Mapping[str, Any]], saved: Mapping[str, str] | None = None, *, query: str = "",
           regex: bool = False, turn: int | None = None, cell: int | None = None, ref: str = "",
           offset: int = 0) -> str:
    """What the tool returns: one page of a message when `ref` is given, else the matches.
    ValueError for a bad regex or nothing to search for."""
    found = entries(records, saved)
    if ref:
        return read(found, ref, offset)
    return search(found, query, regex=regex, turn=turn, cell=cell)
