"""Per-run figures: what one strategy's replay of one session cost, and what it kept.

Fidelity is read two ways. Along the way: for every recorded action, the share of the
identifiers it uses (from earlier results) that its request still held (identifiers.py). At the
end, on the last main request the API answered: a user message counts as kept when its text is
there verbatim (live, or quoted inside a summary or notes text); a tool output counts as intact
when its whole text is there.

Every bill is divided by `raw` replayed at an unlimited window (REFERENCE): the same prices,
the same breakpoints as ctx_magic's, and every session counted in full.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.replay.billing import MODEL, Call, ScriptedPolicy, action_uses, new_bench
from benchmarks.replay.corpus import Replay
from benchmarks.replay.harness import ReplayDesync, text_of
from benchmarks.replay.identifiers import NOT_SERVED
from benchmarks.replay.side_output import STAND_IN, ReplySizes
from benchmarks.replay.strategies import FLOOR, strategy

REFERENCE = "raw, unlimited window"
UNLIMITED_WINDOW = 100_000_000  # no session comes near it: raw finishes every one
SIZES_MARK = "@"  # `cc-default@p99.99`: a strategy with other side-call reply lengths
TAIL_OUTPUTS = 5  # the last tool outputs that should still be intact at the end
SUMMARY_KINDS = ("auto", "session-memory", "reactive", "manual", "model")  # compactions (a summary replaces)
REWRITE_KINDS = ("clear", "fold", "snip", "persist")  # zero-call rewrites of the context


@dataclass
class RunResult:
    strategy: str
    replay: str
    source: str
    window: int
    calls: list[Call]
    overflow: bool = False
    error: str | None = None
    events: Counter[str] = field(default_factory=Counter)
    users_kept: int = 0
    users: int = 0
    tail_kept: int = 0
    tail: int = 0
    seconds: float = 0.0
    largest_request: int = 0
    """Prompt tokens of the largest request the API answered."""
    ids_kept: int = 0
    ids_used: int = 0
    """Identifiers the recorded actions use (from earlier results) and how many their requests held."""
    thinking_cleared: Counter[str] = field(default_factory=Counter)
    """Thinking the client took out of messages it still sends (blocks, tokens)."""
    ids_lost: Counter[str] = field(default_factory=Counter)
    """The pairs not kept, by where they went (identifiers.LOSSES)."""

    @property
    def refused_thinking(self) -> int:
        """Requests the prefix check refused."""
        return sum(c.refused_thinking for c in self.calls)

    def thinking_dropped(self) -> tuple[int, int]:
        """(blocks, tokens) of thinking the API dropped from requests (drop_block), each block once
        however many requests it was dropped from."""
        dropped = dict(d for c in self.calls for d in c.thinking_dropped)
        return len(dropped), sum(dropped.values())

    @property
    def cost(self) -> float:
        return sum(c.cost for c in self.calls)

    @property
    def side_cost(self) -> float:
        return sum(c.cost for c in self.calls if c.side)

    def side_calls(self) -> Counter[str]:
        return Counter(c.kind for c in self.calls if c.side and c.status == 200)

    def side_cost_by_kind(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for c in self.calls:
            if c.side:
                out[c.kind] += c.cost
        return out


def request_text(request: Mapping[str, Any] | None) -> str:
    """Every text of a request's messages (text blocks, tool results and the summary a compaction
    block holds), one string."""
    parts: list[str] = []
    for message in (request or {}).get("messages", []):
        content = message.get("content", [])
        if isinstance(content, str):
            parts.append(content)
            continue
        for block in content:
            if block.get("type") == "text":
                parts.append(block.get("text", ""))
            elif block.get("type") == "tool_result":
                parts.append(text_of(block.get("content", "")))
            elif block.get("type") == "compaction":
                parts.append(str(block.get("content") or ""))
    return "\n\x00\n".join(parts)


def fidelity(replay: Replay, request: Mapping[str, Any] | None) -> tuple[int, int, int, int]:
    """(user messages kept, user messages, last outputs intact, last outputs) in a final request."""
    sent = request_text(request)
    users = [t for t in replay.user_texts() if t.strip()]
    tail = [text_of(o) for o in replay.outputs()[-TAIL_OUTPUTS:]]
    return sum(t in sent for t in users), len(users), sum(t in sent for t in tail), len(tail)


def _unserved(policy: ScriptedPolicy, replay: Replay) -> int:
    """The pairs of the recorded actions a run never got to (an overflow came first)."""
    return sum(len(u) for u in action_uses(replay)[len(policy.identifiers):])


def identifiers_of(policy: ScriptedPolicy, replay: Replay) -> tuple[int, int]:
    """(kept, used) over every recorded action: those never served (an overflow) keep none."""
    kept = sum(k for k, _ in policy.identifiers[:replay.steps])
    used = sum(u for _, u in policy.identifiers[:replay.steps])
    return kept, used + _unserved(policy, replay)


def identifiers_lost(policy: ScriptedPolicy, replay: Replay) -> Counter[str]:
    """The pairs not kept, by where they went: those of actions never served are NOT_SERVED."""
    return policy.sightings.lost + Counter({NOT_SERVED: _unserved(policy, replay)})


def run_one(name: str, replay: Replay, window: int, sizes: ReplySizes = STAND_IN, *,
            model: str = MODEL, thinking: str = "auto") -> RunResult:
    """Replay `replay` with strategy `name` (`base@label`: the base strategy, with side-call
    replies sized by `sizes`) at `window` on `model`, billing every call."""
    bench = new_bench(replay, window, sizes, model=model, thinking=thinking)
    started = time.perf_counter()
    outcome = strategy(name.split(SIZES_MARK)[0])(bench)
    seconds = time.perf_counter() - started
    if not outcome.overflow and bench.policy.served != replay.steps:
        raise ReplayDesync(f"{name} on {replay.name}: {bench.policy.served} recorded actions served, "
                           f"{replay.steps} recorded")
    kept, users, intact, tail = fidelity(replay, bench.meter.final_request)
    largest = max((c.prompt_tokens for c in bench.meter.calls if c.status == 200), default=0)
    ids_kept, ids_used = identifiers_of(bench.policy, replay)
    return RunResult(name, replay.name, replay.source, window, list(bench.meter.calls), outcome.overflow,
                     outcome.error, outcome.events, kept, users, intact, tail, seconds, largest, ids_kept, ids_used,
                     outcome.thinking_cleared, identifiers_lost(bench.policy, replay))


def reference_run(replay: Replay, sizes: ReplySizes = STAND_IN, *, model: str = MODEL,
                  thinking: str = "auto") -> RunResult:
    """`raw` at an unlimited window on `model`: what every bill is divided by."""
    run = run_one("raw", replay, UNLIMITED_WINDOW, sizes, model=model, thinking=thinking)
    if run.overflow:
        raise ReplayDesync(f"raw overflowed {replay.name} at an unlimited window: {run.error}")
    return dataclasses.replace(run, strategy=REFERENCE)


def floor_calls(calls: Sequence[Call]) -> list[Call]:
    """Raw's requests billed as if every new token were written once and all else read.

    Each raw request extends the one before it, so request i holds P(i-1) tokens already sent
    (read at 0.1) and P(i) - P(i-1) new ones (written at 1.25); outputs as billed.
    """
    out: list[Call] = []
    previous = 0
    for call in calls:
        if call.status != 200:
            continue
        prompt = call.prompt_tokens
        new = max(0, prompt - previous)
        out.append(Call(call.kind, call.status, call.at, 0, new, 0, prompt - new, call.output_tokens))
        previous = prompt
    return out


def floor_of(raw: RunResult) -> RunResult:
    """The floor for raw's run (same requests, same overflow: it sends nothing itself)."""
    return RunResult(FLOOR, raw.replay, raw.source, raw.window, floor_calls(raw.calls), raw.overflow, raw.error,
                     Counter(), raw.users_kept, raw.users, raw.tail_kept, raw.tail, 0.0, raw.largest_request,
                     raw.ids_kept, raw.ids_used)
