"""Prompt-cache use over a long session: the real anthropic SDK against the offline server.

A scripted 50-turn session (`run_turn` on a `Session`, `AnthropicModel` on an in-process SDK
client bound to an `OfflineAPI`; the server's prompt-cache simulation and the session share
one manual clock). Each turn asks for fenced python whose output size follows a seeded plan:
small, then medium, then large outputs, one of them over the tool-result budget's 50,000-character limit; one
10-minute pause midway lets the idle microcompact fire. Prints the cache figures per turn,
then checks that the prefix of each main-loop request is kept by the next one except where a
context event (clearing of results or thinking, snip, compaction) explains the break. Ends with what the session cost
in dollars (at the model's list prices) and what its context changes saved; `--strategy server`
runs the same session with the API's own context editing and compaction instead of ctx_magic's.

    python benchmarks/cache.py [--turns 50] [--seed 7] [--window 60000] [--snip-max-messages 200]
                               [--strategy client|server] [--storage DIR]
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clock import ManualClock  # a sibling module: these scripts run as files (python benchmarks/...)

from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import AnthropicModel, ModelReply, ModelRequest
from ctx_magic.agent.session import Session, open_session
from ctx_magic.agent.tools import LocalExecutor
from ctx_magic.events import (
    Cleared,
    Compacted,
    CompactionFailedEvent,
    Event,
    Persisted,
    ServerCompacted,
    ServerEdited,
    Snipped,
    ThinkingCleared,
)
from ctx_magic.messages import Usage
from ctx_magic.offline.app import OfflineAPI, OfflineConfig, RecordedRequest
from ctx_magic.offline.transport import offline_client
from ctx_magic.prices import format_usd
from ctx_magic.settings import DEFAULTS, ModelLimits, Settings

THINK_SECONDS = (20.0, 90.0)  # the user reads the answer and types the next request
CALL_SECONDS = 4.0  # one model call, streamed
CACHE_TTL_SECONDS = 300.0  # the default "5m" prompt-cache lifetime the session asks for
IDLE_SECONDS = 600.0  # a coffee break: twice the 5-minute cache TTL, so the idle trigger fires
HUGE_CHARS = 80_000  # one output over the budget's 50,000-character limit: persisted to disk
# Output sizes (characters) by phase of the session: exploring, analysing, dumping results.
PHASES = ((0.5, 1_000, 12_000), (0.7, 2_000, 24_000), (1.0, 20_000, 45_000))
# events that rewrite what was sent (thinking clearing: an idle gap, an edit or a compaction drops thinking blocks)
CHANGES = (Cleared, ThinkingCleared, Snipped, Compacted, ServerEdited, ServerCompacted)




@dataclass(frozen=True)
class Call:
    turn: int
    purpose: str  # main | compact
    usage: Usage
    at: float  # clock time the call was made
    after_change: bool  # a clearing, snip or compaction happened since the previous call


@dataclass
class RecordingModel:
    """The session's Model (the SDK-backed one) and event listener: every call and context event,
    tagged with the turn and the number of calls made before it."""

    inner: AnthropicModel
    clock: ManualClock
    name: str = DEFAULTS.model
    provider: str = "anthropic"
    backend: str = "anthropic"
    turn: int = 0
    calls: list[Call] = field(default_factory=list)
    events: list[tuple[int, int, Event]] = field(default_factory=list)  # (turn, calls before, event)
    changed: bool = False  # a CHANGES event since the last call

    def limits(self) -> ModelLimits:
        return self.inner.limits()

    def count_tokens(self, request: ModelRequest) -> int:
        return self.inner.count_tokens(request)

    def stream(self, request: ModelRequest, on_text: Callable[[str], None] | None = None, *,
               on_thinking: Callable[[str], None] | None = None) -> ModelReply:
        usage = Usage()  # a refused call (e.g. prompt too long) bills nothing
        try:
            reply = self.inner.stream(request, on_text, on_thinking=on_thinking)
            usage = reply.usage
        finally:
            self.calls.append(Call(self.turn, request.purpose, usage, self.clock(), self.changed))
            self.changed = False
            self.clock.advance(CALL_SECONDS)
        return reply

    def on_event(self, event: Event) -> None:
        if isinstance(event, (Persisted, *CHANGES, CompactionFailedEvent)):
            self.events.append((self.turn, len(self.calls), event))
            self.changed = self.changed or isinstance(event, CHANGES)


# -- the workload ----------------------------------------------------------------------------


def output_plan(turns: int, rng: random.Random) -> list[int]:
    """Characters each turn's code prints: log-uniform within its phase, one huge output."""
    sizes: list[int] = []
    for n in range(turns):
        _, low, high = next(p for p in PHASES if n / turns < p[0])
        sizes.append(round(math.exp(rng.uniform(math.log(low), math.log(high)))))
    sizes[turns // 4] = HUGE_CHARS
    return sizes


def prompt(n: int, chars: int) -> str:
    """A user request with a python block printing `chars` characters of a dataframe-like table."""
    return (
        f"Turn {n}: show me batch {n} of the sales table.\n"
        "```python\n"
        "import random\n"
        f"rng = random.Random({n})\n"
        "words = 'north south east west store region units price'.split()\n"
        f"rows = [f'{{i:>6}} {{rng.choice(words):<8}} {{rng.gauss(100, 30):>10.3f}} {{rng.randrange(500):>5}}'"
        f" for i in range({chars // 30 + 1})]\n"
        f"print('\\n'.join(rows)[:{chars}])\n"
        "```"
    )


@dataclass
class Run:
    recorder: RecordingModel
    requests: list[RecordedRequest]  # every /v1/messages request, in call order
    session: Session
    sizes: list[int]  # characters each turn's code printed
    turn_errors: list[str | None]


def run_session(turns: int, seed: int, window: int, config: Settings, storage: Path) -> Run:
    """The scripted session. Paths and the session id end up in prompts (persisted-output blocks,
    summaries): keep them fixed so that token counts repeat from run to run."""
    clock = ManualClock()
    api = OfflineAPI(OfflineConfig(window=window), clock=clock)
    recorder = RecordingModel(AnthropicModel(offline_client(api, max_retries=0), name=DEFAULTS.model), clock)
    session, _ = open_session(recorder, LocalExecutor(), storage / ".ctx_magic", config, session_id="bench-cache",
                              root=storage, clock=clock)
    session.listeners.append(recorder.on_event)
    rng = random.Random(seed)
    sizes = output_plan(turns, rng)
    idle_turn = turns // 2
    errors: list[str | None] = []
    for n in range(turns):
        clock.advance(IDLE_SECONDS if n == idle_turn and n else rng.uniform(*THINK_SECONDS))
        recorder.turn = n
        errors.append(run_turn(session, prompt(n, sizes[n])).error)
    session.recorder.close()
    requests = [r for r in api.requests if r.path == "/v1/messages"]
    assert len(requests) == len(recorder.calls), "one recorded request per model call"
    return Run(recorder, requests, session, sizes, errors)


# -- figures ---------------------------------------------------------------------------------


def pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def describe(events: Sequence[Event]) -> str:
    parts: list[str] = []
    for e in events:
        if isinstance(e, Persisted):
            parts.append(f"persisted ({e.original_chars:,} chars)")
        elif isinstance(e, Cleared):
            parts.append(f"cleared {e.trigger} ({len(e.replacements)} results, {e.tokens_freed:,} tok)")
        elif isinstance(e, ThinkingCleared):
            parts.append(f"thinking cleared {e.trigger} ({e.blocks} blocks, {e.tokens_freed:,} tok)")
        elif isinstance(e, Compacted):
            parts.append(f"compacted {e.trigger} ({e.tokens_before:,} -> {e.tokens_after:,} tok)")
        elif isinstance(e, Snipped):
            parts.append(f"snipped ({e.count} msgs)")
        elif isinstance(e, CompactionFailedEvent):
            parts.append(f"compaction failed ({e.reason})")
        elif isinstance(e, ServerEdited):
            parts.append(f"server cleared ({e.tokens_cleared:,} tok)")
        elif isinstance(e, ServerCompacted):
            parts.append(f"server compacted ({e.tokens_before:,} -> {e.tokens_after:,} tok)")
    return "; ".join(parts)


def without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


@dataclass(frozen=True)
class Transition:
    before: int  # index of the previous main-loop request among all model calls
    after: int  # the next main-loop request (or a compaction call)
    kept: int  # leading messages of the previous request sent unchanged
    total: int  # messages in the previous request
    same_head: bool  # tools and system unchanged

    @property
    def whole(self) -> bool:
        return self.same_head and self.kept == self.total


def transitions(requests: Sequence[RecordedRequest], kind: str = "normal") -> list[Transition]:
    """From each main-loop request to the next request of `kind`: how much of it the next one starts with."""
    out: list[Transition] = []
    previous: int | None = None
    for i, request in enumerate(requests):
        if request.status != 200:
            continue  # refused: nothing was cached or answered
        if previous is not None and request.kind == kind:
            a, b = (without_cache_control(requests[j].body) for j in (previous, i))
            ma, mb = a["messages"], b["messages"]
            kept = next((k for k, (x, y) in enumerate(zip(ma, mb)) if x != y), min(len(ma), len(mb)))
            head = a.get("system") == b.get("system") and a.get("tools") == b.get("tools")
            out.append(Transition(previous, i, kept, len(ma), head))
        previous = i if request.kind == "normal" else previous
    return out


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, text_last: bool = True) -> None:
    """A Markdown table: the first column (and the last, when it is text) left-aligned, numbers right."""
    last = len(header) - 1 if text_last else len(header)
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---:" if 0 < i < last else "---" for i in range(len(header))) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def share(calls: Sequence[Call]) -> str:
    read = sum(c.usage.cache_read_input_tokens for c in calls)
    whole = sum(c.usage.prompt_tokens for c in calls)
    return f"{pct(read, whole):.1f} % of {whole:,} prompt tokens ({len(calls)} calls)"


