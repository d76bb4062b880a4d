"""ctx_magic: an agent for IPython and Jupyter that keeps its conversation inside the model's window.

`%load_ext ctx_magic` adds `%%agent`, `%compact`, `%memory` and `%ctx` to the notebook.
"""

from __future__ import annotations

import types
from typing import Any

from ctx_magic import context as _context

__version__ = "0.1.0"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the prebuilt JupyterLab extension lives (for `jupyter labextension develop`)."""
    return [{"src": "labextension", "dest": "@ctx-magic/labextension"}]


class _ContextPackage(types.ModuleType):
    """`ctx_magic.context` names the engine's package and, called, the agent's context as it
    stands: a read-only `ContextReport` (tokens, window, thresholds, zone, compactions, the prompt
    cache: warm or cold, when it expires, what the next call writes; the dollars spent). Raises
    `ctx_magic.errors.NoSession` when there is no session."""

    def __call__(self) -> Any:
        from ctx_magic.notebook.extension import current_context

        return current_context()


# The package is imported here, before anything else can, so that the name is callable from the start.
_context.__class__ = _ContextPackage


def load_ipython_extension(ipython: Any) -> None:
    from ctx_magic.notebook.extension import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from ctx_magic.notebook.extension import unload

    unload(ipython)
