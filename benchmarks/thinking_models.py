"""Every model that checks the prefix of the thinking sent back, with default settings on a new
account (a failed check is a 400): a 30-turn notebook session and the soak on each, one table.

`python -m benchmarks.thinking_models` runs, per model, through the notebook layer in this process
against the offline stand-in over HTTP:

- the session: 30 `%%agent` turns at a 20,000-token window, most running code that prints a few
  thousand characters, with cells of the user's own, `%memory add`, `%pin`, an idle break past the
  cache's lifetime and `%compact` (no faults);
- the soak (benchmarks/soak.py) at its windows, with its faults.

For each: requests, requests the prefix check refused, dead ends (a failed step after which the
next clean turn failed too), thinking blocks the API dropped or let through unchecked (it drops only
on ctx_magic's request, after a refusal), and the lines in which ctx_magic said it cleared thinking.
The target is 0 refused, 0 dead ends, 0 blocks dropped.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.clock import ManualClock
from benchmarks.soak import SETUP, Outcome, Report, Step, measure, models_arg, soak
from benchmarks.soak_drivers import InProcess
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.offline.thinking import PRESERVED_THINKING_MODELS

SESSION_WINDOW = 20_000  # a small window: the session reaches clearing and compaction
SESSION_TURNS = 30
IDLE_SECONDS = 10 * 60  # past the 5-minute cache lifetime: the idle rules fire
SAID = re.compile(r"Cleared \d+ thinking blocks?")


def code_turn(n: int, rows: int) -> str:
    return (f"%%agent\nPart {n}: list the rows and tell me what stands out.\n```python\n"
            f"print('\\n'.join(f'row {{i}}: {{i * {n}}}' for i in range({rows})))\n```")


def session_plan() -> list[tuple[str, str]]:
    """(kind, source) for the session's cells: 'turn' for `%%agent`, 'idle' for a break, 'cell' else."""
    steps: list[tuple[str, str]] = [("cell", "data = list(range(5000))\nprint(sum(data))")]
    for n in range(SESSION_TURNS):
        steps.append(("turn", code_turn(n, 150 + 25 * (n % 5)) if n % 4 else
                      f"%%agent\nWhat have we learned so far about part {max(0, n - 1)}?"))
        extra = {2: "%memory add The sensor ids start at 100.", 4: "%pin Always give temperatures in kelvin.",
                 9: "print(sorted(data)[-5:])", 21: "%compact", 25: "print(len(data))"}.get(n)
        if extra:
            steps.append(("cell", extra))
        if n == 14:
            steps.append(("idle", ""))
    return steps


@dataclass
class SessionReport:
    report: Report
    said: int
    """Lines in which ctx_magic said it cleared thinking (an idle gap, an edit, a compaction)."""
    models: frozenset[str]
    """The models the requests named."""


def session(model: str, thinking: str = "auto") -> SessionReport:
    """The 30-turn session on `model` with the `thinking` setting, every figure of the soak's
    report and the lines said."""
    clock = ManualClock()
    api = OfflineAPI(OfflineConfig(window=SESSION_WINDOW, account="new"), clock=clock)
    setup = [*SETUP, f"%config CtxMagic.context_window = {SESSION_WINDOW}", f"%config CtxMagic.model = {model!r}",
             f"%config CtxMagic.thinking = {thinking!r}"]
    outcomes: list[Outcome] = []
    with serve_in_thread(api) as (url, _stop), tempfile.TemporaryDirectory(prefix="thinking-models-") as folder:
        driver = InProcess(Path(folder), {"ANTHROPIC_API_KEY": "sk-session", "ANTHROPIC_BASE_URL": url}, setup)
        try:
            driver._controller().clock = clock
            for number, (kind, source) in enumerate(session_plan()):
                if kind == "idle":
                    clock.advance(IDLE_SECONDS)
                    continue
                start = len(api.requests)
                shown = driver.run(source)
                driver.settle()
                outcomes.append(Outcome(Step("ask" if kind == "turn" else "cell", number), shown, start,
                                        len(api.requests)))
            start = len(api.requests)
            final = Outcome(Step("ask", len(outcomes)), driver.run("%%agent\nSum up the session."), start,
                            len(api.requests))
            driver.settle()
        finally:
            driver.close()
    report = measure(api, SESSION_WINDOW, outcomes, final)
    report.model = model
    said = sum(len(SAID.findall(o.shown.text)) for o in [*outcomes, final])
    return SessionReport(report, said, frozenset(str(q.body.get("model")) for q in api.requests if q.body))


def table(rows: list[tuple[SessionReport, list[Report]]]) -> str:
    head = ("| model | session: requests · refused · dead ends · thinking dropped by the API · clearings said · "
            "failed steps | "
            "soak: requests · refused · dead ends · thinking dropped by the API · failed steps |")
    out = [head, "|---|---|---|"]
    for said, soaks in rows:
        r = said.report
        soaked = " / ".join(f"{s.requests} · {s.refused_thinking} · {s.dead_ends} · {s.thinking_dropped} · "
                            f"{len(s.failed)}" for s in soaks)
        out.append(f"| {r.model} | {r.requests} · {r.refused_thinking} · {r.dead_ends} · {r.thinking_dropped} · "
                   f"{said.said} · {len(r.failed)} | {soaked} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=models_arg, default=list(PRESERVED_THINKING_MODELS),
                        help="comma-separated model ids (default: every model with preserved thinking)")
    parser.add_argument("--soak-steps", type=int, default=160, help="the soak's steps per window (0: no soak)")
    parser.add_argument("--soak-windows", type=int, nargs="+", default=[12_000, 30_000])
    parser.add_argument("--think", default="auto", choices=("auto", "off", "adaptive"),
                        help="the session's `thinking` setting (default auto; the soak keeps the default)")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=here).stdout.strip()
    rows = []
    for model in args.models:
        soaks = [soak(w, steps=args.soak_steps, model=model) for w in args.soak_windows] if args.soak_steps else []
        rows.append((session(model, args.think), soaks))
    windows = " / ".join(f"{w:,}" for w in args.soak_windows)
    settings = "default settings" if args.think == "auto" else f"thinking {args.think!r} in the session"
    print(f"models with preserved thinking, {settings}, a new account; session {SESSION_TURNS} turns at "
          f"{SESSION_WINDOW:,}; soak {args.soak_steps} steps at {windows}; {datetime.date.today()}, commit {commit}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
