"""The price of the next call before the user runs a cell, in a real JupyterLab 4 in headless
Debian Chromium: after a turn, the kernel's clock (a manual one) moves past the prompt cache's
lifetime and the idle timer fires (called as its thread would, no wall-clock wait); the status bar
item then says what the next call will cost, the panel's next-call line says what it will write,
and both agree with `%ctx status --json`. No cell runs in between.

Needs what tests/ui/test_browser.py needs (Debian's chromium, Node.js where the labextension's
build is missing or older); without them the test skips saying what to install, under CI=true it
fails instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ui.browser_rig import (
    build_is_current,
    chromium_missing,
    needs,
    node_missing,
)
from ui.test_agent_cells_browser import kernel_run
from ui.test_browser import PANEL, Page, notebooks_in_lab

from ctx_magic.prices import format_usd

pytestmark = pytest.mark.slow  # a Jupyter server, a browser and a kernel: minutes, not seconds

CELLS = [
    "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False\n"
    "%config CtxMagic.user_memory_dir = '.user-data'\n"
    "import time as _time\nfrom ctx_magic.notebook.extension import controller_of as _controller_of\n"
    "_clock = [_time.time()]\n_controller_of(get_ipython()).clock = lambda: _clock[0]",
    "%%agent\nSummarise these readings: " + " ".join(f"reading{i}" for i in range(300)),
]
IDLE_PAST_TTL = ("_clock[0] += 6 * 60  # past the 5-minute cache lifetime\n"
                 "_controller_of(get_ipython()).idle._fired()  # what the idle timer's thread calls")
STATUS_BAR = ".ctx-magic-statusbar"
NEXT_LINE = f"{PANEL} .ctx-magic-next"


def cold_cache_page(page: Page) -> None:
    """The notebook run, then the kernel idle past the cache's lifetime: the panel shows the cold price."""
    page.open("cold.ipynb")
    page.run_cells(0, len(CELLS) - 1)
    kernel_run(page, IDLE_PAST_TTL)
    page.wait(f"() => document.querySelector('{STATUS_BAR}')?.dataset.cache === 'cold'",
              "the status bar does not show a cold cache")


def test_the_status_bar_prices_a_cold_cache_before_a_cell_runs(tmp_path: Path) -> None:
    needs(chromium_missing(), None if build_is_current() else node_missing())
    with notebooks_in_lab(tmp_path, {"cold.ipynb": CELLS}) as page:
        cold_cache_page(page)
        count = page.count(len(CELLS) - 1)
        item = page.page.locator(STATUS_BAR)
        shown, title = item.inner_text(), item.get_attribute("title") or ""
        line = page.page.locator(NEXT_LINE).inner_text()
        status = page.kernel_status()
        after = page.count(len(CELLS) - 1)
    cache = status["cache"]
    assert cache["state"] == "cold" and cache["write_tokens"] > 0
    assert shown == f"Context {round(status['percent_left'])}% left · next call {format_usd(cache['write_usd'])}"
    assert f"the next call writes {cache['write_tokens']:,} tokens" in title
    assert f"{cache['write_tokens']:,}" in line and format_usd(cache["write_usd"]) in line
    assert after == count  # no cell ran
