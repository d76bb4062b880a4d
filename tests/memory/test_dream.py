"""The dream: gates with an injected clock, the lock, rollback, phases, two real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from memory_rig import SdkTextModel

from ctx_magic.agent.model import AnthropicModel
from ctx_magic.errors import ModelError
from ctx_magic.memory.dream import LOCK_NAME, DreamResult, Held, dream, gather, plan_consolidation
from ctx_magic.memory.dream_gates import (
    STATE_NAME,
    DreamState,
    check_interval_gate,
    load_state,
    save_state,
    sessions_gate,
    time_gate,
)
from ctx_magic.memory.lock import DreamLock, acquire_lock
from ctx_magic.memory.longterm import Candidate
from ctx_magic.memory.prompts import CONSOLIDATE_HEADING, GATHER_HEADING
from ctx_magic.memory.record import Memory, format_time, memory_id
from ctx_magic.memory.store import MemoryStore
from ctx_magic.messages import Message
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.transport import offline_client

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
NOTES = "# Session Title\nSales analysis\n\n# Learnings\n- I prefer plotly over matplotlib for charts.\n"
EMPTY_GATHER = "<memories></memories>"
EMPTY_CONSOLIDATION = "<consolidated></consolidated>"


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


@dataclass
class ScriptedModel:
    """A TextModel answering each phase from a script; an exception in the script is raised."""

    gather: str | Exception = EMPTY_GATHER
    consolidate: str | Exception = EMPTY_CONSOLIDATION
    prompts: list[str] = field(default_factory=list)

    def complete(self, messages: Sequence[Message], prompt: str) -> str:
        self.prompts.append(prompt)
        answer = self.gather if prompt.startswith(GATHER_HEADING) else self.consolidate
        if isinstance(answer, Exception):
            raise answer
        return answer


def add_sessions(storage: Path, count: int, start: datetime, notes: str = NOTES) -> list[str]:
    """`count` session folders, one a minute from `start`, each with a notes file."""
    ids = []
    for n in range(count):
        stamp = (start + timedelta(minutes=n)).strftime("%Y%m%d-%H%M%S")
        session_id = f"{stamp}-{n:06x}"
        folder = storage / "sessions" / session_id
        folder.mkdir(parents=True)
        (folder / "session-memory.md").write_text(notes)
        ids.append(session_id)
    return ids


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file but the OS locks' empty files (.dream.flock), which stay where a lock was taken."""
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.endswith("flock")}


def stored(text: str, *, age_days: float = 0, base: float = 1.0, decay: bool = True, kind: str = "user") -> Memory:
    created = T0 - timedelta(days=age_days)
    return Memory(memory_id(text), text, kind, created, created, base, decay)  # type: ignore[arg-type]


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / ".ctx_magic"


@pytest.fixture
def store(storage: Path) -> MemoryStore:
    return MemoryStore.for_project(storage, clock=lambda: T0)


def lock_path(store: MemoryStore) -> Path:
    return store.folder / LOCK_NAME


# --- the gates as pure functions -------------------------------------------------------------


def test_time_gate_opens_after_24_hours_and_when_there_was_no_dream() -> None:
    assert time_gate(DreamState(), T0) is None
    assert time_gate(DreamState(last_dream=T0), hours(23.9)) == "the last dream was 23.9 hours ago (24 needed)"
    assert time_gate(DreamState(last_dream=T0), hours(24)) is None
    # another member's clock a little ahead stamped it: not "-0.5 hours ago"
    assert time_gate(DreamState(last_dream=hours(0.5)), T0) == "the last dream was 0.0 hours ago (24 needed)"


def test_check_interval_gate_opens_after_10_minutes() -> None:
    assert check_interval_gate(DreamState(), T0) is None
    assert check_interval_gate(DreamState(last_check=T0), T0 + timedelta(minutes=9)) is not None
    assert check_interval_gate(DreamState(last_check=T0), T0 + timedelta(minutes=10)) is None


