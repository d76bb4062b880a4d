"""prepare() at scale: a 5,001-message conversation whose tool outputs total 50 MB.

Times a full pass from a fresh ContextState, then the incremental passes an agent makes
after each turn (one new exchange, ten new exchanges) with the state the full pass returned,
with the default snip limit (200 live messages) and with snipping off. Medians of several
repetitions; the machine is shared, so read ratios rather than absolute times.

It also sets one turn's pipeline CPU against JSON-encoding the request it builds (the SDK does
that on every call anyway), at the workload's full size with snipping off.

    python benchmarks/scale.py [--exchanges 2500] [--megabytes 50] [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import functools
import json
import math
import pstats
import random
import resource
import statistics
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ctx_magic.agent.request import TurnCache, build_request
from ctx_magic.context.engine import ContextSettings, Prepared, prepare
from ctx_magic.context.state import ContextState
from ctx_magic.context.tokens import count_text
from ctx_magic.events import Snipped
from ctx_magic.messages import Message, Usage, tool_result_block, tool_use_block, user_text
from ctx_magic.settings import Settings

T = TypeVar("T")
SEED = 1234
T0 = 1_767_225_600.0  # 2026-01-01, a fixed clock: every run sees the same timestamps
EXCHANGE_SECONDS = 20.0  # one tool round trip; far below the 5-minute idle trigger
TOOLS = ("python", "bash", "read_file", "grep", "notebook_cell")
SYSTEM_TOKENS = 2_000  # system prompt and tool list billed with every request
EXCHANGE_FRAMING_TOKENS = 30  # the assistant's one-line text, the tool_use block and framing
CHAIN_TURNS = 20
NEW_OUTPUT_CHARS = 4_000  # each appended exchange: a typical cell output, fixed for comparable passes
WORDS = "alpha beta gamma delta sales region store revenue units price north south east west".split()


# -- a realistic, deterministic workload ----------------------------------------------------


def log_lines(rng: random.Random) -> str:
    step = rng.randrange(10_000)
    return (
        f"2026-01-01 12:{rng.randrange(60):02d}:{rng.randrange(60):02d},{rng.randrange(1000):03d} "
        f"{rng.choice(('INFO ', 'INFO ', 'DEBUG', 'WARN '))} [worker-{rng.randrange(8)}] epoch {step // 500} "
        f"step {step}/10000 loss={rng.random() * 3:.4f} lr={rng.random() * 1e-3:.2e} "
        f"elapsed={rng.random() * 900:.1f}s\n"
    )


def dataframe_row(rng: random.Random) -> str:
    return (
        f"{rng.randrange(100_000):>6}  {rng.choice(WORDS):<8} {rng.choice(WORDS):<8} "
        f"{rng.gauss(100, 30):>10.3f} {rng.randrange(1, 500):>5} 2025-{rng.randrange(1, 13):02d}-"
        f"{rng.randrange(1, 29):02d}  {rng.random():.6f}\n"
    )


def grep_line(rng: random.Random) -> str:
    return (
        f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{rng.randrange(40)}.py:{rng.randrange(1, 900)}:"
        f"    def {rng.choice(WORDS)}_{rng.choice(WORDS)}(self, {rng.choice(WORDS)}: int = {rng.randrange(99)}):\n"
    )


LINE_MAKERS = {"python": dataframe_row, "notebook_cell": dataframe_row, "bash": log_lines,
               "grep": grep_line, "read_file": grep_line}


def output_text(rng: random.Random, tool: str, chars: int) -> str:
    make = LINE_MAKERS[tool]
    parts: list[str] = []
    size = 0
    if make is dataframe_row:
        parts.append("    id  region   item          price units date        score\n")
    while size < chars:
        parts.append(make(rng))
        size += len(parts[-1])
    return "".join(parts)[:chars]


def output_sizes(rng: random.Random, count: int, total: int) -> list[int]:
    """Many small outputs, some medium, about 3% large (100 KB-1 MB) filling the rest of `total`."""
    kinds = [rng.choices(("small", "medium", "large"), (85, 12, 3))[0] for _ in range(count)]
    if "large" not in kinds:  # tiny workloads (smoke tests) still get one output to fill the total
        kinds[count // 2] = "large"
    ranges = {"small": (80, 4_000), "medium": (4_000, 60_000), "large": (100_000, 1_000_000)}
    sizes = [round(math.exp(rng.uniform(*map(math.log, ranges[k])))) for k in kinds]
    large = [i for i, k in enumerate(kinds) if k == "large"]
    rest = sum(s for i, s in enumerate(sizes) if kinds[i] != "large")
    scale = (total - rest) / sum(sizes[i] for i in large)
    for i in large:
        sizes[i] = round(sizes[i] * scale)
    return sizes


@dataclass(frozen=True)
class Workload:
    tools: list[str]
    outputs: list[str]
    tokens: list[int]  # the engine's own estimate of each output, so billed usage agrees with it


def make_workload(exchanges: int, megabytes: float) -> Workload:
    rng = random.Random(SEED)
    sizes = output_sizes(rng, exchanges, int(megabytes * 1_000_000))
    tools = [rng.choice(TOOLS) for _ in sizes]
    outputs = [output_text(rng, t, n) for t, n in zip(tools, sizes)]
    return Workload(tools, outputs, [count_text(o) for o in outputs])


def exchange(n: int, tool: str, output: str, prompt_tokens: int) -> list[Message]:
    """Assistant tool_use (with its API id and usage) and the user's tool_result: fresh objects."""
    when = T0 + EXCHANGE_SECONDS * (n + 1)
    use = tool_use_block(f"toolu_{n:06d}", tool, {"code": f"step_{n}()"})
    usage = Usage(input_tokens=50, output_tokens=80, cache_read_input_tokens=prompt_tokens)
    return [
        Message("assistant", ({"type": "text", "text": f"Step {n}: running {tool}."}, use),
                timestamp=when, api_id=f"msg_{n:06d}", usage=usage),
        Message("user", (tool_result_block(use["id"], output),), timestamp=when + 2),
    ]


