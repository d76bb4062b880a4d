"""Every file of a session is its owner's alone (0600, in 0700 folders) whatever the umask, and the
storage folder keeps itself out of git: a session run in a real shell, then every file it left
is checked, as another local user or a `git add -A` beside the notebook would find them."""

from __future__ import annotations

import os
import stat
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from notebook_rig import cell, controller, offline_shell, run
from tasks_rig import WAIT, only_run

from ctx_magic.store.files import (
    IGNORE_FILE,
    PRIVATE_FILE_MODE,
    PRIVATE_FOLDER_MODE,
    atomic_write_text,
    make_private_folder,
    open_private_append,
)

TYPED_TOKEN = "sk-typed-in-a-cell-0123456789"
LARGE = "print('x' * 60_000)"  # over the size kept once in tool-results/ beside the transcript


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def modes(folder: Path) -> dict[str, int]:
    """Every file and folder under `folder` (itself too) by relative path, with its permission bits."""
    found = {".": stat.S_IMODE(folder.stat().st_mode)}
    for path in folder.rglob("*"):
        found[path.relative_to(folder).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return found


def not_private(folder: Path) -> dict[str, str]:
    wrong = {}
    for name, mode in modes(folder).items():
        path = folder / name
        expected = PRIVATE_FOLDER_MODE if path.is_dir() else PRIVATE_FILE_MODE
        if mode != expected:
            wrong[name] = oct(mode)
    return wrong


def full_session(shell) -> Path:
    """A session that leaves every kind of file: transcript, state, pending cell, tool-results,
    a background run's log and json, both exports into the session folder, a project memory."""
    run(shell, "%%agent\nhello")
    cell(shell, f"token = {TYPED_TOKEN!r}")
    store = controller(shell).host.session.store
    assert TYPED_TOKEN in store.pending_cells_path.read_text()  # waiting for the next turn, on disk
    pending = modes(store.root)["pending-cells.jsonl"]
    run(shell, f"%%agent\nprint it large\n```python\n{LARGE}\n```\n```python background\nprint(token)\n```")
    assert only_run(controller(shell).runs).done.wait(WAIT)
    run(shell, "%ctx export")
    run(shell, "%ctx export --transcript")
    _, shown = run(shell, "%memory add Reports go out on Mondays.")
    assert "Reports go out on Mondays" in shown
    controller(shell).host.session.end_turn()
    names = {p.relative_to(store.root).as_posix() for p in store.root.rglob("*")}
    assert {"transcript.jsonl", "state.json", "notebook.ipynb", "transcript.ipynb", "tasks/t1.log",
            "tasks/t1.json"} <= names
    assert any(n.startswith("tool-results/") for n in names)
    assert TYPED_TOKEN in (store.tasks_dir / "t1.log").read_text()  # what the run printed
    assert pending == PRIVATE_FILE_MODE
    return store.storage


def test_every_file_of_a_session_is_private_whatever_the_umask(tmp_path, monkeypatch, umask):
    with offline_shell(tmp_path, monkeypatch) as shell:
        storage = full_session(shell)
        user_scope = controller(shell).memory.manager.user  # written by extraction, which needs a longer session
        user_scope.add("Prefers seaborn for plots.", type="user", now=datetime.now(timezone.utc))
        assert (storage / "memory").is_dir() and any((storage / "memory").glob("*.md"))
        assert not_private(storage) == {}
        assert not_private(tmp_path / ".user-data") == {}  # the user-scope memories' folder


def test_an_export_to_a_path_the_user_names_is_theirs_with_the_usual_permissions(tmp_path, monkeypatch, umask):
    with offline_shell(tmp_path, monkeypatch) as shell:
        run(shell, "%%agent\nhello")
        run(shell, f"%ctx export {tmp_path / 'mine.ipynb'}")
    assert stat.S_IMODE((tmp_path / "mine.ipynb").stat().st_mode) == 0o666 & ~umask


def test_git_add_all_beside_the_notebook_commits_no_transcript(tmp_path, tmp_path_factory, monkeypatch):
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "analysis.ipynb").write_text("{}")
    with offline_shell(tmp_path, monkeypatch) as shell:  # the user's own memories live elsewhere, as they do
        shell.run_line_magic("config", f"CtxMagic.user_memory_dir = {str(tmp_path_factory.mktemp('user'))!r}")
        full_session(shell)
    assert (tmp_path / ".ctx_magic" / "sessions").is_dir()
    git("add", "-A")
    staged = git("status", "--porcelain", "--untracked-files=all").splitlines()
    assert staged == ["A  analysis.ipynb"]


def test_a_storage_folder_the_user_already_has_gets_no_ignore_file(tmp_path, monkeypatch):
    mine = tmp_path / "my-sessions"
    mine.mkdir()
    with offline_shell(tmp_path, monkeypatch) as shell:
        shell.run_line_magic("config", f"CtxMagic.storage_dir = {str(mine)!r}")
        run(shell, "%%agent\nhello")
    assert (mine / "sessions").is_dir() and not (mine / IGNORE_FILE).exists()


def test_the_helpers_make_exactly_private_modes_under_an_open_umask(tmp_path, umask):
    folder = tmp_path / "a" / "b"
    make_private_folder(folder)
    atomic_write_text(folder / "notes.md", "a password a run printed")
    with open_private_append(tmp_path / "c" / "log") as log:
        log.write(b"line\n")
    assert not_private(tmp_path / "a") == {} and not_private(tmp_path / "c") == {}
