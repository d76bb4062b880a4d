"""The benchmarks' IPython shells: the global InteractiveShell, made as a kernel formats outputs and
let go when a run is done.

IPython registers two exit handlers per shell (its own, which resets the shell with a full garbage
collection, and the one stopping `%%script`'s background processes) and swaps its namespace in as
the process's `__main__`. A benchmark that makes dozens of shells would keep every one of them, and
their sessions, alive to the end, then spend minutes collecting garbage once per shell after its
tables are printed. A benchmark's shell has no history, temporary files or background scripts for
those handlers to clean: `let_go` does what is needed.
"""

from __future__ import annotations

import atexit
from typing import Any


def new_shell(*, rich: bool = True) -> Any:
    """A fresh global shell without history; `rich`: it formats rich outputs (images, HTML) as a
    kernel does, not only text/plain as a terminal does."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    atexit.unregister(shell.atexit_operations)
    script_magics = shell.magics_manager.registry.get("ScriptMagics")
    if script_magics is not None:
        atexit.unregister(script_magics.kill_bg_processes)
    if rich:
        shell.display_formatter.active_types = shell.display_formatter.format_types
    return shell


def let_go(shell: Any) -> None:
    """The shell gives the process's `__main__` back and stops being the global one."""
    from IPython.core.interactiveshell import InteractiveShell

    shell.cleanup()
    InteractiveShell.clear_instance()
