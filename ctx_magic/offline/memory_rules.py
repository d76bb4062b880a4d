"""The offline stand-in's answers to the long-term memory prompts (ctx_magic.memory.prompts).

Fixed rules, no model: each detector looks for the fixed heading a prompt opens with, as the
last text block of the latest user message, together with the output block it asks for, so an
ordinary user message is never taken for a memory request. The answers:

- extraction and gather: every sentence of the user's (or the notes') own words that reads as a
  durable statement ("I prefer", "always", "never", "we use", "remember", "call it", "don't",
  ...) becomes one JSON line in `<memories>`;
- consolidate: entries equal once normalized are merged into one, keeping the highest relevance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ctx_magic.memory.prompts import (
    CANDIDATES_TAG,
    CONSOLIDATE_HEADING,
    CONSOLIDATED_TAG,
    EXISTING_TAG,
    GATHER_HEADING,
    LONGTERM_HEADING,
    MEMORIES_TAG,
    NOTES_TAG,
)
from ctx_magic.offline.conversation import Request, content_blocks, is_background, latest_user, messages

MAX_SENTENCE_CHARS = 300  # longer "sentences" are pasted data or code, not statements
DEFAULT_LIMIT = 20  # Claude Code: at most 20 memories per session, when the prompt names no limit

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_LIMIT = re.compile(r"At most (\d+) entries")
_REMEMBER_LEAD = re.compile(r"^(?:please\s+)?remember(?:\s+that)?[:,]?\s+", re.IGNORECASE)

# (pattern, type, decay): the first that matches a sentence classifies it.
_DURABLE: tuple[tuple[re.Pattern[str], str, bool], ...] = (
    (re.compile(r"\bI(?: really)? (?:prefer|like|want|'d rather|would rather|use|work)\b|\bI'd rather\b", re.I),
     "user", False),
    (re.compile(r"\b(?:always|never|don't|don’t|do not|stop|avoid|make sure)\b", re.I), "feedback", False),
    (re.compile(r"\b(?:we use|we're using|we are using|call it|call them|is called|are called)\b", re.I),
     "project", False),
    (re.compile(r"\bremember\b", re.I), "project", True),
)


def _last_text(request: Request) -> str:
    message = latest_user(request)
    texts = [b.get("text", "") for b in content_blocks(message or {}) if b.get("type") == "text"]
    return texts[-1] if texts else ""


def _asks(request: Request, heading: str, tag: str) -> bool:
    text = _last_text(request)
    return text.startswith(heading) and f"<{tag}>" in text


def is_longterm_request(request: Request) -> bool:
    return _asks(request, LONGTERM_HEADING, MEMORIES_TAG)


def is_gather_request(request: Request) -> bool:
    return _asks(request, GATHER_HEADING, MEMORIES_TAG)


def is_consolidate_request(request: Request) -> bool:
    return _asks(request, CONSOLIDATE_HEADING, CONSOLIDATED_TAG)


def _sentences(text: str) -> Iterable[str]:
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line or line.startswith(("#", "```", "<")):
            continue
        yield from (s.strip() for s in _SENTENCE_END.split(line) if s.strip())


def durable_entries(texts: Iterable[str], limit: int) -> list[dict[str, Any]]:
    """One entry per durable-looking sentence, in order, each text once, at most `limit`."""
    entries: dict[str, dict[str, Any]] = {}
    for text in texts:
        for sentence in _sentences(text):
            if sentence.endswith("?") or len(sentence) > MAX_SENTENCE_CHARS or len(entries) >= limit:
                continue
            for pattern, kind, decay in _DURABLE:
                if pattern.search(sentence):
                    statement = _REMEMBER_LEAD.sub("", sentence)
                    statement = statement[:1].upper() + statement[1:]
                    entries.setdefault(statement.lower(), {"text": statement, "type": kind, "decay": decay})
                    break
    return list(entries.values())


def _limit(prompt: str) -> int:
    match = _LIMIT.search(prompt)
    return int(match.group(1)) if match else DEFAULT_LIMIT


def _memories_block(entries: Iterable[Mapping[str, Any]], tag: str = MEMORIES_TAG) -> str:
    lines = "\n".join(json.dumps(dict(e), ensure_ascii=False) for e in entries)
    return f"<{tag}>\n{lines}\n</{tag}>" if lines else f"<{tag}></{tag}>"


# A compaction summary quotes the user's own words: a reader of the conversation sees them there.
_SUMMARY_PREFIXES = ("This session is being continued", "The earlier part of this conversation was summarized")
_CONTINUE_MARK = "\n\nContinue the work from where it stopped"


def _user_texts(request: Request) -> list[str]:
    """What the user wrote: user text blocks (summaries included, since they quote the user),
    without re-injected context or the prompt itself."""
    found: list[str] = []
    for message in messages(request):
        if message.get("role") != "user":
            continue
        for block in content_blocks(message):
            text = block.get("text", "") if block.get("type") == "text" else ""
            summary = text.lstrip().startswith(_SUMMARY_PREFIXES)
            if summary:  # the summary's body only: ctx_magic's framing around it is nobody's memory
                text = text.split("\nSummary:\n", 1)[-1].split(_CONTINUE_MARK, 1)[0]
            if text.strip() and (summary or not is_background(text)) and not text.startswith(LONGTERM_HEADING):
                found.append(text)
    return found


def longterm_answer(request: Request) -> str:
    """Extraction: the durable statements the user made in the conversation."""
    return _memories_block(durable_entries(_user_texts(request), _limit(_last_text(request))))


_NOTES = re.compile(rf"<{NOTES_TAG}[^>]*>(.*?)</{NOTES_TAG}>", re.DOTALL)


def gather_answer(request: Request) -> str:
    """Gather: the durable statements in the session notes the prompt quotes."""
    prompt = _last_text(request)
    return _memories_block(durable_entries(_NOTES.findall(prompt), _limit(prompt)))


def _entries(prompt: str, tag: str) -> list[dict[str, Any]]:
    match = re.search(rf"<{tag}>\n(.*?)</{tag}>", prompt, re.DOTALL)
    found = []
    for line in (match.group(1) if match else "").splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("text"), str) and isinstance(data.get("key"), str):
            found.append(data)
    return found


def _normal(text: str) -> str:
    return " ".join(text.split()).strip(".!;: ").lower()


def consolidate_answer(request: Request) -> str:
    """Consolidate: entries equal once normalized become one, with the highest relevance."""
    prompt = _last_text(request)
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in [*_entries(prompt, EXISTING_TAG), *_entries(prompt, CANDIDATES_TAG)]:
        groups.setdefault(_normal(entry["text"]), []).append(entry)
    merged = []
    for group in groups.values():
        if len(group) < 2:
            continue
        first = group[0]
        merged.append({
            "text": first["text"],
            "type": first.get("type", "project"),
            "decay": all(e.get("decay", True) is not False for e in group),
            "relevance": max(float(e.get("relevance", 1.0)) for e in group),
            "from": [e["key"] for e in group],
        })
    return _memories_block(merged, CONSOLIDATED_TAG)
