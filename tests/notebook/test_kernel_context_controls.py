"""A real kernel: `ctx_magic.context()` shows as a table in the cell and holds the figures the
session works with; the turn before an automatic compaction says so in its Done line, with the
figures the value holds; `%compact --not-now` lets one turn through, and the turn after compacts."""

from __future__ import annotations

import json
import re

import pytest
from kernel_rig import Kernel, kernel_env, start

pytestmark = pytest.mark.slow  # a real kernel: seconds to start

# The kernel's clock, held still: no idle gap clears anything between the turns.
CLOCK = ("from ctx_magic.notebook.extension import controller_of\n"
         "controller_of(get_ipython()).clock = lambda: 1_800_000_000.0")
VALUE = "import json, ctx_magic\nprint(json.dumps(ctx_magic.context().to_json()))"
MAX_TURNS = 12  # a bound, not a wait: a 20,000-token window reaches its notice within a few turns


def wordy(n: int) -> str:
    return f"%%agent\nTurn {n}: " + " ".join(f"word{n}x{i}" for i in range(150))


def value(kernel: Kernel) -> dict:
    return json.loads(kernel.execute(VALUE))


def test_the_context_value_the_notice_and_not_now_in_a_real_kernel(tmp_path):
    kernels: list[Kernel] = []
    try:
        kernel = start(kernels, tmp_path, kernel_env())
        kernel.execute_with_reply(CLOCK, silent=True)
        kernel.execute("%config CtxMagic.context_window = 20000\n%config CtxMagic.autocompact_pct = 50.0")
        assert "Done" in kernel.execute(wordy(0))
        outputs, _ = kernel.execute_with_reply("import ctx_magic\nctx_magic.context()")
        shown = next(o["data"] for o in outputs if "data" in o)
        first = value(kernel)
        for n in range(1, MAX_TURNS):
            done = kernel.execute(wordy(n))
            if "the next turn compacts" in done:
                break
        ahead = value(kernel)
        said = kernel.execute("%compact --not-now")
        let_through = kernel.execute(wordy(50))
        after_let_through = value(kernel)
        kernel.execute(wordy(51))
        last = value(kernel)
    finally:
        for kernel in kernels:
            kernel.close()
    assert "<table class='ctx-magic-context'>" in shown["text/html"]
    assert f"{first['tokens']:,} of {first['window']:,}" in shown["text/html"]
    assert first["window"] == 20_000 and first["compactions"] == 0 and first["thresholds"]["autocompact"] == 7_500
    line = next(x for x in done.splitlines() if x.startswith("Done"))
    notice = re.search(r"the next turn compacts: ([\d,]+) tokens now", line)
    assert notice is not None and ahead["compaction_ahead"] is not None
    assert int(notice.group(1).replace(",", "")) == ahead["tokens"] == ahead["compaction_ahead"]["tokens"]
    assert "The next turn goes on without compacting" in said
    assert "Done" in let_through and after_let_through["compactions"] == 0
    assert last["compactions"] == 1 and last["tokens"] < after_let_through["tokens"]
