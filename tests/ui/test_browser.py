"""The context panel in a real JupyterLab 4 and a real Notebook 7, in headless Debian Chromium
(the panel, its sidebar and its live updates).

One notebook, run against the offline stand-in, makes a user cell summarized by a compaction,
another cleared after an idle gap (the kernel's injectable clock moves an hour on), and a third
whose 60,000-character output is saved to disk. In each frontend the test checks that the panel
opens by itself; the palette's compact command is off until a session exists; each of the three
cells carries a visible badge whose popover says why and whose click opens the matching card;
the chart has one marker per compaction and a marker opens its card; in the light and the dark
theme, at 250 and 500 px, no element of the panel is wider than the panel; after a page reload
the panel is back; after `%agent --new` it shows the new session; in `ask` mode the code is on
screen before the question and the "Run it" button answers it; after a kernel restart and a
resume the marks come back on the old cells and not on a new cell that reuses an old count; the
panel's dollars say what the context changes saved, and nothing of it in a session where they
saved nothing. Screenshots are left in test-artifacts/.

Needs Debian's chromium (/usr/bin/chromium), jupyterlab, notebook and playwright (the `test`
extra); the labextension is built from labextension/ when the build is missing or older, which
needs Node.js. Without Chromium or Node.js the test skips saying what to install; under CI=true it
fails instead.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from ui.browser_rig import (
    PACKAGE,
    REPO,
    JupyterLab,
    build_is_current,
    built_labextension,
    chromium_missing,
    chromium_page,
    needs,
    node_missing,
)

from ctx_magic.prices import format_saving, format_usd

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

ARTIFACTS = REPO / "test-artifacts"
RUN_TIMEOUT = 240_000  # ms: the whole notebook, offline, on a slow shared machine
UI_TIMEOUT = 30_000  # ms: one reaction of the page to a change
NOTEBOOK = "window.jupyterapp.shell.currentWidget"
SIDEBAR = "#ctx-magic-sidebar"
PANEL = f"{SIDEBAR} .ctx-magic-panel"

MARKS_CELLS = [
    "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.keep_recent = 1",
    "print('alpha: the first numbers', list(range(20)))",  # A: summarized by the compaction below
    "%%agent\nLook at my first cell, please.",
    "%compact keep the numbers",
    "print('\\n'.join(f'row {i}: ' + 'c' * 40 for i in range(80)))",  # C: cleared after the idle gap
    "print('small')",  # the most recent result, kept by the clearing (keep_recent = 1)
    "%%agent\nAnd what about these rows?",
    ("# ctx: skip\nimport time\nfrom ctx_magic.notebook.extension import controller_of\n"
     "controller_of(get_ipython()).clock = lambda: time.time() + 3600  # an hour passes: the cache expires"),
    "print('b' * 60_000)",  # B: over 50,000 characters, saved to disk
    "%%agent\nWhat did the big cell print?",
    "%agent --new",
    "%%agent --permission ask\nRun this for me.\n\n```python\nprint(6 * 7)\n```",
    ("%load_ext ctx_magic\nimport pathlib\nfirst = sorted(p.name for p in pathlib.Path('.ctx_magic/sessions')"
     ".iterdir())[0]\nget_ipython().run_line_magic('agent', f'--resume {first}')"),
    "print('a new cell, run after the restart')",
]
RUN_UP_TO = 10  # the cells before `%agent --new`: the first session
A, C, B, NEW, ASK, RESUME, FRESH = 1, 4, 8, 10, 11, 12, 13


def notebook_json(sources: list[str]) -> dict[str, Any]:
    cells = [{"cell_type": "code", "id": f"cell-{n}", "metadata": {}, "source": source, "outputs": [],
              "execution_count": None} for n, source in enumerate(sources)]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                        "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}


@contextlib.contextmanager
def notebooks_in_lab(folder: Path, notebooks: Mapping[str, list[str]], *, app: str = "lab",
                     viewport: tuple[int, int] = (1440, 900)) -> Iterator[Page]:
    """JupyterLab (or Notebook 7) serving `notebooks` (file name: cells) from `folder`/root, its
    home in `folder`/home, and a Chromium page on it."""
    root = folder / "root"
    root.mkdir()
    for name, cells in notebooks.items():
        (root / name).write_text(json.dumps(notebook_json(cells)))
    with JupyterLab(root, folder / "home", built_labextension(), app=app) as lab, chromium_page(viewport) as browser:
        yield Page(browser, lab)


class Page:
    """The page and what to show when a wait fails: outputs, the browser console, the server log."""

    def __init__(self, page: Any, lab: JupyterLab) -> None:
        self.page, self.lab, self.console = page, lab, []
        page.on("console", lambda message: self.console.append(f"{message.type}: {message.text}"))
        page.on("pageerror", lambda error: self.console.append(f"page error: {error}"))

    def wait(self, script: str, what: str, arg: Any = None, timeout: float = UI_TIMEOUT) -> None:
        try:
            self.page.wait_for_function(script, arg=arg, timeout=timeout)
        except Exception as error:  # noqa: BLE001 - reported with everything we know
            pytest.fail(f"{what}: {error}\n{self.report()}")

    def js(self, script: str, arg: Any = None) -> Any:
        return self.page.evaluate(script, arg)

    def report(self) -> str:
        try:
            outputs = self.page.locator(".jp-OutputArea-output").all_inner_texts()
        except Exception as error:  # noqa: BLE001
            outputs = [f"(no outputs: {error})"]
        return ("--- cell outputs ---\n" + "\n".join(outputs)[-6_000:] +
                "\n--- browser console ---\n" + "\n".join(self.console[-40:]) +
                "\n--- server log ---\n" + self.lab.log())

    def loaded_extension(self) -> str:
        """The remoteEntry file the page loads for ctx_magic's extension (from its page config)."""
        config = json.loads(self.js("() => document.getElementById('jupyter-config-data').textContent"))
        entry = next(e for e in config["federated_extensions"] if e["name"] == PACKAGE)
        return Path(entry["load"]).name

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"))

    # -- the notebook ---------------------------------------------------------------------------

    def open(self, path: str) -> None:
        self.page.goto(self.lab.lab_url(path))
        self.wait(f"() => window.jupyterapp && {NOTEBOOK} && {NOTEBOOK}.sessionContext",
                  "the notebook did not open", timeout=90_000)
        self.js(f"async () => {{ await {NOTEBOOK}.context.ready; await {NOTEBOOK}.sessionContext.ready; }}")

    def run_cells(self, first: int, last: int) -> None:
        """Run cells first..last (inclusive) in order, each after the previous one finished."""
        for index in range(first, last + 1):
            self.js(f"""async (index) => {{
              const nb = {NOTEBOOK};
              nb.content.activeCellIndex = index;
              window.jupyterapp.commands.execute('notebook:run-cell');  // not awaited: waited on below
            }}""", index)
            self.wait(f"""(index) => {{
              const nb = {NOTEBOOK};
              const cell = nb.content.widgets[index];
              return nb.sessionContext.kernelDisplayStatus === 'idle' && cell.model.executionCount !== null &&
                !cell.node.querySelector('.jp-Stdin');
            }}""", f"cell {index} did not finish", arg=index, timeout=RUN_TIMEOUT)

    def count(self, index: int) -> int:
        return self.js(f"(i) => {NOTEBOOK}.content.widgets[i].model.executionCount", index)

    def cell(self, index: int) -> Any:
        return self.page.locator(f"{NOTEBOOK_NODE} .jp-Cell").nth(index)

    def kernel_status(self) -> dict[str, Any]:
        """`%ctx status --json` of the kernel, read without touching the notebook."""
        return json.loads(self.js(f"""async () => {{
          const kernel = {NOTEBOOK}.sessionContext.session.kernel;
          let text = '';
          const future = kernel.requestExecute({{code: '%ctx status --json', silent: false, store_history: false}});
          future.onIOPub = msg => {{ if (msg.header.msg_type === 'stream') text += msg.content.text; }};
          await future.done;
          return text;
        }}"""))

    # -- the panel ------------------------------------------------------------------------------

    def set_theme(self, theme: str) -> None:
        light = "true" if theme == "light" else "false"
        name = "JupyterLab Light" if theme == "light" else "JupyterLab Dark"
        self.js("(name) => { window.jupyterapp.commands.execute('apputils:change-theme', {theme: name}); }", name)
        self.wait(f"() => document.body.dataset.jpThemeLight === '{light}'", f"the {theme} theme did not apply")

    def set_panel_width(self, width: int) -> None:
        """Drag the right side panel to `width` px, through the split panel that holds it."""
        self.js("""(width) => {
          const shell = window.jupyterapp.shell;
          const right = shell.rightHandler ? shell.rightHandler.widgets : Array.from(shell.widgets('right'));
          let child = right.find(w => w.id === 'ctx-magic-sidebar');
          while (child.parent && typeof child.parent.setRelativeSizes !== 'function') { child = child.parent; }
          const split = child.parent;
          const index = split.widgets.indexOf(child);
          const total = split.widgets.reduce((sum, w) => sum + w.node.getBoundingClientRect().width, 0);
          const sizes = split.relativeSizes().map(s => s * total);
          const main = sizes.indexOf(Math.max(...sizes));
          const sidebar = document.getElementById('ctx-magic-sidebar').getBoundingClientRect().width;
          const extra = sizes[index] - sidebar;  // the side panel's own chrome around the sidebar
          sizes[main] += sizes[index] - (width + extra);
          sizes[index] = width + extra;
          split.setRelativeSizes(sizes);
          split.fit();
        }""", width)
        self.wait("(width) => Math.abs(document.getElementById('ctx-magic-sidebar').getBoundingClientRect().width"
                  " - width) <= 2", f"the panel did not become {width} px wide", arg=width)

    def open_every_card(self) -> None:
        """Every card open (details and accordions), the originals loaded: all there is to measure."""
        buttons = self.js(f"""() => {{
          const root = document.querySelector('{SIDEBAR}');
          root.querySelectorAll('details').forEach(d => {{ d.open = true; }});
          root.querySelectorAll('.jupyter-widget-Collapse:not(.jupyter-widget-Collapse-open) > ' +
                                '.jupyter-widget-Collapse-header').forEach(h => h.click());
          const buttons = root.querySelectorAll('.ctx-magic-originals-button');
          buttons.forEach(b => b.click());
          return buttons.length;
        }}""")
        self.wait(f"(n) => document.querySelectorAll('{SIDEBAR} .ctx-magic-originals').length >= n",
                  "the original messages did not load", arg=buttons)

    def too_wide(self) -> list[str]:
        """Elements of the sidebar reaching past its edges (those inside a scrolling box excepted:
        the box itself is measured)."""
        return self.js(f"""() => {{
          const root = document.querySelector('{SIDEBAR}');
          const box = root.getBoundingClientRect();
          const bad = [];
          for (const el of root.querySelectorAll('*')) {{
            const r = el.getBoundingClientRect();
            if (r.width === 0 || r.height === 0) continue;
            let clipped = false;
            for (let a = el.parentElement; a && a !== root; a = a.parentElement) {{
              if (getComputedStyle(a).overflowX !== 'visible') {{ clipped = true; break; }}
            }}
            if (!clipped && (r.left < box.left - 0.5 || r.right > box.right + 0.5)) {{
              bad.push(`${{el.tagName.toLowerCase()}}.${{el.className.baseVal ?? el.className}}: ` +
                       `${{Math.round(r.left)}}..${{Math.round(r.right)}} in ${{Math.round(box.left)}}..` +
                       `${{Math.round(box.right)}}`);
            }}
          }}
          return bad;
        }}""")