def conversation(work: Workload, count: int | None = None) -> list[Message]:
    """The user's request then one exchange per output.

    Each response's usage bills everything before it in full (the engine's estimate of each
    output plus a 2,000-token system prompt), as if the history came from a session that never managed its context: the
    engine's own accounting (usage minus what it freed before the anchor) then lands on the real
    live size, so the layers fire as they would on a resumed session.
    """
    count = len(work.outputs) if count is None else count
    messages = [user_text("Load the 2025 sales logs, find the anomalies, and plot them.", timestamp=T0)]
    billed = SYSTEM_TOKENS
    for n in range(count):
        messages += exchange(n, work.tools[n], work.outputs[n], billed)
        billed += EXCHANGE_FRAMING_TOKENS + work.tokens[n]
    return messages


def appended(base: Prepared, first: int, count: int) -> list[Message]:
    """The prepared conversation plus `count` new exchanges billed from its live size."""
    rng = random.Random(first)
    new: list[Message] = []
    billed = base.count.tokens
    for n in range(first, first + count):
        new += exchange(n, "python", output_text(rng, "python", NEW_OUTPUT_CHARS), billed)
        billed += EXCHANGE_FRAMING_TOKENS + NEW_OUTPUT_CHARS // 4
    return [*base.messages, *new]


# -- measuring ------------------------------------------------------------------------------


def now_after(messages: Sequence[Message]) -> float:
    return messages[-1].timestamp + 10.0


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def summary(p: Prepared) -> str:
    kinds = Counter(type(e).__name__ for e in p.events if type(e).__name__ != "ContextMeasured")
    events = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "none"
    return f"{len(p.messages):,} live msgs, {p.count.tokens:,} tokens, {p.plan.zone}; events: {events}"


