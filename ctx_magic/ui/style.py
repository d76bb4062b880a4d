"""The panel's stylesheet (panel.css beside this file), shipped inside the panel itself as a
`<style>` element so that every frontend (the JupyterLab sidebar, Notebook 7, VS Code, a cell
inline) shows the same panel. Every rule is scoped to `.ctx-magic-panel`, and colours come from
JupyterLab's theme variables (with fallbacks for frontends that define none)."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def panel_css() -> str:
    return resources.files("ctx_magic.ui").joinpath("panel.css").read_text(encoding="utf-8")


def panel_style() -> str:
    return f'<style class="ctx-magic-style">{panel_css()}</style>'