def built_entry() -> str:
    """This tree's build's remoteEntry (its hash differs from any other build's)."""
    [entry] = (built_labextension() / "static").glob("remoteEntry.*.js")
    return entry.name


NOTEBOOK_NODE = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"


@pytest.fixture(params=["lab", "notebook"])
def app(request: pytest.FixtureRequest) -> str:
    return request.param


def test_panel_badges_cards_themes_widths_sessions_and_ask(app: str, tmp_path: Path) -> None:
    needs(chromium_missing(), None if build_is_current() else node_missing())
    root = tmp_path / "root"
    root.mkdir()
    (root / "marks.ipynb").write_text(json.dumps(notebook_json(MARKS_CELLS)))
    (root / "other.ipynb").write_text(json.dumps(notebook_json([])))
    started = time.monotonic()
    with JupyterLab(root, tmp_path / "home", built_labextension(), app=app) as lab, chromium_page() as browser:
        page = Page(browser, lab)
        page.open("marks.ipynb")
        assert page.loaded_extension() == built_entry(), "the page loaded another build of the extension"
        assert not page.js("() => window.jupyterapp.commands.isEnabled('ctx-magic:compact')"), \
            "Compact agent context is enabled before the notebook has an agent session"

        page.run_cells(0, RUN_UP_TO - 1)
        sid = page.kernel_status()["session_id"]
        # The panel opened by itself (JupyterLab and Notebook 7 alike) and shows this session.
        page.page.locator(PANEL).wait_for(state="visible", timeout=UI_TIMEOUT)
        page.wait(f"(sid) => document.querySelector('{PANEL} .ctx-magic-session').textContent === sid",
                  "the panel does not show the session", arg=sid)
        assert page.js("() => window.jupyterapp.commands.isEnabled('ctx-magic:compact')")
        check_badges(page, {A: "summarized", C: "cleared", B: "persisted"}, unmarked=[0, 5])
        check_chart_and_cards(page)
        cost = page.kernel_status()["cost"]
        saved = format_saving(cost["saved_usd"])
        assert saved is not None  # the compaction and the clearing above saved something
        check_dollars(page, f"{format_usd(cost['session_usd'])} spent · saved at least {saved} by the context changes")
        for theme in ("light", "dark"):
            page.set_theme(theme)
            for width in (250, 500):
                page.set_panel_width(width)
                page.open_every_card()
                assert page.too_wide() == [], f"{app}, {theme}, {width} px"
                page.shot(f"{app}-{theme}-{width}")
        page.set_theme("light")
        page.set_panel_width(420)
        overview(page, app)

        # A reload of the page: the anchor's widget comes back from the kernel, and the panel with it.
        page.js("async () => { await window.jupyterapp.commands.execute('docmanager:save'); }")
        page.open("marks.ipynb")
        page.wait(f"(sid) => document.querySelector('{PANEL} .ctx-magic-session')?.textContent === sid",
                  "after a reload the panel did not come back", arg=sid)
        check_badges(page, {A: "summarized", C: "cleared", B: "persisted"}, unmarked=[0])

        # %agent --new: the same panel now shows the new session, empty; the old cells lose their marks.
        page.run_cells(NEW, NEW)
        new_status = page.kernel_status()
        new_sid = new_status["session_id"]
        assert new_sid != sid
        page.wait(f"(sid) => document.querySelector('{PANEL} .ctx-magic-session').textContent === sid",
                  "after %agent --new the panel still shows the old session", arg=new_sid)
        assert page.page.locator(f"{PANEL} .ctx-magic-marker").count() == 0
        assert page.page.locator(f"{NOTEBOOK_NODE} .ctx-magic-mark").count() == 0
        if app == "lab":  # the status bar follows too (Notebook 7 has no status bar)
            status = page.page.locator(".ctx-magic-statusbar")
            assert status.inner_text() == f"Context {round(new_status['percent_left'])}% left"
            assert f"{new_status['tokens']:,} of {new_status['threshold']:,} tokens" in status.get_attribute("title")

        check_ask(page, app)
        cost = page.kernel_status()["cost"]
        assert cost["saved_usd"] == 0  # one turn in a new session: no change to its context yet
        check_dollars(page, f"{format_usd(cost['session_usd'])} spent")  # not "saved at least $0.0000"
        page.page.locator(f"{PANEL} .ctx-magic-facts").first.scroll_into_view_if_needed()
        page.shot(f"{app}-nothing-saved")

        # A kernel restart: the panel goes with the kernel; a resume brings the first session back,
        # with its marks on the old cells, and none on a new cell that got an old execution count.
        page.js(f"async () => {{ await {NOTEBOOK}.sessionContext.session.kernel.restart(); }}")
        page.page.locator(f"{SIDEBAR} .ctx-magic-sidebar-hint").wait_for(state="visible", timeout=UI_TIMEOUT)
        page.run_cells(RESUME, FRESH)
        page.wait(f"(sid) => document.querySelector('{PANEL} .ctx-magic-session')?.textContent === sid",
                  "after a restart and a resume the panel does not show the resumed session", arg=sid)
        assert page.count(FRESH) == page.count(A), "the new cell should reuse the summarized cell's count"
        check_badges(page, {A: "summarized", C: "cleared", B: "persisted"}, unmarked=[RESUME, FRESH])
        page.shot(f"{app}-after-restart")

        if app == "lab":  # another notebook without an agent: a hint; back again: the panel
            page.js("() => { window.jupyterapp.commands.execute('docmanager:open', {path: 'other.ipynb'}); }")
            page.page.locator(f"{SIDEBAR} .ctx-magic-sidebar-hint").wait_for(state="visible", timeout=UI_TIMEOUT)
            page.js("() => { window.jupyterapp.commands.execute('docmanager:open', {path: 'marks.ipynb'}); }")
            page.page.locator(PANEL).wait_for(state="visible", timeout=UI_TIMEOUT)
    print(f"{app}: {time.monotonic() - started:.0f} s")


