"""The agent's code as notebook cells, in-process: what each block's display carries, the
next-input fallback where the labextension is absent, `%ctx cell`, and how a re-run agent cell
reaches the context (only its new output unchanged, a diff edited, the whole cell when the call is
no longer in the context)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from notebook_rig import captured, cell, controller, offline_shell, run, status

from ctx_magic.context.recall import entries
from ctx_magic.notebook.agent_cells import AGENT_CODE_MIME, FRONTEND_ENV, agent_call_of, marked

RUN = "n = globals().get('n', 0) + 1\nprint('run', n)"
TWO_LINES = "a = 2\nprint('a is', a)"


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.delenv(FRONTEND_ENV, raising=False)
    with offline_shell(tmp_path, monkeypatch) as sh:
        yield sh


@pytest.fixture
def next_inputs(shell, monkeypatch) -> list[tuple[str, bool]]:
    """What the kernel asked the frontend to place as the next input (IPython's payload)."""
    placed: list[tuple[str, bool]] = []
    monkeypatch.setattr(shell, "set_next_input", lambda text, replace=False: placed.append((text, replace)))
    return placed


def turn(shell, source: str) -> list[Any]:
    """Run a %%agent cell; the payloads of the agent's code blocks it displayed."""
    with captured() as out:
        cell(shell, source)
    return [o for o in out.outputs if AGENT_CODE_MIME in o.data]


def payloads(outputs: list[Any]) -> list[dict[str, Any]]:
    return [o.data[AGENT_CODE_MIME] for o in outputs]


def live(shell):
    return controller(shell).host.session.live.messages


def python_calls(shell) -> list[str]:
    return [b["id"] for m in live(shell) for b in m.blocks("tool_use") if b["name"] == "python"]


def cell_pairs(shell) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """(input, meta, result text) of every notebook_cell in the live context."""
    results = {b["tool_use_id"]: b for m in live(shell) for b in m.blocks("tool_result")}
    pairs = []
    for message in live(shell):
        for block in message.blocks("tool_use"):
            if block["name"] == "notebook_cell":
                content = results[block["id"]]["content"]
                text = content if isinstance(content, str) else content[0]["text"]
                pairs.append((block["input"], dict(message.meta), text))
    return pairs


def test_each_block_of_the_agents_code_carries_its_cell(shell):
    shown = turn(shell, f"%%agent\ngo\n{fence(RUN)}\n{fence('print(40 + 2)')}")
    first, second = payloads(shown)
    calls = python_calls(shell)
    assert [first["call"], second["call"]] == calls
    assert first["source"] == marked(calls[0], RUN) == f"# ctx: agent {calls[0]}\n{RUN}"
    assert first["code"] == RUN and first["session"] == status(shell)["session_id"]
    assert first["outputs"] == [{"output_type": "stream", "name": "stdout", "text": "run 1\n"}]
    assert (first["mode"], first["ran"]) == ("button", True)
    assert second["order"] == first["order"] + 1
    # A frontend without the labextension shows the block as before, with a line saying what to run.
    assert shown[0].data["text/html"].startswith('<details class="ctx-magic-tool" open>')
    assert f"run %ctx cell {calls[0]} in an empty cell" in shown[0].data["text/html"]


def test_each_block_carries_its_place_in_its_turn_and_the_count_it_ran_under(shell):
    first_turn = payloads(turn(shell, f"%%agent\ngo\n{fence(RUN)}\n{fence('41 + 1')}"))
    first_count = shell.execution_count - 1  # the %%agent cell's, now that it has finished
    second_turn = payloads(turn(shell, f"%%agent\nagain\n{fence(TWO_LINES)}"))
    assert [p["index"] for p in first_turn + second_turn] == [1, 2, 1]  # the label's "block 2 of its turn"
    assert [p["count"] for p in first_turn] == [first_count, first_count]
    assert second_turn[0]["count"] == shell.execution_count - 1 == first_count + 1
    [result] = [o for o in first_turn[1]["outputs"] if o["output_type"] == "execute_result"]
    assert result["execution_count"] == first_count  # the cell's Out[n] says the same run


def test_a_block_that_did_not_run_has_no_count(shell):
    ctl = controller(shell)
    ctl.settings.permission = "ask"
    ctl.executor.ask = lambda prompt: "n"
    asked, declined = payloads(turn(shell, f"%%agent\ngo\n{fence(RUN)}"))
    assert (asked["count"], declined["count"]) == (None, None)


def test_a_blocks_outputs_are_the_cells_outputs_displays_results_and_errors(shell):
    code = "from IPython.display import HTML, display\ndisplay(HTML('<b>bold</b>'))\n41 + 1"
    shown = payloads(turn(shell, f"%%agent\ngo\n{fence(code)}\n{fence('1 / 0')}"))
    displayed, raised = shown[0]["outputs"], shown[1]["outputs"]
    assert [o["output_type"] for o in displayed] == ["display_data", "execute_result"]
    assert displayed[0]["data"]["text/html"] == "<b>bold</b>" and displayed[1]["data"]["text/plain"] == "42"
    [error] = raised
    assert (error["output_type"], error["ename"], error["evalue"]) == ("error", "ZeroDivisionError", "division by zero")


def test_off_offers_no_cells(shell, next_inputs):
    shell.run_line_magic("config", "CtxMagic.agent_cells = 'off'")
    assert turn(shell, f"%%agent\ngo\n{fence(RUN)}") == []
    assert next_inputs == []


def test_ask_mode_offers_the_code_before_it_runs_and_after_it_is_declined(shell):
    ctl = controller(shell)
    ctl.settings.permission = "ask"
    ctl.executor.ask = lambda prompt: "n"
    asked, declined = payloads(turn(shell, f"%%agent\ngo\n{fence(RUN)}"))
    assert asked["call"] == declined["call"] == python_calls(shell)[0]
    assert (asked["ran"], asked["outputs"], declined["ran"]) == (False, [], False)
    assert "n" not in shell.user_ns


def test_without_the_labextension_insert_places_one_block_per_execution(shell, next_inputs):
    shell.run_line_magic("config", "CtxMagic.agent_cells = 'insert'")
    turn(shell, f"%%agent\ngo\n{fence(RUN)}\n{fence(TWO_LINES)}")
    first, second = python_calls(shell)
    assert next_inputs == [(marked(first, RUN), False)]  # the turn's reply carries the first block
    cell(shell, next_inputs[0][0])  # the frontend placed it; the person runs it
    assert next_inputs[1:] == [(marked(second, TWO_LINES), False)]  # and the next comes below it
    cell(shell, next_inputs[1][0])
    assert len(next_inputs) == 2  # nothing left to place


def test_with_the_labextension_the_kernel_places_nothing_and_shows_no_hint(shell, next_inputs, monkeypatch):
    monkeypatch.setenv(FRONTEND_ENV, "@ctx-magic/labextension 0.1.0")  # what the extension sets
    shell.run_line_magic("config", "CtxMagic.agent_cells = 'insert'")
    [shown] = turn(shell, f"%%agent\ngo\n{fence(RUN)}")
    assert next_inputs == [] and "%ctx cell" not in shown.data["text/html"]
    assert shown.data[AGENT_CODE_MIME]["mode"] == "insert"


def test_ctx_cell_turns_the_cell_into_the_agents_code(shell, next_inputs):
    turn(shell, f"%%agent\ngo\n{fence(RUN)}\n{fence(TWO_LINES)}")
    first, second = python_calls(shell)
    run(shell, f"%ctx cell {first}")
    run(shell, "%ctx cell")
    assert next_inputs == [(marked(first, RUN), True), (marked(second, TWO_LINES), True)]  # as %load does
    _, shown = run(shell, "%ctx cell toolu_nope")
    assert "No python call toolu_nope in this session" in shown and "Traceback" not in shown


def test_an_agent_cell_run_again_unchanged_sends_only_its_new_output(shell):
    turn(shell, f"%%agent\ngo\n{fence(RUN)}")
    [call] = python_calls(shell)
    cell(shell, marked(call, RUN))
    turn(shell, "%%agent\nand now?")
    [(tool_input, meta, text)] = cell_pairs(shell)
    assert tool_input == {"execution_count": tool_input["execution_count"], "ran_again": call}
    assert text.startswith(f"The user ran your code from call {call} again, unchanged")
    assert text.endswith("run 2")
    assert meta["agent_call"] == call
    sent = json.dumps([[b for b in m.to_json()["content"] if b.get("type") != "thinking"]  # it quotes the prompt
                       for m in live(shell)])
    assert sent.count("globals().get('n', 0)") == 2  # the user's fence and the agent's call: no third copy


def test_an_agent_cell_of_a_cell_magic_runs_with_its_marker_line_above_the_magic(shell):
    code = "%%time\nkept = 6 * 7\nprint('kept', kept)"
    turn(shell, f"%%agent\ngo\n{fence(code)}")
    [call] = python_calls(shell)
    result = cell(shell, marked(call, code))
    assert result.success  # a cell magic must open its cell: the marker line is a comment IPython drops
    assert shell.user_ns["kept"] == 42
    turn(shell, "%%agent\nand now?")
    [(tool_input, _meta, _text)] = cell_pairs(shell)
    assert tool_input["ran_again"] == call


def test_an_edited_agent_cell_sends_a_diff_against_the_version_the_agent_last_saw(shell):
    turn(shell, f"%%agent\ngo\n{fence(TWO_LINES)}")
    [call] = python_calls(shell)
    cell(shell, marked(call, "a = 3\nprint('a is', a)"))
    cell(shell, marked(call, "a = 3\nprint('a is now', a)"))
    turn(shell, "%%agent\nand now?")
    (first, _, first_text), (second, _, second_text) = cell_pairs(shell)
    assert first["edited"] == second["edited"] == call
    assert first["diff"].splitlines()[2:] == ["@@ -1 +1 @@", "-a = 2", "+a = 3"]
    assert second["diff"].splitlines()[2:] == ["@@ -2 +2 @@", "-print('a is', a)", "+print('a is now', a)"]
    assert first_text.endswith("a is 3") and second_text.endswith("a is now 3")


def test_a_rewritten_agent_cell_sends_its_new_code(shell):
    turn(shell, f"%%agent\ngo\n{fence(TWO_LINES)}")
    [call] = python_calls(shell)
    cell(shell, marked(call, "print('something else')"))
    turn(shell, "%%agent\nand now?")
    [(tool_input, _, text)] = cell_pairs(shell)
    assert tool_input["source"] == "print('something else')" and "diff" not in tool_input
    assert text.startswith(f"The user rewrote your code from call {call}")


def test_an_agent_cell_whose_call_was_summarized_goes_in_whole(shell):
    turn(shell, f"%%agent\ngo\n{fence(RUN)}")
    [call] = python_calls(shell)
    run(shell, "%compact")
    cell(shell, marked(call, RUN))
    turn(shell, "%%agent\nand now?")
    [(tool_input, meta, text)] = cell_pairs(shell)
    assert tool_input["source"] == marked(call, RUN) and "agent_call" not in meta
    assert text == "run 2"


def test_the_marker_names_the_call_and_the_code_below_it():
    assert agent_call_of("# ctx: agent toolu_01AB\nx = 1\n") == ("toolu_01AB", "x = 1")
    assert agent_call_of("#ctx: Agent toolu_01AB\nx = 1") == ("toolu_01AB", "x = 1")
    assert agent_call_of("x = 1\n# ctx: agent toolu_01AB") is None
    assert agent_call_of("# ctx: agent\nx = 1") is None


def test_the_transcript_search_shows_what_a_rerun_ran(shell):
    turn(shell, f"%%agent\ngo\n{fence(TWO_LINES)}")
    [call] = python_calls(shell)
    cell(shell, marked(call, TWO_LINES))
    cell(shell, marked(call, "a = 5\nprint('a is', a)"))
    turn(shell, "%%agent\nand now?")
    store = controller(shell).host.session.store
    found = [e.text for e in entries(store.load_transcript().records) if "[notebook cell" in e.text]
    assert f"(the code of call {call}, run again unchanged)" in found[0]
    assert "-a = 2\n+a = 5" in found[1]
