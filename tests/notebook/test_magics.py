"""The magics in-process: every magic, option and config name, with a real InteractiveShell."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import anthropic
import pytest
from IPython.core.error import UsageError
from notebook_rig import captured, cell, close_shell, controller, new_shell, run, status, texts

from ctx_magic.context.invariants import check_invariants
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread

CODE_PROMPT = "%%agent\nWhat is x doubled?\n```python\nprint(x * 2)\n```"


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    sh = new_shell()
    yield sh
    close_shell(sh)


def test_load_ext_registers_magics_and_config(shell):
    magics = shell.magics_manager.magics
    assert "agent" in magics["cell"] and "agent" in magics["line"]
    assert {"compact", "memory", "ctx"} <= set(magics["line"])
    assert any(type(c).__name__ == "CtxMagic" for c in shell.configurables)


def test_unload_ext_removes_everything(shell):
    shell.run_line_magic("unload_ext", "ctx_magic")
    assert "agent" not in shell.magics_manager.magics["cell"]
    assert not any(type(c).__name__ == "CtxMagic" for c in shell.configurables)
    shell.run_line_magic("load_ext", "ctx_magic")  # and it loads again cleanly
    assert "agent" in shell.magics_manager.magics["cell"]


def test_agent_help_documents_the_options(shell):
    doc = shell.find_cell_magic("agent").__doc__
    for option in ("--new", "--resume", "--model", "--permission"):
        assert option in doc
    assert "cell body is your message" in doc
    assert "--up-to" in shell.find_line_magic("compact").__doc__
    assert "status" in shell.find_line_magic("ctx").__doc__


@pytest.mark.parametrize("source", ["%agent --permission auto", "%%agent --permission auto\n   \n",
                                    "%agent --permission auto --model claude-haiku-5-5"])
def test_a_refused_agent_line_changes_no_setting(shell, source):
    run(shell, "%config CtxMagic.permission = 'ask'")
    result, _ = run(shell, source)
    assert isinstance(result.error_in_exec, UsageError)
    assert controller(shell).settings.permission == "ask"
    assert controller(shell).settings.model != "claude-haiku-5-5"


@pytest.mark.parametrize("source, message", [
    ("%%agent --bogus\nhi", "unrecognized arguments: --bogus"),
    ("%%agent --permission maybe\nhi", "invalid choice: 'maybe'"),
    ("%%agent\n", "cell body is empty"),
    ("%agent", "needs your message"),
    ("%%agent --new --resume\nhi", "either --new or --resume"),
    ("%compact --up-to 3 --from 4", "only one of"),
    ("%compact --up-to -1", "0 or more"),
    ("%ctx nonsense", "invalid choice"),
    ("%memory nonsense", "invalid choice"),
])
def test_bad_options_are_one_line_usage_errors(shell, source, message):
    result, _ = run(shell, source)
    error = result.error_in_exec
    assert isinstance(error, UsageError)
    assert message in str(error) and "\n" not in str(error).strip()


def test_first_turn_says_the_offline_backend_is_used_and_runs_code(shell):
    cell(shell, "x = 21")
    result, shown = run(shell, CODE_PROMPT)
    assert result.error_in_exec is None
    assert "offline stand-in" in shown and "not Claude" in shown
    assert "42" in shown  # the tool ran in the user's namespace
    assert "Done · 2 model calls" in shown
    assert status(shell)["backend"] == "offline"


def test_status_json_has_the_documented_fields(shell):
    cell(shell, "x = 1")
    run(shell, CODE_PROMPT)
    data = status(shell)
    for key in ("session_id", "model", "window", "threshold", "tokens", "zone", "messages", "tool_results",
                "boundaries", "breaker_open", "cache_breaks"):
        assert key in data
    assert set(data["tool_results"]) == {"live", "cleared", "persisted"}
    assert data["zone"] == "ok" and data["breaker_open"] is False and data["cache_breaks"] == []


def test_user_cells_enter_the_context_as_notebook_cell_pairs(shell):
    cell(shell, "values = [3, 1, 2]\nprint('sorted:', sorted(values))\nlen(values)")
    cell(shell, "# ctx: skip\nsecret = 'not for the agent'\nprint(secret)")
    cell(shell, "1 / 0")
    run(shell, "%%agent\nWhat happened?")
    session = controller(shell).host.session
    calls = [b for m in session.live.messages for b in m.blocks("tool_use") if b["name"] == "notebook_cell"]
    assert [c["input"]["source"].splitlines()[0] for c in calls] == ["values = [3, 1, 2]", "1 / 0"]
    outputs = {b["tool_use_id"]: b for m in session.live.messages for b in m.blocks("tool_result")}
    first, second = (outputs[c["id"]] for c in calls)
    assert "sorted: [1, 2, 3]" in first["content"] and "[Out[" in first["content"] and "3" in first["content"]
    assert second.get("is_error") and "ZeroDivisionError" in second["content"]
    assert "not for the agent" not in json.dumps([m.to_json() for m in session.live.messages])


def test_json_and_latex_displays_reach_the_agent_as_their_data_not_an_object_repr(shell):
    cell(shell, "from IPython.display import JSON, Latex, display\n"
                "display(JSON({'rows': 120, 'columns': ['id', 'churn']}))\ndisplay(Latex(r'$\\bar{x} = 4.2$'))")
    run(shell, "%%agent\nWhat did it show?")
    session = controller(shell).host.session
    [result] = [b for m in session.live.messages for b in m.blocks("tool_result")]
    assert "[displayed text/plain]" not in result["content"]  # never the object's repr in place of its data
    assert '[displayed application/json]\n{\n "rows": 120,\n "columns": [\n  "id",\n  "churn"' in result["content"]
    assert "[displayed text/latex]\n$\\bar{x} = 4.2$" in result["content"]


def test_own_magic_cells_are_not_recorded(shell):
    run(shell, "%%agent\nhello")
    run(shell, "%ctx status")
    run(shell, "%%agent\nhello again")
    names = [b["name"] for m in controller(shell).host.session.live.messages for b in m.blocks("tool_use")]
    assert "notebook_cell" not in names


def test_a_cell_that_runs_another_inside_it_enters_once_as_typed_with_its_own_number(shell):
    cell(shell, "%%capture quiet\nprint('installing')")
    first = shell.execution_count - 1
    cell(shell, "get_ipython().run_cell('inner = 1')\nouter = 2")
    cell(shell, "after = 3")
    run(shell, "%%agent\nWhat did I run?")
    calls = [b["input"] for m in controller(shell).host.session.live.messages for b in m.blocks("tool_use")
             if b["name"] == "notebook_cell"]
    assert [(c["execution_count"], c["source"]) for c in calls] == [
        (first, "%%capture quiet\nprint('installing')"),
        (first + 1, "get_ipython().run_cell('inner = 1')\nouter = 2"),
        (first + 2, "after = 3"),
    ]


def test_a_cell_of_another_magic_whose_name_starts_like_ours_is_recorded(shell):
    cell(shell, "values = [1, 2]")
    cell(shell, "%pinfo values\ntotal = sum(values)")
    run(shell, "%%agent\nWhat did I run?")
    sources = [b["input"]["source"] for m in controller(shell).host.session.live.messages for b in m.blocks("tool_use")
               if b["name"] == "notebook_cell"]
    assert sources == ["values = [1, 2]", "%pinfo values\ntotal = sum(values)"]


def test_cell_images_become_image_blocks_within_the_cap(shell):
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    shell.run_line_magic("config", "CtxMagic.image_max_bytes = 200")
    cell(shell, f"from IPython.display import Image, display\nimport base64\n"
                   f"display(Image(data=base64.b64decode('{png}')))")
    cell(shell, "display(Image(data=b'\\x89PNG' + bytes(1000), format='png'))")
    run(shell, "%%agent\nlook at the plots")
    results = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")]
    first, second = results[0]["content"], results[1]["content"]
    assert isinstance(first, list) and first[1]["type"] == "image" and first[1]["source"]["data"] == png
    assert isinstance(second, str) and "over the size cap" in second


def test_config_lists_every_setting_with_its_help(shell):
    """The help comes from the traits themselves: nothing is read from ctx_magic's source."""
    with captured() as out:
        shell.run_line_magic("config", "CtxMagic")
    listing = texts(out)
    for name, trait in controller(shell).settings.traits(config=True).items():
        assert f"CtxMagic.{name}=" in listing, name
        assert " ".join(trait.help.split()[:4]) in " ".join(listing.split()), name


