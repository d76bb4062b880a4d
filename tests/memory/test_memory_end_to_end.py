"""Memory end to end, offline, through the real SDK in a real IPython
shell: a session extracts notes, compacts through session memory with zero extra model calls
(counted by the server), and the next session starts with the first one's memories in its
system prompt."""

from __future__ import annotations

import json

import pytest
from notebook_rig import controller, offline_shell, run, status

from ctx_magic.events import Compacted, Status
from ctx_magic.memory.extraction import EXTRACT_FROM_TOKENS
from ctx_magic.memory.prompts import LONGTERM_HEADING


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as sh:
        yield sh


def batch(n: int) -> str:
    code = f"print('\\n'.join(f'station {n} hour {{h}}: {{(h * 7 + {n}) % 31}} mm' for h in range(150)))"
    return f"%%agent\nRainfall batch {n}, please.\n```python\n{code}\n```"


def test_notes_then_compaction_from_notes_then_memories_in_the_next_session(shell):
    shell.run_line_magic("config", "CtxMagic.context_window = 40000")
    shell.run_line_magic("config", "CtxMagic.clear_at_least = 10000000")  # reach the threshold
    run(shell, "%%agent\nI prefer plots in dark mode. Always label the axes in millimetres.")
    ctl = controller(shell)
    api = ctl.host.backend.stand_in
    calls: dict[str, int] = {}

    def count(event):
        if isinstance(event, Status) and event.state == "compacting":
            calls["before"] = api.model_calls()
        if isinstance(event, Compacted):
            calls["after"] = api.model_calls()

    ctl.listeners.append(count)
    n = 0
    while not ctl.host.session.compaction.boundaries and n < 40:
        run(shell, batch(n))
        n += 1
    assert ctl.memory.notes.extractions >= 1 and ctl.memory.notes.last_error is None
    assert "I prefer plots in dark mode" in ctl.memory.notes.text()
    assert status(shell)["boundaries"][-1]["trigger"] == "session-memory"
    assert calls["after"] == calls["before"], "session-memory compaction made a model call"
    assert api.model_calls("compaction") == 0

    first = ctl.host.session.session_id
    run(shell, "%agent --new")  # the first session ends: its memories are extracted
    _, shown = run(shell, "%%agent\nWhat should the next chart look like?")
    assert status(shell)["session_id"] != first
    system = json.dumps([r for r in api.requests if r.kind == "normal"][-1].body["system"])
    assert "# Long-term memory" in system and "dark mode" in system
    _, listing = run(shell, "%memory show")
    assert "dark mode" in listing and "relevance 1.00" in listing
    assert any("dark mode" in row["text"] for row in ctl.panel.widget.memories)


def test_a_short_session_ends_without_an_extraction_call_and_explicit_extract_still_runs(shell):
    run(shell, "%%agent\nI prefer plots in dark mode.")
    api = controller(shell).host.backend.stand_in
    run(shell, "%agent --new")  # a few hundred tokens, no compaction: nothing worth a side call
    controller(shell).memory.manager.background.wait()
    assert api.model_calls("memory") == 0
    run(shell, "%%agent\nAlways label the axes in millimetres.")
    _, shown = run(shell, "%memory extract")
    assert api.model_calls("memory") == 1 and "Extracted" in shown


def extraction_calls(api) -> int:  # type: ignore[no-untyped-def]
    """Long-term extraction requests the stand-in answered (session notes are memory calls too)."""
    return sum(1 for r in api.requests if r.kind == "memory" and LONGTERM_HEADING in json.dumps(r.body["messages"][-1]))


@pytest.mark.parametrize("then", ["nothing", "a turn"])
def test_a_session_extracted_on_demand_is_asked_again_at_its_end_only_when_something_followed(shell, then):
    ctl = controller(shell)
    for n in range(5):
        run(shell, batch(n))
    assert ctl.host.session.tokens() >= EXTRACT_FROM_TOKENS  # due at its end, by size
    api = ctl.host.backend.stand_in
    run(shell, "%memory extract")
    if then == "a turn":
        run(shell, "%%agent\nAlways label the axes in millimetres.")
    run(shell, "%agent --new")
    ctl.memory.manager.background.wait()
    assert extraction_calls(api) == (1 if then == "nothing" else 2)


def test_memory_magics_add_show_forget_and_refuse_secrets(shell):
    _, shown = run(shell, "%memory add --no-decay The team calls the sales table `fact_sales`.")
    assert "Remembered" in shown and "(no decay)" in shown
    memory_id = shown.split("Remembered ")[1].split(" ")[0]
    _, shown = run(shell, "%memory show")
    assert memory_id in shown and "no decay" in shown
    _, shown = run(shell, "%memory add my key is sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789")
    assert "Refused to store this memory" in shown and "sk-ant" not in shown
    _, shown = run(shell, f"%memory forget {memory_id}")
    assert f"Forgot {memory_id}." in shown
    _, shown = run(shell, "%memory forget nope")
    assert "No memory with id 'nope'" in shown


def test_memory_show_names_a_memory_file_it_cannot_read(shell):
    _, shown = run(shell, "%memory add The team calls the sales table `fact_sales`.")
    memory_id = shown.split("Remembered ")[1].split(":")[0]
    path = controller(shell).memory.manager.project.path_of(memory_id)
    path.write_text(path.read_text().replace("type: user", "type: usr"))  # a hand edit gone wrong
    _, shown = run(shell, "%memory show")
    assert shown.strip() == (f"No long-term memories yet (%memory add TEXT stores one).\n"
                             f"Skipped 1 memory file that could not be read (fix or delete it): {path}: "
                             "unknown type (it must be one of user, feedback, project, reference)")


def test_memory_extract_and_dream_on_demand(shell):
    run(shell, "%%agent\nRemember that we use UTC timestamps everywhere. Never drop duplicate rows silently.")
    _, shown = run(shell, "%memory extract")
    assert "Extracted" in shown and "UTC timestamps" in shown
    _, shown = run(shell, "%memory dream")
    assert "dream" in shown.lower()
