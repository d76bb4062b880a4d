"""A folder other people write: a file there is read only when it is a small regular file of its
own, and the locks taken there never follow a link planted at their path. Each test performs the
attack on a real filesystem (a FIFO with no writer, a link to /dev/zero, a sparse 200 MB file, a
link to a member's private file, a link at a lock's path); a read that waited or followed would
hang the test or fill its memory, so the design holds without any timeout."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ctx_magic.memory.dream_gates import STATE_NAME, load_state
from ctx_magic.memory.lock import LOCK_NAME, OS_LOCK_NAME, DreamLock, Held, acquire_lock
from ctx_magic.memory.manager import MemoryManager
from ctx_magic.memory.record import memory_id
from ctx_magic.memory.shared_folder import (
    INDEX_LOCK_NAME,
    MAX_FILE_BYTES,
    LockSupport,
    RefusedFile,
    index_lock,
    read_regular_file,
)
from ctx_magic.memory.store import INDEX_NAME, MemoryStore
from ctx_magic.memory.team import dream_team
from ctx_magic.settings import Settings

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
LOCAL = LockSupport("shared", "ext4")
BIG = 200 * 1024 * 1024
PRIVATE_LINES = ("---", "the staging db login is admin / Winter2024!", "wifi: correct horse battery staple", "---",
                 "my notes")


def plant_the_attacks(folder: Path) -> dict[str, str]:
    """A FIFO, a link to /dev/zero and a sparse 200 MB file, each named like a memory; what each is."""
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / "pipe.md")
    os.symlink("/dev/zero", folder / "zeros.md")
    with open(folder / "huge.md", "wb") as handle:
        handle.truncate(BIG)  # sparse: 200 MB to read, nothing on the disk
    return {"pipe.md": "a FIFO (named pipe), not a regular file",
            "zeros.md": "a symbolic link (memory files are never links; not followed)",
            "huge.md": f"{BIG:,} bytes, over the {MAX_FILE_BYTES:,} a memory file may hold; not read"}


def test_a_fifo_a_link_to_dev_zero_and_a_huge_file_are_each_refused_by_what_they_are(tmp_path: Path) -> None:
    for name, reason in plant_the_attacks(tmp_path).items():
        with pytest.raises(RefusedFile) as refused:
            read_regular_file(tmp_path / name)
        assert str(refused.value) == reason


def test_a_file_swapped_for_a_fifo_after_the_check_is_caught_on_the_open_file(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    regular = tmp_path / "regular.md"
    regular.write_text("---\n")
    os.mkfifo(tmp_path / "pipe.md")
    looks_regular = os.lstat(regular)
    real_lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda path: looks_regular if str(path).endswith("pipe.md") else real_lstat(path))
    with pytest.raises(RefusedFile, match="replaced by something else while being opened"):
        read_regular_file(tmp_path / "pipe.md")  # opened without blocking, then fstat says what it is


def test_a_hard_link_is_refused_and_a_small_regular_file_is_read_with_its_owner(tmp_path: Path) -> None:
    (tmp_path / "mine.md").write_bytes(b"hello")
    read = read_regular_file(tmp_path / "mine.md")
    assert read.data == b"hello" and read.owner_uid == os.getuid()
    os.link(tmp_path / "mine.md", tmp_path / "theirs.md")
    with pytest.raises(RefusedFile, match="a hard link"):
        read_regular_file(tmp_path / "theirs.md")


def test_every_member_still_gets_a_prompt_and_one_line_names_each_planted_file(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    bob = MemoryManager(tmp_path / "bob", tmp_path / "bob-user",
                        settings=Settings(team_memory_dir=str(tmp_path / "shared"), team="analytics", author="bob"),
                        clock=lambda: T0)
    bob.add("Sales close on the 5th.", team=True)
    planted = plant_the_attacks(bob.require_team().folder)
    assert "Sales close on the 5th." in bob.prompt_section()
    assert {p.path.name: p.reason for p in bob.skipped} == planted
    assert {p.path.name: p.reason for p in bob.problems()} == planted


def test_planted_lock_and_state_files_never_hold_the_team_dream(tmp_path: Path) -> None:
    team = MemoryStore.for_team(tmp_path, "analytics", clock=lambda: T0)
    team.add("Sales close on the 5th.", now=T0, type="project", author="bob")
    plant_the_attacks(team.folder)
    os.mkfifo(team.folder / STATE_NAME)
    assert load_state(team.folder).last_dream is None
    result = dream_team(team, _NoChanges(), now=T0, force=True, holder="bob")  # snapshots the folder, reads state
    assert result.status == "dreamed", result
    os.mkfifo(team.folder / LOCK_NAME)  # a dream lock that is a FIFO: the dream is told it is held, never waits
    assert isinstance(acquire_lock(team.folder, T0, holder="bob", support=LOCAL), Held)


class _NoChanges:
    def complete(self, messages: object, prompt: str) -> str:
        return "<memories></memories>" if "gather phase" in prompt else "<consolidated></consolidated>"


# --- a link to a member's private file ------------------------------------------------------------


def test_a_link_to_a_members_private_file_copies_none_of_it_into_the_shared_index(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    alice = MemoryManager(tmp_path / "alice", tmp_path / "alice-user",
                          settings=Settings(team_memory_dir=str(tmp_path / "shared"), team="analytics", author="alice"),
                          clock=lambda: T0)
    private = tmp_path / "alice-home" / ".env"
    private.parent.mkdir()
    private.write_text("\n".join(PRIVATE_LINES) + "\n")
    own = alice.add("The churn report goes to Dana.")  # alice's own memory, in her private storage
    folder = alice.require_team().folder
    folder.mkdir()
    os.symlink(private, folder / "notes.md")  # planted by another member
    os.symlink(alice.project.path_of(own.id), folder / f"{own.id}.md")
    alice.add("Sales close on the 5th.", team=True)  # alice's session rebuilds the shared index
    index = (folder / INDEX_NAME).read_text()
    for line in [*PRIVATE_LINES[1:3], own.text]:
        assert line not in index
        assert not any(line in p.reason for p in alice.problems())
    assert "notes.md: a symbolic link (memory files are never links; not followed)" in index
    assert [m.scope for m in alice.all() if m.id == own.id] == ["project"]


def test_a_broken_file_is_reported_by_what_is_wrong_never_by_quoting_it(tmp_path: Path) -> None:
    team = MemoryStore.for_team(tmp_path, "analytics", clock=lambda: T0)
    team.folder.mkdir()
    (team.folder / "broken.md").write_text("\n".join(PRIVATE_LINES) + "\n")
    typed = "---\nid: x\ntype: Winter2024!\ncreated: correct horse\nupdated: 2025-01-01\n---\nx\n"
    (team.folder / f"{memory_id('x')}.md").write_text(typed)
    reasons = sorted(p.reason for p in team.problems())
    assert reasons == ["line 2 of the front matter has no colon",
                       "unknown type (it must be one of user, feedback, project, reference)"]
    team.index.rebuild(T0)
    assert "Winter2024" not in team.index.text() and "horse" not in team.index.text()


# --- a link planted at a lock's path --------------------------------------------------------------


def test_a_link_planted_at_a_lock_path_never_truncates_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "alice" / "analysis.ipynb"
    victim.parent.mkdir()
    victim.write_text('{"cells": ["a day of work"]}')
    before = victim.read_bytes()
    folder = tmp_path / "shared" / "analytics"
    folder.mkdir(parents=True)
    for name in (INDEX_LOCK_NAME, OS_LOCK_NAME):
        os.symlink(victim, folder / name)
    with index_lock(folder, LOCAL) as held:
        assert held is False  # refused to lock through the link: the index is rebuilt unlocked
    lock = acquire_lock(folder, T0, holder="bob", support=LOCAL)
    assert isinstance(lock, DreamLock) and lock.os_lock is None  # the lock file alone decides
    lock.release()
    team = MemoryStore.for_team(tmp_path / "shared", "analytics", clock=lambda: T0)
    team.add("Sales close on the 5th.", now=T0, type="project", author="bob")  # rebuilds the index under its lock
    assert victim.read_bytes() == before