def test_every_config_name_reaches_the_session(shell):
    settings = {
        "model": "claude-haiku-5-5", "context_window": 50_000, "max_output_tokens": 4_000, "autocompact_pct": 60.0,
        "keep_recent": 3, "idle_minutes": 7.0, "cache_ttl": "1h", "snip_max_messages": 50,
        "clear_at_least": 5_000, "max_retries": 4,
    }
    for name, value in settings.items():
        shell.run_line_magic("config", f"CtxMagic.{name} = {value!r}")
    run(shell, "%%agent\nhello")
    session = controller(shell).host.session
    engine = session.setup().context
    assert session.frame.settings.model == "claude-haiku-5-5" and session.frame.model.name == "claude-haiku-5-5"
    assert engine.thresholds.window == 50_000 and engine.thresholds.max_output == 4_000
    assert engine.thresholds.autocompact == int((50_000 - 4_000) * 0.6)
    assert (engine.keep_recent, engine.idle_seconds, engine.snip_max_messages) == (3, 7.0 * 60, 50)
    assert session.frame.settings.cache_ttl == "1h" and engine.clear_at_least == 5_000
    assert session.frame.model.client.max_retries == 4
    data = status(shell)
    assert data["model"] == "claude-haiku-5-5" and data["window"] == 50_000
    with captured() as out:
        shell.run_line_magic("ctx", "config")
    shown = json.loads(texts(out))
    assert shown["keep_recent"] == 3 and shown["cache_ttl"] == "1h"