@dataclass
class Case:
    name: str
    full: list[float]  # seconds per full pass from a fresh state
    one: list[float]  # seconds per incremental pass, one new exchange
    ten: list[float]  # ... ten new exchanges
    turns: list[float]  # seconds per turn of a chain, each turn fed the previous turn's output
    kept_prefix: list[float]  # per chain turn: share of the previous request still its prefix
    snips: int  # Snipped events over the chain
    notes: list[str]


def run_case(name: str, settings: ContextSettings, work: Workload, repeat: int, count: int | None = None) -> Case:
    case = Case(name, [], [], [], [], [], 0, [])
    base: Prepared | None = None
    for _ in range(repeat):  # fresh Message objects each time: nothing memoized from a previous pass
        messages = conversation(work, count)
        seconds, base = timed(functools.partial(prepare, messages, ContextState(), now_after(messages), settings))
        case.full.append(seconds)
    assert base is not None
    case.notes.append("full: " + summary(base))
    first = len(work.outputs) if count is None else count
    for size, times in ((1, case.one), (10, case.ten)):
        for _ in range(repeat * 4):  # each from the same full-pass output, with fresh new messages
            messages = appended(base, first, size)
            seconds, result = timed(functools.partial(prepare, messages, base.state, now_after(messages), settings))
            times.append(seconds)
        case.notes.append(f"+{size}: " + summary(result))
    previous = base
    for turn in range(CHAIN_TURNS):  # an agent's session: every turn builds on the last one
        messages = appended(previous, first + turn, 1)
        seconds, result = timed(functools.partial(prepare, messages, previous.state, now_after(messages), settings))
        case.turns.append(seconds)
        case.kept_prefix.append(shared_prefix(previous.messages, result.messages) / len(previous.messages))
        case.snips += sum(isinstance(e, Snipped) for e in result.events)
        previous = result
    return case


def shared_prefix(before: Sequence[Message], after: Sequence[Message]) -> int:
    """Leading messages sent identically twice in a row: what the prompt cache can reuse."""
    return next((i for i, (x, y) in enumerate(zip(before, after)) if x != y), min(len(before), len(after)))


def peak_memory(settings: ContextSettings, work: Workload) -> float:
    """MB allocated at the peak of one full pass, above the conversation already in memory."""
    messages = conversation(work)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    prepare(messages, ContextState(), now_after(messages), settings)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (peak - base) / 1e6


def profile_incremental(settings: ContextSettings, work: Workload, top: int = 10) -> None:
    messages = conversation(work)
    base = prepare(messages, ContextState(), now_after(messages), settings)
    profiler = cProfile.Profile()
    for _ in range(20):
        new = appended(base, len(work.outputs), 1)
        profiler.runcall(prepare, new, base.state, now_after(new), settings)
    stats = pstats.Stats(profiler)
    print(f"\ncProfile, 20 incremental passes (+1 exchange, snip_max_messages={settings.snip_max_messages:,}, "
          f"clear_at_least={settings.clear_threshold:,}), top {top} by own time:\n")
    print("| function | calls | own ms / pass | cumulative ms / pass |\n|---|---:|---:|---:|")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    for (path, line, func), (_, calls, own, cumulative, _) in rows:
        where = f"{path.rsplit('/', 1)[-1]}:{line}({func})"
        print(f"| {where} | {calls // 20:,} | {own * 1000 / 20:.2f} | {cumulative * 1000 / 20:.2f} |")


def pipeline_against_json(settings: ContextSettings, work: Workload, repeat: int) -> tuple[int, float, float]:
    """One turn's pipeline CPU (the incremental prepare after one new exchange, then building
    the request's messages) beside what sending it costs anyway: JSON-encoding the request.
    Returns (messages, pipeline ms, json ms), medians."""
    base = prepare(conversation(work), ContextState(), T0, settings)
    pipeline, encoding = [], []
    for _ in range(repeat * 4):
        turns = TurnCache()  # as a session's request frame has it: the previous request's turns and images
        turns.turns(base.messages)
        turns.image_count(base.messages)
        messages = appended(base, len(work.outputs), 1)
        start = time.perf_counter()
        prepared = prepare(messages, base.state, now_after(messages), settings)
        request = build_request(prepared.messages, system="s", tools=[], max_tokens=1, cache_ttl="5m",
                                cached_tail=base.messages[-1].uuid, turns=turns)
        pipeline.append(time.perf_counter() - start)
        body = {"model": "m", "max_tokens": 1, "messages": request.messages}
        seconds, _ = timed(functools.partial(json.dumps, body))
        encoding.append(seconds)
    return len(messages), statistics.median(pipeline) * 1000, statistics.median(encoding) * 1000


