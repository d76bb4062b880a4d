"""The browser tests' rig on a machine without Chromium or Node.js: a developer's run skips them
saying what to install; a run under CI=true fails, so they never silently stop running there."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui import browser_rig
from ui.browser_rig import chromium_missing, needs, node_missing


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(browser_rig, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.setattr(browser_rig, "tool_env", lambda: {"PATH": str(tmp_path)})


def test_without_chromium_or_node_a_developers_run_skips_saying_what_to_install(bare_machine, monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        needs(chromium_missing(), node_missing())
    assert str(skipped.value) == ("Debian's Chromium is not at " + str(browser_rig.CHROMIUM) + ": apt-get install -y "
                                  "chromium (never a downloaded browser); Node.js is not installed, so the "
                                  "labextension cannot be built: apt-get install -y nodejs (18 or newer)")


def test_under_ci_a_missing_browser_fails_the_test(bare_machine, monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"^Debian's Chromium is not at .* \(CI=true: .ci/run installs it"):
        needs(chromium_missing())