def test_config_values_are_validated(shell):
    settings = controller(shell).settings
    before = settings.describe()
    for bad in ("CtxMagic.keep_recent = -1", "CtxMagic.autocompact_pct = 150", "CtxMagic.cache_ttl = '2h'",
                "CtxMagic.permission = 'sometimes'", "CtxMagic.context_window = -5",
                "CtxMagic.max_retries = -1", "CtxMagic.idle_minutes = -1", "CtxMagic.memory_budget_tokens = -100"):
        run(shell, f"%config {bad}")
    assert settings.describe() == before


def test_storage_dir_is_configurable(shell, tmp_path):
    shell.run_line_magic("config", f"CtxMagic.storage_dir = {str(tmp_path / 'elsewhere')!r}")
    run(shell, "%%agent\nhello")
    assert str(tmp_path / "elsewhere" / "sessions") in status(shell)["transcript"]


def test_default_storage_is_dot_ctx_magic_in_the_working_folder(shell, tmp_path):
    run(shell, "%%agent\nhello")
    assert status(shell)["transcript"].startswith(str(tmp_path / ".ctx_magic" / "sessions"))


def test_permission_off_refuses_code_with_a_tool_error(shell):
    _, shown = run(shell, "%%agent --permission off\nrun it\n```python\nran = True\n```")
    assert "[python error]\nRunning code is turned off here (CtxMagic.permission = 'off')." in shown
    assert "ran" not in shell.user_ns


def test_permission_ask_runs_only_on_yes(shell):
    ctl = controller(shell)
    ctl.settings.permission = "ask"
    answers = iter(["n", "yes"])
    ctl.executor.ask = lambda prompt: next(answers)
    _, shown = run(shell, "%%agent\nfirst\n```python\nfirst_ran = True\n```")
    assert "chose not to run" in shown and "first_ran" not in shell.user_ns
    _, shown = run(shell, "%%agent\nsecond\n```python\nsecond_ran = True\n```")
    assert shell.user_ns.get("second_ran") is True


def test_permission_ask_without_a_person_refuses_clearly(shell):
    ctl = controller(shell)
    ctl.settings.permission = "ask"

    def no_stdin(prompt):
        raise OSError("stdin is not available")

    ctl.executor.ask = no_stdin
    _, shown = run(shell, "%%agent\ngo\n```python\nprint('nope')\n```")
    assert "Nobody can approve" in shown


