"""One long-term memory as a value: its text, its front matter, its relevance and who wrote it.

A memory is stored as `<id>.md` (store.py keeps the folders): a front matter of its metadata, then
its text; a team memory also says who added it. The id is the text's first words and a hash of its
normal form, so two files never hold one memory. Relevance decays with a 30-day half-life unless
the memory says `decay: false`.

What a file says about itself is a claim: its scope is the folder it lives in (a file in the team
folder is a team memory whatever its front matter says), its relevance is held to the top of the
scale, and who wrote it is the file's owner as the filesystem says (`Memory.owner`); the `author`
in it is a name the writer gave.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal, get_args

from ctx_magic.memory.secrets import find_secret

MemoryType = Literal["user", "feedback", "project", "reference"]
Scope = Literal["project", "user", "team"]
MEMORY_TYPES: tuple[str, ...] = get_args(MemoryType)
SHARED_TYPES: tuple[str, ...] = ("project", "reference")  # about the work, not the person: the kinds a team shares
SCOPES: tuple[str, ...] = get_args(Scope)

HALF_LIFE_DAYS = 30.0  # Claude Code: decayFactor = 0.5 ^ (days / 30): day 30 x0.5, 60 x0.25, 90 x0.125
BASE_RELEVANCE = 1.0  # Claude Code: a new memory starts at relevanceScore = 1.0
MAX_BASE_RELEVANCE = 1.0  # the top of the scale: a file claiming more is held to it (the dream scores 0 to 1)
MAX_AUTHOR_CHARS = 80  # a name or a few; past it a file's author line is cut (it reaches other members' prompts)
NEAR_DUPLICATE_RATIO = 0.9  # difflib ratio of normalized texts at which two memories say the same thing
SAME_WORD_RATIO = 0.75  # a replaced word this close to the original is a typo or an inflection, not a new word
SECONDS_PER_DAY = 86_400

_WORD = re.compile(r"[a-z0-9]+")
_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"\d+")
SLUG_WORDS = 6  # words of the text in a memory's id, so file names say what they hold


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def relevance(base: float, created: datetime, now: datetime, decay: bool) -> float:
    """Current relevance: base x 0.5^(days/30) since creation (Claude Code's decay), or base when decay is off."""
    if not decay:
        return base
    days = max(0.0, (now - created).total_seconds() / SECONDS_PER_DAY)
    return base * 0.5 ** (days / HALF_LIFE_DAYS)


def normalize_text(text: str) -> str:
    """Case, spacing and end punctuation ignored: the form two memories are compared in."""
    return _SPACE.sub(" ", text).strip().strip(".!;: ").lower()


def is_near_duplicate(a: str, b: str) -> bool:
    """Equal once normalized, or nearly equal with no word swapped for a different word.

    "every Monday morning" and "every monday mornings" are one memory; "axis 0" and "axis 1",
    or "the customers table" and "the refunds table", are two, however close the characters.
    """
    left, right = normalize_text(a), normalize_text(b)
    if left == right:
        return True
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    if matcher.real_quick_ratio() < NEAR_DUPLICATE_RATIO or matcher.ratio() < NEAR_DUPLICATE_RATIO:
        return False
    if _NUMBER.findall(left) != _NUMBER.findall(right):
        return False  # a different number is a different fact, never a typo
    words_left, words_right = left.split(), right.split()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, words_left, words_right).get_opcodes():
        if tag != "replace":
            continue
        swapped = difflib.SequenceMatcher(None, " ".join(words_left[i1:i2]), " ".join(words_right[j1:j2]))
        if swapped.ratio() < SAME_WORD_RATIO:
            return False
    return True


def memory_id(text: str) -> str:
    """A readable, stable id: the first words of the text and a short hash of its normal form."""
    slug = "-".join(_WORD.findall(text.lower())[:SLUG_WORDS])[:48].strip("-") or "memory"
    digest = hashlib.sha1(normalize_text(text).encode("utf-8")).hexdigest()[:8]
    return f"{slug}-{digest}"


def format_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


