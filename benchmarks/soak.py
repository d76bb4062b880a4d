"""A seeded soak (no dead ends): a long notebook session under faults, at small windows.

`python -m benchmarks.soak` runs one plan of notebook steps at each window (and, with `--units`,
under each token unit the stand-in can count in: calibrated like the real API, or on purpose 30 %
more, 20 % less or noisily, so that the client's estimate disagrees with the server), against
the offline stand-in over HTTP with a random fault on a share of the model calls: %%agent turns (some run
code), user cells whose outputs go from 10 characters to 200 KB, %compact, %compact --snip and
kernel kills followed by `%agent --resume`. It then prints, per window:

- requests: calls to /v1/messages (and count_tokens);
- API-rule violations: requests the stand-in refused for a broken rule (a 400 or 413 no fault
  was injected for, and not for length);
- over the window: requests refused because input (+ max_tokens) did not fit, and how many of
  them the step did not recover from (its cell ended in an error);
- failed steps: cells that showed an error (injected faults make some; 401 always does);
- failed from broken streams: turns that met a connection dropped or reset mid-reply (and no
  other fault) and still failed, out of the turns that met one: each is asked again, so the
  target is 0;
- dead ends: failed steps after which the next clean turn (one that met no fault) failed too, or
  no turn worked again; tracebacks shown in a cell;
- recoverable: the share of the user's messages and of every tool output (user cells, code the
  agent ran) whose full text the session's transcript and its files still hold.

The plan, the outputs and the fault draws are seeded; side calls run in the background, so two
runs can differ in which call meets which fault. `--kernel` drives real ipykernels instead of the
notebook layer in this process (slow on 2 cores: use it with few steps, as the test suite does).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import math
import random
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.soak_drivers import Driver, InProcess, RealKernel, Shown
from ctx_magic.messages import result_text
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.counting import UNITS
from ctx_magic.offline.faults import SURVIVABLE_FAULTS
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.offline.thinking import PRESERVED_THINKING_MODELS
from ctx_magic.settings import Settings
from ctx_magic.store.session import SessionDir

STEPS = 160
SEED = 11
WINDOWS = (12_000, 30_000)
FAULT_RATE = 0.10
MIN_OUTPUT, MAX_OUTPUT = 10, 200_000  # characters a cell prints, drawn log-uniformly between
BROKEN_STREAM_FAULTS = frozenset({"drop", "reset"})  # the connection closed or reset mid-reply: always asked again
STEP_WEIGHTS = {"ask": 20, "run": 25, "cell": 35, "compact": 6, "snip": 6, "restart": 8}
TURNS = ("ask", "run")
WORDS = ("sensor", "pressure", "valve", "north", "batch", "drift", "mean", "outlier", "reading", "calibrated")
SETUP = ["%load_ext ctx_magic", "%config CtxMagic.permission = 'auto'", "%config CtxMagic.idle_timer = False",
         "%config CtxMagic.user_memory_dir = '.user-memory'"]


@dataclass(frozen=True)
class Step:
    kind: str
    number: int
    size: int = 0
    keep: int = 0

    @property
    def source(self) -> str:
        if self.kind == "ask":
            return f"%%agent\n{self.prompt}"
        if self.kind == "run":
            return f"%%agent\n{self.prompt}\n```python\n{output_code(self)}\n```"
        if self.kind == "cell":
            return output_code(self)
        if self.kind == "compact":
            return "%compact"
        if self.kind == "snip":
            return f"%compact --snip {self.keep}"
        raise ValueError(self.kind)

    @property
    def prompt(self) -> str:
        if self.kind == "run":
            return f"Step {self.number}: run this and tell me what stands out."
        return f"Step {self.number}: what have we learned so far about batch {self.number % 7}?"


def plan(seed: int, steps: int) -> list[Step]:
    """The steps, drawn from `seed`: a turn first (a session must exist before anything else)."""
    dice = random.Random(seed)
    kinds, weights = zip(*STEP_WEIGHTS.items())
    out = [Step("ask", 0)]
    for number in range(1, steps):
        kind = dice.choices(kinds, weights)[0]
        size = round(math.exp(dice.uniform(math.log(MIN_OUTPUT), math.log(MAX_OUTPUT))))
        out.append(Step(kind, number, size=size if kind in ("run", "cell") else 0, keep=dice.randint(2, 10)))
    return out


def output_code(step: Step) -> str:
    """A cell whose printed output is `step.size` characters of tables, JSON or log lines, made by
    a seeded generator (so the soak knows every character the cell printed)."""
    style = ("table", "json", "words")[step.number % 3]
    rows = step.size // 12 + 2
    line = {
        "table": "f'{i:6d} | {g.random():.4f} | {g.randint(0, 10**6):7d} | unit-{g.randint(1, 99)}'",
        "json": "json.dumps({'id': i, 'v': round(g.random(), 4), 'tag': g.choice('abcdef') * 3})",
        "words": f"' '.join(g.choice({WORDS!r}) for _ in range(g.randint(3, 12)))",
    }[style]
    return (f"import json, random\ng = random.Random({step.number})\n"
            f"text = '\\n'.join({line} for i in range({rows}))\n"
            f"print('== out-{step.number} ==\\n' + text[:{max(0, step.size - 30)}] + '\\n== end-{step.number} ==')")


def printed(step: Step) -> str:
    """What the step's code prints, worked out here by running the same code."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(output_code(step), {})  # noqa: S102 - our own generated code
    return buffer.getvalue().rstrip("\n")


