"""The live context's changes on demand, through the loop against the stand-in over real HTTP."""

from __future__ import annotations

from agent_rig import rig

from ctx_magic.agent.loop import run_turn
from ctx_magic.events import ThinkingCleared
from ctx_magic.settings import Settings


def test_a_clearing_asked_outside_a_call_drops_the_thinking_after_the_result_it_changes(tmp_path):
    """A prompt, a turn running code, a clearing of its result outside any model call, then a turn:
    on a model that checks the thinking's prefix, the answer after the cleared result loses its
    thinking (its prefix changed) and every request is accepted. The clearing used to take the
    append-only flag as a keyword defaulting to off, so a caller that left it out kept that
    thinking and the next request was refused."""
    with rig(tmp_path, window=8_000, config=Settings()) as r:
        events: list[object] = []
        r.session.listeners.append(events.append)
        run_turn(r.session, "Note 0: the first figure looks off")
        run_turn(r.session, "Step 1: look at the data.\n```python\nx10 = 10\n```\n")
        results = [i for m in r.session.live.messages for i in m.tool_result_ids]
        cleared, unknown = r.session.live.clear_results(results, "model", r.session.setup())
        assert cleared == results and unknown == []
        after = r.session.live.messages[-1]
        assert after.role == "assistant" and not any(b.get("type") == "thinking" for b in after.content)
        assert any(b.get("type") == "thinking" for b in r.session.live.messages[1].content)  # before the edit: kept
        run_turn(r.session, "Step 2: and now?")
    assert [e.trigger for e in events if isinstance(e, ThinkingCleared)] == ["edit"]
    calls = [q for q in r.api.requests if q.path == "/v1/messages"]
    assert len(calls) >= 4 and all(q.status == 200 and not q.thinking_mismatches for q in calls)
