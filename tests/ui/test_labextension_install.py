"""`pip install .` builds the JupyterLab extension from labextension/ and installs it prebuilt:
in a fresh virtual environment (no system site packages) made from a clean copy of
the project (what a clone has: no node_modules, no build output), `jupyter labextension list`
shows @ctx-magic/labextension enabled and OK; the wheel `python -m build` makes carries the built
extension, and installed where Node.js is not on the PATH it gives the same listing; a wheel built
without Node.js installs without the sidebar. Slow: pip builds jupyterlab's environment and jlpm
installs the npm dependencies (the npm registry and PyPI are the only network it needs). The tests
that build need Node.js: without it they skip saying so, and fail under CI=true."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ui.browser_rig import REPO, needs, node_missing

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

PACKAGE = "@ctx-magic/labextension"
INSTALL_TIMEOUT = 1_800  # seconds: jupyterlab into two environments plus jlpm on a cold cache
# What a clone never has, for trees that are not a git checkout.
NOT_IN_A_CLONE = shutil.ignore_patterns(".git", "node_modules", ".yarn", "lib", "tsconfig.tsbuildinfo",
                                        "__pycache__", ".venv", "venv", "test-artifacts", ".pytest_cache",
                                        ".ruff_cache", ".hypothesis", ".ctx_magic", "*.egg-info")


def clean_copy(destination: Path) -> Path:
    """The project as a clone of the working tree would have it: tracked and new files, nothing ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        shutil.copytree(REPO, destination, ignore=NOT_IN_A_CLONE)
    else:
        for name in filter(None, listed.stdout.decode().split("\0")):
            source = REPO / name
            if source.is_file():
                (destination / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, destination / name)
    shutil.rmtree(destination / "ctx_magic" / "labextension", ignore_errors=True)
    return destination


def clean_env(home: Path) -> dict[str, str]:
    """This environment without anything pointing at another Python or Jupyter installation."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV", "CONDA", "PIP_REQUIRE"))}
    env.update(JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
                          check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(command)} failed ({done.returncode}):\n{output[-8_000:]}"
    return output


def fresh_venv(tmp_path: Path, env: dict[str, str]) -> Path:
    """A virtual environment that does not see the system's site-packages; `env` now runs in it."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)  # no --system-site-packages
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv)
    return venv


def assert_listed_enabled_and_ok(venv: Path, tmp_path: Path, env: dict[str, str]) -> None:
    installed = venv / "share" / "jupyter" / "labextensions" / PACKAGE
    assert json.loads((installed / "package.json").read_text())["name"] == PACKAGE
    assert json.loads((installed / "install.json").read_text())["packageName"] == "ctx_magic"
    assert list((installed / "static").glob("remoteEntry.*.js"))
    listing = run([str(venv / "bin" / "jupyter"), "labextension", "list"], tmp_path, env)
    line = next((text for text in listing.splitlines() if PACKAGE in text), "")
    assert re.search(rf"{re.escape(PACKAGE)} v0\.1\.0 .*enabled.*OK", line), listing
    assert "(python, ctx_magic)" in line, listing


def test_pip_install_builds_and_installs_the_labextension(tmp_path: Path) -> None:
    needs(node_missing())
    project = clean_copy(tmp_path / "project")
    assert not (project / "labextension" / "node_modules").exists()
    assert (project / "labextension" / "yarn.lock").is_file(), "yarn.lock must be committed"
    env = clean_env(tmp_path)
    venv = fresh_venv(tmp_path, env)

    run([str(venv / "bin" / "python"), "-m", "pip", "install", str(project), "jupyterlab>=4,<5"], tmp_path, env)

    assert_listed_enabled_and_ok(venv, tmp_path, env)


def test_the_built_wheel_carries_the_labextension_and_installs_the_sidebar_without_node(tmp_path: Path) -> None:
    """`python -m build` (an sdist, then the wheel from it) where Node.js is installed; the wheel
    goes into a fresh environment whose PATH has no Node.js, as a user's machine may have none."""
    needs(node_missing())
    project = clean_copy(tmp_path / "project")
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(project)], tmp_path, clean_env(tmp_path))
    (wheel,) = dist.glob("ctx_magic-*.whl")
    shipped = f"ctx_magic-0.1.0.data/data/share/jupyter/labextensions/{PACKAGE}"
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"{shipped}/package.json", f"{shipped}/install.json"} <= set(names)
    assert [n for n in names if n.startswith(f"{shipped}/static/remoteEntry.")]

    env = clean_env(tmp_path)
    bare = tmp_path / "bare-path"  # the PATH holds the venv's scripts and this empty folder: no node, no jlpm
    bare.mkdir()
    env["PATH"] = str(bare)
    venv = fresh_venv(tmp_path, env)
    assert shutil.which("node", path=env["PATH"]) is None
    run([str(venv / "bin" / "python"), "-m", "pip", "install", str(wheel), "jupyterlab>=4,<5"], tmp_path, env)

    assert_listed_enabled_and_ok(venv, tmp_path, env)


def test_pip_install_without_node_installs_the_package_without_the_sidebar(tmp_path: Path) -> None:
    """No Node.js on the PATH: the wheel builds all the same, with the Python package and without
    the labextension (the kernel then shows the panel inline and says how to get the sidebar)."""
    project = clean_copy(tmp_path / "project")
    env = clean_env(tmp_path)
    bare = tmp_path / "bare-path"  # nothing on the PATH: no node, no jlpm (pip runs by absolute path)
    bare.mkdir()
    env["PATH"] = str(bare)
    output = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path / "dist"),
                  str(project)], tmp_path, env)
    assert "Node.js is not installed, so the JupyterLab sidebar extension is not built" in output
    (wheel,) = (tmp_path / "dist").glob("ctx_magic-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "ctx_magic/ui/panel.css" in names and "ctx_magic/notebook/panel_link.py" in names
    assert not [n for n in names if n.endswith(f"labextensions/{PACKAGE}/package.json")]