def per_turn(run: Run, steps: Sequence[Transition]) -> None:
    rec = run.recorder
    rows: list[list[str]] = []
    for n, chars in enumerate(run.sizes):
        calls = [c for c in rec.calls if c.turn == n]
        main = sum(c.purpose == "main" for c in calls)
        prompt_tok = sum(c.usage.prompt_tokens for c in calls)
        read = sum(c.usage.cache_read_input_tokens for c in calls)
        mine = [s for s in steps if rec.calls[s.after].turn == n]
        events = describe([e for t, _, e in rec.events if t == n]) or "-"
        rows.append([str(n), f"{chars:,}", f"{main}+{len(calls) - main}", f"{prompt_tok:,}", f"{read:,}",
                     f"{sum(c.usage.cache_creation_input_tokens for c in calls):,}", f"{pct(read, prompt_tok):.1f}",
                     f"{sum(s.whole for s in mine)}/{len(mine)}", events])
    table(["turn", "output chars", "calls (main+compact)", "prompt tok", "cache read", "cache write", "read %",
           "prefix kept", "context events"], rows)
    steady = [c for c in rec.calls if not c.after_change]
    print(f"\ncache-read share, all calls: {share(rec.calls)}")
    print(f"without the {len(rec.calls) - len(steady)} calls right after a clearing, snip or compaction: "
          f"{share(steady)}")
    print(f"first call (cold cache): {share(rec.calls[:1])}; compaction calls: "
          f"{share([c for c in rec.calls if c.purpose != 'main'])}")
    errors = [f"turn {n}: {e}" for n, e in enumerate(run.turn_errors) if e]
    refused = [f"call {i} ({r.kind}, turn {rec.calls[i].turn}): {r.status}" for i, r in enumerate(run.requests)
               if r.status != 200]
    print("turn errors: " + ("; ".join(errors) or "none") + "; refused calls: " + ("; ".join(refused) or "none"))


