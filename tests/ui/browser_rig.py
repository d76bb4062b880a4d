"""A real JupyterLab 4 or Notebook 7 on 127.0.0.1 with ctx_magic's labextension as built from
this tree, and headless Debian Chromium driven by Playwright: the rig of tests/ui/test_browser.py.
Every wait is bounded; the server always stops.

The server (and the kernels it starts) find the extension through JUPYTER_PATH: a folder of the
test's own holds `labextensions/@ctx-magic/labextension`, a link to this tree's build, and
JUPYTER_PATH comes before every installed location, so the build under test wins over any
installed copy, and the kernel (which checks that the sidebar's extension exists) sees it too."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
LABEXTENSION_SRC = REPO / "labextension"
LABEXTENSION_OUT = REPO / "ctx_magic" / "labextension"  # package.json "jupyterlab.outputDir"
PACKAGE = "@ctx-magic/labextension"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SERVER_START_TIMEOUT = 90  # seconds: a cold JupyterLab server, imports and all
SERVER_STOP_TIMEOUT = 20  # seconds: it shuts its kernels down before exiting
BUILD_TIMEOUT = 600  # seconds: jlpm install from the npm registry on a cold cache, then the build


def tool_env() -> dict[str, str]:
    """This environment with its scripts (jlpm, jupyter) first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def newest_source_mtime() -> float:
    files = [LABEXTENSION_SRC / "package.json", LABEXTENSION_SRC / "tsconfig.json",
             *(LABEXTENSION_SRC / "src").rglob("*"), *(LABEXTENSION_SRC / "style").rglob("*")]
    return max(f.stat().st_mtime for f in files if f.is_file())


def build_is_current() -> bool:
    marker = LABEXTENSION_OUT / "package.json"
    return marker.is_file() and marker.stat().st_mtime >= newest_source_mtime()


def built_labextension() -> Path:
    """The extension built from the current sources (`pip install .` builds it; a development
    tree rebuilds here when the TypeScript or CSS is newer than the build)."""
    if build_is_current():
        return LABEXTENSION_OUT
    env = tool_env()
    if not (LABEXTENSION_SRC / "node_modules").is_dir():
        subprocess.run(["jlpm", "install"], cwd=LABEXTENSION_SRC, env=env, check=True, timeout=BUILD_TIMEOUT)
    subprocess.run(["jlpm", "build"], cwd=LABEXTENSION_SRC, env=env, check=True, timeout=BUILD_TIMEOUT)
    return LABEXTENSION_OUT


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def chromium_missing() -> str | None:
    if CHROMIUM.is_file():
        return None
    return f"Debian's Chromium is not at {CHROMIUM}: apt-get install -y chromium (never a downloaded browser)"


def node_missing() -> str | None:
    if shutil.which("node", path=tool_env()["PATH"]):
        return None
    return "Node.js is not installed, so the labextension cannot be built: apt-get install -y nodejs (18 or newer)"


def needs(*missing: str | None) -> None:
    """Skip, saying what is missing and how to install it, on a machine without the browser or
    Node.js; under CI=true fail instead: `.ci/run` installs both, so these tests never silently
    stop running there."""
    reasons = [reason for reason in missing if reason]
    if not reasons:
        return
    if on_ci():
        pytest.fail("; ".join(reasons) + " (CI=true: .ci/run installs it, so this test must run)", pytrace=False)
    pytest.skip("; ".join(reasons))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


APPS = {"lab": ("lab", "LabApp", "lab/tree"), "notebook": ("notebook", "JupyterNotebookApp", "notebooks")}
"""Frontend -> (jupyter subcommand, its app class, the URL path that opens a notebook)."""


class JupyterLab:
    """`jupyter lab` (or `jupyter notebook`, Notebook 7) serving `root` on a free port with a
    token; ours alone (own config and data dirs, no news, no update check), loading the
    labextension from `extension_dir`; `env` adds to the environment it and its kernels get."""

    def __init__(self, root: Path, home: Path, extension_dir: Path, app: str = "lab",
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.app = app
        command, app_class, self.open_path = APPS[app]
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / f"jupyter-{app}.log"
        jupyter_path = home / "jupyter-path"
        labextension = jupyter_path / "labextensions" / PACKAGE
        labextension.parent.mkdir(parents=True)
        labextension.symlink_to(extension_dir, target_is_directory=True)
        config = home / "config"
        settings = config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        self.env = {k: v for k, v in tool_env().items() if not k.startswith("ANTHROPIC_")}
        self.env.update(env or {})  # e.g. a stand-in served over HTTP, whose requests the test reads
        self.env.update(JUPYTER_CONFIG_DIR=str(config), JUPYTER_DATA_DIR=str(home / "data"),
                        JUPYTER_RUNTIME_DIR=str(home / "runtime"), IPYTHONDIR=str(home / "ipython"),
                        JUPYTER_PATH=os.pathsep.join(filter(None, [str(jupyter_path),
                                                                   os.environ.get("JUPYTER_PATH", "")])))
        self.command = [
            sys.executable, "-m", "jupyter", command, "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
            f"--{app_class}.expose_app_in_browser=True",
        ]
        if os.geteuid() == 0:  # containers and CI run as root; JupyterLab refuses that unless told
            self.command.append("--ServerApp.allow_root=True")
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> JupyterLab:
        with self.log_path.open("wb") as log:
            # Its own process group, so that stopping it can never reach anything else.
            self.process = subprocess.Popen(self.command, cwd=self.root, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_until_up()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        status = f"{self.url}/api/status?token={self.token}"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({self.process.returncode}):\n{self.log()}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                with urllib.request.urlopen(status, timeout=2) as response:
                    if response.status == 200:
                        return
            time.sleep(0.2)  # polling a port that is not open yet: there is no event to wait on
        raise TimeoutError(f"jupyter lab did not answer in {SERVER_START_TIMEOUT}s:\n{self.log()}")

    def stop(self) -> None:
        """SIGTERM (the server shuts its kernels down), then SIGKILL to its own group if stuck."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=SERVER_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=SERVER_STOP_TIMEOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6_000:] if self.log_path.exists() else ""

    def lab_url(self, path: str) -> str:
        """The page that opens the notebook at `path` (JupyterLab's tree, or Notebook 7's page)."""
        return f"{self.url}/{self.open_path}/{path}?token={self.token}"


@contextlib.contextmanager
def chromium_page(viewport: tuple[int, int] = (1440, 900)) -> Iterator[Any]:
    """A fresh page in headless Debian Chromium (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            yield page
        finally:
            browser.close()
