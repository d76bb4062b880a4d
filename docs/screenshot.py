"""Makes the README's pictures of the context panel, in JupyterLab (offline stand-in, light theme) in
headless Debian Chromium, the panel 440 px wide, with the browser tests' rig:
`python docs/screenshot.py [panel|undo|cold-cache|compaction-ahead|context-value]` (all without an argument).

- docs/panel.png: examples/long_session.ipynb run, the first cell's badge hovered;
- docs/undo.png: a compaction's card open, with its Undo (tests/ui/test_undo_browser.py's notebook);
- docs/cold-cache.png: the panel's top once the prompt cache went cold, with the next call's price
  (tests/ui/test_cold_cache_browser.py's notebook);
- docs/compaction-ahead.png: the turn whose Done line announces the next turn's compaction, beside the
  panel's line saying the same (tests/ui/test_compaction_ahead_browser.py's notebook);
- docs/context-value.png: a cell showing `ctx_magic.context()`'s table, beside the panel (CONTEXT_CELLS)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ui.browser_rig import REPO, JupyterLab, built_labextension, chromium_page  # noqa: E402
from ui.test_browser import NOTEBOOK, PANEL, Page, notebooks_in_lab  # noqa: E402
from ui.test_cold_cache_browser import CELLS as COLD_CELLS  # noqa: E402
from ui.test_cold_cache_browser import NEXT_LINE, cold_cache_page  # noqa: E402
from ui.test_compaction_ahead_browser import AHEAD_LINE, NOTICE, compaction_ahead_page  # noqa: E402
from ui.test_compaction_ahead_browser import CELLS as AHEAD_CELLS  # noqa: E402
from ui.test_undo_browser import CARD, open_compaction_card  # noqa: E402
from ui.test_undo_browser import CELLS as UNDO_CELLS  # noqa: E402

RUN_ALL_TIMEOUT = 300_000  # ms
PANEL_WIDTH = 440  # px: the sidebar's width in every picture
SIDE_BY_SIDE = (1180, 720)  # px: the browser's size for a cell beside the panel
CONTEXT_CELLS = [
    "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False\n"
    "%config CtxMagic.user_memory_dir = '.user-data'",
    "%%agent\nSummarise these readings: " + " ".join(f"reading{i}" for i in range(300)),
    "import ctx_magic\n\nctx_magic.context()",
]


def undo_picture() -> None:
    """docs/undo.png: the compaction's card, open, cropped to its facts and its Undo."""
    with tempfile.TemporaryDirectory() as tmp, notebooks_in_lab(Path(tmp), {"undo.ipynb": UNDO_CELLS}) as page:
        browser = page.page
        open_compaction_card(page)
        page.set_panel_width(PANEL_WIDTH)
        card = browser.locator(CARD).first
        card.scroll_into_view_if_needed()
        top, button = card.bounding_box(), browser.locator(f"{CARD} .ctx-magic-undo-button").first.bounding_box()
        height = button["y"] + button["height"] + 8 - top["y"]  # the card's head, down to its Undo
        browser.screenshot(path=str(REPO / "docs" / "undo.png"),
                           clip={"x": top["x"], "y": top["y"], "width": top["width"], "height": height})


def cold_cache_picture() -> None:
    """docs/cold-cache.png: the panel's top, down to its next-call line, once the cache went cold."""
    with tempfile.TemporaryDirectory() as tmp, notebooks_in_lab(Path(tmp), {"cold.ipynb": COLD_CELLS}) as page:
        browser = page.page
        cold_cache_page(page)
        page.set_panel_width(PANEL_WIDTH)
        top, line = browser.locator(PANEL).bounding_box(), browser.locator(NEXT_LINE).bounding_box()
        browser.screenshot(path=str(REPO / "docs" / "cold-cache.png"), clip={
            "x": top["x"], "y": top["y"], "width": top["width"], "height": line["y"] + line["height"] - top["y"]})


def beside_the_panel(browser: object, page: Page, cell: int, bottom: str, name: str) -> None:
    """docs/NAME.png: notebook cell `cell` (scrolled to the top, from its input down to `bottom`,
    a selector inside it) and the panel to its right, at the same height, the left sidebar closed."""
    page.set_panel_width(PANEL_WIDTH)
    page.js("""() => {
      window.jupyterapp.shell.collapseLeft();
      document.getElementById('ctx-magic-sidebar').scrollTop = 0;
    }""")
    shown = page.cell(cell)
    shown.evaluate("node => node.scrollIntoView({block: 'start'})")
    browser.wait_for_timeout(500)  # the notebook draws the cells scrolled into view
    left = shown.bounding_box()
    drop = max(0, left["y"] - browser.locator(PANEL).bounding_box()["y"])  # the panel level with the cell
    page.js(f"(drop) => {{ document.querySelector('{PANEL}').style.marginTop = `${{drop}}px`; }}", drop)
    end, panel = shown.locator(bottom).last.bounding_box(), browser.locator(PANEL).bounding_box()
    top = left["y"] - 4
    browser.screenshot(path=str(REPO / "docs" / f"{name}.png"), clip={
        "x": left["x"], "y": top, "width": panel["x"] + panel["width"] - left["x"],
        "height": end["y"] + end["height"] + 8 - top})


def compaction_ahead_picture() -> None:
    """docs/compaction-ahead.png: the Done line's notice beside the panel's line, a turn before."""
    with tempfile.TemporaryDirectory() as tmp, \
            notebooks_in_lab(Path(tmp), {"ahead.ipynb": AHEAD_CELLS}, viewport=SIDE_BY_SIDE) as page:
        browser = page.page
        compaction_ahead_page(page)
        browser.locator(AHEAD_LINE).wait_for(state="visible")
        beside_the_panel(browser, page, NOTICE, ".ctx-magic-status", "compaction-ahead")


def context_value_picture() -> None:
    """docs/context-value.png: `ctx_magic.context()`'s table in a cell, beside the panel."""
    with tempfile.TemporaryDirectory() as tmp, \
            notebooks_in_lab(Path(tmp), {"context.ipynb": CONTEXT_CELLS}, viewport=SIDE_BY_SIDE) as page:
        browser = page.page
        page.open("context.ipynb")
        page.run_cells(0, len(CONTEXT_CELLS) - 1)
        last = len(CONTEXT_CELLS) - 1
        page.cell(last).locator("table.ctx-magic-context").wait_for(state="visible")
        beside_the_panel(browser, page, last, "table.ctx-magic-context", "context-value")


def main() -> None:
    pictures = {"panel": panel_picture, "undo": undo_picture, "cold-cache": cold_cache_picture,
                "compaction-ahead": compaction_ahead_picture, "context-value": context_value_picture}
    for name in sys.argv[1:] or list(pictures):
        pictures[name]()


def panel_picture() -> None:
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
            page.set_panel_width(PANEL_WIDTH)
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
