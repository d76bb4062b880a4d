"""A real kernel: interrupts (while a tool runs, while the reply streams) leave a valid
conversation, and a kernel killed mid-session resumes with the same next request."""

from __future__ import annotations

import json
import re

import pytest
from kernel_rig import Kernel, kernel_env

from ctx_magic.context.invariants import INTERRUPTED_RESULT, check_invariants
from ctx_magic.context.resume import fold_transcript
from ctx_magic.messages import result_text
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.store.session import SessionDir

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

SETUP = "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False"


def status(kernel: Kernel) -> dict:
    text = kernel.execute("%ctx status --json")
    return json.loads(text[text.index("{"):])


def live_messages(tmp_path, session_id):
    session = SessionDir(tmp_path / ".ctx_magic", session_id)
    live, _, problems = fold_transcript(session.load_transcript().records)
    assert problems == [] and session.load_transcript().problems == []
    return live


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(tmp_path, kernel_env())
    yield k
    k.close()


def test_interrupt_while_a_tool_runs_closes_the_call_and_the_next_turn_works(kernel, tmp_path):
    kernel.execute(SETUP)
    loop = "%%agent\nspin\n```python\nimport itertools\nfor _ in itertools.count():\n    pass\n```"
    shown = kernel.execute(loop, when=lambda text: "Running python" in text, then=kernel.interrupt)
    assert "Interrupted" in shown and "Traceback" not in shown
    after = kernel.execute("%%agent\nare you still there?")
    assert "Done · 1 model call ·" in after
    sid = status(kernel)["session_id"]
    live = live_messages(tmp_path, sid)
    check_invariants(live)
    results = [b for m in live for b in m.blocks("tool_result")]
    assert any(b.get("is_error") and result_text(b) == INTERRUPTED_RESULT for b in results)


def test_interrupt_after_the_code_printed_keeps_what_it_printed_without_a_traceback(kernel, tmp_path):
    kernel.execute(SETUP)
    loop = ("%%agent\ncount\n```python\nimport itertools, time\nfor i in itertools.count():\n"
            "    print(f'tick {i}', flush=True)\n    time.sleep(0.05)\n```")
    shown = kernel.execute(loop, when=lambda text: "tick" in text and "thinking" not in text,  # not its quote
                           then=kernel.interrupt)
    assert "Interrupted" in shown and "Traceback" not in shown
    results = [b for m in live_messages(tmp_path, status(kernel)["session_id"]) for b in m.blocks("tool_result")]
    text = result_text(results[-1])
    assert text.startswith(f"{INTERRUPTED_RESULT}\n\n[output before the interrupt]\ntick 0\n")
    assert "[error]" not in text  # the interrupt's own traceback says nothing the note does not


def test_interrupt_while_the_reply_streams_keeps_the_conversation_valid(tmp_path):
    api = OfflineAPI(OfflineConfig(window=100_000))
    with serve_in_thread(api) as (url, _stop):
        kernel = Kernel(tmp_path, kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url))
        try:
            kernel.execute(SETUP)
            api.inject("stall")  # the reply starts, then hangs
            shown = kernel.execute("%%agent\ntell me a long story",
                                   # the first streamed output: the thinking the default model starts with
                                   when=lambda text: text.startswith(("[thinking]", "Offline stand-in")),
                                   then=kernel.interrupt)
            api.endpoint.stall_release.set()
            assert "Interrupted" in shown and "Traceback" not in shown
            assert "Done · 1 model call ·" in kernel.execute("%%agent\nshorter, please")
            sid = status(kernel)["session_id"]
        finally:
            kernel.close()
    live = live_messages(tmp_path, sid)
    check_invariants(live)
    assert [m.text for m in live if m.role == "user"][:2] == ["tell me a long story", "shorter, please"]
    assert sum(1 for m in live if m.role == "assistant") == 1  # the half-streamed reply was not kept


SCENARIO = [  # every result kept from clearing, so the threshold compacts (a clearing would be cheaper)
    SETUP + "\n%config CtxMagic.context_window = 20000\n%config CtxMagic.keep_recent = 20",
    "data = list(range(5000))\nprint(sum(data))",
    # Each part in two runs, each under the tool-result budget's limit at this window (50,000 characters scaled: 5,000).
    *[f"%%agent\nPart {n}.\n```python\nprint('\\n'.join(f'row {{i}}: {{i * {n}}}' for i in range(350)))\n```\n"
      f"```python\nprint('\\n'.join(f'row {{i}}: {{i * {n}}}' for i in range(350, 700)))\n```"
      for n in range(6)],
    "%%agent\nOne big dump.\n```python\nprint('x' * 70_000)\n```",
]
NEXT = "%%agent\nWhat was in part 2?"


def _last_main_request(api: OfflineAPI) -> list:
    return [r for r in api.requests if r.path == "/v1/messages" and r.kind == "normal"][-1].body["messages"]


def _normalized(messages: list, session_id: str) -> str:
    """Session ids, the offline server's tool ids (a digest of each request, which holds the
    session id) and message refs (the start of a random uuid, in the coverage audit's text), as
    placeholders numbered in order of appearance; thinking signatures as one placeholder."""
    text = re.sub(r"\d{8}-\d{6}-[0-9a-f]{6}", "SESSION", json.dumps(messages).replace(session_id, "SESSION"))
    ids: dict[str, str] = {}
    text = re.sub(r"toolu_offline_[0-9a-f]{12}_\d{2}", lambda m: ids.setdefault(m.group(0), f"TOOL{len(ids)}"), text)
    refs: dict[str, str] = {}
    text = re.sub(r'(?<=ref=\\")[0-9a-f]{8}', lambda m: refs.setdefault(m.group(0), f"REF{len(refs)}"), text)
    # A thinking block's signature covers what came before it, session ids included.
    return re.sub(r'"signature": "[^"]*"', '"signature": "SIGNATURE"', text)


def _run(tmp_path, *, restart: bool) -> tuple[str, dict]:
    tmp_path.mkdir(parents=True)
    api = OfflineAPI(OfflineConfig(window=100_000))
    with serve_in_thread(api) as (url, _stop):
        env = kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)
        kernel = Kernel(tmp_path, env)
        try:
            for cell in SCENARIO:
                assert "ERROR" not in kernel.execute(cell)
            before = status(kernel)
            if restart:
                kernel.kill()  # the kernel dies between turns
                kernel = Kernel(tmp_path, env)
                shown = kernel.execute(SETUP + "\n%config CtxMagic.context_window = 20000\n"
                                       "%config CtxMagic.keep_recent = 20\n%agent --resume")
                assert f"Resumed session {before['session_id']}" in shown
            kernel.execute(NEXT)
        finally:
            kernel.close()
    return _normalized(_last_main_request(api), before["session_id"]), before


def test_a_killed_kernel_resumes_with_the_same_next_request(tmp_path):
    work = tmp_path / "work"  # both runs in the same folder: its path is part of what is sent
    first, straight = _run(work, restart=False)
    work.rename(tmp_path / "straight")
    second, restarted = _run(work, restart=True)
    assert straight["boundaries"] and restarted["boundaries"]  # compaction happened before the kill
    assert straight["tool_results"] == restarted["tool_results"]
    assert second == first
