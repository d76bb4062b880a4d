"""The exact requests of the calibration broken down: by model family and class, by model (with its
fitted-on and held-out halves), and by the month each cassette was recorded.

The cassettes carry no date. Their month is that of the last commit that touched each file in a
clone of the repository they were copied from (pydantic-ai, at the commit the corpus names):
`python benchmarks/calibration.py --history PATH`. Without it, the month table is left out.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.calibration_corpus import Exchange
from ctx_magic.context import model_families

# The counter follows the API as it is now. Requests with tools recorded before this month were billed
# a hidden tool-use prompt about 180 tokens (auto) and 270 (any) shorter on the Claude 4.5 models; the
# month table shows where that ends. The per-model table also reports the requests recorded since.
CURRENT_PROMPT_SINCE = "2025-11"

Pairs = dict[int, tuple[int, int]]  # id(exchange) -> (predicted, real)
Row = Callable[[Sequence[tuple[int, int]]], list[str]]
Table = Callable[[str, Sequence[str], list[list[str]]], None]


def recording_months(history: Path, files: Sequence[str]) -> dict[str, str]:
    """file -> "YYYY-MM" of the last commit touching it in the clone at `history`."""
    months: dict[str, str] = {}
    for file in sorted(set(files)):
        out = subprocess.run(["git", "-C", str(history), "log", "-1", "--format=%ad", "--date=format:%Y-%m",
                              "--", file], capture_output=True, text=True, check=False)
        months[file] = out.stdout.strip() or "unknown"
    return months


def _halves(selected: Sequence[Exchange], pairs: Pairs, row: Row) -> list[str]:
    """n and share within 5 % of each half (the ratio row's first and last figures)."""
    cells: list[str] = []
    for half in (False, True):
        figures = row([pairs[id(e)] for e in selected if e.held_out == half])
        cells += [figures[0], figures[5] if figures[0] != "0" else ""]
    return cells


def _current(selected: Sequence[Exchange], months: dict[str, str], pairs: Pairs, row: Row) -> list[str]:
    """n and share within 5 % of the requests recorded since the hidden tool prompt the counter
    follows (the ratio row's first and last figures)."""
    figures = row([pairs[id(e)] for e in selected if months[e.file] >= CURRENT_PROMPT_SINCE])
    return [figures[0], figures[5] if figures[0] != "0" else ""]


def breakdown(countable: Sequence[Exchange], pairs: Pairs, row: Row, header: Sequence[str], table: Table,
              classify: Callable[[Exchange], str], history: Path | None) -> None:
    family: dict[tuple[str, str], list[Exchange]] = defaultdict(list)
    model: dict[str, list[Exchange]] = defaultdict(list)
    for e in countable:
        family[(model_families.family_of(e.request.get("model")).name, classify(e))].append(e)
        model[str(e.request.get("model"))].append(e)
    table("Exact requests by model family and class (countable classes)", ["family / class", *header],
          [[f"{f} / {c}", *row([pairs[id(e)] for e in family[(f, c)]])] for f, c in sorted(family)])
    halves = ["fitted on: n", "within 5 %", "held out: n", "within 5 %"]
    months = recording_months(history, [e.file for e in countable]) if history is not None else {}
    current = ["since " + CURRENT_PROMPT_SINCE + ": n", "within 5 %"] if months else []
    table("Exact requests by model (countable classes)", ["model", *header, *halves, *current],
          [[m, *row([pairs[id(e)] for e in model[m]]), *_halves(model[m], pairs, row),
            *(_current(model[m], months, pairs, row) if months else [])] for m in sorted(model)])
    if history is None:
        return
    by_month: dict[str, list[Exchange]] = defaultdict(list)
    month: dict[tuple[str, str], list[Exchange]] = defaultdict(list)
    for e in countable:
        by_month[months[e.file]].append(e)
        month[(months[e.file], str(e.request.get("model")))].append(e)
    table("Exact requests by recording month (countable classes, every model)", ["month", *header, *halves],
          [[mo, *row([pairs[id(e)] for e in by_month[mo]]), *_halves(by_month[mo], pairs, row)]
           for mo in sorted(by_month)])
    table("Exact requests by recording month and model (countable classes)", ["month / model", *header, *halves],
          [[f"{mo} / {m}", *row([pairs[id(e)] for e in month[(mo, m)]]), *_halves(month[(mo, m)], pairs, row)]
           for mo, m in sorted(month)])
