"""The dream: consolidation of long-term memory across sessions, after Claude Code's dreaming.

Once its gates open (dream_gates.py) and a lock file no live process holds is taken, four
phases run under the lock:

1. orient: read the stored memories and the notes of the sessions since the last dream;
2. gather: ask the model for candidate facts in those notes;
3. consolidate: ask the model to merge duplicates, settle contradictions and re-score;
4. prune: remove what has decayed below a threshold and rebuild the index.

The memory folder is snapshotted before the phases; any failure puts back every file the dream
wrote or removed, byte for byte (and only those: in a shared folder, what another member wrote
meanwhile stays).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from ctx_magic.context.tokens import count_text
from ctx_magic.errors import CtxMagicError
from ctx_magic.memory.dream_gates import STATE_NAME, load_state, open_gates, save_state, sessions_gate, sessions_since
from ctx_magic.memory.lock import LOCK_NAME, Held, acquire_lock
from ctx_magic.memory.longterm import (
    MAX_PER_SESSION,
    Candidate,
    TextModel,
    as_bool,
    candidate_from,
    json_lines,
    known_texts,
    parse_candidates,
    tagged_block,
)
from ctx_magic.memory.prompts import CONSOLIDATED_TAG, consolidate_prompt, entry_line, gather_prompt
from ctx_magic.memory.record import (
    BASE_RELEVANCE,
    MAX_BASE_RELEVANCE,
    SHARED_TYPES,
    Memory,
    MemoryType,
    Scope,
    memory_id,
    sort_by_relevance,
)
from ctx_magic.memory.secrets import detect_secret, find_secret, refusal_line
from ctx_magic.memory.shared_folder import SHARED_FILE_MODE, read_regular_file
from ctx_magic.memory.store import INDEX_NAME, MemoryStore
from ctx_magic.store.files import atomic_write_bytes, describe_os_error
from ctx_magic.store.session import SessionDir

PRUNE_BELOW = 0.1  # ~100 days for a full-score decaying memory, past Claude Code's last row (day 90: x0.125)
NOTES_BUDGET_TOKENS = 40_000  # about three full notes files (session notes cap one at 12,000), newest first
MAX_CANDIDATES = MAX_PER_SESSION  # a dream gathers no more than a session may extract (Claude Code: 20)
DREAM_SOURCE = "dream"  # source_session of memories a dream writes

DreamOutcome = Literal["dreamed", "skipped", "locked", "failed"]


class DreamFailed(CtxMagicError):
    """A phase of the dream could not finish (bad model output)."""


@dataclass(frozen=True)
class DreamResult:
    status: DreamOutcome
    reason: str = ""
    added: int = 0
    merged: int = 0
    pruned: int = 0
    """Memories removed: decayed below PRUNE_BELOW, or dropped as contradicted by the consolidation."""
    refused: tuple[str, ...] = ()
    """The kinds of secret of the candidates refused (never their text)."""
    waiting: int = 0
    """New facts gathered from the notes left waiting for the person's review (`memory_review = 'ask'`)."""

    def summary(self) -> str:
        if self.status == "dreamed":
            done = f"Dream done: {self.added} added, {self.merged} merged, {self.pruned} pruned."
            if self.waiting:
                done += f" {self.waiting} new waiting for your review: %memory pending."
            line = refusal_line(self.refused, "candidate")
            return f"{done} {line}" if line else done
        if self.status == "failed":
            return f"Dream failed and was rolled back: {self.reason}"
        return f"No dream: {self.reason}"


# -- the phases -----------------------------------------------------------------------------


def read_notes(sessions: Sequence[SessionDir], budget_tokens: int = NOTES_BUDGET_TOKENS) -> list[tuple[str, str]]:
    """Orient: the notes files of `sessions`, newest first until the budget, returned oldest first."""
    chosen: list[tuple[str, str]] = []
    left = budget_tokens
    for folder in reversed(sessions):
        try:
            text = folder.notes_path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        cost = count_text(text)
        if text and cost <= left:
            chosen.append((folder.session_id, text))
            left -= cost
    return chosen[::-1]