def test_sessions_gate_needs_five() -> None:
    assert sessions_gate(4) == "4 sessions since the last dream (5 needed)"
    assert sessions_gate(5) is None


def test_state_round_trips_and_garbage_reads_as_empty(tmp_path: Path) -> None:
    save_state(tmp_path, DreamState(last_dream=T0, last_check=hours(1)))
    assert load_state(tmp_path) == DreamState(last_dream=T0, last_check=hours(1))
    (tmp_path / STATE_NAME).write_text('{"last_dream": "soon"}')
    assert load_state(tmp_path) == DreamState()
    (tmp_path / STATE_NAME).write_text('{"last_dream": 1764201600, "last_check": ["2026-11-27"]}')
    assert load_state(tmp_path) == DreamState()  # a timestamp as a number, a list: not a time we wrote


# --- the gates in dream, with an injected clock ----------------------------------------


def test_time_gate_holds_the_dream_for_24_hours(storage: Path, store: MemoryStore) -> None:
    save_state(store.folder, DreamState(last_dream=T0))
    add_sessions(storage, 5, hours(1))
    model = ScriptedModel()
    assert dream(storage, model, now=hours(23)) == DreamResult(
        "skipped", "the last dream was 23.0 hours ago (24 needed)"
    )
    assert model.prompts == []
    assert dream(storage, model, now=hours(24)).status == "dreamed"
    assert load_state(store.folder).last_dream == hours(24)


def test_sessions_gate_counts_only_sessions_after_the_last_dream(storage: Path, store: MemoryStore) -> None:
    add_sessions(storage, 3, T0 - timedelta(days=2))  # before the last dream: not counted
    save_state(store.folder, DreamState(last_dream=T0 - timedelta(days=1)))
    add_sessions(storage, 4, T0 - timedelta(hours=5))
    result = dream(storage, ScriptedModel(), now=T0)
    assert result == DreamResult("skipped", "4 sessions since the last dream (5 needed)")
    add_sessions(storage, 1, T0 - timedelta(hours=1))
    assert dream(storage, ScriptedModel(), now=T0 + timedelta(minutes=10)).status == "dreamed"


def test_the_current_session_does_not_count(storage: Path) -> None:
    ids = add_sessions(storage, 5, T0 - timedelta(hours=5))
    assert dream(storage, ScriptedModel(), now=T0, current_session=ids[-1]).reason.startswith("4 sessions")


def test_sessions_are_checked_at_most_every_10_minutes(storage: Path, store: MemoryStore) -> None:
    add_sessions(storage, 4, T0 - timedelta(hours=5))
    assert dream(storage, ScriptedModel(), now=T0).reason.startswith("4 sessions")
    assert load_state(store.folder).last_check == T0
    add_sessions(storage, 1, T0 - timedelta(hours=1))
    too_soon = dream(storage, ScriptedModel(), now=T0 + timedelta(minutes=9))
    assert too_soon == DreamResult("skipped", "sessions were checked 9 minutes ago (every 10 at most)")
    assert load_state(store.folder).last_check == T0  # a skipped check does not restart the interval
    assert dream(storage, ScriptedModel(), now=T0 + timedelta(minutes=10)).status == "dreamed"


def test_force_ignores_the_gates_but_still_records_the_dream(storage: Path, store: MemoryStore) -> None:
    save_state(store.folder, DreamState(last_dream=T0, last_check=T0))
    result = dream(storage, ScriptedModel(), now=hours(1), force=True)
    assert result == DreamResult("dreamed")
    assert load_state(store.folder) == DreamState(last_dream=hours(1), last_check=T0)


# --- the lock ---------------------------------------------------------------------------------


def write_lock(store: MemoryStore, taken: datetime, pid: int = 999_999) -> bytes:
    store.folder.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"pid": pid, "time": format_time(taken), "token": "someone-else"}).encode()
    lock_path(store).write_bytes(body)
    return body


