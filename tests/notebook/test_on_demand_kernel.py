"""A real kernel on the default model (claude-sonnet-5-5, which the API summarizes on demand) against
the stand-in over HTTP: `%compact` asks the API for the summary (the main call's request with
`compaction` and its beta header), the compaction block opens the next request, and that turn is
accepted with the thinking it writes sent back after it."""

from __future__ import annotations

import pytest
from agent_rig import THINKING_TYPES, thinking_prefix_problems
from kernel_rig import SETUP, kernel_env, start

from ctx_magic.agent.on_demand import ON_DEMAND_BETA
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread

pytestmark = pytest.mark.slow  # a real kernel: seconds to start


def part(n: int) -> str:
    return (f"%%agent\nPart {n}: list the rows.\n```python\n"
            f"print('\\n'.join(f'row {{i}}: {{i * {n}}}' for i in range(40)))\n```")


def test_compact_in_a_kernel_is_written_by_the_api_and_the_next_turns_are_accepted(kernels, tmp_path):
    api = OfflineAPI(OfflineConfig(window=200_000, account="new"))
    with serve_in_thread(api) as (url, _stop):
        env = kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)
        kernel = start(kernels, tmp_path, env, SETUP + "\n%config CtxMagic.context_window = 60000"
                       f"\n%config CtxMagic.user_memory_dir = {str(tmp_path / 'memories')!r}")
        shown = [kernel.execute(part(n)) for n in range(3)]
        shown.append(kernel.execute("%compact keep the row counts"))
        shown += [kernel.execute(part(n)) for n in range(3, 5)]
    calls = [q for q in api.requests if q.path == "/v1/messages"]
    asked = [q for q in calls if "compaction" in (q.body or {})]
    assert all("Traceback" not in s and "refused" not in s for s in shown), shown
    assert len(asked) == 1 and ON_DEMAND_BETA in asked[0].betas and asked[0].status == 200
    assert "keep the row counts" in asked[0].body["compaction"]["instructions"]
    assert not [q for q in calls if q.kind == "compaction" and q is not asked[0]]  # no summary of ctx_magic's own
    after = [q for q in calls[calls.index(asked[0]) + 1:] if q.kind == "normal"]
    assert after and all(q.body["messages"][0]["content"][0]["type"] == "compaction" for q in after)
    assert [(q.status, q.thinking_mismatches) for q in calls if q.status != 200 or q.thinking_mismatches] == []
    assert sum(1 for m in after[-1].body["messages"][1:] if m["role"] == "assistant" for b in m["content"]
               if b.get("type") in THINKING_TYPES) > 0  # thinking written after the block goes back
    assert thinking_prefix_problems(api.requests) == []