def gather(
    model: TextModel, notes: Sequence[tuple[str, str]], known: Sequence[Memory], now: datetime,
    refused: list[str] | None = None,
) -> list[Candidate]:
    """Gather: candidate memories from the session notes (no call when there are no notes);
    secrets are dropped, their kinds added to `refused`."""
    if not notes:
        return []
    reply = model.complete([], gather_prompt(notes, known_texts(known, now), MAX_CANDIDATES))
    candidates = parse_candidates(reply)
    if candidates is None:
        raise DreamFailed("the gather phase's reply has no <memories> block")
    found = [detect_secret(c.text) for c in candidates]
    if refused is not None:
        refused += [f.described for f in found if f is not None]
    return [c for c, secret in zip(candidates, found) if secret is None][:MAX_CANDIDATES]


@dataclass(frozen=True)
class Consolidation:
    """What the consolidation changes in the store."""

    write: tuple[Memory, ...] = ()
    remove: tuple[str, ...] = ()
    leftover: tuple[Candidate, ...] = ()
    """Candidates the consolidation did not mention: stored as new memories when not duplicates."""
    added: int = 0
    merged: int = 0
    dropped: int = 0
    refused: tuple[str, ...] = ()
    """Kinds of secret in entries the consolidation wrote (those entries are skipped)."""