@dataclass
class Outcome:
    step: Step
    shown: Shown
    first: int  # index of the first request the step made in the server's log
    last: int


@dataclass
class Report:
    window: int
    unit: str = "calibrated"
    model: str = ""
    refused_thinking: int = 0
    """Requests the prefix check refused (a thinking block sent back after a change of its prefix)."""
    thinking_dropped: int = 0
    """Thinking blocks the API dropped (drop_block) or let through unchecked (an old account)."""
    requests: int = 0
    count_requests: int = 0
    violations: int = 0
    over_window: int = 0
    over_unrecovered: int = 0
    failed: list[str] = field(default_factory=list)
    dead_ends: int = 0
    tracebacks: int = 0
    faults: int = 0
    broken: tuple[int, int] = (0, 0)
    """(failed, met): turns that met only broken-stream faults, and how many of them failed."""
    prompts: tuple[int, int] = (0, 0)
    outputs: tuple[int, int] = (0, 0)
    final_ok: bool = False
    steps: int = 0
    restarts: int = 0

    @staticmethod
    def share(found: tuple[int, int]) -> str:
        return f"{100 * found[0] / found[1]:.1f}% ({found[0]}/{found[1]})" if found[1] else "n/a"


@contextlib.contextmanager
def stand_in(window: int, seed: int, rate: float, unit: str = "calibrated",
             faults: tuple[str, ...] | None = None) -> Iterator[tuple[OfflineAPI, dict[str, str]]]:
    api = OfflineAPI(OfflineConfig(window=window, unit=unit))
    api.random_faults(rate, seed, faults)
    with serve_in_thread(api) as (url, _stop):
        yield api, {"ANTHROPIC_API_KEY": "sk-soak", "ANTHROPIC_BASE_URL": url}