def overview(page: Page, app: str) -> None:
    """The picture for people (the README's comes from here): the panel from its top, beside the
    summarized cell with its popover open."""
    page.js("""() => {
      const shell = window.jupyterapp.shell;
      if (shell.collapseLeft) { shell.collapseLeft(); }
      document.getElementById('ctx-magic-sidebar').scrollTop = 0;
      document.querySelectorAll('#ctx-magic-sidebar details[open]').forEach(d => { d.open = false; });
    }""")
    page.cell(A).scroll_into_view_if_needed()
    page.cell(A).locator(".ctx-magic-badge").hover()
    page.cell(A).locator(".ctx-magic-popover").wait_for(state="visible", timeout=UI_TIMEOUT)
    page.shot(f"{app}-overview")


def check_badges(page: Page, expected: dict[int, str], unmarked: list[int]) -> None:
    """Each of these cells carries a visible badge of its kind; the others none."""
    for index, kind in expected.items():
        row = page.cell(index).locator(".ctx-magic-mark")
        try:
            row.wait_for(state="visible", timeout=UI_TIMEOUT)
        except Exception:  # noqa: BLE001
            pytest.fail(f"cell {index} has no visible badge ({kind})\n{page.report()}")
        assert row.get_attribute("data-kind") == kind
        badge = row.locator(".ctx-magic-badge")
        box = badge.bounding_box()
        assert box is not None and box["width"] > 40 and box["height"] > 10
    for index in unmarked:
        assert page.cell(index).locator(".ctx-magic-mark").count() == 0, f"cell {index} is marked"


