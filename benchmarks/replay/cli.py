"""`python -m benchmarks.replay`: replay recorded sessions with each strategy, print the tables.

    python -m benchmarks.replay [--windows 32000,200000,1000000] [--corpus PATH] [--quick]
                                [--strategies raw,masking,...] [--ablations] [--sources swe,notebook]
                                [--thinking] [--model NAME]
                                [--replies real|stand-in] [--per-session N]

One run prints every table: per window, each strategy against the reference (raw at an
unlimited window), identifiers kept, by source; where ctx_magic's bill goes on the sessions that
never near its threshold; the targets. Windows above a standard window are run only when some
session grows past 200,000 tokens (otherwise they repeat the 200,000 run digit for digit). A
session whose longest recorded reply is over a window's reply cap (a quarter of the window) is
left out at that window for every strategy alike, and named with the reason: the API would cut
that reply, and the replay would no longer be the recorded session.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import ctx_magic.context.decide as decide
from benchmarks.replay.billing import MODEL, thinking_sent
from benchmarks.replay.corpus import DEFAULT_CORPUS, Replay, load_corpus
from benchmarks.replay.ctx_strategy import CtxOptions, thresholds_at
from benchmarks.replay.harness import longest_reply, max_output, replies_fit
from benchmarks.replay.results import REFERENCE, SIZES_MARK, RunResult, floor_of, reference_run, run_one
from benchmarks.replay.side_output import STAND_IN, ReplySizes, p9999_sizes, real_sizes
from benchmarks.replay.strategies import ABLATIONS, COMPACTION_SWITCHES, DEFAULT, FLOOR, THINKING, strategy
from benchmarks.replay.table import (
    grouped,
    overhead_summary,
    overhead_table,
    overheads,
    target_lines,
    thinking_table,
    thinking_targets,
    window_tables,
)
from ctx_magic.agent.catalog import MODEL_TABLE, checks_thinking_prefix

DEFAULT_WINDOWS = (32_000, 200_000, 1_000_000)
STANDARD_WINDOW = 200_000  # past it, a window measures something only if a session grows past it
SENSITIVITY = "p99.99"
KNOWN_MODELS = tuple(spec.prefix for spec in MODEL_TABLE)  # the ids ctx_magic's model catalog describes


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
    parser.add_argument("--strategies", default=None,
                        help="comma-separated (raw always runs); NAME@p99.99: NAME with p99.99-long summaries")
    parser.add_argument("--thinking", action="store_true",
                        help=f"the thinking sent back: {', '.join(THINKING)} (unless --strategies names others), "
                             "and per window the prefix check's table (refused requests, thinking dropped)")
    parser.add_argument("--ablations", action="store_true", help="add ctx_magic with mechanisms switched off")
    parser.add_argument("--model", default=MODEL, choices=KNOWN_MODELS, metavar="NAME",
                        help=f"the model every request names (default {MODEL}): its tokenizer, thinking and limits "
                             f"shape the bill; one of {', '.join(KNOWN_MODELS)}")
    parser.add_argument("--think", default="auto", choices=("auto", "off", "adaptive"),
                        help="ctx_magic's `thinking` setting (default auto: the model's own); every strategy sends "
                             "the `thinking` parameter ctx_magic sends with it")
    parser.add_argument("--sources", default="", help="only these sources: swe, claude-code, notebook")
    parser.add_argument("--replies", choices=("real", "stand-in"), default="real",
                        help="side-call reply lengths: a real model's (default) or the stand-in's own")
    parser.add_argument("--per-session", type=int, default=8, metavar="N",
                        help="per window, the N sessions never nearing the threshold where ctx_magic bills most")
    parser.add_argument("--overhead-of", default="ctx_magic", metavar="NAME",
                        help="the strategy whose bill --per-session splits (default ctx_magic)")
    args = parser.parse_args(argv)
    args.windows = [int(w.replace("_", "")) for w in args.windows.split(",") if w.strip()]
    chosen = args.strategies if args.strategies is not None else ",".join(THINKING if args.thinking else DEFAULT)
    names = [s.strip() for s in chosen.split(",") if s.strip()]
    names += list(ABLATIONS) if args.ablations else []
    args.strategies = ["raw", *dict.fromkeys(n for n in names if n != "raw")]
    for name in args.strategies:
        base, _, sizes = name.partition(SIZES_MARK)
        if sizes and sizes != SENSITIVITY:
            parser.error(f"unknown reply sizes {sizes!r} in {name!r} (known: {SENSITIVITY})")
        if base != FLOOR:
            try:
                strategy(base)  # an unknown name fails here, before anything runs
            except ValueError as error:
                parser.error(str(error))
    return args


def quiet_at(window: int, model: str) -> Callable[[RunResult], bool]:
    """Whether a session never nears ctx_magic's threshold at `window` on `model`: raw's largest
    request stays under the warning level."""
    warning = thresholds_at(window, model).warning
    return lambda reference: reference.largest_request < warning


def run_strategy(name: str, replays: list[Replay], window: int, results: list[RunResult],
                 sizes: ReplySizes, model: str, thinking: str = "auto") -> tuple[list[RunResult], str | None]:
    """One strategy over every session at `window` on `model` (and a note when nothing needed running)."""
    base, _, label = name.partition(SIZES_MARK)
    if name == FLOOR:
        raws = {r.replay: r for r in results if r.strategy == "raw" and r.window == window}
        return [floor_of(raws[r.name]) for r in replays], None
    if label:
        done = [r for r in results if r.strategy == base and r.window == window]
        if len(done) == len(replays) and not any(c.kind == "compaction" for r in done for c in r.calls):
            note = f"{name} at {window:,}: {base} wrote no summary at this window, so the row repeats it"
            return [dataclasses.replace(r, strategy=name) for r in done], note
        sizes = p9999_sizes(sizes)
    switches = base.split("+")[1:]
    if switches and set(switches) <= set(COMPACTION_SWITCHES):
        done = [r for r in results if r.strategy == "ctx_magic" and r.window == window]
        largest = max((r.largest_request for r in results if r.strategy == REFERENCE), default=0)
        variant = thresholds_at(window, model, CtxOptions.parse(base))
        nearest = min(variant.warning, decide.early_compaction_from(variant))
        if len(done) == len(replays) and largest < nearest:
            note = (f"{name} at {window:,}: no session comes near a compaction ({largest:,} tokens at most, under "
                    f"{nearest:,}), so the row repeats ctx_magic")
            return [dataclasses.replace(r, strategy=name) for r in done], note
    return [run_one(name, replay, window, sizes, model=model, thinking=thinking) for replay in replays], None


@dataclass(frozen=True)
class LeftOut:
    """A session left out at a window, for every strategy alike: a recorded reply is longer than
    the window's reply cap, so the stand-in (like the API) would cut it and the replay would no
    longer be the recorded session."""

    session: str
    longest_reply: int


@dataclass
class Runs:
    """Every run of one benchmark, on one model, with what it noted and what it left out, per window."""

    model: str
    results: list[RunResult]
    notes: list[str] = field(default_factory=list)
    left_out: dict[int, list[LeftOut]] = field(default_factory=dict)
    thinking: str = "auto"
    """ctx_magic's `thinking` setting; every strategy sends the `thinking` it sends."""


