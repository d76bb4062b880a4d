"""An in-process IPython shell with ctx_magic loaded against the offline backend."""

from __future__ import annotations

import atexit
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from builders import ManualClock
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from ctx_magic.notebook.extension import controller_of


def fresh_shell() -> InteractiveShell:
    """The global shell (IPython's display() talks to the singleton), fresh, without ctx_magic loaded."""
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    # IPython registers exit handlers that hold the shell (and its test's session) until the run ends:
    # the shell's own, which then resets it with a full garbage collection of that heap (minutes after
    # the last test), and the one stopping %%script's background processes. A test's shell has nothing
    # for them to do (no history, no temporary files, no background scripts): the test closes it.
    atexit.unregister(shell.atexit_operations)
    atexit.unregister(shell.magics_manager.registry["ScriptMagics"].kill_bg_processes)
    # Like a kernel, format rich outputs (images, HTML), not just text/plain as a terminal does.
    shell.display_formatter.active_types = shell.display_formatter.format_types
    return shell


def new_shell() -> InteractiveShell:
    """A fresh global shell with ctx_magic loaded, for each test."""
    shell = fresh_shell()
    shell.run_line_magic("load_ext", "ctx_magic")
    shell.run_line_magic("config", "CtxMagic.permission = 'auto'")
    shell.run_line_magic("config", "CtxMagic.idle_timer = False")
    # The user-scope memories of the test, not of whoever runs it (tests run in a tmp folder).
    shell.run_line_magic("config", "CtxMagic.user_memory_dir = '.user-data'")
    return shell


@contextmanager
def captured() -> Iterator[Any]:
    with capture_output(display=True) as out:
        yield out


def texts(out: Any) -> str:
    """Everything a cell showed, as plain text (stdout and every display's text/plain)."""
    parts = [out.stdout, out.stderr]
    parts += [o.data.get("text/plain", "") for o in out.outputs]
    return "\n".join(parts)


def cell(shell: InteractiveShell, source: str) -> Any:
    """Run `source` as ipykernel runs a notebook cell: with history, so it has an execution count."""
    return shell.run_cell(source, store_history=True)


def run(shell: InteractiveShell, source: str) -> tuple[Any, str]:
    with captured() as out:
        result = cell(shell, source)
    return result, texts(out)


def status(shell: InteractiveShell) -> dict[str, Any]:
    with captured() as out:
        shell.run_line_magic("ctx", "status --json")
    return json.loads(out.stdout)


def close_shell(shell: InteractiveShell) -> None:
    shell.run_line_magic("unload_ext", "ctx_magic")
    shell.cleanup()  # gives back the process's __main__, which would otherwise hold this shell to the end
    InteractiveShell.clear_instance()


def controller(shell: InteractiveShell):  # type: ignore[no-untyped-def]
    return controller_of(shell)


@contextmanager
def offline_shell(tmp_path: Any, monkeypatch: Any) -> Iterator[InteractiveShell]:
    """A fresh shell in `tmp_path` with no API key (the offline stand-in answers), closed after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    shell = new_shell()
    try:
        yield shell
    finally:
        close_shell(shell)


@contextmanager
def clocked_shell(tmp_path: Any, monkeypatch: Any) -> Iterator[InteractiveShell]:
    """The same, with its controller on a manual clock (`shell.user_ns["_clock"]`)."""
    with offline_shell(tmp_path, monkeypatch) as shell:
        clock = ManualClock(1_800_000_000.0)
        controller(shell).clock = clock
        shell.user_ns["_clock"] = clock
        yield shell