def test_new_and_resume_sessions(shell):
    run(shell, "%%agent\nremember the number 7")
    first = status(shell)["session_id"]
    _, shown = run(shell, "%agent --new")
    assert "New session" in shown and status(shell)["session_id"] != first
    _, shown = run(shell, f"%agent --resume {first}")
    assert f"Resumed session {first}: 2 live messages." in shown and status(shell)["session_id"] == first
    run(shell, "%agent --new")
    run(shell, "%pin Plot in UTC.")  # a session whose only message is its pins
    second = status(shell)["session_id"]
    run(shell, f"%agent --resume {first}")
    _, shown = run(shell, f"%agent --resume {second}")
    assert f"Resumed session {second}: 1 live message." in shown
    _, shown = run(shell, "%agent --resume nope")
    assert "No session 'nope'" in shown


@pytest.mark.parametrize("target", [".", "..", "../sessions", "/"])
def test_resume_takes_only_the_id_of_a_stored_session_never_a_folder_path(shell, tmp_path, target):
    run(shell, "%%agent\nremember the number 7")
    first = status(shell)["session_id"]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.name == "transcript.jsonl")
    _, shown = run(shell, f"%agent --resume {target}")
    assert f"No session '{target}'" in shown
    assert status(shell)["session_id"] == first
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.name == "transcript.jsonl") == before


HOLD_SESSION = """
import sys
from pathlib import Path
from ctx_magic.store.session import SessionDir
SessionDir(Path(sys.argv[1]), sys.argv[2]).claim()
print("held", flush=True)
sys.stdin.read()
"""
"""Another kernel's process holding a session until its stdin closes."""