def run_replays(replays: list[Replay], windows: list[int], strategies: list[str], sizes: ReplySizes,
                model: str = MODEL, thinking: str = "auto") -> Runs:
    """The reference first, then each strategy at each window worth running, each over the
    sessions whose recorded replies fit that window's reply cap, every request on `model`."""
    started = time.perf_counter()
    runs = Runs(model, [reference_run(replay, sizes, model=model, thinking=thinking) for replay in replays],
                thinking=thinking)
    print(f"reference (raw, unlimited window): {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    largest = max(r.largest_request for r in runs.results)
    runs.notes += [f"window {w:,} not run: no session's largest request passes {STANDARD_WINDOW:,} tokens (the largest "
                   f"is {largest:,}), so it would repeat the {STANDARD_WINDOW:,} run digit for digit"
                   for w in windows if w > STANDARD_WINDOW and largest <= STANDARD_WINDOW]
    for window in [w for w in windows if w <= STANDARD_WINDOW or largest > STANDARD_WINDOW]:
        fitting = [r for r in replays if replies_fit(r, window, model)]
        runs.left_out[window] = [LeftOut(r.name, longest_reply(r, model)) for r in replays
                                 if not any(r is f for f in fitting)]
        for name in strategies:
            started = time.perf_counter()
            done, note = run_strategy(name, fitting, window, runs.results, sizes, model, thinking)
            runs.results += done
            runs.notes += [note] if note else []
            print(f"window {window:,} {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return runs


def left_out_line(window: int, left_out: list[LeftOut], sessions: int) -> str:
    """The sessions left out at `window`, by name, with the reason (empty when none is)."""
    if not left_out:
        return ""
    names = ", ".join(f"{o.session} ({o.longest_reply:,})" for o in left_out)
    return (f"{len(left_out)} of {sessions} sessions left out at {window:,} for every strategy: a recorded reply "
            f"longer than the reply cap ({max_output(window):,} tokens, a quarter of the window), which the API "
            f"would cut; longest reply in tokens: {names}")


def run_all(args: argparse.Namespace) -> tuple[Runs, ReplySizes]:
    """Every run the arguments ask for."""
    replays = load_corpus(args.corpus, quick=args.quick)
    if args.sources:
        keep = {s.strip() for s in args.sources.split(",")}
        replays = [r for r in replays if r.source in keep]
    if not replays:
        sys.exit(f"No session to replay under {args.corpus} (mini-swe-agent trajectories, Claude Code sessions, "
                 "notebooks).")
    try:
        sizes = real_sizes(args.corpus) if args.replies == "real" else STAND_IN
    except FileNotFoundError as error:
        sys.exit(f"{error}: the side calls' replies cannot be sized like a model's (--replies stand-in bills "
                 "them at the stand-in's lengths).")
    return run_replays(replays, args.windows, args.strategies, sizes, args.model, args.think), sizes


def header(args: argparse.Namespace, argv: list[str] | None, runs: Runs, sizes: ReplySizes, elapsed: float) -> str:
    results, notes = runs.results, runs.notes
    command = "python -m benchmarks.replay " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None
                                                                                   else argv))
    sessions = {r.replay: r.source for r in results}
    by_source = ", ".join(f"{sum(s == k for s in sessions.values())} {k}" for k in ("swe", "claude-code", "notebook"))
    windows = sorted({r.window for r in results if r.strategy != REFERENCE})
    references = [r for r in results if r.strategy == REFERENCE]
    pairs = ", ".join(f"{k} {sum(r.ids_used for r in references if r.source == k):,}"
                      for k in ("swe", "claude-code", "notebook"))
    p9999 = p9999_sizes(sizes)
    lines = [
        "# Replay cost benchmark\n",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- commit: {commit()}",
        f"- model: {runs.model} (its tokenizer counts every request and reply); the sessions' largest requests, raw "
        f"at an unlimited window, add up to {sum(r.largest_request for r in references):,} tokens in its unit; "
        f"thinking setting {runs.thinking!r}: every strategy sends `thinking` "
        f"{thinking_sent(runs.model, runs.thinking) or 'not at all'}",
        f"- command: `{command.strip()}`",
        f"- sessions: {len(sessions)} ({by_source}); windows: {', '.join(f'{w:,}' for w in windows)}",
        f"- identifiers the recorded actions use (action, identifier pairs): {pairs}",
        f"- run time: {elapsed:.0f} s",
        "- prices in base-input units: input 1, cache write 1.25 (5m) / 2 (1h), cache read 0.1, output 5; "
        "usage from the offline stand-in's cache simulation",
        "- every ratio is to raw replayed at an unlimited window (same prices; breakpoints on the system prompt, "
        "the last block and where the previous request ended, as ctx_magic's), so every session counts in full",
        f"- side-call replies ({sizes.label}): summaries {sizes.analysis:,} + {sizes.summary:,} tokens (analysis + "
        f"summary), each notes section written {sizes.notes_section:,}, a memory extraction {sizes.memory:,}: "
        f"{sizes.source}; rows `{SENSITIVITY}`: summaries {p9999.analysis:,} + {p9999.summary:,} ({p9999.source})",
        *(f"- {note}" for note in notes),
        *(f"- {line}" for w, out in sorted(runs.left_out.items())
          if (line := left_out_line(w, out, len(sessions)))),
    ]
    return "\n".join(lines) + "\n"


