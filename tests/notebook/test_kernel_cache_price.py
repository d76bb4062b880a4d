"""A real kernel on a manual clock: once the prompt cache has outlived its TTL, `%ctx status`
tells what the next call will write and cost before the cell is run, and the stand-in then bills
that call's cache write within 1 % of it."""

from __future__ import annotations

import json

import pytest
from kernel_rig import Kernel, kernel_env, start

pytestmark = pytest.mark.slow  # a real kernel: seconds to start

# The kernel's clock, moved by hand: the session and the stand-in's prompt cache both read it.
CLOCK = ("from ctx_magic.notebook.extension import controller_of\n_clock = [1_800_000_000.0]\n"
         "controller_of(get_ipython()).clock = lambda: _clock[0]")
FIRST_ANSWER_AFTER_GO_ON = """import json
from ctx_magic.notebook.extension import controller_of
_live = controller_of(get_ipython()).host.session.live.messages
_at = max(i for i, m in enumerate(_live) if m.role == "user" and m.text == "Go on.")
_answer = next(m for m in _live[_at:] if m.role == "assistant" and m.api_id)
print(json.dumps(_answer.usage.to_json()))"""


def json_in(text: str) -> dict:
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]


def test_a_cold_cache_s_price_is_told_before_the_call_and_is_what_the_call_is_billed(tmp_path):
    kernels: list[Kernel] = []
    try:
        kernel = start(kernels, tmp_path, kernel_env())
        kernel.execute_with_reply(CLOCK, silent=True)  # silent: not a cell the agent sees
        for n in range(3):
            shown = kernel.execute(f"%%agent\nTurn {n}: " + " ".join(f"word{n}x{i}" for i in range(200)))
            assert "Done" in shown
        assert json_in(kernel.execute("%ctx status --json"))["cache"]["state"] == "warm"
        kernel.execute_with_reply("_clock[0] += 6 * 60", silent=True)
        status = json_in(kernel.execute("%ctx status --json"))
        shown = kernel.execute("%ctx status")
        cache = status["cache"]
        assert cache["state"] == "cold" and cache["reason"] == "idle 6 min, past the cache's 5m lifetime"
        assert f"it writes {cache['write_tokens']:,} tokens to the cache, about ${cache['write_usd']:.4f}" in shown
        rate = status["cost"]["prices_per_mtok"]["cache_write_5m"]
        assert "Done" in kernel.execute("%%agent\nGo on.")
        usage = json_in(kernel.execute(FIRST_ANSWER_AFTER_GO_ON))
    finally:
        for kernel in kernels:
            kernel.close()
    assert usage["cache_read_input_tokens"] == 0  # the stand-in's cache expired on the kernel's clock
    billed = usage["cache_creation_input_tokens"] * rate / 1_000_000
    assert cache["write_usd"] == pytest.approx(billed, rel=0.01)