def _base(value: Any, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return min(MAX_BASE_RELEVANCE, max(0.0, number)) if number == number else default


def plan_consolidation(
    existing: Mapping[str, Memory],
    candidates: Mapping[str, Candidate],
    entries: Sequence[Mapping[str, Any]],
    now: datetime,
    scope: Scope,
    author: str = "",
) -> Consolidation:
    """Turn the consolidation's answer into writes and removals (pure).

    An entry replaces the memories it names in "from"; a memory merged with a fresh candidate
    counts as re-observed today (created = now), otherwise it keeps its oldest creation time.
    A key belongs to the first entry that names it. Unknown keys and junk entries are ignored.
    A merged memory keeps the names of everyone who added its sources; a new one is the
    dreamer's (`author`, on the team's folder). On the team's folder an entry stays of a shared
    kind (project or reference) whatever the answer says: a member's own kinds never go there.
    """
    claimed: set[str] = set()
    write: dict[str, Memory] = {}
    remove: list[str] = []
    refused: list[str] = []
    added = merged = dropped = 0
    for data in entries:
        drop = data.get("drop")
        if isinstance(drop, str):
            if drop in existing and drop not in claimed:
                remove.append(existing[drop].id)
                dropped += 1
            claimed.add(drop)
            continue
        candidate = candidate_from(data)
        found = detect_secret(candidate.text) if candidate is not None else None
        if found is not None:
            refused.append(found.described)
        if candidate is None or found is not None:
            continue
        named = data.get("from") if isinstance(data.get("from"), list) else []
        sources = [k for k in dict.fromkeys(named) if isinstance(k, str) and k not in claimed]
        sources = [k for k in sources if k in existing or k in candidates]
        claimed.update(sources)
        olds = [existing[k] for k in sources if k in existing]
        fresh = any(k in candidates for k in sources) or not olds
        base = _base(data.get("relevance"), max((m.relevance for m in olds), default=BASE_RELEVANCE))
        created = now if fresh else min(m.created for m in olds)
        decay = as_bool(data.get("decay"), olds[0].decay if olds else True)
        authors = ", ".join(dict.fromkeys(m.author for m in olds if m.author)) if olds else author
        memory = Memory(
            id=memory_id(candidate.text),
            text=candidate.text,
            type=_kind_in(scope, candidate.type, olds),
            created=created,
            updated=now,
            relevance=base,
            decay=decay,
            scope=scope,
            source_session=olds[0].source_session if olds else DREAM_SOURCE,
            author=authors,
        )
        if len(sources) == 1 and olds and _same(olds[0], memory):
            continue
        write[memory.id] = memory
        remove += [m.id for m in olds]
        added += 0 if olds else 1
        merged += max(0, len(sources) - 1)
    leftover = tuple(c for k, c in candidates.items() if k not in claimed)
    kept_remove = tuple(dict.fromkeys(i for i in remove if i not in write))
    return Consolidation(tuple(write.values()), kept_remove, leftover, added, merged, dropped, tuple(refused))


def _kind_in(scope: Scope, kind: MemoryType, olds: Sequence[Memory]) -> MemoryType:
    if scope != "team" or kind in SHARED_TYPES:
        return kind
    return next((m.type for m in olds if m.type in SHARED_TYPES), "project")


def _same(old: Memory, new: Memory) -> bool:
    fields = ("id", "text", "type", "decay", "relevance")
    return all(getattr(old, name) == getattr(new, name) for name in fields)


def consolidate(
    model: TextModel, memories: Sequence[Memory], candidates: Sequence[Candidate], now: datetime, scope: Scope,
    author: str = "",
) -> Consolidation:
    """Consolidate: one call over stored memories and candidates (none when fewer than two)."""
    existing = {f"m{i}": m for i, m in enumerate(sort_by_relevance(memories, now), 1)}
    fresh = {f"c{i}": c for i, c in enumerate(candidates, 1)}
    if len(existing) + len(fresh) < 2:
        return Consolidation(leftover=tuple(candidates))
    existing_lines = [
        entry_line(key, {"text": m.text, "type": m.type, "decay": m.decay, "relevance": round(m.relevance, 3),
                         "current": round(m.current_relevance(now), 3), "age_days": m.age_days(now)})
        for key, m in existing.items()
    ]
    candidate_lines = [entry_line(key, {"text": c.text, "type": c.type, "decay": c.decay}) for key, c in fresh.items()]
    reply = model.complete([], consolidate_prompt(existing_lines, candidate_lines))
    block = tagged_block(reply, CONSOLIDATED_TAG)
    if block is None:
        raise DreamFailed(f"the consolidate phase's reply has no <{CONSOLIDATED_TAG}> block")
    return plan_consolidation(existing, fresh, json_lines(block), now, scope, author)


def decayed(memories: Sequence[Memory], now: datetime) -> list[Memory]:
    """Prune: the memories whose current relevance fell below PRUNE_BELOW."""
    return [m for m in memories if m.current_relevance(now) < PRUNE_BELOW]


def run_phases(store: MemoryStore, sessions: Sequence[SessionDir], model: TextModel, now: datetime,
               touched: set[str] | None = None, author: str = "", pending: MemoryStore | None = None) -> DreamResult:
    """The four phases on `store`; the name of every file they write or remove goes into `touched`
    before it is written (what a failure puts back). With `pending`, the facts gathered from the
    notes wait there for the person's keep instead, and the dream only tidies what they kept."""
    touched = set() if touched is None else touched
    touched.add(INDEX_NAME)
    memories = [m for m in store.all() if find_secret(m.text) is None]  # one stored before the checks: never sent
    notes = read_notes(sessions)
    refused: list[str] = []
    candidates = gather(model, notes, [*memories, *(pending.all() if pending is not None else [])], now, refused)
    new = [c for c in candidates if pending is not None and store.find_duplicate(c.text, memories) is None]
    plan = consolidate(model, memories, [] if pending is not None else candidates, now, store.scope, author)
    touched.update(f"{i}.md" for i in (*(m.id for m in plan.write), *plan.remove))
    store.apply(write=plan.write, remove=plan.remove, now=now)
    added = plan.added
    for candidate in plan.leftover:
        if store.find_duplicate(candidate.text) is None:
            touched.add(f"{memory_id(candidate.text)}.md")
            store.add(candidate.text, now=now, type=candidate.type, decay=candidate.decay, source_session=DREAM_SOURCE,
                      author=author)
            added += 1
    stale = decayed(store.all(), now)
    touched.update(f"{m.id}.md" for m in stale)
    store.apply(remove=[m.id for m in stale], now=now)
    waiting = 0
    for candidate in new:  # last: a failure before this leaves nothing waiting
        assert pending is not None
        if pending.find_duplicate(candidate.text) is None:
            pending.add(candidate.text, now=now, type=candidate.type, decay=candidate.decay,
                        source_session=DREAM_SOURCE)
            waiting += 1
    return DreamResult("dreamed", "", added, plan.merged, len(stale) + plan.dropped, (*refused, *plan.refused), waiting)


# -- rollback -----------------------------------------------------------------------------


def _is_lock_file(name: str) -> bool:
    """Locks and half-written temporary files: never snapshotted, never put back."""
    return name.startswith((LOCK_NAME, "."))


def snapshot_folder(folder: Path, skip: Callable[[str], bool]) -> dict[str, bytes]:
    """The bytes of every small regular file of `folder` that `skip` does not name: what a failed
    dream puts back. Anything else (a link, a FIFO, a huge file) is never read: the dream never
    writes one, and a file it replaces that is missing here is only removed on failure."""
    if not folder.is_dir():
        return {}
    found: dict[str, bytes] = {}
    for path in folder.iterdir():
        if skip(path.name):
            continue
        try:
            found[path.name] = read_regular_file(path).data
        except OSError:
            continue
    return found


def put_back(store: MemoryStore, snapshot: Mapping[str, bytes], touched: set[str]) -> None:
    """Undo a failed dream: each file it wrote or removed as the snapshot saw it (new ones removed).
    In a shared folder the index is then rebuilt, so it lists what others added meanwhile."""
    mode = SHARED_FILE_MODE if store.shared else None
    for name in touched:
        path = store.folder / name
        if name not in snapshot:
            path.unlink(missing_ok=True)
        elif _current_bytes(path) != snapshot[name]:
            atomic_write_bytes(path, snapshot[name], mode=mode)
    if store.shared:
        store.index.rebuild()


def _current_bytes(path: Path) -> bytes | None:
    try:
        return read_regular_file(path).data
    except OSError:
        return None


def run_locked(store: MemoryStore, now: datetime, holder: str,
               phases: Callable[[set[str]], DreamResult]) -> DreamResult:
    """`phases` under the dream lock (a second dreamer is told who holds it and skips), with every
    file they touch put back on any failure; the lock is released in every case."""
    try:
        lock = acquire_lock(store.folder, now, holder=holder)
    except OSError as error:  # a folder this member may not write (a team's, of a Unix group they are not in)
        return DreamResult("skipped", f"the dream lock could not be taken: "
                                      f"{describe_os_error(error, store.folder / LOCK_NAME)}")
    if isinstance(lock, Held):
        return DreamResult("locked", lock.reason)
    touched: set[str] = {STATE_NAME}
    try:
        snapshot = snapshot_folder(store.folder, skip=_is_lock_file)
        try:
            result = phases(touched)
            save_state(store.folder, dataclasses.replace(load_state(store.folder), last_dream=now), shared=store.shared)
        except Exception as error:  # noqa: BLE001 - any failure (model, output, disk) rolls back
            put_back(store, snapshot, touched)
            return DreamResult("failed", str(error) or type(error).__name__)
        except BaseException:
            put_back(store, snapshot, touched)
            raise
    finally:
        lock.release()
    return result


# -- entry points ---------------------------------------------------------------------------


def dream(
    storage_dir: Path,
    model: TextModel,
    *,
    now: datetime,
    force: bool = False,
    current_session: str | None = None,
    store: MemoryStore | None = None,
    holder: str = "",
    pending: MemoryStore | None = None,
) -> DreamResult:
    """Consolidate the memories of `store` (the project scope of `storage_dir` by default).

    Without `force` the gates decide first. Under the lock, every file the dream touches is
    put back on any failure; the lock is released in every case.
    """
    store = store or MemoryStore.for_project(storage_dir)
    state, closed = (load_state(store.folder), None) if force else open_gates(store.folder, now)
    if closed:
        return DreamResult("skipped", closed)
    recent = sessions_since(storage_dir, state.last_dream, current_session)
    closed = None if force else sessions_gate(len(recent))
    if closed:
        return DreamResult("skipped", closed)
    return run_locked(store, now, holder, lambda touched: run_phases(store, recent, model, now, touched,
                                                                     pending=pending))