def test_a_live_lock_makes_the_dream_report_locked(storage: Path, store: MemoryStore) -> None:
    body = write_lock(store, T0 - timedelta(minutes=59))
    model = ScriptedModel()
    result = dream(storage, model, now=T0, force=True)
    assert result == DreamResult("locked", "another dream is running (pid 999999 since 2025-03-01T11:01:00Z)")
    assert lock_path(store).read_bytes() == body
    assert model.prompts == []


def test_a_stale_lock_is_taken_over_and_released_after(storage: Path, store: MemoryStore) -> None:
    write_lock(store, T0 - timedelta(hours=1))
    add_sessions(storage, 1, T0 - timedelta(hours=2))
    model = ScriptedModel()
    assert dream(storage, model, now=T0, force=True).status == "dreamed"
    assert len(model.prompts) == 1  # gathered from the notes: the dream did run
    assert not lock_path(store).exists()
    # The OS locks' files (.dream.flock, .dream.lock.guard) stay: an unlocked one holds nothing.
    assert sorted(p.name for p in store.folder.iterdir() if "lock" in p.name and not p.name.startswith(".")) == []


def test_a_garbled_lock_is_judged_by_its_file_time(store: MemoryStore) -> None:
    store.folder.mkdir(parents=True)
    lock_path(store).write_bytes(b"")  # a lock being written, or a crash mid-write
    assert isinstance(acquire_lock(store.folder, T0), Held)
    taken = (T0 - timedelta(hours=2)).timestamp()
    os.utime(lock_path(store), (taken, taken))
    taken = acquire_lock(store.folder, T0)
    assert isinstance(taken, DreamLock)
    taken.release()


def test_release_never_removes_a_lock_that_is_not_ours(store: MemoryStore) -> None:
    lock = acquire_lock(store.folder, T0)
    assert isinstance(lock, DreamLock)
    body = write_lock(store, T0)
    lock.release()
    assert lock_path(store).read_bytes() == body


def test_threads_breaking_one_stale_lock_together_leave_one_owner(store: MemoryStore) -> None:
    write_lock(store, T0 - timedelta(hours=3))
    barrier = threading.Barrier(8)
    outcomes: list[DreamLock | Held] = []

    def contend() -> None:
        barrier.wait(timeout=10)
        outcomes.append(acquire_lock(store.folder, T0))

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [o for o in outcomes if isinstance(o, DreamLock)]
    assert len(outcomes) == 8 and len(winners) == 1
    assert json.loads(lock_path(store).read_text())["token"] == winners[0].token
    winners[0].release()


# --- rollback ---------------------------------------------------------------------------------


def seed_store(storage: Path, store: MemoryStore) -> None:
    store.apply(write=[stored("Uses polars.", age_days=3), stored("An old transient fact.", age_days=120)], now=T0)
    save_state(store.folder, DreamState(last_dream=T0 - timedelta(days=2), last_check=T0 - timedelta(days=2)))
    add_sessions(storage, 5, T0 - timedelta(hours=6))


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (ScriptedModel(gather=ModelError("The API is overloaded (529).")), "The API is overloaded (529)."),
        (ScriptedModel(gather="I found nothing worth keeping."), "gather phase's reply has no <memories> block"),
        (
            ScriptedModel(
                gather='<memories>\n{"text": "Never use seaborn.", "type": "feedback", "decay": false}\n</memories>',
                consolidate=ModelError("The connection broke."),
            ),
            "The connection broke.",
        ),
        (
            ScriptedModel(
                gather='<memories>\n{"text": "Never use seaborn.", "type": "feedback"}\n</memories>',
                consolidate="Merged them all, trust me.",
            ),
            "no <consolidated> block",
        ),
    ],
)
def test_a_failed_dream_leaves_the_memory_folder_byte_identical(
    storage: Path, store: MemoryStore, model: ScriptedModel, reason: str
) -> None:
    seed_store(storage, store)
    before = folder_bytes(store.folder)
    result = dream(storage, model, now=T0, force=True)
    assert result.status == "failed"
    assert reason in result.reason
    assert result.summary().startswith("Dream failed and was rolled back:")
    assert folder_bytes(store.folder) == before
    assert not lock_path(store).exists()