def check_chart_and_cards(page: Page) -> None:
    """One marker per compaction; a marker and a badge each open their card, whose popover
    and content say why and show the summary as Markdown."""
    status = page.kernel_status()
    markers = page.page.locator(f"{PANEL} .ctx-magic-marker[data-kind='compaction']")
    assert markers.count() == len(status["boundaries"]) == 1
    # The summarized cell's popover says why and what the agent still has.
    badge = page.cell(A).locator(".ctx-magic-badge")
    badge.hover()
    popover = page.cell(A).locator(".ctx-magic-popover")
    popover.wait_for(state="visible", timeout=UI_TIMEOUT)
    assert "summarized" in popover.inner_text() and "It still has the compaction's summary" in popover.inner_text()
    # Its click opens the compaction's card: the summary rendered as Markdown, the reason given.
    badge.click()
    card = page.page.locator(f"{PANEL} .ctx-magic-card.jupyter-widget-Accordion").first
    card.locator(".jupyter-widget-Collapse-open").wait_for(state="attached", timeout=UI_TIMEOUT)
    summary = card.locator(".jp-RenderedMarkdown").first
    summary.wait_for(state="visible", timeout=UI_TIMEOUT)
    assert summary.locator("h2").count() > 0 and "Primary Request and Intent" in summary.inner_text()
    assert "the user asked for it: keep the numbers" in card.inner_text()
    # The originals, as messages under their roles: the user's cell with its source.
    card.locator(".ctx-magic-originals-button").click()
    you = card.locator(".ctx-magic-msg[data-role='user']").first
    you.wait_for(state="visible", timeout=UI_TIMEOUT)
    assert "alpha: the first numbers" in card.locator(".ctx-magic-originals").inner_text()
    assert "{'execution_count'" not in card.locator(".ctx-magic-originals").inner_text()
    # The clearing's marker opens the clearing's card.
    marker = page.page.locator(f"{PANEL} .ctx-magic-marker[data-kind='clearing']").first
    key = marker.get_attribute("data-ctx-card")
    marker.click()
    page.wait(f"(key) => document.querySelector(`{PANEL} details[data-ctx-card='${{key}}']`).open",
              "the clearing's marker did not open its card", arg=key)


