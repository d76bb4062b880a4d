"""The panel's link to the kernel's sessions: the sidebar when its JupyterLab extension
is there, the inline panel and a line saying how to get the sidebar when it is not; the
transcript replayed into the panel (model calls once per response); cells known by their id."""

from __future__ import annotations

import json

import pytest
from notebook_rig import captured, cell, controller, offline_shell, texts

from ctx_magic.events import Compacted, UsageUpdated
from ctx_magic.messages import Message, Usage, user_text
from ctx_magic.notebook.outputs import KERNEL_RUN
from ctx_magic.notebook.panel_link import NO_SIDEBAR, labextension_installed, replayed
from ctx_magic.ui.marks import CellIndex


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as sh:
        yield sh


def widget_ids(out) -> list[str]:
    return [o.data["application/vnd.jupyter.widget-view+json"]["model_id"] for o in out.outputs
            if "application/vnd.jupyter.widget-view+json" in o.data]


def test_the_sidebar_extension_is_found_where_jupyter_looks_for_labextensions(tmp_path):
    assert not labextension_installed([str(tmp_path)])
    package = tmp_path / "@ctx-magic" / "labextension" / "package.json"
    package.parent.mkdir(parents=True)
    package.write_text(json.dumps({"name": "@ctx-magic/labextension"}))
    assert labextension_installed([str(tmp_path / "elsewhere"), str(tmp_path)])


def test_without_the_sidebar_extension_the_panel_shows_inline_with_a_line_on_how_to_get_it(shell):
    ctl = controller(shell)
    ctl.workspace.env["JPY_SESSION_NAME"] = "analysis.ipynb"
    ctl.panel._sidebar_available = lambda: False
    with captured() as out:
        cell(shell, "%%agent\nhello")
    assert widget_ids(out) == [ctl.panel.widget.model_id]  # the panel itself, not the anchor
    assert NO_SIDEBAR in texts(out) and "Node.js" in NO_SIDEBAR


def test_agent_new_alone_shows_the_anchor_in_a_fresh_kernel(shell):
    ctl = controller(shell)
    ctl.workspace.env["JPY_SESSION_NAME"] = "analysis.ipynb"
    ctl.panel._sidebar_available = lambda: True
    with captured() as out:
        cell(shell, "%agent --new")  # e.g. the first command after a kernel restart
    assert widget_ids(out) == [ctl.panel.shown_widget.model_id]
    assert type(ctl.panel.shown_widget).__name__ == "SidebarAnchor"


def test_unloading_the_extension_closes_the_panel_so_no_stale_one_stays_in_the_sidebar(shell):
    cell(shell, "%%agent\nhello")
    panel = controller(shell).panel.widget
    shell.run_line_magic("unload_ext", "ctx_magic")
    assert panel.comm is None
    shell.run_line_magic("load_ext", "ctx_magic")


def test_replay_counts_one_model_call_per_response_and_yields_durable_events():
    first = Message("assistant", ({"type": "text", "text": "a"},), api_id="msg_1", usage=Usage(10, 2, 5, 80))
    split = Message("assistant", ({"type": "text", "text": "b"},), api_id="msg_1", usage=Usage(10, 2, 5, 80))
    second = Message("assistant", ({"type": "text", "text": "c"},), api_id="msg_2", usage=Usage(20, 3, 0, 90))
    event = Compacted("manual", 100, 40, 3, "b1", ("b1",), "summary", summarized_uuids=(first.uuid,))
    records = [{"type": "message", **m.to_json()} for m in (user_text("hi"), first, split, second)]
    records.append({"type": "event", **event.to_json()})
    records.append({"type": "event", "event": "measured"})  # not durable: not replayed
    events = list(replayed(records, CellIndex()))
    assert [type(e) for e in events] == [UsageUpdated, UsageUpdated, Compacted]
    assert [e.usage.prompt_tokens for e in events[:2]] == [95, 110]
    assert events[2] == event


def test_a_user_cell_enters_the_context_with_the_frontends_cell_id_and_this_kernel(shell):
    ctl = controller(shell)
    cell(shell, "%%agent\nhello")
    result = shell.run_cell("x = 1\nprint(x)", store_history=True, cell_id="3f2a-cell")  # as ipykernel runs it
    cell(shell, "%%agent\nand now?")
    use = next(m for m in ctl.host.session.live.messages if m.meta.get("cell_id") == "3f2a-cell")
    assert use.meta["kernel"] == KERNEL_RUN and use.meta["cell"] == result.execution_count