def soak(window: int, *, seed: int = SEED, steps: int = STEPS, rate: float = FAULT_RATE, kernel: bool = False,
         folder: Path | None = None, unit: str = "calibrated", faults: tuple[str, ...] | None = None,
         model: str = "") -> Report:
    """Run the plan at one window on `model` (the default one if empty), the stand-in counting in
    `unit` and drawing from `faults` (every survivable one by default); the figures of the report."""
    folder = folder or Path(tempfile.mkdtemp(prefix=f"soak-{window}-"))
    setup = [*SETUP, f"%config CtxMagic.context_window = {window}",
             *([f"%config CtxMagic.model = {model!r}"] if model else [])]
    with stand_in(window, seed, rate, unit, faults) as (api, env):
        driver: Driver = (RealKernel if kernel else InProcess)(folder, env, setup)
        try:
            outcomes, sid = _run_plan(driver, api, plan(seed, steps))
            api.random_faults(0, seed)  # the last word: does the session still work?
            start = len(api.requests)
            last = Step("ask", steps)
            final = Outcome(last, driver.run(last.source), start, len(api.requests))
            driver.settle()
        finally:
            driver.close()
        report = measure(api, window, outcomes, final)
    report.unit, report.model = unit, model or Settings().model
    report.prompts, report.outputs = recoverable(folder / ".ctx_magic", sid, [*outcomes, final])
    return report


def _run_plan(driver: Driver, api: OfflineAPI, steps: list[Step]) -> tuple[list[Outcome], str]:
    outcomes: list[Outcome] = []
    sid = ""
    for step in steps:
        start = len(api.requests)
        if step.kind == "restart":
            driver.kill()
            shown = driver.run(f"%agent --resume {sid}")
        else:
            shown = driver.run(step.source)
        driver.settle()
        outcomes.append(Outcome(step, shown, start, len(api.requests)))
        sid = sid or driver.session_id()
    return outcomes, sid


def measure(api: OfflineAPI, window: int, outcomes: list[Outcome], final: Outcome) -> Report:
    records = api.requests
    report = Report(window, steps=len(outcomes), restarts=sum(o.step.kind == "restart" for o in outcomes))
    calls = [r for r in records if r.path == "/v1/messages"]
    report.requests = len(calls)
    report.count_requests = sum(r.path == "/v1/messages/count_tokens" for r in records)
    report.faults = sum(r.fault is not None for r in calls)
    failed_at: set[int] = set()
    for n, outcome in enumerate(outcomes):
        if outcome.shown.errors or outcome.shown.traceback:
            failed_at.add(n)
            report.failed.append(f"{outcome.step.kind}: {(outcome.shown.errors or ['traceback'])[0][:160]}")
        report.tracebacks += outcome.shown.traceback
    for index, record in enumerate(records):
        if record.fault is not None or record.status not in (400, 413) or record.path != "/v1/messages":
            continue
        if any(m.get("type") == "thinking_refused" for m in record.thinking_mismatches):
            report.refused_thinking += 1
        tokens = (record.input_tokens or 0) + int((record.body or {}).get("max_tokens") or 0)
        if tokens > window:
            report.over_window += 1
            owner = next((n for n, o in enumerate(outcomes) if o.first <= index < o.last), None)
            report.over_unrecovered += owner in failed_at
        else:
            report.violations += 1
    report.thinking_dropped = sum(1 for r in calls for m in r.thinking_mismatches
                                  if m.get("type") in ("thinking_dropped", "thinking_mismatch_allowed"))
    report.broken = _broken_streams(outcomes, records, failed_at)
    report.final_ok = not (final.shown.errors or final.shown.traceback)
    report.dead_ends = sum(_dead_end(n, outcomes, records, report.final_ok) for n in sorted(failed_at))
    return report


def _broken_streams(outcomes: list[Outcome], records: list, failed_at: set[int]) -> tuple[int, int]:
    """(failed, met) over the turns whose only faults were connections dropped or reset mid-reply."""
    met = [n for n, o in enumerate(outcomes) if o.step.kind in TURNS
           and (faults := {r.fault for r in records[o.first:o.last] if r.fault}) and faults <= BROKEN_STREAM_FAULTS]
    return sum(n in failed_at for n in met), len(met)


def _dead_end(n: int, outcomes: list[Outcome], records: list, final_ok: bool) -> bool:
    """A failed step is a dead end when the next turn that met no fault failed too (or, with no
    such turn left in the plan, the final check did)."""
    for later in outcomes[n + 1:]:
        if later.step.kind not in TURNS or any(r.fault for r in records[later.first:later.last]):
            continue
        return bool(later.shown.errors or later.shown.traceback)
    return not final_ok


