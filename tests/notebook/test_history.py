"""`kernel_history`: cells run before ctx_magic was loaded, or before the session started, come
back to the agent on request with what IPython kept of their output; cells the live context holds
and ctx_magic's own are left out; a long history comes a page at a time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from IPython.core.interactiveshell import InteractiveShell
from notebook_rig import cell, close_shell, controller, fresh_shell, run

from ctx_magic.agent.tools import ToolCall
from ctx_magic.messages import result_text
from ctx_magic.notebook.history import PAGE_CHARS, _kept_output


@pytest.fixture
def bare_shell(tmp_path, monkeypatch):
    """A kernel-like shell where ctx_magic is not loaded yet (the test loads it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    shell = fresh_shell()
    # IPython keeps what cells printed in a dict every shell of the process shares (a kernel has
    # one shell): a test's shell starts it empty, as a new kernel does.
    for kept in (getattr(shell.history_manager, "outputs", {}), getattr(shell.history_manager, "exceptions", {})):
        kept.clear()
    yield shell
    if controller(shell) is not None:
        close_shell(shell)
    InteractiveShell.clear_instance()


def load(shell) -> None:
    cell(shell, "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False\n"
                "%config CtxMagic.user_memory_dir = '.user-data'")


def history_results(shell) -> list[str]:
    session = controller(shell).host.session
    calls = {b["id"] for m in session.live.messages for b in m.blocks("tool_use") if b["name"] == "kernel_history"}
    return [result_text(b) for m in session.live.messages for b in m.blocks("tool_result") if b["tool_use_id"] in calls]


def read_history(shell, **arguments) -> str:
    [tool] = [t for t in controller(shell).executor.tools() if t.spec["name"] == "kernel_history"]
    return str(tool.run(ToolCall("toolu_test", "kernel_history", arguments), None).content)


def test_continue_from_where_i_was_reads_the_cells_run_before_ctx_magic(bare_shell):
    cell(bare_shell, "import math\nradius = 3\nprint('area', round(math.pi * radius ** 2, 2))")
    cell(bare_shell, "radius * 2")
    cell(bare_shell, "1 / 0")
    load(bare_shell)
    cell(bare_shell, "print('after loading')")  # recorded: it enters the context with the turn
    run(bare_shell, "%%agent\nContinue from where I was.")
    [text] = history_results(bare_shell)
    assert text.startswith("3 cells of this kernel's history the conversation does not hold")
    assert "--- In[1] ---\nimport math\nradius = 3" in text and "[output]\narea 28.27" in text
    assert "--- In[2] ---\nradius * 2\n[output]\n[Out[2]]\n6" in text
    assert "[error]\nZeroDivisionError: division by zero" in text
    assert "after loading" not in text and "load_ext" not in text and "%%agent" not in text


def test_the_agent_is_told_displays_are_not_kept_where_the_kernel_keeps_none(bare_shell):
    cell(bare_shell, "print('before')")
    load(bare_shell)
    assert read_history(bare_shell).startswith("1 cell of this kernel's history the conversation does not hold, "
                                               "with what they printed, displayed, returned and raised:")
    bare_shell.display_pub.store_display_history = False  # ipykernel's display publisher, as it ships
    assert read_history(bare_shell).startswith("1 cell of this kernel's history the conversation does not hold, "
                                               "with what they printed, returned and raised:")


def test_what_the_agents_code_printed_is_not_read_back_as_the_next_cells(bare_shell):
    load(bare_shell)
    run(bare_shell, "%%agent --new\nRun it.\n```python\nprint('printed by the agent')\n```")
    cell(bare_shell, "print('printed by the user')")
    run(bare_shell, "%agent --new")  # that cell is now outside the context
    text = read_history(bare_shell, search="printed by")
    assert "printed by the user" in text and "printed by the agent" not in text


def test_cells_of_an_earlier_session_come_back_to_a_new_one(bare_shell):
    load(bare_shell)
    cell(bare_shell, "total = 12\nprint('total', total)")
    run(bare_shell, "%%agent\nhello")  # the cell entered this first session
    assert "total" not in read_history(bare_shell, search="total")
    run(bare_shell, "%agent --new")
    assert "--- In[2] ---\ntotal = 12" in read_history(bare_shell, search="total")


def test_a_long_history_comes_a_page_at_a_time(bare_shell):
    for index in range(1, 31):
        cell(bare_shell, f"print('{index}' * 600)")
    load(bare_shell)
    first = read_history(bare_shell)
    assert len(first) < PAGE_CHARS + 1_000
    more = first.splitlines()[-1]
    assert more.startswith("[") and "more cells: call again with start=" in more
    start = int(more.rsplit("=", 1)[1].rstrip("]"))
    rest = read_history(bare_shell, start=start)
    assert f"--- In[{start}] ---" in rest and f"--- In[{start - 1}] ---" not in rest
    assert "--- In[1] ---" in first and f"--- In[{start}] ---" not in first


def test_where_ipython_keeps_no_printed_output_the_out_value_is_what_comes_back():
    older = SimpleNamespace()  # IPython 8's history manager: no outputs, no exceptions
    assert _kept_output(older, 4, {4: [1, 2]}) == "[Out[4]]\n[1, 2]"
    assert _kept_output(older, 5, {4: [1, 2]}) == ""
