"""What the notebook says: help that shows the cell magic, a line magic given a message, one
arrow everywhere, singular counts, the code on screen before `ask` asks, the composition in
`%ctx status`."""

from __future__ import annotations

import json

import pytest
from IPython.core.error import UsageError
from notebook_rig import captured, cell, controller, offline_shell, run

from ctx_magic.context import model_families
from ctx_magic.events import Compacted, ServerCompacted
from ctx_magic.notebook.display import approval_request
from ctx_magic.notebook.magics import MESSAGE_IN_LINE
from ctx_magic.notebook.notices import compaction_line, server_compaction_line


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as sh:
        yield sh


def test_cell_magic_help_shows_the_cell_form_and_option_values_as_written(shell):
    doc = shell.find_cell_magic("agent").__doc__
    assert "%%agent [--new | --resume [ID]]" in doc and "%agent --new | --resume [ID]" in doc
    assert "--resume [ID]" in doc and "<[ID]>" not in doc and "<{ask,auto,off}>" not in doc
    assert "<[KEEP]>" not in shell.find_line_magic("compact").__doc__


@pytest.mark.parametrize("source", ["%agent some text", "%agent what does this text do?"])
def test_a_line_agent_with_a_message_says_to_use_the_cell_magic(shell, source):
    result, _ = run(shell, source)
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    assert str(result.error_in_exec) == MESSAGE_IN_LINE
    assert "Object `" not in MESSAGE_IN_LINE


def test_a_line_agent_question_mark_alone_is_still_help(shell):
    assert "pinfo" in shell.transform_cell("%agent?")


def test_cells_and_panel_use_the_same_arrow():
    event = Compacted("auto", 12_000, 3_000, 40, "b", ("b",), "s")
    assert compaction_line(event) == "Compacted 40 messages: 12,000 → 3,000 tokens (auto)"


def test_one_message_compacted_is_said_in_the_singular():
    event = Compacted("manual", 2_019, 2_560, 1, "b", ("b",), "s")
    assert compaction_line(event) == "Compacted 1 message: 2,019 → 2,560 tokens (manual)"
    server = ServerCompacted("m", ("m",), "s", 1_000, 400, 1)
    assert server_compaction_line(server) == "The API compacted 1 message: 1,000 -> 400 tokens (server)"


def test_approval_request_highlights_the_code_even_when_it_holds_a_fence():
    bundle = approval_request("s = '```'\nprint(s)")
    assert "````python\ns = '```'\nprint(s)\n````" in bundle["text/markdown"]
    assert bundle["text/plain"].endswith("print(s)")


def test_ask_mode_shows_the_code_before_the_question(shell):
    ctl = controller(shell)
    ctl.settings.permission = "ask"
    shown_when_asked = []
    with captured() as out:
        ctl.executor.ask = lambda prompt: shown_when_asked.append(
            (prompt, [o.data.get("text/markdown") or o.data.get("text/plain", "") for o in out.outputs])) or "y"
        cell(shell, "%%agent\nrun it\n```python\nprint(6 * 7)\n```")
    prompt, shown = shown_when_asked[0]
    assert prompt.startswith("Run this code?")
    assert any("```python\nprint(6 * 7)\n```" in markdown for markdown in shown)
    assert "Waiting for your answer below…" in shown  # the status line no longer says the code runs


def test_status_names_what_the_next_request_carries(shell):
    run(shell, "%%agent\nhello")
    text = repr(shell.run_line_magic("ctx", "status"))  # shown once, as the value's text
    assert "the next request carries: system prompt" in text and "tool results" in text


def test_status_says_which_counter_counts_the_estimates(shell):
    run(shell, "%%agent\nhello")
    assert f"estimates counted with {model_families.counter_name()}" in repr(shell.run_line_magic("ctx", "status"))
    with captured() as out:
        shell.run_line_magic("ctx", "status --json")
    assert json.loads(out.stdout)["token_counter"] == model_families.counter_name()


def test_memory_show_with_no_memories_says_so_and_how_to_add_one(shell):
    result, shown = run(shell, "%memory show")
    assert result.error_in_exec is None
    assert shown.strip() == "No long-term memories yet (%memory add TEXT stores one)."


def test_status_json_is_indented_for_a_person_and_parses(shell):
    run(shell, "%%agent\nhello")
    with captured() as out:
        shell.run_line_magic("ctx", "status --json")
    lines = out.stdout.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and len(lines) > 20
    assert lines[1].startswith(' "') and json.loads(out.stdout)["zone"] == "ok"