def recoverable(storage: Path, sid: str, outcomes: list[Outcome]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(found, expected) for the user's messages and for every tool output, by full text."""
    store = SessionDir(storage, sid)
    parts: list[str] = []
    for message in store.load_transcript().messages():
        for block in message.content:
            parts.append(result_text(block) if block.get("type") == "tool_result" else str(block.get("text", "")))
    for path in sorted(store.root.rglob("*.txt")):
        parts.append(path.read_text(encoding="utf-8", errors="replace"))
    blob = "\n\0\n".join(parts)
    prompts = [o.step.prompt for o in outcomes if o.step.kind in TURNS]
    outputs = [printed(o.step) for o in outcomes
               if o.step.kind == "cell" or (o.step.kind == "run" and f"== out-{o.step.number} ==" in o.shown.text)]
    return (sum(p in blob for p in prompts), len(prompts)), (sum(o in blob for o in outputs), len(outputs))


def table(reports: list[Report]) -> str:
    head = ("| model | unit | window | steps (restarts) | requests (count_tokens) | faults injected | "
            "API-rule violations | over the window (unrecovered) | refused by the prefix check | "
            "thinking dropped by the API | failed steps | failed from broken streams | dead ends | tracebacks | "
            "user messages recoverable | tool outputs recoverable | final turn |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in reports:
        rows.append(f"| {r.model} | {r.unit} | {r.window:,} | {r.steps} ({r.restarts}) | "
                    f"{r.requests} ({r.count_requests}) | {r.faults} | {r.violations} | "
                    f"{r.over_window} ({r.over_unrecovered}) | {r.refused_thinking} | {r.thinking_dropped} | "
                    f"{len(r.failed)} | {r.broken[0]} of {r.broken[1]} | {r.dead_ends} | "
                    f"{r.tracebacks} | {Report.share(r.prompts)} | {Report.share(r.outputs)} | "
                    f"{'works' if r.final_ok else 'FAILS'} |")
    return "\n".join(rows)


def models_arg(text: str) -> list[str]:
    """`--models`: model ids, comma-separated; 'preserved-thinking' stands for all such models."""
    return list(PRESERVED_THINKING_MODELS) if text == "preserved-thinking" else [m for m in text.split(",") if m]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    parser.add_argument("--fault-rate", type=float, default=FAULT_RATE)
    parser.add_argument("--units", nargs="+", choices=list(UNITS), default=["calibrated"],
                        help="how the stand-in counts tokens: each unit is a run of the plan at each window")
    parser.add_argument("--faults", nargs="+", choices=list(SURVIVABLE_FAULTS), default=None,
                        help="the faults drawn from (default: every one a session must survive)")
    parser.add_argument("--models", type=models_arg, default=[""],
                        help="comma-separated model ids, or 'preserved-thinking' for every model that checks the "
                             "prefix of the thinking sent back (default: the default model)")
    parser.add_argument("--kernel", action="store_true", help="drive real ipykernels (slow)")
    parser.add_argument("--failures", action="store_true", help="list each failed step's first error line")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=here).stdout.strip()
    faults = tuple(args.faults) if args.faults else None
    reports = [soak(w, seed=args.seed, steps=args.steps, rate=args.fault_rate, kernel=args.kernel, unit=unit,
                    faults=faults, model=model) for model in args.models for unit in args.units for w in args.windows]
    print(f"soak: {args.steps} steps, seed {args.seed}, faults ({', '.join(faults or ('all survivable',))}) on "
          f"{args.fault_rate:.0%} of model calls, "
          f"{'real kernels' if args.kernel else 'in-process shell'}; {datetime.date.today()}, commit {commit}\n")
    print(table(reports))
    if args.failures:
        for report in reports:
            print(f"\nfailed steps at {report.window:,} ({report.model}, {report.unit}):")
            for line in report.failed:
                print(f"- {line}")


if __name__ == "__main__":
    main()