def ms(values: Sequence[float]) -> str:
    return f"{statistics.median(values) * 1000:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=2_500)
    parser.add_argument("--megabytes", type=float, default=50.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile the incremental passes")
    args = parser.parse_args()

    seconds, work = timed(functools.partial(make_workload, args.exchanges, args.megabytes))
    sizes = sorted(len(o) for o in work.outputs)
    print(f"workload: {1 + 2 * len(sizes):,} messages, {sum(sizes) / 1e6:.1f} MB of tool output in "
          f"{len(sizes):,} results (median {statistics.median(sizes):,} chars, "
          f"{sum(s >= 100_000 for s in sizes)} of 100 KB-{sizes[-1] / 1e6:.2f} MB); built in {seconds:.1f} s")

    default = ContextSettings.create(200_000, 32_000, env={})
    no_snip = ContextSettings.create(200_000, 32_000, Settings(snip_max_messages=10**9), env={})
    cases = [run_case("default (snip at 200)", default, work, args.repeat),
             run_case("snip off", no_snip, work, args.repeat)]
    peaks = [f"{peak_memory(s, work):,.1f}" for s in (default, no_snip)]
    for count in (args.exchanges // 4, args.exchanges // 2):
        cases.append(run_case(f"snip off, {1 + 2 * count:,} msgs", no_snip, work, max(2, args.repeat // 2), count))
    # Below the warning level nothing is cleared and every older result stays a candidate.
    no_clear = dataclasses.replace(no_snip, clear_at_least=10**12)
    cases.append(run_case("snip off, pressure clearing off", no_clear, work, max(2, args.repeat // 2)))

    print("\n| case | full ms | +1 exchange ms | +10 exchanges ms | full / +1 | +10 / +1 | chain turn ms "
          "| prefix kept % | snips in chain | peak MB (full) |")
    print("|---|" + "---:|" * 9)
    for i, case in enumerate(cases):
        full, one, ten = (statistics.median(v) for v in (case.full, case.one, case.ten))
        print(f"| {case.name} | {ms(case.full)} | {ms(case.one)} | {ms(case.ten)} | {full / one:,.0f} | "
              f"{ten / one:.1f} | {ms(case.turns)} | {100 * statistics.median(case.kept_prefix):.1f} | "
              f"{case.snips}/{CHAIN_TURNS} | {peaks[i] if i < len(peaks) else '-'} |")
    holds = ContextSettings.create(20_000_000, 32_000, Settings(snip_max_messages=10**9), env={})
    print("\n| per-turn pipeline (prepare after one new exchange + the request) | messages | pipeline ms "
          "| JSON-encoding ms | pipeline / JSON |\n|---|---:|---:|---:|---:|")
    for label, settings in (("a window that holds the workload (20M), snip off", holds),
                            ("200,000 window, snip off: far past the blocking limit, results sized every turn",
                             no_snip)):
        count, pipeline, encoding = pipeline_against_json(settings, work, max(2, args.repeat // 2))
        print(f"| {label} | {count:,} | {pipeline:,.1f} | {encoding:,.1f} | {100 * pipeline / encoding:.1f} % |")
    print(f"\nprocess max RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    for case in cases:
        print(f"\n{case.name}:\n  " + "\n  ".join(case.notes))
    if args.profile:
        profile_incremental(default, work)
        profile_incremental(no_snip, work)
        profile_incremental(no_clear, work)


if __name__ == "__main__":
    main()