class DiskFullAfterAdd(MemoryStore):
    """A store whose `add` writes its memory and then fails, as a full disk would mid-dream."""

    def add(self, *args: Any, **kwargs: Any) -> Memory:
        super().add(*args, **kwargs)
        raise OSError("disk full")


def test_a_failure_after_writing_is_rolled_back_too(storage: Path, store: MemoryStore) -> None:
    seed_store(storage, store)
    before = folder_bytes(store.folder)
    gather = '<memories>\n{"text": "Never use seaborn.", "type": "feedback"}\n</memories>'
    failing = DiskFullAfterAdd(store.folder, "project")
    result = dream(storage, ScriptedModel(gather=gather), now=T0, force=True, store=failing)
    assert result == DreamResult("failed", "disk full")
    assert folder_bytes(store.folder) == before


def test_a_failed_gated_dream_keeps_the_last_dream_time(storage: Path, store: MemoryStore) -> None:
    seed_store(storage, store)
    result = dream(storage, ScriptedModel(gather=ModelError("overloaded")), now=T0)
    assert result.status == "failed"
    assert load_state(store.folder) == DreamState(last_dream=T0 - timedelta(days=2), last_check=T0)


# --- the phases, end to end through the real SDK and the offline stand-in -------------------


def test_dream_against_the_offline_stand_in_merges_adds_and_prunes(storage: Path, store: MemoryStore) -> None:
    preference = "I prefer plotly over matplotlib for charts."
    store.apply(
        write=[
            stored(preference, age_days=40, base=0.7),
            stored("Uses polars for dataframes.", age_days=2, decay=False),
            stored("The loader had a bug on day 3.", age_days=120),
        ],
        now=T0,
    )
    notes = f"# Learnings\n- {preference}\n- Never use seaborn in this project.\n- The data was loaded.\n"
    add_sessions(storage, 5, T0 - timedelta(hours=6), notes)
    api = OfflineAPI(OfflineConfig(window=200_000))
    model = SdkTextModel(AnthropicModel(offline_client(api, max_retries=0), name="claude-offline-test"))

    result = dream(storage, model, now=T0)

    assert result == DreamResult("dreamed", "", added=1, merged=1, pruned=1)
    assert api.model_calls("memory") == 2  # gather, consolidate
    by_text = {m.text: m for m in store.all()}
    assert sorted(by_text) == [preference, "Never use seaborn in this project.", "Uses polars for dataframes."]
    merged = by_text[preference]
    assert (merged.relevance, merged.created, merged.updated) == (1.0, T0, T0)  # re-observed today
    assert "loader had a bug" not in store.index.text()
    assert load_state(store.folder).last_dream == T0
    assert not lock_path(store).exists()


def test_nothing_to_gather_or_consolidate_makes_no_call(storage: Path, store: MemoryStore) -> None:
    store.add("Uses polars.", now=T0)
    model = ScriptedModel()
    assert dream(storage, model, now=T0, force=True) == DreamResult("dreamed")
    assert model.prompts == []


def test_prompts_open_with_their_headings_and_list_the_entries(storage: Path, store: MemoryStore) -> None:
    store.add("Uses polars.", now=T0)
    add_sessions(storage, 1, T0 - timedelta(hours=1))
    gather = '<memories>\n{"text": "Never use seaborn.", "type": "feedback"}\n</memories>'
    model = ScriptedModel(gather=gather)
    dream(storage, model, now=T0, force=True)
    assert model.prompts[0].startswith(GATHER_HEADING) and "I prefer plotly" in model.prompts[0]
    assert model.prompts[1].startswith(CONSOLIDATE_HEADING)
    assert '"key": "m1", "text": "Uses polars."' in model.prompts[1]
    assert '"key": "c1", "text": "Never use seaborn."' in model.prompts[1]


