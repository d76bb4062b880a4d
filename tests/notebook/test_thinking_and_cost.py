"""Thinking and dollars as a notebook user sees them: the thinking streams into a
collapsed block, the Done line says what the turn cost, `%ctx status` (text and JSON) says where
the window came from, the thinking in force, the session's spend and savings."""

from __future__ import annotations

import json

import pytest
from builders import ManualClock
from notebook_rig import captured, clocked_shell, controller, run, status

from ctx_magic.events import TextDelta, ThinkingDelta
from ctx_magic.notebook.display import STREAM_INTERVAL, TurnDisplay
from ctx_magic.ui.panel import ContextPanel


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with clocked_shell(tmp_path, monkeypatch) as sh:
        yield sh


def test_a_turn_with_thinking_shows_it_collapsed_and_says_what_it_cost(shell):
    run(shell, "%config CtxMagic.thinking = 'enabled'")
    run(shell, "%config CtxMagic.thinking_budget = 2048")
    with captured() as out:
        shell.run_cell("%%agent\nCheck this.\n```python\nprint(6 * 7)\n```", store_history=True)
    html = "\n".join(o.data.get("text/html", "") for o in out.outputs)
    plain = "\n".join(o.data.get("text/plain", "") for o in out.outputs)
    assert '<details class="ctx-magic-thinking"><summary>Thinking</summary>' in html
    assert "<details class=\"ctx-magic-thinking\" open" not in html  # collapsed until opened
    assert "Offline stand-in thinking" in html
    done = next(line for line in plain.splitlines() if line.startswith("Done"))
    assert done.endswith("this turn") and " · $0.0" in done
    _r, text = run(shell, "%ctx status")
    seen = status(shell)
    assert "thinking adaptive (2,048 tokens reserved)" in text and "from models-api" in text  # what the model takes
    assert "spent $" in text and "prices per million tokens: input $2" in text
    assert seen["thinking"] == {"type": "adaptive", "budget_tokens": 2048, "unasked": None}
    assert seen["cost"]["session_usd"] > 0 and seen["cost"]["prices_source"] == "table"
    assert seen["window_source"] == "models-api"
    session = controller(shell).host.session
    assert session is not None and session.live.messages[1].content[0]["type"] == "thinking"


def test_thinking_off_on_the_default_model_is_the_least_it_takes_and_the_status_says_so(shell):
    """The default model thinks unasked: 'auto' (the default) lets it, 'off' sends what turns it
    down, and the status says which, in text and JSON."""
    shell.run_cell("%%agent\nHello.", store_history=True)
    _r, text = run(shell, "%ctx status")
    assert "thinking adaptive (the model's own default; 'off' turns it down)" in text
    assert status(shell)["thinking"] == {"type": "off", "budget_tokens": 0, "unasked": "default"}
    run(shell, "%config CtxMagic.thinking = 'off'")  # from the next turn on
    with captured() as out:
        shell.run_cell("%%agent\nCheck this.\n```python\nprint(6 * 7)\n```", store_history=True)
    html = "\n".join(o.data.get("text/html", "") for o in out.outputs)
    assert "Offline stand-in thinking" not in html  # no thinking before the answer; the note between calls is empty
    _r, text = run(shell, "%ctx status")
    assert "thinking off (notes between tool calls only: the least this model takes)" in text
    assert status(shell)["thinking"] == {"type": "off", "budget_tokens": 0, "unasked": "between_tools"}
    session = controller(shell).host.session
    assert session is not None
    answers = [m for m in session.live.messages if m.role == "assistant"]
    assert [[b["type"] for b in m.content if b["type"] == "thinking"] for m in answers] == [
        ["thinking"], [], ["thinking"]]  # the first turn's thinking is still sent back


def test_thinking_updates_in_place_a_few_times_a_second_then_the_answer_follows(shell):
    clock = ManualClock(0.0)
    with captured() as out:
        display = TurnDisplay(clock=clock)
        for n in range(30):
            display(ThinkingDelta(f"step{n} "))
            clock.now += STREAM_INTERVAL / 3
        display(TextDelta("The answer."))
        display.finish("Done")
    blocks = [o.data["text/plain"] for o in out.outputs if "ctx-magic-thinking" in o.data.get("text/html", "")]
    assert 9 <= len(blocks) <= 12 and blocks[-1].endswith("step29 ")
    assert [o.data["text/plain"] for o in out.outputs if "text/markdown" in o.data][-1] == "The answer."


def test_the_panel_shows_the_spend_and_the_savings(shell):
    run(shell, "%%agent\nhello")
    session = controller(shell).host.session
    panel = ContextPanel()
    panel.load(session.status())
    assert panel.cost["session_usd"] > 0 and "spent" in panel.counts.value
    assert panel.cost["saved_usd"] == 0 and "saved at least" not in panel.counts.value  # nothing changed yet
    assert json.loads(json.dumps(panel.cost)) == panel.cost  # synced to the front end as plain JSON
