"""Long-term memory extraction from a session.

At session end (and on `%memory extract`) one side call reads the conversation and answers
with the durable facts in it, one JSON object per line inside `<memories>`. Each candidate is
checked for secrets and duplicates before it is stored; a session stores at most 20. With team
memory on, a candidate about the shared work goes to the team's folder (`belongs_to_team`). With
review on, a candidate waits in the member's own pending folder for that destination instead, until
they keep it (`MemoryStore.for_pending`: one pending store for their own memories and the team's).

The model is reached through `TextModel`, one method wide; the agent adapts its
`Session.side_call` to it, tests adapt the SDK model or a stub.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ctx_magic.memory.prompts import MEMORIES_TAG, longterm_prompt
from ctx_magic.memory.record import MEMORY_TYPES, SHARED_TYPES, Memory, MemoryType, sort_by_relevance
from ctx_magic.memory.secrets import detect_secret
from ctx_magic.memory.store import MemoryStore
from ctx_magic.messages import Message

MAX_PER_SESSION = 20  # Claude Code: at most 20 memories extracted per session
KNOWN_IN_PROMPT = 60  # stored memories listed as "already remembered": the most relevant ones
MAX_TEXT_CHARS = 600  # a memory is a sentence or two; longer answers are junk, not memories
DEFAULT_TYPE: MemoryType = "project"  # for an entry whose type is missing or unknown

# About a person rather than the shared work: the first and second person, a third person's
# pronouns, "the user"; and a path in someone's home folder, which the others cannot reach.
_PERSONAL = re.compile(r"\b(?-i:I|I'm|I've|I'd|I'll)\b|\b(?:me|my|mine|myself|you|you're|your|yours|yourself|he|"
                       r"she|him|his|her|hers|the user|the user's)\b|(?<![\w/])~/|/(?:home|Users)/[^/\s]+/"
                       r"|[A-Za-z]:\\Users\\", re.IGNORECASE)  # "I" in capitals only: "i.e." is no one


class TextModel(Protocol):
    """One text-only model call beside the conversation: `messages`, then `prompt` as the last ask."""

    def complete(self, messages: Sequence[Message], prompt: str) -> str: ...


@dataclass(frozen=True)
class TeamShare:
    """Where extraction sends a fact about the shared work: the team's store, signed by `author`;
    with `pending`, that folder instead, where it waits for the member's accept."""

    store: MemoryStore
    author: str
    pending: MemoryStore | None = None

    @property
    def target(self) -> MemoryStore:
        return self.pending if self.pending is not None else self.store

    def known(self) -> list[Memory]:
        """The team's memories and those proposed for it: neither is proposed again."""
        return [*self.store.all(), *(self.pending.all() if self.pending is not None else [])]


@dataclass(frozen=True)
class Candidate:
    """A memory the model proposed, not yet checked or stored."""

    text: str
    type: MemoryType
    decay: bool


def tagged_block(reply: str, tag: str) -> str | None:
    """The inside of the last `<tag>...</tag>` in `reply` (to its end if never closed), or None."""
    start = reply.rfind(f"<{tag}>")
    if start < 0:
        return None
    inner = reply[start + len(tag) + 2 :]
    end = inner.find(f"</{tag}>")
    return inner if end < 0 else inner[:end]


_OBJECT = re.compile(r"\{.*\}")


def json_lines(block: str) -> list[dict[str, Any]]:
    """The JSON objects of a block, one a line; anything else on a line (bullets, junk) is skipped."""
    found: list[dict[str, Any]] = []
    for line in block.splitlines():
        match = _OBJECT.search(line)
        if match is None:
            continue
        try:
            data = json.loads(match.group(0))
        except ValueError:
            continue
        if isinstance(data, dict):
            found.append(data)
    return found


def as_bool(value: Any, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return default


def candidate_from(data: Mapping[str, Any]) -> Candidate | None:
    """A candidate from one parsed line, or None when the line has no usable text."""
    text = data.get("text")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
        return None
    kind = data.get("type")
    kind = kind if kind in MEMORY_TYPES else DEFAULT_TYPE
    return Candidate(" ".join(text.split()), kind, as_bool(data.get("decay"), True))


def parse_candidates(reply: str, tag: str = MEMORIES_TAG) -> list[Candidate] | None:
    """The candidates in the reply's `<memories>` block; None when the reply has no such block."""
    block = tagged_block(reply, tag)
    if block is None:
        return None
    parsed = (candidate_from(data) for data in json_lines(block))
    return [c for c in parsed if c is not None]


def belongs_to_team(candidate: Candidate) -> bool:
    """Whether an extracted memory goes to the team: it is of a shared kind (project: decisions and
    facts about the work; reference: where things live) and says nothing about a person (no I, my,
    you, your, he, she, the user; no path in someone's home folder). A user or feedback memory
    never does; anything in doubt stays with the person, who can still `%memory add --team` it."""
    return candidate.type in SHARED_TYPES and _PERSONAL.search(candidate.text) is None


def known_texts(memories: Iterable[Memory], now: datetime, limit: int = KNOWN_IN_PROMPT) -> list[str]:
    """The stored memories the prompt lists so the model does not propose them again."""
    return [" ".join(m.text.split()) for m in sort_by_relevance(memories, now)[:limit]]


@dataclass(frozen=True)
class MemoryTargets:
    """Where extracted memories go: the member's own store (`own`), or `pending` for their review
    instead; with a `team`, what `belongs_to_team` says is about the shared work goes there."""

    own: MemoryStore
    pending: MemoryStore | None = None
    team: TeamShare | None = None

    def known(self) -> list[Memory]:
        """Every memory stored or waiting in any of them: none is proposed again."""
        return [*self.own.all(), *(self.pending.all() if self.pending is not None else []),
                *(self.team.known() if self.team is not None else [])]

    def target(self, candidate: Candidate) -> tuple[MemoryStore, str]:
        """The store a checked candidate goes to, and the author it is signed with there."""
        if self.team is not None and belongs_to_team(candidate):
            return self.team.target, self.team.author
        return (self.pending if self.pending is not None else self.own), ""


def extract_memories(
    model: TextModel,
    messages: Sequence[Message],
    targets: MemoryTargets,
    *,
    now: datetime,
    session_id: str,
    already_extracted: int = 0,
    refused: list[str] | None = None,
) -> list[Memory]:
    """Ask the model for the session's durable facts and store the new ones.

    `already_extracted` is how many this session stored before; the result holds only the
    memories stored now (the caller adds their number to its count). Secrets and duplicates
    of stored memories (in any scope) are dropped, each secret's kind and masked value added to
    `refused` (for one line to the user, never the text); a reply without a `<memories>` block
    stores nothing. Each new memory goes where `targets` sends it (the member's own store, their
    pending folder, or the team's). Model errors propagate to the caller, which runs this in the
    background.
    """
    room = MAX_PER_SESSION - already_extracted
    if room <= 0:
        return []
    existing = targets.known()
    reply = model.complete(messages, longterm_prompt(known_texts(existing, now), room,
                                                     team=targets.team is not None))
    added: list[Memory] = []
    for candidate in parse_candidates(reply) or []:
        if len(added) >= room:
            break
        found = detect_secret(candidate.text)
        if found is not None:
            if refused is not None:
                refused.append(found.described)
            continue
        if targets.own.find_duplicate(candidate.text, [*existing, *added]) is not None:
            continue
        target, author = targets.target(candidate)
        memory = target.add(candidate.text, now=now, type=candidate.type, decay=candidate.decay,
                            source_session=session_id, author=author)
        added.append(memory)
    return added