# --- consolidation plans (pure) ---------------------------------------------------------------


def test_merging_two_stored_memories_keeps_the_oldest_creation() -> None:
    a, b = stored("Uses polars.", age_days=10), stored("Polars, not pandas.", age_days=20)
    entry = {"text": "Uses polars rather than pandas.", "type": "user", "from": ["m1", "m2"], "relevance": 0.9}
    plan = plan_consolidation({"m1": a, "m2": b}, {}, [entry], T0, "project")
    assert [(m.text, m.created, m.updated, m.relevance) for m in plan.write] == [
        ("Uses polars rather than pandas.", b.created, T0, 0.9)
    ]
    assert plan.remove == (a.id, b.id) and (plan.merged, plan.added) == (1, 0)


def test_drops_unknown_keys_junk_secrets_and_double_claims_are_handled() -> None:
    a, b = stored("Uses polars.", age_days=10), stored("Deadline is Friday.", age_days=5)
    entries = [
        {"drop": "m2", "why": "the deadline moved"},
        {"text": "Deadline is Monday.", "type": "project", "from": ["m2", "c9"]},  # m2 already claimed, c9 unknown
        {"text": "password=hunter22", "type": "project", "from": ["m1"]},
        {"nonsense": True},
        {"text": "Uses polars.", "type": "user", "decay": True, "relevance": 1.0, "from": ["m1"]},  # unchanged
        {"text": "Too sure.", "type": "user", "relevance": 7, "from": ["c1"]},
    ]
    plan = plan_consolidation({"m1": a, "m2": b}, {"c1": Candidate("Sure.", "user", True)}, entries, T0, "user")
    assert plan.remove == (b.id,) and plan.dropped == 1
    assert [(m.text, m.relevance, m.scope, m.created) for m in plan.write] == [
        ("Deadline is Monday.", 1.0, "user", T0),
        ("Too sure.", 1.0, "user", T0),
    ]
    assert plan.added == 2 and plan.leftover == ()
    assert plan.refused == ("a value assigned to password (h*******)",)  # the kind and the value masked


def test_gather_refuses_secret_candidates_and_names_their_kind() -> None:
    @dataclass
    class Canned:
        reply: str

        def complete(self, messages: Sequence[Any], prompt: str) -> str:
            return self.reply

    lines = [json.dumps({"text": t, "type": "project"}) for t in ["My wifi password is swordfish", "Uses polars."]]
    refused: list[str] = []
    found = gather(Canned("<memories>\n" + "\n".join(lines) + "\n</memories>"), [("s1", "notes")], [], T0, refused)
    assert [c.text for c in found] == ["Uses polars."] and refused == ["a password in plain words (s********)"]


def test_candidates_nobody_mentioned_are_left_over() -> None:
    plan = plan_consolidation({}, {"c1": Candidate("Uses polars.", "user", False)}, [], T0, "project")
    assert plan.leftover == (Candidate("Uses polars.", "user", False),) and plan.write == ()


def test_result_summaries() -> None:
    assert DreamResult("dreamed", "", 1, 2, 3).summary() == "Dream done: 1 added, 2 merged, 3 pruned."
    assert DreamResult("dreamed", "", 1, 0, 0, ("a password in plain words",)).summary() == (
        "Dream done: 1 added, 0 merged, 0 pruned. 1 candidate was not stored: it looked like it contained a "
        "password in plain words. Memories are never secrets.")
    assert DreamResult("locked", "another dream is running").summary() == "No dream: another dream is running"


# --- two real processes race for the lock -----------------------------------------------------

