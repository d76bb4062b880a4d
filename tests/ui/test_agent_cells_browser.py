"""The agent's code as notebook cells, in a real JupyterLab 4 and a real Notebook 7 in headless
Debian Chromium, against the offline stand-in served over HTTP so the test reads the requests it
receives.

In each frontend: the blocks of a `%%agent` turn carry an "Insert as cell" button; clicked (the
second block first), each becomes a code cell below the `%%agent` cell, in the blocks' order, with
its output, its call in the first line, the session and call in its metadata and a visible label;
with `agent_cells = 'insert'` the next turn's blocks become cells by themselves (and IPython's
next-input fallback stays unused, and a restarted kernel is told again). Then one agent cell is run
again unchanged, another edited and run, a third deleted; the next turn's request carries the first
as the call it came from with only its new output, the second as a diff, and nothing of the third.
What a person sees is checked too: each block's code and output apart under their labels; an agent
cell's label in words (not the ids its first line holds) and the execution count it ran under in its
prompt; in `insert` mode one line in the output pointing to each cell instead of the block a second
time; and `%ctx export` showing the user's prompt with its line breaks, `*` and `_` as typed.
Every wait is on the page's state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ui.browser_rig import (
    JupyterLab,
    build_is_current,
    built_labextension,
    chromium_missing,
    chromium_page,
    needs,
    node_missing,
)
from ui.test_browser import NOTEBOOK, NOTEBOOK_NODE, RUN_TIMEOUT, UI_TIMEOUT, Page, notebook_json

from ctx_magic.offline.app import OfflineAPI
from ctx_magic.offline.server import serve_in_thread

pytestmark = pytest.mark.slow  # a Jupyter server, a browser and a kernel: minutes, not seconds

RUN = "n = globals().get('n', 0) + 1\nprint('run', n)"
SECOND = "print('second block')"
SET_M = "m = 10\nprint('m is', m)"
DOUBLE = "twice = m * 2\nprint('m doubled', twice)"
DOUBLE_PRINT = "print('m doubled', twice)"
TRIPLE_PRINT = "print('m tripled', m * 3)"
ANNOUNCE_READS = 5  # the extension tells the new process as it comes up: a read may come first
PROMPT = "Run these.\nKeep my_var and 2*3*4 as typed,\nand _this_ too."
EXPORTED = "exported.ipynb"


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


CELLS = [
    "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False",
    f"%%agent\n{PROMPT}\n\n{fence(RUN)}\n\n{fence(SECOND)}",
    "%config CtxMagic.agent_cells = 'insert'",
    f"%%agent\nAnd these.\n\n{fence(SET_M)}\n\n{fence(DOUBLE)}",
    "%%agent\nWhat happened since?",
]

CELLS_JS = f"""() => Array.from({NOTEBOOK}.content.model.cells).map(c => ({{
  id: c.id, type: c.type, source: c.sharedModel.getSource(), meta: c.getMetadata('ctx_magic') ?? null,
  tags: c.getMetadata('tags') ?? [], outputs: c.type === 'code' ? JSON.stringify(c.outputs.toJSON()) : ''
}}))"""


def cells(page: Page) -> list[dict[str, Any]]:
    return page.js(CELLS_JS)


def agent_cells(page: Page) -> list[dict[str, Any]]:
    return [c for c in cells(page) if (c["meta"] or {}).get("agent")]


def index_of(page: Page, cell_id: str) -> int:
    return [c["id"] for c in cells(page)].index(cell_id)


def run(page: Page, *cell_ids: str) -> None:
    """Run these cells by id, each once the one before has finished (agent cells move the others)."""
    for cell_id in cell_ids:
        page.run_cells(index_of(page, cell_id), index_of(page, cell_id))


def wait_agent_cells(page: Page, count: int, what: str) -> None:
    page.wait(f"(n) => Array.from({NOTEBOOK}.content.model.cells).filter(c => c.getMetadata('ctx_magic')?.agent)"
              ".length === n", what, arg=count)


def wait_output(page: Page, cell_id: str, text: str) -> None:
    page.wait(f"""([id, text]) => {{
      const cell = Array.from({NOTEBOOK}.content.model.cells).find(c => c.id === id);
      return JSON.stringify(cell.outputs.toJSON()).includes(text);
    }}""", f"cell {cell_id} does not show {text!r}", arg=[cell_id, text], timeout=RUN_TIMEOUT)


def kernel_run(page: Page, code: str) -> str:
    """What `code` printed in the kernel, run without touching the notebook (the request waits
    behind anything the extension sent first)."""
    return page.js(f"""async (code) => {{
      const kernel = {NOTEBOOK}.sessionContext.session.kernel;
      let text = '';
      const future = kernel.requestExecute({{code, silent: false, store_history: false}});
      future.onIOPub = msg => {{
        if (msg.header.msg_type === 'stream') {{ text += msg.content.text; }}
        if (msg.header.msg_type === 'display_data') {{ text += msg.content.data['text/plain'] ?? ''; }}
      }};
      await future.done;
      return text;
    }}""", code)


def kernel_env(page: Page, name: str) -> str:
    """A variable of the kernel's environment."""
    return kernel_run(page, f"print(__import__('os').environ.get({name!r}, ''), end='')")


