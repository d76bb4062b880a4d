"""One turn's path: the call's setup worked out once per conversation (again only when what it
stands on changes), the live context prepared once per model call."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from agent_rig import prompt, rig

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.request import RequestFrame
from ctx_magic.agent.tools import Executor, Tool
from ctx_magic.settings import Settings

WIDE = 200_000  # no cut of the context in these few turns: every call is an ordinary one


@pytest.fixture
def counted(monkeypatch):  # type: ignore[no-untyped-def]
    """How many times a setup was worked out and the live context prepared."""
    counts: Counter[str] = Counter()
    work_out, prepare = RequestFrame._work_out, LiveContext.prepare

    def counting_work_out(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        counts["setup"] += 1
        return work_out(self, *args, **kwargs)

    def counting_prepare(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        counts["prepare"] += 1
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(RequestFrame, "_work_out", counting_work_out)
    monkeypatch.setattr(LiveContext, "prepare", counting_prepare)
    return counts


def test_the_setup_is_worked_out_once_per_conversation_and_the_context_prepared_once_per_call(tmp_path, counted):
    with rig(tmp_path, window=WIDE, config=Settings(context_window=WIDE)) as r:
        first = run_turn(r.session, prompt(0))
        assert first.error is None and counted["setup"] == 1
        counted.clear()
        results = [run_turn(r.session, prompt(n)) for n in range(1, 4)]
        calls = sum(result.model_calls for result in results)
        assert [result.error for result in results] == [None] * 3 and not r.session.live.state.cleared
    assert calls == 6  # each turn ran its code, then answered
    assert counted == {"prepare": calls}  # no setup worked out again


def test_settings_read_again_unchanged_keep_the_setup_and_a_changed_one_works_it_out_again(tmp_path, counted):
    config = Settings(context_window=WIDE)
    with rig(tmp_path, window=WIDE, config=config) as r:
        assert run_turn(r.session, "Hello.").error is None
        counted.clear()
        r.session.frame.reconfigure(dataclasses.replace(config))  # the notebook does this before every turn
        assert run_turn(r.session, "Hello again.").error is None
        assert counted["setup"] == 0
        r.session.frame.reconfigure(dataclasses.replace(config, keep_recent=2))
        assert run_turn(r.session, "And again.").error is None
        assert counted["setup"] == 1 and r.session.setup().context.keep_recent == 2


def test_a_new_memory_section_or_tool_works_the_setup_out_again_once(tmp_path, counted):
    class Growing(Executor):
        """An executor that gains a tool between turns."""

        def __init__(self) -> None:
            self.extra: list[Tool] = []

        def tools(self) -> list[Tool]:
            return [*self.extra]

    executor = Growing()
    config = Settings(context_window=WIDE, append_only="off")  # append-only, the first call's prefix stays
    with rig(tmp_path, window=WIDE, config=config, executor=executor) as r:
        assert run_turn(r.session, "Hello.").error is None
        counted.clear()
        r.session.frame.set_memory_section("<memories>the user likes tables</memories>")
        assert run_turn(r.session, "Hello again.").error is None
        assert counted["setup"] == 1 and "the user likes tables" in r.session.setup().system_prompt
        executor.extra.append(Tool({"name": "lookup", "description": "Look a word up.",
                                    "input_schema": {"type": "object", "properties": {}}}, _no_run))
        assert run_turn(r.session, "And again.").error is None
        assert counted["setup"] == 2 and "lookup" in r.session.setup().tools.names()
        sent = [q.body for q in r.api.requests if q.path == "/v1/messages"]
    assert [t["name"] for t in sent[-1]["tools"]][:1] == ["lookup"]


def _no_run(_call, _context):  # type: ignore[no-untyped-def]
    raise AssertionError("not called")
