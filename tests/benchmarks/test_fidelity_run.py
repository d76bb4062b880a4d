"""Smoke test: the fidelity benchmark still runs end to end on a short notebook session
and one trajectory; the guarantees it measures hold there (no timings checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.corpus_location import corpus_missing, corpus_path

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

ROOT = Path(__file__).resolve().parents[2]
CORPUS = corpus_path()


@pytest.mark.skipif(corpus_missing("handson-ml3") is not None and os.environ.get("CI") != "true",
                    reason=corpus_missing("handson-ml3") or "")  # absent under CI it runs, and fails
def test_fidelity_benchmark_runs_a_short_notebook_session(tmp_path: Path) -> None:
    done = subprocess.run(
        # A window the 22 turns fill once, to the manual compaction at turn 20 (no automatic one).
        [sys.executable, "benchmarks/fidelity.py", "--windows", "28000", "--swe", "1", "--no-claude-code",
         "--notebook-turns", "22", "--corpus", str(CORPUS), "--storage", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    coverage, recovery = done.stdout.split("\n\n")
    assert "| workload | window | turns | compactions | user msgs: before audit | after audit |" in coverage
    row = next(line for line in coverage.splitlines() if line.startswith("| notebook/tools_pandas | 28,000 | 22 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert "manual 1" in cells[3]  # the %compact at turn 20
    assert cells[5].startswith("100.0%") and cells[11].startswith("100.0%") and cells[13].startswith("100.0%")
    notebook = next(line for line in recovery.splitlines() if line.startswith("| notebook/tools_pandas |"))
    assert [c.strip() for c in notebook.strip("|").split("|")][8].startswith("100.0%")  # pins