@contextmanager
def held_elsewhere(storage, session_id: str) -> Iterator[None]:
    """The session held by another process (as another kernel holds it) while the block runs."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_SESSION, str(storage), session_id],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def two_sessions(shell) -> tuple[str, str]:
    """A first session with a turn, then a second, current one: (first id, second id)."""
    run(shell, "%%agent\nthe first session")
    first = status(shell)["session_id"]
    run(shell, "%agent --new")
    run(shell, "%%agent\nthe second session")
    return first, status(shell)["session_id"]


def test_a_resume_refused_because_another_kernel_holds_the_session_keeps_the_current_one(shell, tmp_path):
    other, mine = two_sessions(shell)
    with held_elsewhere(tmp_path / ".ctx_magic", other):
        _, shown = run(shell, f"%agent --resume {other}")
        assert f"Session {other} is open in another kernel" in shown
        assert status(shell)["session_id"] == mine
        _, shown = run(shell, f"%%agent --resume {other} --model claude-haiku-5-5\nhi")
        assert f"Session {other} is open in another kernel" in shown
        assert controller(shell).settings.model != "claude-haiku-5-5"
        run(shell, "%%agent\nand on")
        assert status(shell)["turns"] == 2


def test_a_resume_refused_right_after_a_reload_leaves_the_reloaded_session_to_go_on(shell, tmp_path):
    other, mine = two_sessions(shell)
    shell.run_line_magic("reload_ext", "ctx_magic")
    with held_elsewhere(tmp_path / ".ctx_magic", other):
        _, shown = run(shell, f"%agent --resume {other}")
        assert f"Session {other} is open in another kernel" in shown
    _, shown = run(shell, "%%agent\nand on")
    assert f"Resumed session {mine}" in shown and status(shell)["session_id"] == mine


def test_unknown_model_is_one_clear_line(shell):
    result, shown = run(shell, "%%agent --model gpt-4\nhello")
    assert result.error_in_exec is None
    assert "Unknown model 'gpt-4'" in shown and "Traceback" not in shown
    assert controller(shell).settings.model != "gpt-4"


def test_switching_the_model_keeps_the_conversation(shell):
    run(shell, "%%agent\nhello")
    first = status(shell)["session_id"]
    run(shell, "%%agent --model claude-haiku-5-5\nand now?")
    data = status(shell)
    assert data["session_id"] == first and data["model"] == "claude-haiku-5-5" and data["turns"] == 2
    api = controller(shell).host.backend.stand_in
    assert [r.body["model"] for r in api.requests if r.kind == "normal"][-1] == "claude-haiku-5-5"


def test_compact_magic_variants(shell):
    for n in range(3):
        run(shell, f"%%agent\nstep {n}\n```python\nprint({n})\n```")
    _, shown = run(shell, "%compact keep the step numbers")
    assert "Compacted" in shown and "(manual)" in shown
    for n in range(3, 6):
        run(shell, f"%%agent\nstep {n}\n```python\nprint({n})\n```")
    _, shown = run(shell, "%compact --up-to 4")
    assert "Compacted" in shown
    _, shown = run(shell, "%compact --from 3 focus")
    assert "Compacted" in shown
    _, shown = run(shell, "%compact --snip 2")
    assert "Nothing to snip yet." in shown  # what is left after --from is the opening and the recent messages
    for n in range(6, 10):
        run(shell, f"%%agent\nstep {n}\n```python\nprint({n})\n```")
    _, shown = run(shell, "%compact --snip 2")
    assert "Snipped 12 messages." in shown  # the API's summary is two: its block and the note after it
    # The default model checks thinking prefixes: the same line says what thinking the cut took with it.
    assert re.search(r"Snipped 12 messages\. Cleared \d+ thinking blocks? that followed an edit of the conversation "
                     r"\(.*\): about [\d,]+ tokens of thinking left the context", shown)
    assert [b["trigger"] for b in status(shell)["boundaries"]] == ["manual"] * 3


def test_an_unclosed_quote_in_free_text_is_taken_as_typed(shell):
    run(shell, "%%agent\nhello")
    _, shown = run(shell, "%compact keep 'the plots")
    assert "Compacted" in shown and "internal error" not in shown
    api = controller(shell).host.backend.stand_in
    assert "keep 'the plots" in json.dumps([r for r in api.requests if r.kind == "compaction"][-1].body)
    _, shown = run(shell, "%memory add the 'sales table is in /data")
    assert "Remembered" in shown and ": the 'sales table is in /data" in shown


def test_compact_before_any_session_says_so(shell):
    _, shown = run(shell, "%compact")
    assert "run a %%agent cell first" in shown


def test_memory_subcommands_do_not_crash(shell):
    for command in ("show", "add something", "add --no-decay stable fact", "forget abc", "extract", "dream"):
        result, shown = run(shell, f"%memory {command}")
        assert result.error_in_exec is None and shown.strip()


def test_ctx_export_writes_a_readable_notebook(shell, tmp_path):
    cell(shell, "y = 5")
    run(shell, "%%agent\ncompute\n```python\nprint(y + 1)\n```")
    run(shell, "%compact")
    _, shown = run(shell, f"%ctx export --transcript {tmp_path / 'out.ipynb'}")
    import nbformat

    notebook = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    sources = "\n".join(c.source for c in notebook.cells)
    assert "**You:**" in sources and "print(y + 1)" in sources and "y = 5" in sources
    assert "Compaction" in sources and "Summary that replaced them" in sources


@pytest.mark.parametrize("typed", ['"my notebook.ipynb"', "'my notebook.ipynb'", "my notebook.ipynb"])
def test_ctx_export_takes_a_path_with_spaces_quoted_or_not(shell, tmp_path, typed):
    run(shell, "%%agent\nhello")
    _, shown = run(shell, f"%ctx export {typed}")
    assert "Wrote the session as a notebook to my notebook.ipynb" in shown
    assert (tmp_path / "my notebook.ipynb").is_file()
    _, shown = run(shell, f"%ctx export --transcript {typed} --force")  # the same file: replaced only when forced
    assert "Wrote the full transcript to my notebook.ipynb." in shown


def test_ctx_count(shell):
    run(shell, "%%agent\nhello")
    _, shown = run(shell, "%ctx count")
    assert "Exact context:" in shown and "count_tokens API" in shown


def widget_ids(out) -> list[str]:
    return [o.data["application/vnd.jupyter.widget-view+json"]["model_id"] for o in out.outputs
            if "application/vnd.jupyter.widget-view+json" in o.data]


def test_ctx_sidebar_shows_the_panel_inline_outside_jupyterlab(shell):
    run(shell, "%%agent\nhello")
    with captured() as out:
        shell.run_line_magic("ctx", "sidebar")
    assert widget_ids(out) == [controller(shell).panel.widget.model_id]


def test_ctx_sidebar_sends_the_panel_to_the_sidebar_under_a_jupyter_server(shell):
    ctl = controller(shell)
    ctl.workspace.env["JPY_SESSION_NAME"] = "analysis.ipynb"
    ctl.panel._sidebar_available = lambda: True  # the labextension is installed
    with captured() as out:
        cell(shell, "%%agent\nhello")  # the first turn shows the anchor by itself
    (anchor_id,) = widget_ids(out)
    anchor = ctl.panel.shown_widget
    assert anchor.model_id == anchor_id
    assert type(anchor).__name__ == "SidebarAnchor" and anchor.panel is ctl.panel.widget
    assert anchor._view_module == "@ctx-magic/labextension"
    with captured() as out:
        cell(shell, "%%agent\nagain")  # only once
    assert widget_ids(out) == []
    with captured() as out:
        shell.run_line_magic("ctx", "sidebar --inline")
    assert widget_ids(out) == [ctl.panel.widget.model_id]


def test_network_down_is_one_line_and_the_same_session_goes_on_when_it_is_back(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    api = OfflineAPI(OfflineConfig(window=100_000))
    with serve_in_thread(api) as (url, _stop):
        port = int(url.rsplit(":", 1)[1])
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)  # nothing listens there now: connections are refused
    shell = new_shell()
    try:
        shell.run_line_magic("config", "CtxMagic.max_retries = 0")
        result, shown = run(shell, "%%agent\nare you there?")
        assert result.error_in_exec is None and "Traceback" not in shown
        assert "Could not reach the API after retries" in shown
        sid = status(shell)["session_id"]
        with serve_in_thread(api, port):
            shell.run_line_magic("config", "CtxMagic.max_retries = 1")
            assert controller(shell).host.session.frame.model.client.max_retries == 1
            _, shown = run(shell, "%%agent\nand now?")
            assert "Could not reach" not in shown and api.model_calls() == 1
        data = status(shell)
        assert data["session_id"] == sid and data["messages"] == 3  # both prompts and the one answer
    finally:
        shell.run_line_magic("unload_ext", "ctx_magic")


def test_api_key_and_base_url_point_at_any_messages_api_server(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    api = OfflineAPI(OfflineConfig(window=100_000))
    with serve_in_thread(api) as (url, _stop):
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        shell = new_shell()
        try:
            _, shown = run(shell, "%%agent\nhello server")
            assert "offline stand-in" not in shown.split("Offline stand-in (a deterministic")[0]
            assert api.model_calls() == 1 and status(shell)["backend"] == "anthropic"
            assert status(shell)["window"] == 100_000  # from the server's Models API
        finally:
            shell.run_line_magic("unload_ext", "ctx_magic")
    assert isinstance(anthropic.Anthropic, type)


def test_notebook_tool_reads_the_saved_notebook_when_its_path_is_known(shell, tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    from ctx_magic.agent.tools import ToolCall, ToolRegistry

    code = new_code_cell("df = load('sales.csv')\ndf.head()")
    code.outputs = [new_output("execute_result", data={"text/plain": "   region  total"}, execution_count=1)]
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Sales"), code]), str(tmp_path / "sales.ipynb"))
    ctl = controller(shell)
    assert "notebook" not in [t.name for t in ctl.executor.tools() if t.offered]
    ctl.workspace.env["JPY_SESSION_NAME"] = "work/sales.ipynb"  # a path relative to the server's root
    assert "notebook" in [t.name for t in ctl.executor.tools() if t.offered]
    output = ToolRegistry(ctl.executor.tools()).run(ToolCall("t1", "notebook", {"search": "load("}), None)
    assert not output.is_error
    assert "sales.ipynb: 2 cells" in output.content and "--- cell 1 (code) ---" in output.content
    assert "region  total" in output.content and "# Sales" not in output.content


def test_the_agents_own_code_cannot_start_a_turn_or_compact_inside_one(shell):
    run(shell, "%%agent\nfirst\n```python\nx = 1\n```")
    _, shown = run(shell, "%%agent\nnest\n```python\nget_ipython().run_cell_magic('agent', '', 'nested hello')\n"
                          "get_ipython().run_line_magic('compact', '')\n```")
    session = controller(shell).host.session
    assert "%%agent cannot be used from inside it" in shown and "%compact cannot be used from inside it" in shown
    assert not any(m.text.strip() == "nested hello" for m in session.store.load_transcript().messages())
    assert not session.compaction.boundaries
    check_invariants(session.live.messages)
    assert run(shell, "%%agent\nstill fine?")[0].error_in_exec is None


def test_a_storage_dir_that_is_a_file_and_a_bad_export_path_are_one_clear_line(shell, tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    shell.run_line_magic("config", f"CtxMagic.storage_dir = {str(tmp_path / 'afile')!r}")
    _, shown = run(shell, "%%agent\nhello")
    assert "cannot use" in shown and "afile" in shown and "internal error" not in shown and "Traceback" not in shown
    shell.run_line_magic("config", f"CtxMagic.storage_dir = {str(tmp_path / 'store')!r}")
    assert run(shell, "%%agent\nhello")[0].error_in_exec is None
    (tmp_path / "adir").mkdir()
    for target, said in ((tmp_path / "adir", "is a folder: give the path of the .ipynb file to write"),
                         (tmp_path / "afile" / "x.ipynb", "The session was not exported: could not write")):
        with captured() as out:
            shell.run_line_magic("ctx", f"export {target}")
        shown = texts(out)
        assert said in shown, shown
        assert "internal error" not in shown and "Wrote" not in shown


def test_a_failure_inside_the_cell_hooks_is_one_line_and_later_cells_are_recorded(shell, monkeypatch):
    ctl = controller(shell)

    def broken() -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(ctl.idle, "check", broken)
    _, shown = run(shell, "print('user cell')")
    assert "internal error (RecursionError" in shown and "Traceback" not in shown and "user cell" in shown
    monkeypatch.undo()
    cell(shell, "print('recorded')")
    assert [r.source for r in ctl.cells.pending] == ["print('recorded')"]



def test_reloading_the_extension_goes_on_with_the_same_session_and_the_cells_run_before(shell):
    run(shell, "%%agent\nfirst\n```python\nx = 41\n```")
    sid = status(shell)["session_id"]
    cell(shell, "print('user cell A')")
    shell.run_line_magic("reload_ext", "ctx_magic")
    _, shown = run(shell, "%%agent\nafter the reload")
    assert f"Resumed session {sid}" in shown and status(shell)["session_id"] == sid
    session = controller(shell).host.session
    sources = [b["input"]["source"] for m in session.live.messages for b in m.blocks("tool_use")
               if b["name"] == "notebook_cell"]
    assert sources == ["print('user cell A')"]
    shell.run_line_magic("unload_ext", "ctx_magic")
    shell.run_line_magic("load_ext", "ctx_magic")
    run(shell, "%%agent\nand again")
    assert status(shell)["session_id"] == sid
    check_invariants(controller(shell).host.session.live.messages)


def test_compact_past_the_end_is_one_line_and_a_summary_bigger_than_the_chat_is_said(shell):
    run(shell, "%%agent\nhi")
    with captured() as out:
        shell.run_line_magic("compact", "--up-to 999")
    assert "--up-to 999 is outside the live context, which has 2 messages" in texts(out)
    assert not controller(shell).host.session.compaction.boundaries
    with captured() as out:
        shell.run_line_magic("compact", "keep everything")
    assert "The context after compaction is larger than before it" in texts(out)
    assert controller(shell).host.session.compaction.boundaries


def test_a_value_whose_repr_raises_is_named_with_its_error_for_the_agent(shell):
    code = "class Bad:\n    def __repr__(self):\n        raise RuntimeError('no repr today')\nBad()"
    run(shell, f"%%agent\nshow it\n```python\n{code}\n```")
    results = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")]
    assert "its repr raised RuntimeError: no repr today" in results[-1]["content"]


def test_top_level_await_in_the_agents_code_inside_a_running_loop_is_a_clear_tool_error(shell):
    import asyncio

    from ctx_magic.agent.tools import ToolCall, ToolRegistry

    tools = ToolRegistry(controller(shell).executor.tools())

    async def inside_the_kernels_loop():  # as in ipykernel, where the turn runs inside the event loop
        return (tools.run(ToolCall("t1", "python", {"code": "import asyncio\nawait asyncio.sleep(0)"}), None),
                tools.run(ToolCall("t2", "python", {"code": "print('plain code runs')"}), None))

    awaiting, plain = asyncio.run(inside_the_kernels_loop())
    assert awaiting.is_error and "Top-level await cannot run here" in awaiting.content
    assert not plain.is_error and "plain code runs" in plain.content


def test_a_session_folder_removed_from_a_cell_is_reported_at_the_next_turn(shell):
    run(shell, "%%agent\nturn one")
    cell(shell, "import shutil; shutil.rmtree('.ctx_magic')")
    _, shown = run(shell, "%%agent\nturn two")
    assert "was removed while the session ran" in shown
    assert controller(shell).host.session.store.transcript_path.is_file()


def test_after_a_reload_status_says_the_session_goes_on_and_config_cells_are_not_recorded(shell):
    run(shell, "%%agent\nhello")
    sid = status(shell)["session_id"]
    shell.run_line_magic("reload_ext", "ctx_magic")
    with captured() as out:
        shell.run_line_magic("ctx", "status")
    assert f"Session {sid} goes on at the next %%agent" in texts(out)
    cell(shell, "%config CtxMagic.keep_recent = 4")
    _, shown = run(shell, "%%agent\nagain")
    assert "offline stand-in" not in shown.lower().split("resumed session")[0]  # said once, not per reload
    assert not [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_use")
                if b["name"] == "notebook_cell"]


def test_a_display_updated_in_place_reaches_the_agent_as_its_latest_state(shell):
    code = ("from IPython.display import display\nh = display('first', display_id=True)\nh.update('second')\n"
            "h.update('third')\ndisplay('other')")
    run(shell, f"%%agent\nshow\n```python\n{code}\n```")
    result = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")][-1]["content"]
    assert "'third'" in result and "'other'" in result and "'first'" not in result and "'second'" not in result


def test_after_a_restart_a_command_that_needs_the_session_says_how_to_resume_it(shell):
    run(shell, "%%agent\nhello")
    sid = status(shell)["session_id"]
    close_shell(shell)
    restarted = new_shell()  # the same folder, as a restarted kernel or a reopened notebook
    try:
        _, shown = run(restarted, "%ctx cell toolu_01")
        # Not 'run a %%agent cell first': that starts a new session, where the call is unknown.
        assert shown.strip() == (f"There is no agent session in this kernel yet: %agent --resume goes on "
                                 f"with the last one ({sid}); a %%agent cell starts a new one.")
    finally:
        close_shell(restarted)
        new_shell()  # the fixture closes a shell of its own


def test_unloading_after_an_unknown_model_was_set_unloads_without_a_traceback(shell):
    """The session ends with the extension even when its model cannot be looked up any more."""
    run(shell, "%%agent\nhello")
    run(shell, "%config CtxMagic.model = 'claude-nope-9'")
    _, shown = run(shell, "%%agent\nhello")
    assert "Unknown model 'claude-nope-9'" in shown
    shell.run_line_magic("unload_ext", "ctx_magic")
    assert "ctx_magic" not in shell.extension_manager.loaded
    shell.run_line_magic("load_ext", "ctx_magic")
    run(shell, "%config CtxMagic.model = 'claude-sonnet-5-5'")
    _, shown = run(shell, "%%agent\nand now?")
    assert "Done" in shown


def test_a_model_set_by_config_that_the_api_does_not_know_is_said_once_and_the_session_stays_on_its_model(shell):
    run(shell, "%%agent\nhello")
    run(shell, "%config CtxMagic.model = 'claude-nope-9'")
    _, shown = run(shell, "%%agent\nhello")
    assert shown.count("Unknown model 'claude-nope-9': the API does not offer it (") == 1
    assert shown.count("Set CtxMagic.model to a model it offers.") == 1
    _, shown = run(shell, "%ctx status")
    assert "claude-sonnet-5-5" in shown and "Unknown model" not in shown