RACER = r"""
import json, pathlib, sys, time
from datetime import datetime, timezone
from ctx_magic.memory.dream import dream

root, me = pathlib.Path(sys.argv[1]), sys.argv[2]

def wait_for(path, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"{me}: gave up waiting for {path.name}")
        time.sleep(0.005)

class HeldModel:
    # Blocks inside the first model call until the test says so: the lock is held meanwhile.
    def complete(self, messages, prompt):
        (root / f"in-model-{me}").write_text(me)
        wait_for(root / "release")
        return "<memories></memories>" if "gather phase" in prompt else "<consolidated></consolidated>"

(root / f"ready-{me}").write_text(me)
wait_for(root / "ready-a")
wait_for(root / "ready-b")  # both processes are up: from here they race for the lock
result = dream(root / "storage", HeldModel(), now=datetime(2025, 3, 1, tzinfo=timezone.utc), force=True)
print(json.dumps({"who": me, "status": result.status, "reason": result.reason}))
"""


def test_two_processes_racing_for_the_lock_dream_once(tmp_path: Path) -> None:
    add_sessions(tmp_path / "storage", 1, T0 - timedelta(hours=1))
    racers = {
        name: subprocess.Popen(
            [sys.executable, "-c", RACER, str(tmp_path), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    }
    try:
        deadline = time.monotonic() + 120
        # The loser finishes on its own ("locked"); the winner holds the lock inside the model call.
        while not (any(p.poll() is not None for p in racers.values()) and any(tmp_path.glob("in-model-*"))):
            if len(list(tmp_path.glob("in-model-*"))) == 2:
                break  # both got in: the assertions below say so at once
            assert time.monotonic() < deadline, "the racers did not reach their positions"
            time.sleep(0.01)
        in_model = sorted(p.name for p in tmp_path.glob("in-model-*"))
        (tmp_path / "release").write_text("go")
        outputs = {name: p.communicate(timeout=120) for name, p in racers.items()}
    finally:
        for process in racers.values():
            if process.poll() is None:
                process.kill()
    results = {}
    for name, (out, err) in outputs.items():
        assert racers[name].returncode == 0, err
        results[name] = json.loads(out.strip().splitlines()[-1])
    statuses = sorted(r["status"] for r in results.values())
    assert statuses == ["dreamed", "locked"]
    winner = next(n for n, r in results.items() if r["status"] == "dreamed")
    loser = next(n for n, r in results.items() if r["status"] == "locked")
    assert in_model == [f"in-model-{winner}"]  # the loser never reached the model
    assert results[loser]["reason"].startswith("another dream is running")
    assert not (tmp_path / "storage" / "memory" / LOCK_NAME).exists()


def test_with_review_the_facts_a_dream_gathers_wait_and_only_what_was_kept_is_tidied(
        storage: Path, store: MemoryStore) -> None:
    preference = "I prefer plotly over matplotlib for charts."
    store.apply(write=[stored(preference, age_days=40, base=0.7), stored("The loader had a bug on day 3.",
                                                                         age_days=120)], now=T0)
    notes = f"# Learnings\n- {preference}\n- Never use seaborn in this project.\n- The data was loaded.\n"
    add_sessions(storage, 5, T0 - timedelta(hours=6), notes)
    api = OfflineAPI(OfflineConfig(window=200_000))
    model = SdkTextModel(AnthropicModel(offline_client(api, max_retries=0), name="claude-offline-test"))
    pending = MemoryStore.for_pending(storage)

    result = dream(storage, model, now=T0, pending=pending)

    assert result == DreamResult("dreamed", "", added=0, merged=0, pruned=1, waiting=1)
    assert "1 new waiting for your review: %memory pending." in result.summary()
    assert [m.text for m in store.all()] == [preference]  # the new fact reached no store
    assert [(m.text, m.scope) for m in pending.all()] == [("Never use seaborn in this project.", "project")]
