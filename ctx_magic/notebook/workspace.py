"""Where this kernel works: the notebook it serves (when the frontend says), the folder its
sessions and memories are kept in, the folder the agent's file tools may read, and whether a
Jupyter server (JupyterLab, Notebook 7) runs it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctx_magic.notebook.config import CtxMagic

STORAGE_FOLDER = ".ctx_magic"


def find_notebook_path(user_ns: Mapping[str, Any], env: Mapping[str, str]) -> Path | None:
    """The notebook this kernel serves, when the frontend says (JupyterLab, VS Code)."""
    for candidate in (user_ns.get("__vsc_ipynb_file__"), env.get("JPY_SESSION_NAME")):
        if not candidate or not str(candidate).endswith(".ipynb"):
            continue
        path = Path(str(candidate))
        for option in (path, Path.cwd() / path.name):
            if option.is_file():
                return option.resolve()
    return None


class Workspace:
    """The kernel's places, read when asked: the notebook can be saved, the setting changed."""

    def __init__(self, shell: Any, env: dict[str, str], settings: CtxMagic) -> None:
        self._shell = shell
        self.env = env
        """The kernel's environment (the frontend's variables among them)."""
        self._settings = settings

    def notebook_path(self) -> Path | None:
        return find_notebook_path(self._shell.user_ns, self.env)

    def root(self) -> Path:
        """The folder the agent's file tools work in: the notebook's, else the working folder."""
        notebook = self.notebook_path()
        return notebook.parent if notebook else Path.cwd()

    def storage_dir(self) -> Path:
        """The `storage_dir` setting, else .ctx_magic beside the notebook (or in the working folder)."""
        if self._settings.current.storage_dir:
            return Path(self._settings.current.storage_dir).expanduser().resolve()
        return self.root() / STORAGE_FOLDER

    def in_jupyter_server(self) -> bool:
        """JupyterLab (and Notebook 7) start kernels with JPY_SESSION_NAME; VS Code does not."""
        return bool(self.env.get("JPY_SESSION_NAME")) and "__vsc_ipynb_file__" not in self._shell.user_ns