def check_dollars(page: Page, expected: str) -> None:
    """The panel's dollars row reads `expected` (the panel updates after the turn: waited on)."""
    page.wait(f"""(expected) => {{
      const term = Array.from(document.querySelectorAll('{PANEL} dt')).find(d => d.textContent === 'Dollars');
      return term?.nextElementSibling?.textContent === expected;
    }}""", f"the panel's dollars do not read {expected!r}", arg=expected)


def check_ask(page: Page, app: str) -> None:
    """`ask`: the code is on screen before the question; the "Run it" button answers it."""
    page.js(f"""(index) => {{
      const nb = {NOTEBOOK};
      nb.content.activeCellIndex = index;
      window.jupyterapp.commands.execute('notebook:run-cell');
    }}""", ASK)
    cell = page.cell(ASK)
    stdin = cell.locator(".jp-Stdin")
    try:
        stdin.wait_for(state="visible", timeout=RUN_TIMEOUT)
    except Exception:  # noqa: BLE001
        pytest.fail(f"no question in ask mode\n{page.report()}")
    code = cell.locator(".jp-RenderedMarkdown pre", has_text="print(6 * 7)")
    try:  # the Markdown renderer is asynchronous: the prompt's plain widget may be drawn first
        code.wait_for(state="visible", timeout=UI_TIMEOUT)
    except Exception:  # noqa: BLE001
        pytest.fail(f"the code is not on screen while the question waits\n{page.report()}")
    assert code.bounding_box()["y"] < stdin.bounding_box()["y"], "the question is above the code"
    assert "Run this code?" in stdin.inner_text()
    stdin.scroll_into_view_if_needed()
    page.shot(f"{app}-ask")
    cell.locator(".ctx-magic-approval-button[data-answer='y']").click()
    page.wait(f"""(index) => {{
      const cell = {NOTEBOOK}.content.widgets[index];
      return {NOTEBOOK}.sessionContext.kernelDisplayStatus === 'idle' && cell.model.executionCount !== null &&
        cell.node.innerText.includes('42');
    }}""", "the approved code did not run", arg=ASK, timeout=RUN_TIMEOUT)