def prefix_stability(run: Run, steps: Sequence[Transition]) -> None:
    """Every transition that lost part of the previous request, and the context event behind it."""
    rec = run.recorder
    causes: dict[str, int] = {}
    unexplained = 0
    rows: list[list[str]] = []
    for s in (s for s in steps if not s.whole):
        found = [e for _, before, e in rec.events if s.before < before <= s.after and isinstance(e, CHANGES)]
        for e in found:
            trigger = e.trigger if isinstance(e, (Cleared, ThinkingCleared, Compacted)) else None
            name = type(e).__name__.lower() + (f" {trigger}" if trigger else "")
            causes[name] = causes.get(name, 0) + 1
        unexplained += not found
        rows.append([str(rec.calls[s.after].turn), f"{s.before} -> {s.after}", f"{s.kept} of {s.total}",
                     "yes" if s.same_head else "no", describe(found) or "**none**"])
    print()
    table(["turn", "calls", "messages kept", "system+tools kept", "explaining event"], rows)
    whole = [s for s in steps if s.whole]
    partial = [s for s in whole
               if rec.calls[s.after].usage.cache_read_input_tokens != rec.calls[s.before].usage.prompt_tokens]
    expired = sum(rec.calls[s.after].at - rec.calls[s.before].at > CACHE_TTL_SECONDS for s in partial)
    print(f"\n{len(whole)} of {len(steps)} transitions kept the whole previous request as prefix; every break "
          "coincides with: " + (", ".join(f"{k} ({v})" for k, v in sorted(causes.items())) or "-")
          + (f"; {unexplained} break(s) have NO explaining event" if unexplained else ""))
    print(f"{len(whole) - len(partial)} of {len(whole)} of those read the whole previous request from the cache"
          + (f"; of the {len(partial)} others, {expired} came after the 5-minute cache lifetime" if partial else ""))
    print("\ncompaction calls against the main request before them:\n")
    table(["turn", "call", "messages kept", "cache read", "prompt tok", "previous request tok"],
          [[str(rec.calls[s.after].turn), str(s.after), f"{s.kept} of {s.total}",
            f"{rec.calls[s.after].usage.cache_read_input_tokens:,}", f"{rec.calls[s.after].usage.prompt_tokens:,}",
            f"{rec.calls[s.before].usage.prompt_tokens:,}"] for s in transitions(run.requests, "compaction")],
          text_last=False)


