"""A real kernel on the default model (claude-sonnet-5-5, which checks the prefix of every thinking
block sent back) with a small window, against the stand-in over HTTP: an automatic compaction,
then `%compact --undo`; the next request holds exactly the messages the compaction replaced (what
the stand-in received before it, thinking and signatures included) and is accepted; the same after
the kernel dies and a new one resumes the session from its transcript."""

from __future__ import annotations

import pytest
from agent_rig import _plain
from kernel_rig import SETUP, kernel_env, start

from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread

pytestmark = pytest.mark.slow  # a real kernel: seconds to start

MAX_TURNS = 15  # the window fills in about eight of these turns; a bound, not a wait
BOUNDARIES = ("# ctx: skip\nfrom ctx_magic.notebook.extension import controller_of\n"
              "print(len(controller_of(get_ipython()).host.session.compaction.boundaries))")


def part(n: int) -> str:
    return (f"%%agent\nPart {n}: list the rows.\n```python\n"
            f"print('\\n'.join(f'row {{i}}: {{i * {n}}}' for i in range(100)))\n```")


def main_calls(api: OfflineAPI) -> list:
    return [q for q in api.requests if q.path == "/v1/messages" and q.kind == "normal"]


def kernel_setup(tmp_path) -> str:  # type: ignore[no-untyped-def]
    """A 20,000-token window, memories kept under the test's folder."""
    return (SETUP + "\n%config CtxMagic.context_window = 20000"
            f"\n%config CtxMagic.user_memory_dir = {str(tmp_path / 'memories')!r}")


def until_compacted(kernel, api: OfflineAPI):  # type: ignore[no-untyped-def]
    """Turns until the first automatic compaction; the last main request before it."""
    for n in range(MAX_TURNS):
        calls = len(main_calls(api))
        assert "Done" in kernel.execute(part(n))
        if kernel.execute(BOUNDARIES).strip() != "0":
            return main_calls(api)[calls - 1]  # the last request before the compaction
    raise AssertionError(f"no automatic compaction in {MAX_TURNS} turns")


def test_undo_of_an_automatic_compaction_sends_the_replaced_messages_next(kernels, tmp_path):
    api = OfflineAPI(OfflineConfig(window=200_000, account="new"))
    with serve_in_thread(api) as (url, _stop):
        env = kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)
        kernel = start(kernels, tmp_path, env, kernel_setup(tmp_path))
        assert kernel.execute("%compact --undo").strip() == "There is no agent session yet: run a %%agent cell first."
        sent_before = until_compacted(kernel, api)
        undone = kernel.execute("%compact --undo")
        calls = len(main_calls(api))
        assert "Done" in kernel.execute("%%agent\nAnd now, which part had the largest row?")
        sent_after = main_calls(api)[calls]
        again = kernel.execute("%compact --undo")
    assert "Undid the automatic compaction: the " in undone and "the session's notes were its summary" in undone, undone
    before, after = _plain(sent_before.body["messages"]), _plain(sent_after.body["messages"])
    assert after[:len(before)] == before
    assert any(b.get("type") == "thinking" and b.get("signature") for m in before for b in m["content"]
               if isinstance(m["content"], list))
    assert sent_after.status == 200 and not sent_after.thinking_mismatches
    assert "no compaction, snip or clearing to undo" in again


def test_after_a_kernel_restart_and_resume_the_undo_sends_what_was_sent_before_the_compaction(kernels, tmp_path):
    api = OfflineAPI(OfflineConfig(window=200_000, account="new"))
    setup = kernel_setup(tmp_path)
    with serve_in_thread(api) as (url, _stop):
        env = kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)
        kernel = start(kernels, tmp_path, env, setup)
        sent_before = until_compacted(kernel, api)
        kernel.kill()  # the kernel dies between turns
        kernel = start(kernels, tmp_path, env, setup)
        resumed = kernel.execute("%agent --resume")
        undone = kernel.execute("%compact --undo")
        status = kernel.execute("%ctx status")
        calls = len(main_calls(api))
        assert "Done" in kernel.execute("%%agent\nAnd now, which part had the largest row?")
        sent_after = main_calls(api)[calls]
    assert "Resumed session" in resumed
    assert "Undid the automatic compaction: the " in undone and "the session's notes were its summary" in undone, undone
    assert "0 compactions (1 more undone, not counted)" in status, status
    before, after = _plain(sent_before.body["messages"]), _plain(sent_after.body["messages"])
    assert after[:len(before)] == before
    assert sent_after.status == 200 and not sent_after.thinking_mismatches