@dataclass(frozen=True)
class Memory:
    """One long-term memory: its text and front matter."""

    id: str
    text: str
    type: MemoryType
    created: datetime
    updated: datetime
    relevance: float = BASE_RELEVANCE
    """The base score; what it is worth today is `current_relevance(now)`."""
    decay: bool = True
    scope: Scope = "project"
    source_session: str = ""
    author: str = ""
    """Who added it as the writer gave it (team memories: the member's name; empty elsewhere): a claim."""
    owner: str = field(default="", compare=False)
    """The OS account owning the file it was read from: the filesystem's word, not the file's
    (empty for a memory not read from a file, or where the system has no accounts)."""

    def current_relevance(self, now: datetime) -> float:
        return relevance(self.relevance, self.created, now, self.decay)

    def age_days(self, now: datetime) -> int:
        return max(0, int((now - self.created).total_seconds() // SECONDS_PER_DAY))

    def to_markdown(self) -> str:
        fields = {
            "id": self.id,
            "type": self.type,
            "created": format_time(self.created),
            "updated": format_time(self.updated),
            "relevance": repr(self.relevance),
            "decay": "true" if self.decay else "false",
            "scope": self.scope,
            "source_session": _SPACE.sub(" ", self.source_session).strip(),
        }
        author = _SPACE.sub(" ", self.author).strip()
        if author:
            fields["author"] = author
        front = "".join(f"{key}: {value}\n" for key, value in fields.items())
        return f"---\n{front}---\n{self.text.strip()}\n"

    @classmethod
    def from_markdown(cls, text: str, *, scope: Scope = "project", owner: str = "") -> Memory:
        """Parse a memory file of the folder of `scope` (its own `scope:` line is not believed); its
        relevance is held to the top of the scale. ValueError says what is wrong by line and field,
        never quoting the file (it may be someone's private file reached through a link)."""
        lines = text.splitlines()
        if not lines or lines[0].strip() != "---":
            raise ValueError("no front matter (the file must start with ---)")
        try:
            end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
        except StopIteration:
            raise ValueError("the front matter is not closed with ---") from None
        fields: dict[str, str] = {}
        for number, line in enumerate(lines[1:end], 2):
            key, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"line {number} of the front matter has no colon")
            fields[key.strip()] = value.strip()
        missing = [k for k in ("id", "type", "created", "updated") if not fields.get(k)]
        if missing:
            raise ValueError(f"front matter lacks {', '.join(missing)}")
        body = "\n".join(lines[end + 1 :]).strip()
        if not body:
            raise ValueError("the memory has no text")
        kind = fields["type"]
        if kind not in MEMORY_TYPES:
            raise ValueError(f"unknown type (it must be one of {', '.join(MEMORY_TYPES)})")
        try:
            base = float(fields.get("relevance") or BASE_RELEVANCE)
        except ValueError:
            base = math.nan
        if not math.isfinite(base) or base < 0:
            raise ValueError("relevance must be a number >= 0")
        decay = fields.get("decay", "true").lower()
        if decay not in ("true", "false"):
            raise ValueError("decay must be true or false")
        times = {}
        for name in ("created", "updated"):
            try:
                times[name] = parse_time(fields[name])
            except ValueError:
                raise ValueError(f"{name} is not a date and time (like 2025-03-01T12:00:00Z)") from None
        author = _SPACE.sub(" ", fields.get("author", "")).strip()
        if len(author) > MAX_AUTHOR_CHARS:
            author = author[: MAX_AUTHOR_CHARS - 1] + "…"
        return cls(
            id=fields["id"],
            text=body,
            type=kind,  # type: ignore[arg-type]
            created=times["created"],
            updated=times["updated"],
            relevance=min(base, MAX_BASE_RELEVANCE),
            decay=decay == "true",
            scope=scope,
            source_session=fields.get("source_session", ""),
            author=author,
            owner=owner,
        )


def sort_by_relevance(memories: Iterable[Memory], now: datetime) -> list[Memory]:
    """Most relevant first; ties go to the most recently updated, then by id (stable)."""
    by_id = sorted(memories, key=lambda m: m.id)
    return sorted(by_id, key=lambda m: (-m.current_relevance(now), -m.updated.timestamp()))


def shown_text(memory: Memory) -> str:
    """A memory's text where people see it (%memory show, the panel, MEMORY.md): one stored before
    the secret checks existed, or edited by hand, is named by its kind instead of echoed."""
    kind = find_secret(memory.text)
    if kind is None:
        return memory.text
    return f"(hidden: it looks like it contains {kind}; it is never put in a prompt. %memory forget removes it)"


def signed(memory: Memory) -> str:
    """Who wrote a team memory, as far as its folder can tell: the owner of its file when that is all
    there is or the file's author agrees with it; else the author's name, quoted and marked as
    claimed (with the owner that the filesystem vouches for, when there is one); "" for neither."""
    if memory.scope != "team":
        return ""  # a member's own memory: they wrote it
    claimed, owner = memory.author, memory.owner
    if not claimed or claimed == owner:
        return owner or ""
    quoted = json.dumps(claimed, ensure_ascii=False)  # a quote inside the name cannot end the quotation
    if owner:
        return f"{quoted} (claimed; the file belongs to OS user {owner})"
    return f"{quoted} (claimed)"


def added_by(memory: Memory) -> str:
    """"added by alice on 2025-03-01" for a memory whose writer the folder can name (`signed`), else ""."""
    who = signed(memory)
    if not who:
        return ""
    return f"added by {who} on {memory.created.astimezone(timezone.utc).date().isoformat()}"
