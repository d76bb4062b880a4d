"""Thinking on the models that think when a request has no `thinking`: 'auto' (the default) sends
none and lets them think as they do by default; 'off' sends the least thinking each takes (Sonnet
5.5 `between_tools`, Haiku 5.5 `disabled`); the models that always think get no parameter either
way, and the status says what each does. Through the real SDK, over HTTP, against the stand-in's
thinking rules and prefix check."""

from __future__ import annotations

import pytest
from agent_rig import THINKING_TYPES, rig, thinking_prefix_problems

from ctx_magic.agent.loop import run_turn
from ctx_magic.notebook.wording import status_text
from ctx_magic.settings import Settings


def code_turn(n: int) -> str:
    return f"Turn {n}\n```python\nprint('\\n'.join(f'value {n} {{i}}' for i in range(40)))\n```"


def _main(requests):  # type: ignore[no-untyped-def]
    return [q for q in requests if q.path == "/v1/messages" and q.kind == "normal"]


def _thinking_in(content) -> list[dict]:  # type: ignore[no-untyped-def]
    return [b for b in content if b.get("type") in THINKING_TYPES]


OFF = {  # model: (thinking sent, its first answer of a turn thinks, its answer after tool results thinks, status)
    "claude-sonnet-5-5": ({"type": "between_tools"}, False, True,
                          "thinking off (notes between tool calls only: the least this model takes)"),
    "claude-haiku-5-5": ({"type": "disabled"}, False, False, "thinking off ·"),
    "claude-opus-5-5": (None, True, True, "thinking adaptive (this model always thinks; 'off' cannot turn it off)"),
    "claude-sonnet-4-6": (None, False, False, "thinking off ·"),
    "claude-fable-5": (None, True, True, "thinking adaptive (this model always thinks; 'off' cannot turn it off)"),
}
AUTO = {
    "claude-sonnet-5-5": (None, True, True, "thinking adaptive (the model's own default; 'off' turns it down)"),
    "claude-haiku-5-5": (None, True, True, "thinking adaptive (the model's own default; 'off' turns it down)"),
    "claude-opus-5-5": OFF["claude-opus-5-5"],
    "claude-sonnet-4-6": OFF["claude-sonnet-4-6"],
    "claude-fable-5": OFF["claude-fable-5"],
}


@pytest.mark.parametrize(("setting", "model"), [(s, m) for s in ("off", "auto") for m in OFF])
def test_each_model_thinks_as_the_setting_and_the_model_allow(tmp_path, setting, model):
    """Two turns that run code: every main request carries what the setting sends that model,
    every one is accepted, and the answers think only where that model then does (up front, or
    between tool calls); what thinking there is goes back exactly as returned and passes the
    check, and `%ctx status` says what the model does."""
    sent, first_thinks, notes_between_tools, shown = (OFF if setting == "off" else AUTO)[model]
    with rig(tmp_path, window=200_000, model=model, config=Settings(model=model, thinking=setting)) as r:
        for n in range(2):
            assert run_turn(r.session, code_turn(n)).error is None
        text = status_text(r.session.status())
    calls = _main(r.api.requests)
    assert len(calls) >= 4 and all(q.status == 200 and not q.thinking_mismatches for q in calls)
    assert all(q.body.get("thinking") == sent for q in calls)
    assistants = [m for m in r.session.live.messages if m.role == "assistant"]
    opening = [a for a in assistants if a.tool_use_ids]  # each turn's first answer: it runs the code
    closing = [a for a in assistants if not a.tool_use_ids]  # the answer after the code's output
    assert len(opening) == len(closing) == 2
    assert all(bool(_thinking_in(a.content)) == first_thinks for a in opening)
    assert all(bool(_thinking_in(a.content)) == notes_between_tools for a in closing)
    assert thinking_prefix_problems(r.api.requests) == []
    assert shown in text


def test_the_default_is_the_models_own_thinking():
    assert Settings().thinking == "auto"


def test_thinking_asked_for_is_sent_as_asked_on_a_model_that_turns_it_down_when_off(tmp_path):
    with rig(tmp_path, window=200_000, config=Settings(thinking="adaptive")) as r:
        assert run_turn(r.session, code_turn(0)).error is None
        text = status_text(r.session.status())
    calls = _main(r.api.requests)
    assert calls and all(q.body.get("thinking") == {"type": "adaptive"} for q in calls)
    assert all(_thinking_in(m.content) for m in r.session.live.messages if m.role == "assistant")
    assert "thinking adaptive (" in text and "tokens reserved)" in text