def check_blocks_apart(page: Page, index: int) -> None:
    """Each block in the %%agent cell's output: the code under "Code", its output under "Output"
    below it, neither inside the other."""
    block = page.cell(index).locator(".ctx-magic-tool").first
    code, output = block.locator(".ctx-magic-tool-input"), block.locator(".ctx-magic-tool-output")
    assert code.inner_text().strip() == RUN
    assert "run 1" in output.inner_text() and "globals()" not in output.inner_text()
    labels = block.locator(".ctx-magic-tool-part")
    assert labels.all_inner_texts() == ["Code", "Output"]
    assert labels.nth(1).bounding_box()["y"] >= code.bounding_box()["y"] + code.bounding_box()["height"]


def prompt_text(page: Page, cell_id: str) -> str:
    return page.cell(index_of(page, cell_id)).locator(".jp-InputPrompt").first.inner_text().strip()


def check_export(page: Page, app: str) -> None:
    """The exported conversation: the user's prompt with its line breaks, `*` and `_` as typed."""
    page.open(EXPORTED)
    you = page.page.locator(f"{NOTEBOOK_NODE} .jp-MarkdownCell", has_text="You:").first
    you.scroll_into_view_if_needed()
    rendered = you.locator(".jp-RenderedMarkdown")
    rendered.wait_for(state="visible", timeout=UI_TIMEOUT)
    text = rendered.inner_text()
    assert "Keep my_var and 2*3*4 as typed,\nand _this_ too." in text, text
    assert rendered.locator("em").count() == 0 and rendered.locator("strong").all_inner_texts() == ["You:"]
    assert rendered.locator("br").count() == 2
    assert rendered.locator("pre", has_text="print('second block')").count() == 1  # the typed fence stays code
    page.shot(f"{app}-agent-cells-export")


def call_of(source: str) -> str:
    first = source.splitlines()[0]
    assert first.startswith("# ctx: agent "), source
    return first.removeprefix("# ctx: agent ")


def main_requests(api: OfflineAPI) -> list[dict[str, Any]]:
    return [r.body for r in api.requests if r.path == "/v1/messages" and r.kind == "normal"]


