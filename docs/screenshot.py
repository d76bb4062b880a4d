"""Makes docs/panel.png, the README's picture of the context panel: examples/long_session.ipynb run
in JupyterLab (offline stand-in, light theme) in headless Debian Chromium, the panel 440 px wide,
the first cell's badge hovered. Uses the browser tests' rig: `python docs/screenshot.py`."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ui.browser_rig import REPO, JupyterLab, built_labextension, chromium_page  # noqa: E402
from ui.test_browser import NOTEBOOK, Page  # noqa: E402

RUN_ALL_TIMEOUT = 300_000  # ms


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        shutil.copy(REPO / "examples" / "long_session.ipynb", root / "long_session.ipynb")
        with JupyterLab(root, Path(tmp) / "home", built_labextension()) as lab, chromium_page((1440, 900)) as browser:
            page = Page(browser, lab)
            page.open("long_session.ipynb")
            page.js("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait(f"""() => {{ const nb = {NOTEBOOK}; return nb.sessionContext.kernelDisplayStatus === 'idle' &&
                nb.content.widgets.filter(c => c.model.type === 'code').every(c => c.model.executionCount !== null);
              }}""", "the notebook did not finish", timeout=RUN_ALL_TIMEOUT)
            page.set_panel_width(440)
            page.js("""() => {
              window.jupyterapp.shell.collapseLeft();
              document.getElementById('ctx-magic-sidebar').scrollTop = 0;
              window.jupyterapp.shell.currentWidget.content.scrollToItem(0);
            }""")
            badge = browser.locator(".ctx-magic-badge").first
            badge.scroll_into_view_if_needed()
            badge.hover()
            browser.locator(".ctx-magic-popover").first.wait_for(state="visible")
            browser.screenshot(path=str(REPO / "docs" / "panel.png"))


if __name__ == "__main__":
    main()
