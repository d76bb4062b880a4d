"""`%ctx export`: the session as a notebook that runs top to bottom without ctx_magic (executed
with nbclient in a fresh kernel), the agent's code and the user's cells as code cells with their
outputs, the conversation as Markdown between them, what a compaction summarized tagged."""

from __future__ import annotations

import mistune
import nbformat
import pytest
from nbclient import NotebookClient
from notebook_rig import cell, controller, offline_shell, run

from ctx_magic.notebook.agent_cells import marked
from ctx_magic.notebook.export import BACKGROUND_NOTE

USER = "import statistics\nvalues = [3, 5, 7]"
MEAN = "mean = statistics.mean(values)\nprint('mean', mean)"
RAISES = "values[10]"
REFUSED = "open('never-written.txt', 'w').write('no')"
AFTER = "print('after the compaction', mean * 2)"


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.fixture
def exported(tmp_path, monkeypatch):
    """A session with the user's cells, the agent's code (one block raising, one refused), an
    agent cell run again and a compaction, exported to out.ipynb."""
    with offline_shell(tmp_path, monkeypatch) as shell:
        cell(shell, USER)
        run(shell, f"%%agent\nThe mean, please.\n{fence(MEAN)}\n{fence(RAISES)}")
        run(shell, f"%%agent --permission off\nWrite a file.\n{fence(REFUSED)}")
        shell.run_line_magic("config", "CtxMagic.permission = 'auto'")
        [call] = [b["id"] for m in controller(shell).host.session.live.messages for b in m.blocks("tool_use")
                  if b["name"] == "python" and b["input"]["code"] == MEAN]
        cell(shell, marked(call, MEAN))  # the agent's cell, run again
        run(shell, "%compact")
        run(shell, f"%%agent\nDouble it.\n{fence(AFTER)}")
        _, shown = run(shell, f"%ctx export {tmp_path / 'out.ipynb'}")
        assert f"Wrote the session as a notebook to {tmp_path / 'out.ipynb'}" in shown
    return nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)


def test_the_export_holds_the_code_as_cells_and_the_conversation_between_them(exported):
    nbformat.validate(exported)
    code = [c for c in exported.cells if c.cell_type == "code"]
    assert [c.source for c in code] == [USER, MEAN, RAISES, MEAN, AFTER]
    assert code[1].outputs[0].text == "mean 5\n" and code[1].metadata["ctx_magic"]["agent"]["tool_use_id"]
    assert code[3].outputs[0].text == "mean 5\n"  # the run again, without the line that told the agent
    assert code[2].metadata["tags"] == ["ctx-agent", "raises-exception", "summarized"]
    assert code[0].metadata["tags"] == ["summarized"]  # the user's own cell
    assert code[2].outputs[-1].output_type == "error" and code[2].outputs[-1].ename == "IndexError"
    markdown = "\n\n".join(c.source for c in exported.cells if c.cell_type == "markdown")
    assert "**You:**\n\nThe mean, please." in markdown and "**Agent:**" in markdown
    assert "*The agent's code, not run (Running code is turned off here" in markdown and REFUSED in markdown
    assert "**The agent's context was compacted here** (manual)" in markdown
    assert "**The summary the agent kept:**" in markdown
    assert markdown.count("the agent's context later kept only a summary") == 1
    summarized = [c.source for c in code if "summarized" in c.metadata.get("tags", [])]
    assert summarized == [USER, MEAN, RAISES, MEAN]  # everything before the compaction, nothing after
    assert not any("ctx_magic" in c.source or c.source.startswith("%") for c in code)


@pytest.mark.slow  # a real kernel
def test_the_export_runs_top_to_bottom_in_a_kernel_without_ctx_magic(exported, tmp_path):
    exported.cells.append(nbformat.v4.new_code_cell("import sys\nprint('ctx_magic' in sys.modules)"))
    NotebookClient(exported, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in exported.cells if c.cell_type == "code"]
    assert [c.outputs[0].text for c in code if c.source in (MEAN, AFTER)] == [
        "mean 5\n", "mean 5\n", "after the compaction 10\n"]
    assert code[-1].outputs[0].text == "False\n"
    assert not (tmp_path / "never-written.txt").exists()  # the code that was refused stays unrun


BACKGROUND = "print('in the background')"
ASKS = "answer = input('Go on? [y/N] ')\nprint('answered', answer)"


@pytest.fixture
def exported_runs(tmp_path, monkeypatch):
    """A session with a background run and a foreground run that waited for input, exported."""
    with offline_shell(tmp_path, monkeypatch) as shell:
        run(shell, f"%%agent\nIn the background, please.\n```python background\n{BACKGROUND}\n```")
        _, asked = run(shell, f"%%agent\nAsk first.\n{fence(ASKS)}")
        assert "waiting for input after 'Go on? [y/N]'" in asked
        _, stopped = run(shell, "%ctx stop t2")
        assert "t2" in stopped
        run(shell, f"%ctx export {tmp_path / 'out.ipynb'}")
    return nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)


def test_a_background_run_and_a_run_that_waited_for_input_export_as_cells_a_kernel_can_run(exported_runs):
    exported = exported_runs
    code = [c for c in exported.cells if c.cell_type == "code"]
    assert [c.source for c in code] == [BACKGROUND, ASKS]
    # The background run's output went to its log: the cell shows none, a note above says why.
    assert code[0].outputs == [] and code[0].metadata["tags"] == ["ctx-agent"]
    assert exported.cells[exported.cells.index(code[0]) - 1].source == BACKGROUND_NOTE
    # input() stops where nobody can type: the cell's error is expected, and the run goes on past it.
    assert code[1].metadata["tags"] == ["ctx-agent", "raises-exception"]