def notebook_cell_calls(request: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(input, result text) of each notebook_cell call in a request."""
    uses = {b["id"]: b["input"] for m in request["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_use" and b.get("name") == "notebook_cell"}
    found = []
    for message in request["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result" and block.get("tool_use_id") in uses:
                content = block["content"]
                text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
                found.append((uses[block["tool_use_id"]], text))
    return found


@pytest.fixture(params=["lab", "notebook"])
def app(request: pytest.FixtureRequest) -> str:
    return request.param


def test_agent_code_becomes_cells_and_their_reruns_reach_the_agent_as_new_output_or_a_diff(
        app: str, tmp_path: Path) -> None:
    needs(chromium_missing(), None if build_is_current() else node_missing())
    root = tmp_path / "root"
    root.mkdir()
    (root / "agent.ipynb").write_text(json.dumps(notebook_json(CELLS)))
    api = OfflineAPI()
    with serve_in_thread(api) as (url, _stop):
        env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": url}
        with JupyterLab(root, tmp_path / "home", built_labextension(), app=app, env=env) as lab, \
                chromium_page() as browser:
            page = Page(browser, lab)
            page.open("agent.ipynb")
            run(page, "cell-0", "cell-1")
            sid = page.kernel_status()["session_id"]
            turn_count = page.count(index_of(page, "cell-1"))
            check_blocks_apart(page, index_of(page, "cell-1"))
            first_turn = main_requests(api)[-1]

            # 'button': each block has its button and nothing is inserted by itself.
            buttons = page.cell(index_of(page, "cell-1")).locator(".ctx-magic-insert-cell")
            assert buttons.count() == 2
            assert buttons.all_inner_texts() == ["Insert as cell", "Insert as cell"]
            assert agent_cells(page) == []
            buttons.nth(1).click()  # the second block first: the cells still come in the blocks' order
            wait_agent_cells(page, 1, "the second block's button made no cell")
            buttons.nth(0).click()
            wait_agent_cells(page, 2, "the first block's button made no cell")
            listed = cells(page)
            below = listed[index_of(page, "cell-1") + 1:index_of(page, "cell-1") + 3]
            assert [c["source"].split("\n", 1)[1] for c in below] == [RUN, SECOND]
            assert "run 1" in below[0]["outputs"] and "second block" in below[1]["outputs"]
            for made in below:
                assert made["meta"]["agent"]["session"] == sid
                assert made["meta"]["agent"]["tool_use_id"] == call_of(made["source"])
                assert made["tags"] == ["ctx-agent"]
            # Each cell shows the count it ran under (not `[ ]:`, as if stale) and a label in words.
            for n, made in enumerate(below, start=1):
                assert page.count(index_of(page, made["id"])) == turn_count
                assert prompt_text(page, made["id"]) == f"[{turn_count}]:"
                label = page.cell(index_of(page, made["id"])).locator(".ctx-magic-agent-tag")
                label.wait_for(state="visible", timeout=UI_TIMEOUT)
                assert label.inner_text() == f"Agent's code · block {n} of its turn in [{turn_count}]"
                assert call_of(made["source"]) not in label.inner_text() and sid not in label.inner_text()
            # 'button': what the person clicked stays in the output as it was.
            assert page.cell(index_of(page, "cell-1")).locator(".ctx-magic-tool-input:visible").count() == 2
            page.wait(f"""(i) => Array.from({NOTEBOOK}.content.widgets[i].node
                .querySelectorAll('.ctx-magic-insert-cell')).every(b => b.disabled)""",
                      "the buttons do not say their code is a cell now", arg=index_of(page, "cell-1"))
            assert buttons.all_inner_texts() == ["Inserted as cell", "Inserted as cell"]
            page.shot(f"{app}-agent-cells-button")
            run_cell, second_cell = below

            # 'insert': the next turn's blocks become cells below it by themselves, in order.
            run(page, "cell-2", "cell-3")
            wait_agent_cells(page, 4, "'insert' mode made no cells")
            start = index_of(page, "cell-3") + 1
            inserted = cells(page)[start:start + 2]
            assert [c["source"].split("\n", 1)[1] for c in inserted] == [SET_M, DOUBLE]
            assert "m is 10" in inserted[0]["outputs"] and "m doubled 20" in inserted[1]["outputs"]
            assert [c["meta"]["agent"]["session"] for c in inserted] == [sid, sid]
            assert [c["meta"]["agent"]["tool_use_id"] for c in inserted] == [call_of(c["source"]) for c in inserted]
            assert [c["tags"] for c in inserted] == [["ctx-agent"], ["ctx-agent"]]
            marked = [c for c in cells(page) if c["source"].startswith("# ctx: agent ")]
            assert len(marked) == 4, "a next-input cell came on top of the extension's (the kernel was not told)"
            insert_count = page.count(index_of(page, "cell-3"))
            assert [page.count(index_of(page, c["id"])) for c in inserted] == [insert_count, insert_count]
            # The output shows each block once: a line pointing to its cell, not the code again.
            turn_cell = page.cell(index_of(page, "cell-3"))
            references = turn_cell.locator(".ctx-magic-agent-ref:visible")
            references.nth(1).wait_for(state="visible", timeout=UI_TIMEOUT)
            assert references.count() == 2
            assert "block 2) ran as the cell below" in references.nth(1).inner_text()
            assert turn_cell.locator(".ctx-magic-tool-input:visible").count() == 0
            assert turn_cell.locator(".ctx-magic-insert-cell:visible").count() == 0
            references.nth(1).locator(".ctx-magic-go-to-cell").click()
            page.wait(f"(i) => {NOTEBOOK}.content.activeCellIndex === i", "'Go to cell' did not select the cell",
                      arg=index_of(page, inserted[1]["id"]))
            turn_cell.scroll_into_view_if_needed()
            page.shot(f"{app}-agent-cells-insert")
            second_turn = main_requests(api)[-1]

            # Run one agent cell again unchanged, edit and run another, delete a third.
            run(page, run_cell["id"])
            wait_output(page, run_cell["id"], "run 2")
            doubled = inserted[1]
            page.js(f"""([id, source]) => {{
              Array.from({NOTEBOOK}.content.model.cells).find(c => c.id === id).sharedModel.setSource(source);
            }}""", [doubled["id"], doubled["source"].replace(DOUBLE_PRINT, TRIPLE_PRINT)])
            run(page, doubled["id"])
            wait_output(page, doubled["id"], "m tripled 30")
            page.js(f"""(id) => {{
              const model = {NOTEBOOK}.content.model;
              model.sharedModel.deleteCell(Array.from(model.cells).findIndex(c => c.id === id));
            }}""", second_cell["id"])
            wait_agent_cells(page, 3, "the deleted agent cell is still there")
            run(page, "cell-4")
            assert "Wrote the session as a notebook" in kernel_run(page, f"%ctx export {EXPORTED}")

            # A restarted kernel is told again that this frontend makes the cells.
            page.js(f"async () => {{ await {NOTEBOOK}.sessionContext.session.kernel.restart(); }}")
            told = [kernel_env(page, "CTX_MAGIC_FRONTEND") for _ in range(ANNOUNCE_READS)]
            assert "@ctx-magic/labextension 0.1.0" in told, told  # each read waits for the kernel's answer
            check_export(page, app)

    last = main_requests(api)[-1]
    calls = notebook_cell_calls(last)
    again = [(i, text) for i, text in calls if i.get("ran_again") == call_of(run_cell["source"])]
    assert len(again) == 1, calls
    tool_input, text = again[0]
    assert set(tool_input) == {"execution_count", "ran_again"}  # no code: the agent has it in its call
    assert "again, unchanged" in text and text.rstrip().endswith("run 2")
    edited = [(i, text) for i, text in calls if i.get("edited") == call_of(doubled["source"])]
    assert len(edited) == 1, calls
    tool_input, text = edited[0]
    assert f"-{DOUBLE_PRINT}" in tool_input["diff"] and f"+{TRIPLE_PRINT}" in tool_input["diff"]
    assert "twice = m * 2" not in tool_input["diff"]  # the unchanged line stays out of the diff
    assert text.rstrip().endswith("m tripled 30")
    assert len(calls) == 2  # nothing of the deleted cell, nothing else
    # No copy of code the agent already had reached the context.
    sent, before = json.dumps(last), json.dumps(first_turn)
    for code in (json.dumps(RUN)[1:-1], json.dumps(SECOND)[1:-1]):
        assert sent.count(code) == before.count(code), code
    for code in ("m = 10", "twice = m * 2"):
        assert sent.count(code) == json.dumps(second_turn).count(code), code
