"""The agent's code as cells in a real kernel whose frontend has no ctx_magic labextension (VS
Code, the classic notebook): IPython's next-input payload places the blocks one per execution, in
order; `%ctx cell ID` turns a cell into a block as `%load` does; a placed cell run again reaches
the agent as its own code with only the new output. A kernel the labextension announced itself to
places nothing."""

from __future__ import annotations

import json

import pytest
from kernel_rig import Kernel, kernel_env

from ctx_magic.notebook.agent_cells import AGENT_CODE_MIME, FRONTEND_ENV, marked
from ctx_magic.store.session import SessionDir

pytestmark = pytest.mark.slow  # a real kernel

SETUP = ("%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False\n"
         "%config CtxMagic.agent_cells = 'insert'")
FIRST = "n = globals().get('n', 0) + 1\nprint('run', n)"
SECOND = "print('second block')"
TURN = f"%%agent\nRun these.\n```python\n{FIRST}\n```\n```python\n{SECOND}\n```"
ANNOUNCEMENT = f"__import__('os').environ.__setitem__('{FRONTEND_ENV}', '@ctx-magic/labextension 0.1.0')"


@pytest.fixture
def kernel(tmp_path):
    env = {k: v for k, v in kernel_env().items() if k != FRONTEND_ENV}
    k = Kernel(tmp_path, env)
    yield k
    k.close()


def next_inputs(reply: dict) -> list[tuple[str, bool]]:
    return [(p["text"], p["replace"]) for p in reply.get("payload", []) if p.get("source") == "set_next_input"]


def session_id(kernel: Kernel) -> str:
    text = kernel.execute("%ctx status --json")
    return json.loads(text[text.index("{"):])["session_id"]


def python_calls(tmp_path, sid: str) -> list[str]:
    records = SessionDir(tmp_path / ".ctx_magic", sid).load_transcript().messages()
    return [b["id"] for m in records for b in m.blocks("tool_use") if b["name"] == "python"]


def test_without_the_labextension_next_input_places_the_blocks_one_per_execution(kernel, tmp_path):
    kernel.execute(SETUP)
    outputs, reply = kernel.execute_with_reply(TURN)
    sid = session_id(kernel)
    first, second = python_calls(tmp_path, sid)
    assert next_inputs(reply) == [(marked(first, FIRST), False)]
    blocks = [o for o in outputs if AGENT_CODE_MIME in o.get("data", {})]
    assert len(blocks) == 2 and f"run %ctx cell {first} in an empty cell" in blocks[0]["data"]["text/html"]

    # The frontend placed the first block below the %%agent cell; running it places the second.
    outputs, reply = kernel.execute_with_reply(next_inputs(reply)[0][0])
    assert [o["text"] for o in outputs if o.get("name") == "stdout"] == ["run 2\n"]
    assert next_inputs(reply) == [(marked(second, SECOND), False)]
    _, reply = kernel.execute_with_reply(marked(second, SECOND))
    assert next_inputs(reply) == []

    _, reply = kernel.execute_with_reply(f"%ctx cell {first}")
    assert next_inputs(reply) == [(marked(first, FIRST), True)]

    kernel.execute("%%agent\nWhat changed?")
    records = list(SessionDir(tmp_path / ".ctx_magic", sid).load_transcript().messages())
    runs = [b["input"] for m in records for b in m.blocks("tool_use") if b["name"] == "notebook_cell"]
    assert {"ran_again": first}.items() <= runs[0].items() and "source" not in runs[0]
    assert {"ran_again": second}.items() <= runs[1].items() and "source" not in runs[1]


def test_a_kernel_the_labextension_announced_itself_to_places_nothing(kernel):
    _, reply = kernel.execute_with_reply(ANNOUNCEMENT, silent=True)  # as the extension sends it
    assert reply["status"] == "ok"
    kernel.execute(SETUP)
    outputs, reply = kernel.execute_with_reply(TURN)
    assert next_inputs(reply) == []
    blocks = [o for o in outputs if AGENT_CODE_MIME in o.get("data", {})]
    assert [b["data"][AGENT_CODE_MIME]["mode"] for b in blocks] == ["insert", "insert"]
    assert all("%ctx cell" not in b["data"]["text/html"] for b in blocks)
