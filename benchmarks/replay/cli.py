"""`python -m benchmarks.replay`: replay recorded sessions with each strategy, print the tables.

    python -m benchmarks.replay [--windows 32000,200000,1000000] [--corpus PATH] [--quick]
                                [--strategies raw,masking,...] [--ablations] [--sources swe,notebook]
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.replay.corpus import DEFAULT_CORPUS, load_corpus
from benchmarks.replay.results import RunResult, floor_of, run_one
from benchmarks.replay.strategies import ABLATIONS, DEFAULT, FLOOR, strategy
from benchmarks.replay.table import costliest, grouped, target_lines, window_tables

DEFAULT_WINDOWS = (32_000, 200_000, 1_000_000)


def commit() -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--windows", default=",".join(str(w) for w in DEFAULT_WINDOWS),
                        help="context windows in tokens, comma-separated")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="the shared corpus folder")
    parser.add_argument("--quick", action="store_true",
                        help="a subset: 3 trajectories, the Claude Code log, the start of a notebook")
    parser.add_argument("--strategies", default=",".join(DEFAULT), help="comma-separated (raw always runs)")
    parser.add_argument("--ablations", action="store_true", help="add ctx_magic with mechanisms switched off")
    parser.add_argument("--sources", default="", help="only these sources: swe, claude-code, notebook")
    parser.add_argument("--per-session", type=int, default=0, metavar="N",
                        help="also list, per window, the N sessions where ctx_magic bills most above raw")
    args = parser.parse_args(argv)
    args.windows = [int(w.replace("_", "")) for w in args.windows.split(",") if w.strip()]
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    names += list(ABLATIONS) if args.ablations else []
    args.strategies = ["raw", *dict.fromkeys(n for n in names if n != "raw")]
    for name in args.strategies:
        if name != FLOOR:
            strategy(name)  # an unknown name fails here, before anything runs
    return args


def run_all(args: argparse.Namespace) -> list[RunResult]:
    replays = load_corpus(args.corpus, quick=args.quick)
    if args.sources:
        keep = {s.strip() for s in args.sources.split(",")}
        replays = [r for r in replays if r.source in keep]
    results: list[RunResult] = []
    for window in args.windows:
        for name in args.strategies:
            started = time.perf_counter()
            for replay in replays:
                if name == FLOOR:
                    raw = next(r for r in results if r.strategy == "raw" and r.replay == replay.name
                               and r.window == window)
                    results.append(floor_of(raw))
                else:
                    results.append(run_one(name, replay, window))
            print(f"window {window:,} {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    results = run_all(args)
    elapsed = time.perf_counter() - started
    command = "python -m benchmarks.replay " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None
                                                                                   else argv))
    sessions = {r.replay: r.source for r in results}
    by_source = ", ".join(f"{sum(s == k for s in sessions.values())} {k}" for k in ("swe", "claude-code", "notebook"))
    print("# Replay cost benchmark\n")
    print(f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"- commit: {commit()}")
    print(f"- command: `{command.strip()}`")
    print(f"- sessions: {len(sessions)} ({by_source}); windows: {', '.join(f'{w:,}' for w in args.windows)}")
    print(f"- run time: {elapsed:.0f} s")
    print("- prices in base-input units: input 1, cache write 1.25 (5m) / 2 (1h), cache read 0.1, output 5; "
          "usage from the offline stand-in's cache simulation\n")
    tables = grouped(results)
    for window in args.windows:
        print(window_tables(window, tables[window]) + "\n")
        if args.per_session and "ctx_magic" in tables[window]:
            print(f"Where ctx_magic bills most above raw (sessions raw finishes, window {window:,}):\n")
            print(costliest(tables[window], count=args.per_session) + "\n")
    lines = target_lines(tables)
    if lines:
        print("## Targets (issue 10)\n")
        print("\n".join(lines))
