"""Where the soak's cells run: the notebook layer in this process (an IPython InteractiveShell, as
a kernel would run it), or real ipykernels through jupyter_client. Both answer the same three
questions: run a cell (what it showed), kill the kernel (nothing saved on the way out), and which
session is open.

The in-process "kill" does what the OS does when a kernel dies: the session's lock is dropped
and the process state is gone; nothing is flushed or closed on purpose.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchmarks.shells import let_go, new_shell
from ctx_magic.notebook.notices import NOTICE_STYLES  # what an error-level notice looks like in a cell

KERNEL_TIMEOUT = 300  # seconds any one cell may take in a real kernel


@dataclass
class Shown:
    """What one cell showed: its text, and whether it showed an error (a notice of error level,
    a traceback, an internal error of ours)."""

    text: str = ""
    errors: list[str] = field(default_factory=list)
    traceback: bool = False


class Driver(Protocol):
    def run(self, source: str) -> Shown: ...

    def kill(self) -> None: ...

    def session_id(self) -> str: ...

    def settle(self) -> None: ...

    def close(self) -> None: ...


def _errors_of(data: Mapping[str, Any]) -> list[str]:
    html = str(data.get("text/html", ""))
    return [str(data.get("text/plain", ""))] if f'style="{NOTICE_STYLES["error"]}"' in html else []


class InProcess:
    """The notebook layer in this process: one InteractiveShell per "kernel"."""

    def __init__(self, folder: Path, env: Mapping[str, str], setup: list[str]) -> None:
        self.folder, self.env, self.setup = folder, dict(env), setup
        self.shell: Any = None
        # A kernel's environment and folder are its own: this process's come back at close().
        self._saved_env = {name: os.environ.get(name) for name in self.env}
        self._saved_cwd = os.getcwd()
        self._start()

    def _start(self) -> None:
        os.chdir(self.folder)
        os.environ.update(self.env)
        self.shell = new_shell()
        for line in self.setup:
            self.run(line)

    def run(self, source: str) -> Shown:
        from IPython.utils.capture import capture_output

        with capture_output(display=True) as out:
            result = self.shell.run_cell(source, store_history=True)
        shown = Shown(traceback=result.error_in_exec is not None or result.error_before_exec is not None)
        parts = [out.stdout, out.stderr]
        for output in out.outputs:
            parts.append(str(output.data.get("text/plain", "")))
            shown.errors += _errors_of(output.data)
        shown.text = "\n".join(parts)
        shown.traceback = shown.traceback or "Traceback (most recent call last)" in out.stderr
        return shown

    def _controller(self) -> Any:
        from ctx_magic.notebook.extension import controller_of

        return controller_of(self.shell)

    def settle(self) -> None:
        """Wait for the background side calls (notes, memories) a kernel would go on running."""
        controller = self._controller()
        controller.memory.wait()
        session = controller.host.session
        notes = session.plugins.notes if session is not None else None
        if notes is not None:
            notes.wait(KERNEL_TIMEOUT)

    def session_id(self) -> str:
        session = self._controller().host.session
        return session.session_id if session is not None else ""

    def kill(self) -> None:
        self.settle()  # a real kernel's threads die with it: none may write after the next one starts
        controller = self._controller()
        controller.idle.cancel()
        if controller.host.session is not None:
            controller.host.session.store.release()  # what the OS does with a dead process's lock
        let_go(self.shell)
        self._start()

    def close(self) -> None:
        self.settle()
        self.shell.run_line_magic("unload_ext", "ctx_magic")
        let_go(self.shell)
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.chdir(self._saved_cwd)


class RealKernel:
    """ipykernels in `folder`, driven through jupyter_client; every wait is bounded."""

    def __init__(self, folder: Path, env: Mapping[str, str], setup: list[str]) -> None:
        self.folder, self.setup = folder, setup
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")} | dict(env)
        self._start()

    def _start(self) -> None:
        from jupyter_client.manager import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(self.folder), env=self.env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=KERNEL_TIMEOUT)
        for line in self.setup:
            self.run(line)

    def run(self, source: str) -> Shown:
        msg_id = self.client.execute(source)
        shown, texts = Shown(), []
        while True:
            message = self.client.get_iopub_msg(timeout=KERNEL_TIMEOUT)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                texts.append(content["text"])
            elif kind in ("display_data", "update_display_data", "execute_result"):
                texts.append(str(content["data"].get("text/plain", "")))
                shown.errors += _errors_of(content["data"])
            elif kind == "error":
                shown.traceback = True
                texts.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                break
        self.client.get_shell_msg(timeout=KERNEL_TIMEOUT)
        shown.text = "\n".join(texts)
        return shown

    def settle(self) -> None:
        return  # a kernel's background calls run on; the soak reads the server's log at the end

    def session_id(self) -> str:
        text = self.run("%ctx status --json").text
        return str(json.JSONDecoder().raw_decode(text[text.index("{"):])[0]["session_id"])

    def kill(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
        self._start()

    def close(self) -> None:
        if self.manager.is_alive():
            self.client.stop_channels()
            self.manager.shutdown_kernel(now=True)