def detector(session: Session) -> None:
    """What the session's own cache-break detector reported over the run."""
    breaks = session.meter.breaks
    reasons: dict[str, int] = {}
    for b in breaks:
        reasons[b.reason] = reasons.get(b.reason, 0) + 1
    print(f"\nthe session's cache-break detector flagged {len(breaks)} break(s)"
          + (": " + ", ".join(f"{k} ({v})" for k, v in sorted(reasons.items())) if breaks else "")
          + f"; {sum(not b.expected for b in breaks)} unexplained")


def cost(run: Run, strategy: str) -> None:
    """What the session cost at the model's list prices, and what its context changes saved."""
    status = run.session.status()
    usage = status.usage
    saved = ", ".join(f"{k} {format_usd(v)}" for k, v in sorted(usage.saved_usd.items()) if v) or "-"
    print()
    table(["strategy", "model calls", "prompt tokens", "read from cache", "dollars", "saved (at least)", "by"],
          [[strategy, f"{usage.calls}", f"{sum(c.usage.prompt_tokens for c in run.recorder.calls):,}",
            f"{pct(usage.cache_read_input_tokens, sum(c.usage.prompt_tokens for c in run.recorder.calls)):.1f} %",
            format_usd(usage.cost_usd), format_usd(usage.saved_total_usd), saved]])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--window", type=int, default=60_000)
    parser.add_argument("--snip-max-messages", type=int, default=200)
    parser.add_argument("--strategy", choices=("client", "server"), default="client")
    parser.add_argument("--storage", type=Path, default=Path(tempfile.gettempdir()) / "ctx_magic-bench-cache",
                        help="session folder, emptied first and removed after (a fixed path: see run_session)")
    args = parser.parse_args()
    config = Settings(snip_max_messages=args.snip_max_messages, strategy=args.strategy)
    storage: Path = args.storage
    shutil.rmtree(storage, ignore_errors=True)
    try:
        run = run_session(args.turns, args.seed, args.window, config, storage)
        th = run.session.setup().context.thresholds
        print(f"{args.turns} turns, seed {args.seed}, window {th.window:,}: warning {th.warning:,}, autocompact "
              f"{th.autocompact:,}; snip at {args.snip_max_messages} messages\n")
        steps = transitions(run.requests)
        per_turn(run, steps)
        prefix_stability(run, steps)
        detector(run.session)
        cost(run, args.strategy)
    finally:
        shutil.rmtree(storage, ignore_errors=True)


if __name__ == "__main__":
    main()