def report(runs: Runs, overhead_of: str = "ctx_magic", per_session: int = 8, thinking: bool = False) -> str:
    """Every window's tables (after the line naming the sessions it left out), with `thinking` the
    prefix check's table, the overhead of `overhead_of` on the sessions that never near its
    threshold, then the targets."""
    tables = grouped(runs.results)
    sessions = len({r.replay for r in runs.results})
    parts: list[str] = []
    for window in sorted(tables):
        by_strategy = tables[window]
        parts.append(window_tables(window, by_strategy, left_out_line(window, runs.left_out.get(window, []), sessions))
                     + "\n")
        if thinking:
            check = ("prefix check on, an account that gets the 400" if checks_thinking_prefix(runs.model)
                     else "a model without the prefix check")
            parts.append(f"The thinking sent back to {runs.model} ({check}):\n")
            parts.append(thinking_table(by_strategy) + "\n")
        split = by_strategy.get(overhead_of)
        if split and per_session:
            quiet_here, warning = quiet_at(window, runs.model), thresholds_at(window, runs.model).warning
            quiet = overheads(split, by_strategy[REFERENCE], quiet_here)
            parts.append(f"Where {overhead_of}'s bill goes on the sessions that never near its threshold (raw's "
                         f"largest request under its warning level, {warning:,} tokens), as a "
                         f"share of raw's bill on each, the {per_session} highest:\n")
            parts.append(overhead_table(quiet, per_session, overhead_of) + "\n")
            names = [n for n in by_strategy if n == "ctx_magic" or n.startswith("ctx_magic+")]
            parts += [f"- {overhead_summary(n, overheads(by_strategy[n], by_strategy[REFERENCE], quiet_here))}"
                      for n in names]
            parts.append("")
    lines = (target_lines(tables, lambda window: quiet_at(window, runs.model))
             + (thinking_targets(tables) if thinking else []))
    if lines:
        parts += ["## Targets\n", "\n".join(lines)]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    runs, sizes = run_all(args)
    print(header(args, argv, runs, sizes, time.perf_counter() - started))
    print(report(runs, args.overhead_of, args.per_session, args.thinking))
