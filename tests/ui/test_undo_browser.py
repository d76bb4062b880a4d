"""The Undo on a compaction's card, in a real JupyterLab 4 in headless Debian Chromium: after three
turns and `%compact`, the card's Undo brings back the messages the summary replaced (the kernel
confirms: no boundary is live, every turn's message is), the line under the button says so, and
the card's title says it was undone. A second Undo is not offered.

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
from ui.test_browser import PANEL, UI_TIMEOUT, Page, notebooks_in_lab

pytestmark = pytest.mark.slow  # a Jupyter server, a browser and a kernel: minutes, not seconds

TURNS = 3
CELLS = [
    "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False\n"
    "%config CtxMagic.user_memory_dir = '.user-data'",
    *(f"%%agent\nPart {n}: list the rows.\n```python\nprint('\\n'.join(f'row {{i}}' for i in range(40)))\n```"
      for n in range(TURNS)),
    "%compact keep the row counts",  # instructions: a summary by the model, not the session's notes
]
CARD = f"{PANEL} .ctx-magic-cards > .ctx-magic-card"
LIVE_KINDS = ("from ctx_magic.notebook.extension import controller_of\n"
              "_live = controller_of(get_ipython()).host.session.live.messages\n"
              "print([m.kind for m in _live].count('boundary'), sum(m.text.startswith('Part ') for m in _live))")


def open_compaction_card(page: Page) -> None:
    """Run the notebook up to `%compact`, then open the compaction's card (the newest, on top)."""
    page.open("undo.ipynb")
    page.run_cells(0, len(CELLS) - 1)
    page.page.locator(f"{CARD} .ctx-magic-undo-button").first.wait_for(state="attached", timeout=UI_TIMEOUT)
    page.page.locator(f"{CARD} .jupyter-widget-Collapse-header").first.click()
    page.page.locator(f"{CARD} .ctx-magic-undo-button").first.wait_for(state="visible", timeout=UI_TIMEOUT)


def test_the_undo_on_a_compaction_card_brings_back_the_replaced_messages(tmp_path: Path) -> None:
    needs(chromium_missing(), None if build_is_current() else node_missing())
    with notebooks_in_lab(tmp_path, {"undo.ipynb": CELLS}) as page:
        open_compaction_card(page)
        assert kernel_run(page, LIVE_KINDS).split() == ["1", "0"]  # compacted: a boundary, no turn's message
        page.page.locator(f"{CARD} .ctx-magic-undo-button").first.click()
        page.wait(f"() => document.querySelector('{CARD}.ctx-magic-card-undone') !== null",
                  "the compaction's card is not shown as undone")
        # The line saying what came back is a widget update of its own: it may arrive just after.
        page.wait(f"() => (document.querySelector('{CARD} .ctx-magic-undo-said')?.innerText || '').length > 0",
                  "the compaction's card does not say what the undo brought back")
        said = page.page.locator(f"{CARD} .ctx-magic-undo-said").first.inner_text()
        title = page.page.locator(f"{CARD}.ctx-magic-card-undone .jupyter-widget-Collapse-header").inner_text()
        shown = page.page.locator(f"{CARD} .ctx-magic-undo-button").first.is_visible()
        live = kernel_run(page, LIVE_KINDS).split()
        again = kernel_run(page, "%compact --undo")
    assert said.startswith("Undid the manual compaction: the ") and "stays spent" in said
    assert title.endswith("· undone") and not shown
    assert live == ["0", str(TURNS)]
    assert "There is no compaction, snip or clearing to undo" in again
