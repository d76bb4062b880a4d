"""Smoke tests: the benchmark scripts still run end to end (on tiny inputs; no timings checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.corpus_location import corpus_missing, corpus_path

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

ROOT = Path(__file__).resolve().parents[2]
CORPUS = corpus_path()


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cache_benchmark_runs_a_short_session(tmp_path: Path) -> None:
    out = run("benchmarks/cache.py", "--turns", "8", "--window", "20000", "--storage", str(tmp_path / "session"))
    assert "| turn | output chars | calls (main+compact) |" in out
    assert "transitions kept the whole previous request as prefix" in out
    assert "NO explaining event" not in out  # every prefix break is a clearing, snip or compaction


def test_cache_benchmark_prices_the_session_under_the_server_strategy(tmp_path: Path) -> None:
    out = run("benchmarks/cache.py", "--turns", "6", "--window", "20000", "--strategy", "server",
              "--storage", str(tmp_path / "session"))
    assert "| strategy | model calls | prompt tokens | read from cache | dollars |" in out
    assert "| server | " in out and "$0." in out


def test_scale_benchmark_runs_on_a_small_workload() -> None:
    out = run("benchmarks/scale.py", "--exchanges", "40", "--megabytes", "1", "--repeat", "1")
    assert "| default (snip at 200) |" in out
    assert "| snip off |" in out


@pytest.mark.skipif(corpus_missing("mini-swe-agent-gemini3") is not None and os.environ.get("CI") != "true",
                    reason=corpus_missing("mini-swe-agent-gemini3") or "")  # absent under CI it runs, and fails
def test_estimation_benchmark_prints_every_table() -> None:
    out = run("benchmarks/estimation.py", "--corpus", str(CORPUS))
    for title in ("Whole request", "Estimated part alone", "Large deltas only", "Sensitivity"):
        assert f"### {title}" in out
    assert "| overall | learned |" in out


def test_background_benchmark_prints_what_a_run_adds_to_the_requests() -> None:
    out = run("benchmarks/background.py", "--lines", "20", "--every", "10")
    assert "4 turns, one every 10 s during the run" in out and "| baseline | 4 | " in out
    for variant in ("foreground", "background, never read", "background, read at the end",
                    "background, read at each turn"):
        assert f"| {variant} | " in out
    assert "tokens in every request" in out and "Traceback" not in out


def test_secrets_benchmark_prints_its_catches() -> None:
    out = run("benchmarks/secret_check.py", "--corpus", "/nonexistent", "--keys", "5")
    assert "No corpus at /nonexistent" in out
    assert "| AWS access key id | 5/5 | 5/5 | 5/5 | 5/5 | 5/5 |" in out


@pytest.mark.skipif(corpus_missing("handson-ml3") is not None and os.environ.get("CI") != "true",
                    reason=corpus_missing("handson-ml3") or "")  # absent under CI it runs, and fails
def test_digest_writes_every_model_call_of_a_replay_the_same_twice(tmp_path: Path) -> None:
    options = ("--corpus", str(CORPUS), "--quick", "--windows", "32000", "--strategies", "raw,ctx_magic",
               "--sources", "notebook")
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    run("-m", "benchmarks.digest", str(first), *options)
    run("-m", "benchmarks.digest", str(second), *options)
    lines = first.read_text().splitlines()
    assert {json.loads(line)["strategy"] for line in lines} == {"raw", "ctx_magic", "raw, unlimited window"}
    assert all(json.loads(line)["calls"] for line in lines)
    assert first.read_text() == second.read_text()  # repeatable to the token


def said(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("script", "message"), [
    (("-m", "benchmarks.replay", "--quick"), "No session to replay under"),
    (("benchmarks/estimation.py",), "No Claude Code sessions or mini-swe-agent trajectories under"),
    (("benchmarks/fidelity.py",), "Nothing to replay under"),
])
def test_a_corpus_without_what_a_benchmark_reads_is_said_in_one_line(tmp_path: Path, script, message) -> None:
    done = said(*script, "--corpus", str(tmp_path))
    assert done.returncode == 1 and done.stdout == "" and done.stderr.startswith(message)
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.skipif(corpus_missing("mini-swe-agent-gemini3") is not None and os.environ.get("CI") != "true",
                    reason=corpus_missing("mini-swe-agent-gemini3") or "")  # absent under CI it runs, and fails
def test_a_corpus_of_trajectories_alone_replays_and_estimates(tmp_path: Path) -> None:
    """Another corpus than this one: trajectories only, no Claude Code session, notebook or recorded
    compaction. The replay says what it lacks in one line (and runs with stand-in replies); the
    estimate reports what it has."""
    (tmp_path / "mini-swe-agent-gemini3").symlink_to(CORPUS / "mini-swe-agent-gemini3")
    done = said("-m", "benchmarks.replay", "--quick", "--windows", "32000", "--strategies", "ctx_magic",
                "--corpus", str(tmp_path))
    assert done.returncode == 1 and "no Claude Code compaction runs under" in done.stderr
    assert "--replies stand-in" in done.stderr and "Traceback" not in done.stderr
    out = run("-m", "benchmarks.replay", "--quick", "--windows", "32000", "--strategies", "ctx_magic",
              "--replies", "stand-in", "--corpus", str(tmp_path))
    assert "sessions: 3 (3 swe, 0 claude-code, 0 notebook)" in out and "| ctx_magic | " in out
    out = run("benchmarks/estimation.py", "--corpus", str(tmp_path))
    assert "conversations: claude-code 0, mini-swe-gemini3 63" in out and "| claude-code | " in out


def test_calibration_leaves_out_the_tables_a_corpus_has_no_traffic_for(tmp_path: Path) -> None:
    (tmp_path / "claude-api-real").mkdir()
    out = run("benchmarks/calibration.py", "--corpus", str(tmp_path))
    assert [line for line in out.splitlines() if "left out" in line] == [
        f"(no {what} under {tmp_path}: the {name} tables are left out)"
        for what, name in (("recorded calls", "exact"), ("Claude Code logs", "deltas"), ("recorded traffic", "cache"))]


@pytest.mark.skipif(corpus_missing("mini-swe-agent-gemini3") is not None and os.environ.get("CI") != "true",
                    reason=corpus_missing("mini-swe-agent-gemini3") or "")  # absent under CI it runs, and fails
def test_a_file_of_another_kind_is_left_out_in_one_line_and_the_rest_replays(tmp_path: Path) -> None:
    swe = tmp_path / "mini-swe-agent-gemini3"
    swe.mkdir()
    real = sorted((CORPUS / "mini-swe-agent-gemini3").glob("*.traj.json"))[0]
    (swe / real.name).write_bytes(real.read_bytes())
    (swe / "other.traj.json").write_text('{"not": "a trajectory"}')
    done = said("-m", "benchmarks.replay", "--windows", "32000", "--strategies", "ctx_magic", "--replies", "stand-in",
                "--corpus", str(tmp_path))
    assert done.returncode == 0, done.stderr
    said_out = [line for line in done.stderr.splitlines() if line.startswith("left out")]
    assert said_out == [f"left out {swe / 'other.traj.json'}: not a file this benchmark reads (KeyError: 'messages')"]
    assert "Traceback" not in done.stderr
    assert "sessions: 1 (1 swe, 0 claude-code, 0 notebook)" in done.stdout


def test_calibration_leaves_out_recordings_of_another_kind_in_one_line_each(tmp_path: Path) -> None:
    cassettes = tmp_path / "claude-api-real" / "pydantic-ai" / "tests" / "cassettes"
    cassettes.mkdir(parents=True)
    (cassettes / "cut.yaml").write_text("interactions: [ {request: \n")
    (cassettes / "list.yaml").write_text("- a list, not a cassette\n")
    (tmp_path / "claude-api-real" / "spotter").mkdir()
    (tmp_path / "claude-api-real" / "spotter" / "log.jsonl").write_text("not a Claude Code log\n")
    done = said("benchmarks/calibration.py", "--corpus", str(tmp_path))
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert [line.split(":")[0] for line in done.stderr.splitlines()] == [
        f"left out {cassettes / 'cut.yaml'}", f"left out {cassettes / 'list.yaml'}"]
    assert "(no two consecutive Claude Code responses with usage: the deltas tables are left out)" in done.stdout
