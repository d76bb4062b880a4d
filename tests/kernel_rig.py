"""A real ipykernel driven through jupyter_client, for interrupt and restart tests."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

OUTPUT_TYPES = ("stream", "display_data", "update_display_data", "execute_result", "error")


def kernel_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(extra)
    return env


def output_text(content: dict[str, Any]) -> str:
    if "text" in content:
        return content["text"]
    if "data" in content:
        return str(content["data"].get("text/plain", ""))
    if "ename" in content:
        return f"ERROR {content['ename']}: {content['evalue']}"
    return ""


class Kernel:
    """One kernel process in `cwd`; every wait is bounded by a timeout, none sleeps."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(cwd), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def submit(self, code: str) -> str:
        """Start running `code` without waiting (two kernels can then run at the same moment)."""
        return self.client.execute(code)

    def collect(self, msg_id: str, timeout: float = 120) -> str:
        """All output text of a submitted run, once it is done."""
        return self.execute("", msg_id=msg_id, timeout=timeout)

    def outputs(self, code: str, timeout: float = 120) -> list[dict[str, Any]]:
        """Run `code`; the content of every output message it sent (what the .ipynb would keep)."""
        return self.execute_with_reply(code, timeout)[0]

    def execute_with_reply(self, code: str, timeout: float = 120,
                           silent: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Run `code`; its output messages' content and its execute_reply's content (the payloads)."""
        msg_id = self.client.execute(code, silent=silent)
        found: list[dict[str, Any]] = []
        while True:
            message = self.client.get_iopub_msg(timeout=timeout)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] in OUTPUT_TYPES:
                found.append(message["content"])
            elif message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                break
        while True:
            reply = self.client.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return found, reply["content"]

    def execute(self, code: str, *, when: Callable[[str], bool] | None = None,
                then: Callable[[], None] | None = None, timeout: float = 120, msg_id: str | None = None) -> str:
        """Run `code` (or wait for the run `msg_id` submitted before); when an output satisfies
        `when`, call `then` once. Returns all output text."""
        msg_id = msg_id or self.client.execute(code)
        texts: list[str] = []
        fired = False
        while True:
            message = self.client.get_iopub_msg(timeout=timeout)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind = message["msg_type"]
            if kind in OUTPUT_TYPES:
                text = output_text(message["content"])
                texts.append(text)
                if when is not None and then is not None and not fired and when(text):
                    fired = True
                    then()
            elif kind == "status" and message["content"]["execution_state"] == "idle":
                break
        self.client.get_shell_msg(timeout=timeout)
        return "\n".join(texts)

    def interrupt(self) -> None:
        self.manager.interrupt_kernel()

    def kill(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)

    def close(self) -> None:
        if self.manager.is_alive():
            self.client.stop_channels()
            self.manager.shutdown_kernel(now=True)


SETUP = "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False"


def start(kernels: list[Kernel], folder: Path, env: dict[str, str], setup: str = SETUP) -> Kernel:
    """A kernel in `folder` with ctx_magic loaded (`setup`), added to `kernels` to be closed."""
    kernel = Kernel(folder, env)
    kernels.append(kernel)
    assert "ERROR" not in kernel.execute(setup)
    return kernel


def session_id(kernel: Kernel) -> str:
    text = kernel.execute("%ctx status --json")
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]["session_id"]
