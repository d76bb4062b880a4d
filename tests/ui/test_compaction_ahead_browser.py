"""The notice of an automatic compaction one turn early, in a real JupyterLab 4 in headless Debian
Chromium: in a 20,000-token window compacting at half of it, the panel's next-call line says
nothing of a compaction while none is due; after the turn that leaves the context one turn short
of the threshold it says how many tokens the next turn compacts and about what it costs (the
figures of `%ctx status --json`), the cell's Done line says so too, and nothing was compacted yet;
the turn after it compacts.

Needs what tests/ui/test_browser.py needs (Debian's chromium, Node.js where the labextension's
build is missing or older); without them the test skips saying what to install, under CI=true it
fails instead.
"""

from __future__ import annotations

import re
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


def turn(n: int) -> str:
    return f"%%agent\nTurn {n}: " + " ".join(f"word{n}x{i}" for i in range(250))  # under the size saved to a file


CELLS = [
    "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False\n"
    "%config CtxMagic.user_memory_dir = '.user-data'\n"
    "%config CtxMagic.context_window = 20000\n%config CtxMagic.autocompact_pct = 50.0",
    turn(0),
    turn(1),
    turn(2),  # leaves the context one turn short of the threshold: the notice
    turn(3),  # the compacting turn
]
NOTICE, COMPACTING = 3, 4
AHEAD_LINE = f"{PANEL} .ctx-magic-next[data-state='compacting']"


def compaction_ahead_page(page: Page) -> None:
    """The notebook run up to the turn whose Done line announces the compaction, the panel as that
    turn left it (the Done line's figures: no status read since)."""
    page.open("ahead.ipynb")
    page.run_cells(0, NOTICE)
    page.wait(f"() => document.querySelector(\"{AHEAD_LINE}\") !== null", "the panel does not announce the compaction")


def test_the_panel_announces_the_compaction_a_turn_before_it(tmp_path: Path) -> None:
    needs(chromium_missing(), None if build_is_current() else node_missing())
    with notebooks_in_lab(tmp_path, {"ahead.ipynb": CELLS}) as page:
        page.open("ahead.ipynb")
        page.run_cells(0, NOTICE - 1)
        quiet = page.kernel_status()
        page.wait(f"(tokens) => document.querySelector('{PANEL}')?.innerText.includes(tokens)",
                  "the panel does not show the last turn", arg=f"{quiet['tokens']:,}")
        before = page.page.locator(PANEL).inner_text()
        page.run_cells(NOTICE, NOTICE)
        done = page.cell(NOTICE).locator(".jp-OutputArea-output", has_text="Done").inner_text()
        status = settled_status(page)
        ahead = status["compaction_ahead"]
        assert ahead is not None, page.report()
        said = f"The next turn compacts {ahead['tokens']:,} tokens, about {format_usd(ahead['cost_usd'])}"
        page.wait(f"(said) => document.querySelector(\"{AHEAD_LINE}\")?.innerText.includes(said)",
                  f"the panel does not say {said!r}", arg=said)
        page.run_cells(COMPACTING, COMPACTING)
        after = page.kernel_status()
    assert quiet["compaction_ahead"] is None and "compacts" not in before
    assert not ahead["deferred"] and status["boundaries"] == []
    # The Done line is written before the session's notes catch up (a compaction in sight starts
    # their update), so its price may be the summary call's: the tokens and a price, as shown (as
    # text: with its two dollar figures the line was once typeset by MathJax as a formula).
    assert re.search(rf"· the next turn compacts: {ahead['tokens']:,} tokens now, about [\d,]+ more a turn, threshold "
                     r"7,500 \(about \$\d\.\d{4}\): %compact --not-now lets one more turn through under the "
                     r"blocking limit 14,700$", done), done
    assert len(after["boundaries"]) == 1  # the turn after the notice compacted


def settled_status(page: Page) -> dict:
    """`%ctx status --json` once the notes' background update the turn started has ended (the
    compaction ahead is priced from them when they are there)."""
    kernel_run(page, "from ctx_magic.notebook.extension import controller_of as _controller_of\n"
                     "_controller_of(get_ipython()).host.session.plugins.notes.wait(120)")
    return page.kernel_status()
