"""What a background run costs in context, against running the same code in the foreground.

A run prints a line a second for a minute: sixty lines of a training log. Each variant is one
session of eight turns through the notebook layer in this process (an IPython shell with
ctx_magic loaded, the offline stand-in behind the real anthropic SDK, counting as the API does);
the run is paced line by line and its board is on a manual clock, so nothing waits on the
wall clock and every run of the script prints the same figures.

- baseline: the same eight turns without the run;
- foreground: the first turn runs the code and waits the minute; its output is one tool result;
- background, never read: the first turn starts a background run; six turns follow during the
  minute (one every ten lines) and the eighth after it, where the agent hears one line that it ended;
- background, read at the end: the same, and the eighth turn reads the whole log once;
- background, read at each turn: each of the six turns during the minute reads what is new.

For each: the model calls, the prompt tokens of all their requests together and their excess over
the baseline (what the run added to the requests over that minute and the turns after it), the
excess of the last request (what every later request carries), and the tokens the `task` tool and
the `background` parameter add to every request (the same in every variant, cached after the first).

    python benchmarks/background.py [--lines 60] [--every 10]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clock import ManualClock  # a sibling module: these scripts run as files (python benchmarks/...)
from shells import let_go, new_shell

TRAINING = """for second in range({lines}):
    pace.acquire()
    print(f"step {{second * 10:4d}}/600  loss {{2.5 * 0.97 ** second:.4f}}  acc {{1 - 0.9 * 0.96 ** second:.3f}}  "
          f"lr 3.0e-04  312 samples/s", flush=True)
    printed.release()"""
QUESTIONS = ("While that runs: which columns does the sales table have?", "And how many rows?",
             "Which region is largest?", "What is the mean order value?", "Any missing values?",
             "What date range does it cover?")
FINAL = "How did the training end?"
READ_AT_END = "background, read at the end"
READ_EACH = "background, read at each turn"
VARIANTS = ("baseline", "foreground", "background, never read", READ_AT_END, READ_EACH)


@dataclass(frozen=True)
class Figures:
    variant: str
    calls: int
    total: int
    last: int


def _shell(folder: Path) -> Any:
    os.chdir(folder)
    shell = new_shell(rich=False)
    for line in ("load_ext ctx_magic", "config CtxMagic.permission = 'auto'", "config CtxMagic.idle_timer = False",
                 "config CtxMagic.user_memory_dir = '.user-data'"):
        name, _, rest = line.partition(" ")
        shell.run_line_magic(name, rest)
    return shell


def _agent(shell: Any, text: str) -> None:
    from IPython.utils.capture import capture_output

    with capture_output(display=True):
        shell.run_cell(f"%%agent\n{text}", store_history=True)


def run_variant(variant: str, lines: int, every: int) -> tuple[Figures, int]:
    """One session of the variant in a folder of its own: its figures and the tools' overhead."""
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        try:
            return _session(Path(folder), variant, lines, every)
        finally:
            os.chdir(home)


def _session(folder: Path, variant: str, lines: int, every: int) -> tuple[Figures, int]:
    from ctx_magic.notebook.extension import controller_of

    shell = _shell(folder)
    controller = controller_of(shell)
    clock = ManualClock()
    controller.runs.clock = controller.clock = clock
    background = variant.startswith("background")
    pace = threading.Semaphore(0 if background else lines)  # the foreground run prints its minute at once
    printed = threading.Semaphore(0)
    shell.user_ns.update(pace=pace, printed=printed)
    fence = {"baseline": "", "foreground": "```python\n"}.get(variant, "```python background\n")
    code = f"\n\n{fence}{TRAINING.format(lines=lines)}\n```" if fence else ""
    _agent(shell, "Train the model." + code)
    for question in QUESTIONS[: lines // every]:
        if background:
            pace.release(every)
            for _ in range(every):
                printed.acquire(timeout=60)
        clock.advance(every)
        _agent(shell, question + ("\n\ntask read t1" if variant == READ_EACH else ""))
    if background:
        next(iter(controller.runs.runs.values())).done.wait(60)
    clock.advance(every)
    _agent(shell, FINAL + ("\n\ntask read t1" if variant == READ_AT_END else ""))
    stand_in = controller.host.backend.stand_in
    sizes = [r.input_tokens or 0 for r in stand_in.requests if r.path == "/v1/messages" and r.kind == "normal"]
    overhead = _tool_overhead(controller)
    shell.run_line_magic("unload_ext", "ctx_magic")
    let_go(shell)
    return Figures(variant, len(sizes), sum(sizes), sizes[-1]), overhead


def _tool_overhead(controller: Any) -> int:
    """Tokens the `task` tool and the `background` parameter add to every request (the API's count)."""
    from ctx_magic.agent.tools import PYTHON_TOOL
    from ctx_magic.notebook.executor import KERNEL_PYTHON_TOOL, TASK_TOOL

    client = controller.host.backend.client
    model = controller.settings.model
    messages = [{"role": "user", "content": "hello"}]

    def count(tools: list[dict[str, Any]]) -> int:
        return client.messages.count_tokens(model=model, messages=messages, tools=tools).input_tokens

    return count([KERNEL_PYTHON_TOOL, TASK_TOOL]) - count([PYTHON_TOOL])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=60, help="lines the run prints, one a second")
    parser.add_argument("--every", type=int, default=10, help="seconds between the agent's turns during the run")
    parser.add_argument("--json", action="store_true", help="the figures as JSON too")
    args = parser.parse_args()
    os.environ.pop("ANTHROPIC_API_KEY", None)
    os.environ.pop("ANTHROPIC_AUTH_TOKEN", None)
    os.environ.pop("ANTHROPIC_BASE_URL", None)
    results = [run_variant(variant, args.lines, args.every) for variant in VARIANTS]
    base = results[0][0]
    minutes = args.lines / 60
    turns = 2 + min(len(QUESTIONS), args.lines // args.every)
    print(f"A run printing {args.lines} lines, one a second ({minutes:.3g} min); {turns} turns, one every "
          f"{args.every} s during the run; tokens as the stand-in counts them.\n")
    print("| variant | model calls | prompt tokens, all requests | added by the run | added per minute of run "
          "| added to the last request (carried by every later one) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for figures, _overhead in results:
        added = figures.total - base.total
        carried = figures.last - base.last
        rows.append({"variant": figures.variant, "calls": figures.calls, "total": figures.total, "added": added,
                     "added_per_minute": round(added / minutes), "carried": carried})
        print(f"| {figures.variant} | {figures.calls} | {figures.total:,} | {added:,} | {round(added / minutes):,} "
              f"| {carried:,} |")
    overhead = results[0][1]
    print(f"\nThe task tool and the python tool's `background` parameter: {overhead:,} tokens in every request "
          "(all variants alike; read from the prompt cache after the first).")
    if args.json:
        print(json.dumps({"rows": rows, "tool_overhead": overhead}, indent=1))


if __name__ == "__main__":
    main()
