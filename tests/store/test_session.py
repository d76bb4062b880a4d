"""One kernel per session: the hold is atomic across processes, lasts until release, and a dead
process's hold is taken over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ctx_magic.errors import Remedy, SessionInUse
from ctx_magic.store.session import SessionDir

ROUNDS = 40

# A process that claims or releases a session when told to on stdin, and says what happened.
CLAIMER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ctx_magic.errors import Remedy, SessionInUse
    from ctx_magic.store.session import SessionDir
    store = SessionDir(Path(sys.argv[1]), sys.argv[2])
    for line in sys.stdin:
        if line.strip() == "claim":
            try:
                store.claim()
                print("won", flush=True)
            except SessionInUse as error:
                print("lost", error, flush=True)
        elif line.strip() == "release":
            store.release()
            print("released", flush=True)
""")


class Claimer:
    def __init__(self, storage, session_id: str = "s1") -> None:
        self.process = subprocess.Popen([sys.executable, "-c", CLAIMER, str(storage), session_id],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def tell(self, command: str) -> None:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def answer(self) -> str:
        return self.process.stdout.readline().strip()

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def claimers(tmp_path):
    SessionDir(tmp_path, "s1").create()
    pair = [Claimer(tmp_path), Claimer(tmp_path)]
    yield pair
    for claimer in pair:
        claimer.close()


def test_of_two_processes_claiming_at_once_exactly_one_wins_every_time(claimers):
    for _ in range(ROUNDS):
        for claimer in claimers:
            claimer.tell("claim")
        answers = [claimer.answer() for claimer in claimers]
        assert sorted(a.split()[0] for a in answers) == ["lost", "won"], answers
        assert "is open in another kernel" in next(a for a in answers if a.startswith("lost"))
        winner = claimers[[a.split()[0] for a in answers].index("won")]
        winner.tell("release")
        assert winner.answer() == "released"


def test_the_hold_lasts_until_release_and_names_the_holder(tmp_path, claimers):
    first, second = claimers
    first.tell("claim")
    assert first.answer() == "won"
    for _ in range(3):
        second.tell("claim")
        assert second.answer() == (f"lost Session s1 is open in another kernel (process {first.process.pid}). Close "
                                   "that kernel first.")
    first.tell("release")
    assert first.answer() == "released"
    second.tell("claim")
    assert second.answer() == "won"


def test_a_killed_process_claim_is_taken_over_at_once(tmp_path, claimers):
    first, second = claimers
    first.tell("claim")
    assert first.answer() == "won"
    first.close()  # SIGKILL: no release, owner.json still names it
    assert json.loads(SessionDir(tmp_path, "s1").owner_path.read_text())["pid"] == first.process.pid
    second.tell("claim")
    assert second.answer() == "won"


def test_claiming_again_in_the_same_process_is_fine_and_release_frees_it(tmp_path):
    store = SessionDir(tmp_path, "s2").create()
    store.claim()
    store.claim()
    assert json.loads(store.owner_path.read_text())["pid"] == os.getpid()
    other = Claimer(tmp_path, "s2")
    try:
        other.tell("claim")
        assert other.answer().startswith("lost")
        store.release()
        assert not store.owner_path.exists()
        other.tell("claim")
        assert other.answer() == "won"
    finally:
        other.close()


def test_release_leaves_another_process_hold_alone(tmp_path, claimers):
    first, _ = claimers
    first.tell("claim")
    assert first.answer() == "won"
    store = SessionDir(tmp_path, "s1")
    store.release()  # not ours
    assert json.loads(store.owner_path.read_text())["pid"] == first.process.pid
    with pytest.raises(SessionInUse) as refused:
        store.claim()
    assert refused.value.remedy == Remedy.NEW_SESSION
