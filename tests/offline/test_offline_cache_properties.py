"""Property: whatever the sequence of requests, the cache's figures are sound."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctx_magic.offline.cache import PromptCache
from ctx_magic.offline.counting import input_tokens, request_segments

from .offline_support import FakeClock

WORDS = ["alpha", "beta", "gamma", "delta"]


def _request(texts: list[str], marks: list[str | None]) -> dict[str, Any]:
    messages = []
    for i, (text, mark) in enumerate(zip(texts, marks)):
        block: dict[str, Any] = {"type": "text", "text": text}
        if mark is not None:
            block["cache_control"] = {"type": "ephemeral", "ttl": mark}
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": [block]})
    return {"messages": messages}


steps = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
        st.lists(st.sampled_from([None, None, "5m", "1h"]), min_size=6, max_size=6),
        st.sampled_from([0.0, 60.0, 299.0, 301.0, 3_601.0]),
        st.sampled_from([0, 2, 5]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_usage_parts_are_non_negative_and_sum_to_input_tokens(sequence: list[Any]) -> None:
    clock = FakeClock()
    cache = PromptCache(clock)
    for texts, marks, gap, minimum in sequence:
        clock.advance(gap)
        request = _request(texts, marks[: len(texts)])
        usage = cache.account(request_segments(request), minimum)
        parts = (usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens)
        assert min(parts) >= 0
        assert sum(parts) == input_tokens(request)
        assert usage.ephemeral_5m_input_tokens + usage.ephemeral_1h_input_tokens == usage.cache_creation_input_tokens


def test_cache_hit_needs_a_breakpoint_at_or_after_it() -> None:
    cache = PromptCache(FakeClock())
    cache.account(request_segments(_request(["alpha", "beta"], ["5m", None])))
    unmarked = cache.account(request_segments(_request(["alpha", "beta"], [None, None])))
    assert unmarked.cache_read_input_tokens == 0
