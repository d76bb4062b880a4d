"""ctx_magic: an agent for IPython and Jupyter that keeps its conversation inside the model's window.

`%load_ext ctx_magic` adds `%%agent`, `%compact`, `%memory` and `%ctx` to the notebook.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the prebuilt JupyterLab extension lives (for `jupyter labextension develop`)."""
    return [{"src": "labextension", "dest": "@ctx-magic/labextension"}]


def load_ipython_extension(ipython: Any) -> None:
    from ctx_magic.notebook.extension import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from ctx_magic.notebook.extension import unload

    unload(ipython)
