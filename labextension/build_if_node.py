"""The build function pyproject.toml gives hatch-jupyter-builder (`labextension.build_if_node.build`).

With Node.js on the PATH it is hatch-jupyter-builder's own npm builder (`jlpm install`, then the
build), and the wheel ships the JupyterLab extension; a failed build still fails the install.
Without Node.js the TypeScript is not built: ctx_magic installs without its sidebar extension
and the kernel shows the context panel inline instead, with a line saying how to get the
sidebar (ctx_magic/notebook/panel_link.py).
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Any

from hatch_jupyter_builder import npm_builder

BUILT = ("ctx_magic/labextension/package.json", "ctx_magic/labextension/static/style.js")
NO_NODE = ("ctx_magic: Node.js is not installed, so the JupyterLab sidebar extension is not built; the context "
           "panel will show inline in the notebook. Install Node.js 18 or newer and reinstall ctx_magic to get "
           "the sidebar.")


def build(target_name: str, version: str, **kwargs: Any) -> None:
    if shutil.which("node") is None:
        logging.getLogger(__name__).warning(NO_NODE)
        print(NO_NODE, file=sys.stderr)
        return
    npm_builder(target_name, version, **kwargs)
    missing = [path for path in BUILT if not Path(path).exists()]
    if missing:
        raise ValueError(f"the labextension build did not make {', '.join(missing)}")
