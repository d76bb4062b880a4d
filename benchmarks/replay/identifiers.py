"""What each recorded action uses of earlier results, and whether its request still holds it.

A strategy that makes the agent blind is not cheap. For every recorded action (the answer to one
main call) the identifiers it uses that the session learned from an earlier tool result or
notebook cell are listed: file paths, code names (snake_case, CamelCase, dotted), ids (letters
and digits: a task id, a hash) and whole error lines it quotes. Identifiers the system prompt or
the tool definitions hold are left out (every request carries them). "Identifiers kept" is then
the share of (action, identifier) pairs whose identifier is still somewhere in the request that
produced the action (live, or quoted in a summary, the notes or a placeholder); an action a
strategy never got to (it overflowed first) keeps none.

Where a pair not kept went (`Sightings`), read from the requests alone: no earlier request held the
identifier (its result went out as a preview, or was cut, at first sight); an earlier one did and
the conversation's opening has changed since (a compaction); or an earlier one did and the opening
is the same (a result cleared, folded or persisted later, or a snip).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from benchmarks.replay.corpus import Action, Replay

_PATH = re.compile(
    r"(?<![\w/.-])/?(?:[\w.-]+/)+[\w.-]*[A-Za-z][\w.-]*"  # a path with a folder in it
    r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|pyx|ipynb|js|ts|tsx|jsx|json|md|rst|txt|cfg|toml|ini|yaml|yml|csv|html|css"
    r"|c|h|cc|cpp|hpp|rs|go|java|rb|ex|exs|sh|sql|xml|lock|log)\b"  # or a file name with a known extension
)
_NAME = re.compile(r"(?<![\w./-])[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")  # not inside a path
_CAMEL = re.compile(r"[a-z][A-Z]")
_ID = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{6,}(?![\w-])")  # letters and digits: an id, a hash
_ERROR_LINE = re.compile(r"^\s*((?:[\w.]*(?:Error|Exception|Warning)\b|Traceback\b|error\b|ERROR\b|FAIL\b|fatal\b).*)$",
                         re.MULTILINE)
MIN_NAME_CHARS = 4  # shorter names (i, df, os) say too little about what the agent knows
MIN_PATH_CHARS = 5
ERROR_LINE_CHARS = (12, 200)  # an error line quoted whole: long enough to be specific, short enough to be a line


def _is_code_name(token: str) -> bool:
    """snake_case, camelCase / CamelCase or a dotted name, not a plain word."""
    if len(token) < MIN_NAME_CHARS or token.isupper() and "_" not in token:
        return False
    return "_" in token.strip("_") or "." in token or bool(_CAMEL.search(token))


def identifiers(text: str) -> set[str]:
    """The paths and code names in a text."""
    found = {p.rstrip(".-") for p in _PATH.findall(text) if len(p) >= MIN_PATH_CHARS}
    found |= {n.rstrip(".") for n in _NAME.findall(text) if _is_code_name(n.rstrip("."))}
    return found | set(_ID.findall(text))


def error_lines(text: str) -> set[str]:
    low, high = ERROR_LINE_CHARS
    return {line.strip() for line in _ERROR_LINE.findall(text) if low <= len(line.strip()) <= high}


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (a tool call's input)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings(item)


def content_text(content: Any) -> str:
    """The text of a tool result's content (text blocks joined; images say nothing)."""
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, Mapping) and b.get("type") == "text")


def action_text(action: Action) -> str:
    return "\n".join([action.text, *(s for call in action.calls for s in strings(call.input))])


def uses_by_action(replay: Replay) -> list[tuple[str, ...]]:
    """For each recorded action in order, the identifiers it uses that earlier results taught."""
    always = identifiers(replay.system + json.dumps(list(replay.tools)))
    seen: set[str] = set()
    errors: set[str] = set()
    out: list[tuple[str, ...]] = []

    def learn(text: str) -> None:
        seen.update(identifiers(text) - always)
        errors.update(error_lines(text))

    for turn in replay.turns:
        for cell in turn.cells:  # a cell the user ran: its code and its outputs
            learn(cell.source + "\n" + content_text(cell.content))
        for action in turn.actions:
            text = action_text(action)
            used = sorted(identifiers(text) & seen) + sorted(e for e in errors if e in text)
            out.append(tuple(used))
            for call in action.calls:
                learn(content_text(call.output))
    return out


def request_strings(request: Mapping[str, Any]) -> str:
    """Everything a request says, as one string: system, texts, tool calls' inputs, results."""
    parts: list[str] = []
    system = request.get("system") or []
    parts += [system] if isinstance(system, str) else [b.get("text", "") for b in system]
    for message in request.get("messages", []):
        content = message.get("content", [])
        if isinstance(content, str):
            parts.append(content)
            continue
        for block in content:
            kind = block.get("type")
            if kind == "text":
                parts.append(block.get("text", ""))
            elif kind == "tool_use":
                parts += strings(block.get("input", {}))
            elif kind == "tool_result":
                parts.append(content_text(block.get("content", "")))
            elif kind == "compaction":
                parts.append(str(block.get("content") or ""))
    return "\n\x00\n".join(parts)


NEVER_SHOWN, COMPACTED, EDITED, NOT_SERVED = "never shown", "compacted away", "edited away", "not served"
LOSSES = (NEVER_SHOWN, COMPACTED, EDITED, NOT_SERVED)


def opening(request: Mapping[str, Any]) -> Any:
    """What a request's first message holds: a compaction replaces it, an edit to later messages does not."""
    messages = request.get("messages") or [{}]
    return messages[0].get("content")


class Sightings:
    """One session's main requests as sent, for where each identifier an action used but its
    request no longer held went (`lost`: counts by NEVER_SHOWN, COMPACTED, EDITED)."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, str]] = []  # (opening, everything it says) per main request
        self.lost: Counter[str] = Counter()

    def kept(self, uses: Sequence[str], request: Mapping[str, Any]) -> int:
        """How many of `uses` the request holds; each one it does not is counted in `lost`."""
        text, first = request_strings(request), opening(request)
        held = 0
        for use in uses:
            if use in text:
                held += 1
                continue
            last = next((start for start, said in reversed(self.sent) if use in said), None)
            self.lost[NEVER_SHOWN if last is None else COMPACTED if last != first else EDITED] += 1
        self.sent.append((first, text))
        return held
