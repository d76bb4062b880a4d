"""Real kernels against the stand-in served over HTTP (the test reads every request it received):
with `memory_review = 'ask'` a memory that extraction found waits through a kernel restart, is in
no request the next kernel sends (system prompt or messages) until kept, and in the next
session's system prompt once kept."""

from __future__ import annotations

import json

import pytest
from kernel_rig import SETUP, Kernel, kernel_env, start

from ctx_magic.offline.app import OfflineAPI
from ctx_magic.offline.server import serve_in_thread

pytestmark = pytest.mark.slow  # real kernels: seconds to start

CONFIG = SETUP + "\n%config CtxMagic.memory_review = 'ask'\n%config CtxMagic.user_memory_dir = '.user-data'"
FACT = "The churn model is retrained on the first of each month."


def sent(api: OfflineAPI, first: int) -> list[str]:
    """Every request to /v1/messages from `first` on, as the JSON text of its body."""
    return [json.dumps(r.body) for r in api.requests[first:] if r.path == "/v1/messages"]


def test_a_pending_memory_survives_a_restart_and_reaches_no_prompt_until_kept(tmp_path):
    api = OfflineAPI()
    kernels: list[Kernel] = []
    with serve_in_thread(api) as (url, _stop):
        env = kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)
        try:
            kernel = start(kernels, tmp_path, env, CONFIG)
            assert "Done" in kernel.execute(f"%%agent\nRemember that {FACT[0].lower()}{FACT[1:]}")
            shown = kernel.execute("%memory extract")
            assert f"- {FACT} (waiting for your review: %memory keep " in shown
            memory_id = shown.split("%memory keep ")[1].split(")")[0]
            kernel.manager.restart_kernel(now=True)  # the kernel dies; the memory is in a file
            kernel.client.wait_for_ready(timeout=60)
            assert "ERROR" not in kernel.execute(CONFIG)
            first = len(api.requests)
            assert f"- {memory_id} [project]: {FACT}" in kernel.execute("%memory pending")
            assert "Done" in kernel.execute("%%agent\nWhen is the churn model retrained?")
            before = sent(api, first)
            kept = kernel.execute(f"%memory keep {memory_id}")
            after_keep = len(api.requests)
            assert "Done" in kernel.execute("%%agent --new\nAnd when is it retrained?")
            after = sent(api, after_keep)
        finally:
            for each in kernels:
                each.close()
    assert kept.strip() == f"Kept 1 memory:\n- {memory_id}: {FACT}"
    assert before and all(FACT not in body and "first of each month" not in body for body in before)
    assert after and FACT in json.dumps(json.loads(after[0])["system"])
