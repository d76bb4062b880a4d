"""`%ctx status` shows the context once: its value is the cell's result, with the status lines as
its text and under its table, and nothing is printed beside it."""

from __future__ import annotations

import pytest
from notebook_rig import captured, cell, clocked_shell

import ctx_magic


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with clocked_shell(tmp_path, monkeypatch) as sh:  # a manual clock: two reads agree on the cache
        yield sh


def test_ctx_status_shows_its_lines_once_as_its_value(shell):
    cell(shell, "%%agent\nhello")
    with captured() as out:
        result = cell(shell, "%ctx status").result
    data, _ = shell.display_formatter.format(result)
    assert out.outputs == []  # nothing displayed beside the value
    assert out.stdout.count("context management:") == 1  # the value, as the terminal's Out shows it
    assert data["text/plain"].startswith(f"session {result.session_id} · ")
    assert "<table class='ctx-magic-context'>" in data["text/html"]
    assert data["text/html"].count("context management:") == 1
    assert result == ctx_magic.context() and "context management:" not in repr(ctx_magic.context())
