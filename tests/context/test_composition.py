"""What the next request carries, part by part (the panel's composition bar, the thresholds' split of the window)."""

from __future__ import annotations

from builders import assistant, call, results, text

from ctx_magic.context.composition import compose
from ctx_magic.context.state import ContextState
from ctx_magic.context.thresholds import compute_thresholds
from ctx_magic.context.tokens import count_text
from ctx_magic.messages import user_text

THRESHOLDS = compute_thresholds(30_000, 8_192, env={})  # effective 21,808, autocompact 19,858


def sample():
    live, cleared, saved = call(), call(), call()
    messages = [
        user_text("look at the data"),
        assistant(text("on it"), live, cleared, saved),
        results((live["id"], "x " * 400), (cleared["id"], "[Old tool result content cleared]"),
                (saved["id"], "<persisted-output>preview</persisted-output>")),
        user_text("<recent-file path='a.py'>print(1)</recent-file>", kind="attachment"),
    ]
    state = ContextState(cleared={cleared["id"]: "[Old tool result content cleared]"},
                         persisted={saved["id"]: "<persisted-output>preview</persisted-output>"})
    return messages, state


def test_used_parts_add_up_to_the_measured_tokens():
    messages, state = sample()
    for tokens in (1, 977, 5_000, 19_000):
        c = compose(messages, state, tokens=tokens, thresholds=THRESHOLDS, system_tokens=300, memory_tokens=100,
                    tools_tokens=500)
        assert c.used == tokens


def test_the_window_splits_into_used_free_buffer_and_reserve():
    messages, state = sample()
    c = compose(messages, state, tokens=5_000, thresholds=THRESHOLDS, system_tokens=300, memory_tokens=100,
                tools_tokens=500)
    assert c.free == THRESHOLDS.autocompact - 5_000
    assert c.buffer == THRESHOLDS.effective - THRESHOLDS.autocompact
    assert c.reserve == THRESHOLDS.window - THRESHOLDS.effective
    assert sum(size for _, size in c.parts()) == c.window == 30_000


def test_past_the_threshold_the_context_eats_into_the_buffer_not_below_zero():
    messages, state = sample()
    c = compose(messages, state, tokens=21_000, thresholds=THRESHOLDS, system_tokens=300, memory_tokens=0,
                tools_tokens=500)
    assert c.free == 0 and c.buffer == THRESHOLDS.effective - 21_000 and c.reserve == 30_000 - THRESHOLDS.effective
    over = compose(messages, state, tokens=29_000, thresholds=THRESHOLDS, system_tokens=300, memory_tokens=0,
                   tools_tokens=500)
    assert (over.free, over.buffer, over.reserve) == (0, 0, 1_000)


def test_results_are_sorted_into_live_persisted_and_cleared_stubs():
    messages, state = sample()
    total = 100_000  # scaling by 1: the parts are the local counts (the estimate is the measure)
    unscaled = compose(messages, state, tokens=total, thresholds=compute_thresholds(400_000, 8_192, env={}),
                       system_tokens=0, memory_tokens=0, tools_tokens=0)
    assert unscaled.tool_results > unscaled.persisted > 0  # 400 "x " against one short preview
    assert unscaled.memory > 0  # the re-read file is attached context, not conversation
    assert unscaled.system == unscaled.tools == 0


def test_memory_section_is_counted_apart_from_the_rest_of_the_system_prompt():
    c = compose([user_text("hi")], ContextState(), tokens=1_000, thresholds=THRESHOLDS, system_tokens=600,
                memory_tokens=200, tools_tokens=200)
    hi = count_text("hi")
    total = 400 + 200 + 200 + hi
    assert abs(c.system - 1_000 * 400 / total) <= 1 and abs(c.memory - 1_000 * 200 / total) <= 1


def test_an_empty_context_carries_nothing():
    c = compose([], ContextState(), tokens=0, thresholds=THRESHOLDS, system_tokens=0, memory_tokens=0,
                tools_tokens=0)
    assert c.used == 0 and c.free == THRESHOLDS.autocompact
