"""The sidebar in a real JupyterLab, in headless Chromium (SPEC U2, §9): the quickstart notebook
runs offline, its context panel moves to the right sidebar, the compaction boundary opens to its
summary, the status bar shows what is left, the palette compacts, cell marks appear, and the
sidebar follows the active notebook.

Needs Debian's chromium (/usr/bin/chromium), jupyterlab and playwright (the `test` extra); the
labextension is built from labextension/ when the build is missing or older than the sources.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from ui.browser_rig import CHROMIUM, REPO, JupyterLab, built_labextension, chromium_page

QUICKSTART = REPO / "examples" / "quickstart.ipynb"
ARTIFACTS = REPO / "test-artifacts"
RUN_TIMEOUT = 180_000  # ms: the whole quickstart, offline, on a slow machine
UI_TIMEOUT = 30_000  # ms: one reaction of the page to a change

BOUNDARIES = "#ctx-magic-sidebar .ctx-magic-boundary"
NOTEBOOK = "window.jupyterapp.shell.currentWidget"
ALL_CELLS_RAN = f"""() => {{
  const nb = {NOTEBOOK};
  return nb && nb.sessionContext.kernelDisplayStatus === 'idle' &&
    nb.content.widgets.filter(c => c.model.type === 'code').every(c => c.model.executionCount !== null);
}}"""


class Diagnostics:
    """What to show when a wait fails: the cells' outputs, the browser console, the server log."""

    def __init__(self, page: Any, lab: JupyterLab) -> None:
        self.page, self.lab, self.console = page, lab, []
        page.on("console", lambda message: self.console.append(f"{message.type}: {message.text}"))
        page.on("pageerror", lambda error: self.console.append(f"page error: {error}"))

    def wait(self, script: str, what: str, timeout: float = UI_TIMEOUT) -> None:
        try:
            self.page.wait_for_function(script, timeout=timeout)
        except Exception as error:  # noqa: BLE001 - reported with everything we know
            pytest.fail(f"{what}: {error}\n{self.report()}")

    def report(self) -> str:
        try:
            outputs = self.page.locator(".jp-OutputArea-output").all_inner_texts()
        except Exception as error:  # noqa: BLE001
            outputs = [f"(no outputs: {error})"]
        return ("--- cell outputs ---\n" + "\n".join(outputs)[-6_000:] +
                "\n--- browser console ---\n" + "\n".join(self.console[-40:]) +
                "\n--- jupyter lab log ---\n" + self.lab.log())


def kernel_execute(page: Any, code: str) -> None:
    """Run code silently in the active notebook's kernel, as the compact command does."""
    page.evaluate(f"""async (code) => {{
      await {NOTEBOOK}.sessionContext.session.kernel.requestExecute({{code, silent: true}}).done;
    }}""", code)


def open_notebook(page: Any, path: str, diagnostics: Diagnostics) -> None:
    page.evaluate("(path) => { window.jupyterapp.commands.execute('docmanager:open', {path}); }", path)
    diagnostics.wait(f"() => {NOTEBOOK} && {NOTEBOOK}.context && {NOTEBOOK}.context.path === {json.dumps(path)}",
                     f"{path} did not become the active notebook")


@pytest.fixture
def lab_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(QUICKSTART, root / "quickstart.ipynb")
    empty = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                      "language": "python"}},
             "nbformat": 4, "nbformat_minor": 5}
    (root / "other.ipynb").write_text(json.dumps(empty))
    return root


def test_sidebar_shows_the_quickstart_context_and_follows_the_notebook(lab_root: Path, tmp_path: Path) -> None:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (never a downloaded browser)")
    extension = built_labextension()
    with JupyterLab(lab_root, tmp_path / "lab", extension) as lab, chromium_page() as page:
        diagnostics = Diagnostics(page, lab)
        page.goto(lab.lab_url("quickstart.ipynb"))
        diagnostics.wait(f"() => window.jupyterapp && {NOTEBOOK} && {NOTEBOOK}.sessionContext",
                         "JupyterLab did not open the notebook", timeout=90_000)
        page.evaluate(f"async () => {{ await {NOTEBOOK}.context.ready; await {NOTEBOOK}.sessionContext.ready; }}")
        assert page.evaluate("() => ['ctx-magic:compact', 'ctx-magic:show-panel']"
                             ".every(id => window.jupyterapp.commands.hasCommand(id))")

        # Run everything; the first %%agent cell leaves the anchor, %compact a boundary.
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        diagnostics.wait(ALL_CELLS_RAN, "the quickstart did not finish", timeout=RUN_TIMEOUT)
        diagnostics.wait(f"() => document.querySelectorAll('{BOUNDARIES}').length > 0",
                         "no compaction boundary reached the sidebar")

        # The line in the cell opens the sidebar; the boundary opens to its summary.
        anchor = page.locator(".ctx-magic-anchor-link").first
        assert anchor.inner_text().startswith("Agent context is in the right sidebar")
        anchor.click()
        boundary = page.locator(BOUNDARIES).first
        boundary.wait_for(state="visible", timeout=UI_TIMEOUT)
        boundary.locator(".jupyter-widget-Collapse-header").first.click()
        summary = boundary.locator(".ctx-magic-summary").first
        summary.wait_for(state="visible", timeout=UI_TIMEOUT)
        text = summary.inner_text()
        assert "Primary Request and Intent" in text
        assert "What did my cell above compute, and how many samples are there?" in text

        status = page.locator(".ctx-magic-statusbar")
        assert re.fullmatch(r"Context \d+% left", status.inner_text()), status.inner_text()
        assert status.get_attribute("data-zone") == "ok"

        # For the person looking at the screenshot: room for the notebook beside the sidebar.
        page.evaluate("() => { window.jupyterapp.shell.collapseLeft(); }")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "sidebar.png"))

        # Cell marks: the cell whose execution count the panel names gets the quiet marker.
        count = page.evaluate(f"""() => {NOTEBOOK}.content.widgets
            .find(c => c.model.sharedModel.getSource().startsWith('import math')).model.executionCount""")
        kernel_execute(page, "from ctx_magic.notebook.extension import controller_of\n"
                             f"controller_of(get_ipython()).panel.widget.cell_marks = {{'{count}': 'cleared (test)'}}")
        marked = page.locator(".jp-CodeCell.ctx-magic-cell-hidden")
        marked.first.wait_for(state="attached", timeout=UI_TIMEOUT)
        assert marked.count() == 1
        assert marked.first.locator(".jp-OutputArea").first.get_attribute("title") == "cleared (test)"

        # The palette's compact command runs %compact in this kernel: one more boundary.
        before = page.locator(BOUNDARIES).count()
        page.evaluate("() => window.jupyterapp.commands.execute('ctx-magic:compact')")
        diagnostics.wait(f"() => document.querySelectorAll('{BOUNDARIES}').length > {before}",
                         "the compact command added no boundary")

        # Another notebook without an agent: a hint, no status; back again: the panel.
        open_notebook(page, "other.ipynb", diagnostics)
        page.locator("#ctx-magic-sidebar .ctx-magic-sidebar-hint").wait_for(state="visible", timeout=UI_TIMEOUT)
        assert page.locator(BOUNDARIES).first.is_hidden()
        assert page.locator(".ctx-magic-statusbar").count() == 0 or page.locator(".ctx-magic-statusbar").is_hidden()
        open_notebook(page, "quickstart.ipynb", diagnostics)
        page.locator(BOUNDARIES).first.wait_for(state="visible", timeout=UI_TIMEOUT)
        assert page.locator("#ctx-magic-sidebar .ctx-magic-sidebar-hint").is_hidden()
