"""`python -m benchmarks.digest OUT.jsonl [replay options]`: every model call of the replay benchmark,
to the token, as JSON lines, so that two builds can be compared call by call (`cmp a.jsonl b.jsonl`).

A plain replay is not repeatable to the token: message ids are random, the coverage audit quotes
them as refs in the summaries it extends, and a ref's length in tokens varies by one or two; and
the session notes' side call runs in a thread, so which ids it draws depends on timing. Here each
run draws its ids from a generator seeded with the run's name, and the notes' side call runs to
its end where it starts. Nothing else changes: the figures are those the benchmark's tables sum.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

_ids = {"rng": random.Random(0)}
uuid.uuid4 = lambda: uuid.UUID(int=_ids["rng"].getrandbits(128), version=4)
_start = threading.Thread.start


def _start_in_order(thread: threading.Thread) -> None:
    _start(thread)
    if thread.name == "ctx-magic-session-notes":
        thread.join()  # to its end before the turn goes on: ids are drawn in one order


threading.Thread.start = _start_in_order  # type: ignore[method-assign]

from benchmarks.replay import cli  # noqa: E402 - after the ids are made repeatable

_run_one = cli.run_one


def _seeded_run(name: str, replay: Any, window: int, *sizes: Any, **model: Any) -> Any:
    _ids["rng"] = random.Random(f"{name}/{replay.name}/{window}")
    return _run_one(name, replay, window, *sizes, **model)


def main(argv: list[str]) -> None:
    out, args = Path(argv[0]), cli.parse_args(argv[1:])
    cli.run_one = _seeded_run
    with out.open("w", encoding="utf-8") as lines:
        runs, _ = cli.run_all(args)
        for run in runs.results:
            calls = [[c.kind, c.status, c.input_tokens, c.write_5m, c.write_1h, c.read, c.output_tokens, c.rule,
                      c.extends, c.images] for c in run.calls]
            figures = {"strategy": run.strategy, "replay": run.replay, "window": run.window, "overflow": run.overflow,
                       "error": run.error, "events": dict(sorted(run.events.items())), "users_kept": run.users_kept,
                       "tail_kept": run.tail_kept, "calls": calls}
            lines.write(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