@pytest.mark.slow  # a real kernel
def test_an_export_with_a_run_that_waited_for_input_runs_to_its_end(exported_runs, tmp_path):
    exported_runs.cells.append(nbformat.v4.new_code_cell("print('the end')"))
    NotebookClient(exported_runs, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in exported_runs.cells if c.cell_type == "code"]
    assert code[0].outputs[0].text == "in the background\n"
    assert code[1].outputs[-1].ename == "StdinNotImplementedError"  # nobody can type here
    assert code[-1].outputs[0].text == "the end\n"


FAILS = "print('loading')\n1 / 0"
LOOPS = "import time\nwhile True:\n    time.sleep(0.05)"


@pytest.fixture
def exported_ended_runs(tmp_path, monkeypatch):
    """A session with a background run that failed and one the user stopped, exported."""
    with offline_shell(tmp_path, monkeypatch) as shell:
        run(shell, f"%%agent\nIn the background, please.\n```python background\n{FAILS}\n```")
        run(shell, f"%%agent\nWatch it in the background.\n```python background\n{LOOPS}\n```")
        runs = controller(shell).runs
        assert runs.find("t1")[0].done.wait(20)
        _, stopped = run(shell, "%ctx stop t2")
        assert "Run t2 stopped." in stopped
        run(shell, f"%ctx export {tmp_path / 'out.ipynb'}")
    return nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)


def test_a_background_run_that_failed_is_tagged_and_one_stopped_is_not_a_cell(exported_ended_runs):
    exported = exported_ended_runs
    code = [c for c in exported.cells if c.cell_type == "code"]
    assert [c.source for c in code] == [FAILS]
    assert code[0].metadata["tags"] == ["ctx-agent", "raises-exception"]
    markdown = "\n\n".join(c.source for c in exported.cells if c.cell_type == "markdown")
    assert ("*The agent's code, run in the background and stopped (a run that did not end by itself is not a "
            f"cell here):*\n\n```python\n{LOOPS}\n```") in markdown


@pytest.mark.slow  # a real kernel
def test_an_export_with_background_runs_that_failed_or_were_stopped_runs_to_its_end(exported_ended_runs, tmp_path):
    exported_ended_runs.cells.append(nbformat.v4.new_code_cell("print('the end')"))
    NotebookClient(exported_ended_runs, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in exported_ended_runs.cells if c.cell_type == "code"]
    assert code[0].outputs[-1].ename == "ZeroDivisionError"
    assert code[-1].outputs[0].text == "the end\n"


def test_the_users_prompt_keeps_its_lines_and_its_stars_while_the_agents_reply_stays_markdown(tmp_path, monkeypatch):
    prompt = "Take my_var and 2*3*4.\nThen *this* line, __as typed__."
    with offline_shell(tmp_path, monkeypatch) as shell:
        cell(shell, "my_var = 7")
        run(shell, f"%%agent\n{prompt}\n{fence('print(my_var * 2)')}")
        replies = [m.text for m in controller(shell).host.session.live.messages if m.role == "assistant" and m.text]
        run(shell, f"%ctx export {tmp_path / 'out.ipynb'}")
    markdown = [c.source for c in nbformat.read(str(tmp_path / "out.ipynb"), as_version=4).cells
                if c.cell_type == "markdown"]
    [you] = [source for source in markdown if source.startswith("**You:**")]
    html = mistune.html(you)
    assert "Take my_var and 2*3*4.<br />\nThen *this* line, __as typed__." in html
    assert "<em>" not in html and "<strong>" not in html.replace("<strong>You:</strong>", "")
    assert '<code class="language-python">print(my_var * 2)' in html  # the fence stays code
    assert replies and [s for s in markdown if s.startswith("**Agent:**")] == [f"**Agent:**\n\n{r}" for r in replies]


@pytest.mark.parametrize("option", ["", "--transcript"])
def test_an_export_never_replaces_a_notebook_that_is_there_unless_forced(tmp_path, monkeypatch, option):
    theirs = tmp_path / "analysis.ipynb"
    theirs.write_text("the user's own notebook")
    with offline_shell(tmp_path, monkeypatch) as shell:
        run(shell, "%%agent\nhello")
        _, shown = run(shell, f"%ctx export {option} {theirs}")
        assert f"{theirs} exists already: the " in shown and "(--force replaces it)" in shown
        assert "Traceback" not in shown and "Wrote" not in shown
        assert theirs.read_text() == "the user's own notebook"
        _, shown = run(shell, "%ctx status")  # the session still works
        assert "Traceback" not in shown
        _, shown = run(shell, f"%ctx export {theirs} {option} --force")
        assert f"to {theirs}" in shown
    nbformat.validate(nbformat.read(str(theirs), as_version=4))


def test_an_export_into_the_session_folder_is_replaced_each_time(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        run(shell, "%%agent\nhello")
        run(shell, "%ctx export")
        run(shell, "%%agent\nand again")
        _, shown = run(shell, "%ctx export")
        written = controller(shell).host.session.store.root / "notebook.ipynb"
        assert f"Wrote the session as a notebook to {written}" in shown
    assert "and again" in written.read_text()
