"""Memories waiting for review in the context panel, in a real JupyterLab 4 and a real Notebook 7
in headless Debian Chromium: with `memory_review = 'ask'`, after `%memory extract` the panel lists
the two memories extraction found with Keep and Discard buttons; a click on Keep made while a cell
runs is carried out when the cell ends (the kernel reads widget messages between cells) and stores
one, which moves to the panel's long-term memories; a click on Discard drops the other, and the
section goes. The kernel confirms both. Screenshots are left in test-artifacts/
(`lab-pending-panel.png` is docs/pending-memories.png).

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
from ui.test_browser import ARTIFACTS, NOTEBOOK, PANEL, SIDEBAR, UI_TIMEOUT, Page, notebooks_in_lab

pytestmark = pytest.mark.slow  # a Jupyter server, a browser and a kernel: minutes, not seconds

REPORTS = "Reports go out on Mondays."
PLOTS = "I prefer plots in dark mode."
CELLS = [
    "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False\n"
    "%config CtxMagic.memory_review = 'ask'\n%config CtxMagic.user_memory_dir = '.user-data'",
    f"%%agent\nRemember that {REPORTS[0].lower()}{REPORTS[1:]} {PLOTS}",
    "%memory extract",
    # Busy until the test makes the file `go` (a wait on a file, bounded at two minutes): a click meanwhile waits.
    "import pathlib, time\nfor _ in range(2400):\n    if pathlib.Path('go').exists():\n        break\n"
    "    time.sleep(0.05)",
]
BUSY = 3
PENDING = f"{PANEL} .ctx-magic-pending"


def pending_row(page: Page, text: str):  # type: ignore[no-untyped-def]
    return page.page.locator(f"{PENDING} > *").filter(has=page.page.locator(".ctx-magic-pending-memory",
                                                                           has_text=text))


@pytest.fixture(params=["lab", "notebook"])
def app(request: pytest.FixtureRequest) -> str:
    return request.param


def test_the_panels_keep_and_discard_buttons_decide_what_is_remembered(app: str, tmp_path: Path) -> None:
    needs(chromium_missing(), None if build_is_current() else node_missing())
    root = tmp_path / "root"  # the notebooks' folder, the kernel's working directory
    with notebooks_in_lab(tmp_path, {"review.ipynb": CELLS}, app=app) as page:
        page.open("review.ipynb")
        page.run_cells(0, BUSY - 1)
        page.page.locator(PENDING).wait_for(state="visible", timeout=UI_TIMEOUT)
        page.wait(f"() => document.querySelectorAll('{PENDING} .ctx-magic-pending-memory').length === 2",
                  "the panel does not list the two memories waiting for review")
        assert "in no prompt until kept" in page.page.locator(PENDING).inner_text()
        page.set_panel_width(420)
        pending_row(page, REPORTS).scroll_into_view_if_needed()
        page.shot(f"{app}-pending-memories")
        ARTIFACTS.mkdir(exist_ok=True)
        page.page.locator(SIDEBAR).screenshot(path=str(ARTIFACTS / f"{app}-pending-panel.png"))  # docs' picture

        # Keep clicked while a cell runs: the kernel reads the click once the cell ends, and it is not lost.
        page.js(f"""(index) => {{
          {NOTEBOOK}.content.activeCellIndex = index;
          window.jupyterapp.commands.execute('notebook:run-cell');
        }}""", BUSY)
        page.wait(f"() => {NOTEBOOK}.sessionContext.kernelDisplayStatus === 'busy'", "the busy cell did not start")
        pending_row(page, REPORTS).locator(".ctx-magic-pending-keep").click()
        waiting = root / ".ctx_magic" / "memory" / "pending" / "project"
        assert len([p for p in waiting.glob("*.md") if p.name != "MEMORY.md"]) == 2  # the kernel is busy
        (root / "go").touch()
        page.wait(f"() => document.querySelectorAll('{PENDING} .ctx-magic-pending-memory').length === 1",
                  "Keep did not take the memory off the pending list")
        page.wait(f"(text) => document.querySelector('{PANEL} .ctx-magic-memories')?.textContent.includes(text)",
                  "the kept memory is not among the panel's long-term memories", arg=REPORTS)
        pending_row(page, PLOTS).locator(".ctx-magic-pending-discard").click()
        page.page.locator(PENDING).wait_for(state="hidden", timeout=UI_TIMEOUT)

        shown = kernel_run(page, "%memory show")
        assert REPORTS in shown and "dark mode" not in shown and "wait for your review" not in shown
        assert "No memories wait for review" in kernel_run(page, "%memory pending")
