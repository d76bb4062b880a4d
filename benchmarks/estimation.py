"""How close is the context-size estimate (anchored count plus local estimate) to what the API reported?

Replays real conversations, and before each response k > 0 predicts the size of the request
that produced it (usage.prompt_tokens) from the messages before it with `count_context`:
the previous response's usage (the anchor, exact) plus the local estimate of what came after
it (the delta). Three ratios: the fixed 4/3 padding used before the count was calibrated, none
`Correction` (reset per conversation, fed each response's true delta).

    python benchmarks/estimation.py [--corpus DIR] [--sweep]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

if __package__ in (None, ""):  # run as a script: the repository root on the path, like `-m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.corpus_location import corpus_path, readable  # noqa: E402
from benchmarks.replay.corpus import claude_code_paths, swe_paths  # noqa: E402
from ctx_magic.context.tokens import STARTING_RATIO, Correction, count_context, count_text, message_tokens  # noqa: E402
from ctx_magic.messages import Kind, Message, Usage, text_block  # noqa: E402

DEFAULT_CORPUS = corpus_path()
MIN_DELTA = Correction.MIN_SAMPLE_TOKENS  # deltas below this are framing noise (as observe() says)


@dataclass(frozen=True)
class Conversation:
    messages: list[Message]
    starts: list[int]  # index of each response's first message: messages[:i] is its request
    overhead: int = 0  # system prompt tokens: counted by the engine only before any anchor


@dataclass(frozen=True)
class Point:
    actual: int  # the response's usage.prompt_tokens (input + cache creation + cache read)
    predicted: int  # count_context(...).tokens
    anchor: int  # tokens taken from the anchoring usage
    estimated: int  # unpadded local estimate of the messages after the anchor

    @property
    def delta_actual(self) -> int:  # the true size of what was estimated
        return self.actual - self.anchor

    @property
    def delta_predicted(self) -> int:  # the padded estimate of it
        return self.predicted - self.anchor


# -- loading ---------------------------------------------------------------------------------


def load_claude_code(path: Path, *, send_meta: bool = True, fill_output: bool = False) -> Conversation:
    """The request thread of a Claude Code JSONL: one Message per user/assistant record.

    Kept: ancestors (parentUuid) of the last assistant record, plus tool_result records whose
    tool_use is on that thread (parallel results hang off their own tool_use, not the chain).
    This drops abandoned branches (an interrupted queued prompt). `isMeta` user records (the
    local-command caveat, expanded slash-command prompts) are hidden from the UI but sent to
    the model, which answers them, so they count as sent unless `send_meta` is False.
    `fill_output` replaces each response's streaming-placeholder output_tokens by the local
    estimate of all its records (what a final usage would hold, roughly).
    """
    records = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    parents = {r["uuid"]: r.get("parentUuid") for r in records if r.get("uuid")}
    last = next(r for r in reversed(records) if r.get("type") == "assistant")
    thread: set[str] = set()
    cursor: str | None = last["uuid"]
    while cursor and cursor not in thread:
        thread.add(cursor)
        cursor = parents.get(cursor)
    messages: list[Message] = []
    starts: list[int] = []
    responses: set[str] = set()
    for r in records:
        if r.get("type") not in ("user", "assistant"):
            continue  # system, summary, progress, queue-operation, snapshots: never sent
        if r["uuid"] not in thread and r.get("sourceToolAssistantUUID") not in thread:
            continue
        body = r["message"]
        content = body["content"]
        blocks = (text_block(content),) if isinstance(content, str) else tuple(dict(b) for b in content)
        if r["type"] == "user":
            kind: Kind = "meta" if r.get("isMeta") and not send_meta else "normal"
            messages.append(Message("user", blocks, kind=kind))
            continue
        if body["id"] not in responses:  # one response spans several records sharing its id
            responses.add(body["id"])
            starts.append(len(messages))
        # output_tokens here is the streaming start value (1-8): the anchor lacks the output.
        messages.append(Message("assistant", blocks, api_id=body["id"], usage=Usage.from_json(body["usage"])))
    if fill_output:
        for i in starts:
            usage = messages[i].usage
            assert usage is not None
            output = sum(message_tokens(m) for m in messages[i:] if m.api_id == messages[i].api_id)
            messages[i] = dataclasses.replace(messages[i], usage=dataclasses.replace(usage, output_tokens=output))
    return Conversation(messages, starts)


def load_mini_swe(path: Path, *, resend_reasoning: bool = True) -> Conversation:
    """A mini-swe-agent trajectory; the system prompt becomes `overhead_tokens`.

    ctx_magic passes its own system prompt the same way. Gemini's completion_tokens include
    reasoning tokens that are not sent back; `resend_reasoning=False` leaves them out of the
    anchor (output_tokens = completion - reasoning) to show what that costs.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    messages: list[Message] = []
    starts: list[int] = []
    overhead = 0
    for m in data["messages"]:
        if m["role"] == "system":
            overhead += count_text(m["content"])
        elif m["role"] == "user":
            messages.append(Message("user", (text_block(m["content"]),)))
        else:
            response = m["extra"]["response"]
            usage = response["usage"]
            output = usage["completion_tokens"]
            if not resend_reasoning:
                output -= (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
            starts.append(len(messages))
            tokens = Usage(input_tokens=usage["prompt_tokens"], output_tokens=output)
            messages.append(Message("assistant", (text_block(m["content"]),), api_id=response["id"], usage=tokens))
    return Conversation(messages, starts, overhead)


# -- replay ----------------------------------------------------------------------------------


class Learner(Protocol):  # what replay needs of a correction (Correction fits)
    @property
    def ratio(self) -> float: ...

    def observe(self, estimated: int, actual: int) -> Learner: ...


def replay(conv: Conversation, start: Learner, *, learn: bool) -> tuple[list[Point], Point, float]:
    """Predictions for responses 1.. (anchored), the first request's (unanchored), final ratio.

    The learner observes only anchored predictions: before the first response the prompt
    holds an overhead the CC logs do not show (system prompt and tools, ~18,000 tokens).
    """
    corr = start
    points: list[Point] = []
    for start_index in conv.starts:
        usage = conv.messages[start_index].usage
        assert usage is not None
        count = count_context(
            conv.messages[:start_index], overhead_tokens=conv.overhead, correction=Correction(corr.ratio)
        )
        points.append(Point(usage.prompt_tokens, count.tokens, count.anchor_tokens, count.estimated_tokens))
        if learn and count.anchor_index >= 0:
            corr = corr.observe(estimated=count.estimated_tokens, actual=points[-1].delta_actual)
    return points[1:], points[0], corr.ratio


SEED_PADDING = 4 / 3  # the fixed padding the estimate used before it was calibrated, for comparison
VARIANTS: dict[str, tuple[Learner, bool]] = {
    "4/3 padding": (Correction(SEED_PADDING, 1), False),
    "no padding": (Correction(), False),
    "learned": (Correction(), True),
}


# Candidate learners for --sweep (same inputs as Correction.observe; not engine code).
@dataclass(frozen=True)
class Ema:
    """Correction's rule with other constants, times a safety margin once something is learned."""

    smoothing: float
    margin: float = 1.0
    learned: float = STARTING_RATIO
    observations: int = 0

    @property
    def ratio(self) -> float:
        return self.learned * self.margin if self.observations else self.learned

    def observe(self, estimated: int, actual: int) -> Ema:
        if estimated < Correction.MIN_SAMPLE_TOKENS or actual <= 0:
            return self
        sample = min(max(actual / estimated, Correction.BOUNDS[0]), Correction.BOUNDS[1])
        mixed = sample if not self.observations else (1 - self.smoothing) * self.learned + self.smoothing * sample
        return dataclasses.replace(self, learned=mixed, observations=self.observations + 1)


@dataclass(frozen=True)
class Sums:
    """Ratio of summed actual to summed estimated deltas: big deltas weigh more than small ones."""

    margin: float = 1.0
    estimated: int = 0
    actual: int = 0

    @property
    def ratio(self) -> float:
        return self.actual / self.estimated * self.margin if self.estimated else STARTING_RATIO

    def observe(self, estimated: int, actual: int) -> Sums:
        if estimated < Correction.MIN_SAMPLE_TOKENS or actual <= 0:
            return self
        return dataclasses.replace(self, estimated=self.estimated + estimated, actual=self.actual + actual)


SWEEP: dict[str, tuple[Learner, bool]] = {
    "engine (decayed sums, prior)": (Correction(), True),
    "EMA 0.1": (Ema(0.1), True),
    "EMA 0.5": (Ema(0.5), True),
    "EMA 0.3 x1.1": (Ema(0.3, 1.1), True),
    "ratio of sums": (Sums(), True),
    "ratio of sums x1.1": (Sums(1.1), True),
}


# -- figures ---------------------------------------------------------------------------------


def pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else math.nan


def request_row(points: Sequence[Point]) -> list[str]:
    if not points:  # a corpus without this kind of conversation
        return ["0", *["-"] * (len(REQUEST_HEADER) - 1)]
    errors = [p.predicted - p.actual for p in points]
    ape = [abs(pct(e, p.actual)) for e, p in zip(errors, points)]
    signed = [pct(e, p.actual) for e, p in zip(errors, points)]
    return [f"{len(points):,}", f"{statistics.median(ape):.2f}", f"{quantile(ape, 0.9):.2f}",
            f"{quantile([abs(e) for e in errors], 0.9):,.0f}", f"{statistics.fmean(signed):+.2f}",
            f"{pct(sum(e < 0 for e in errors), len(errors)):.0f}"]


def delta_row(points: Sequence[Point], least: int = MIN_DELTA) -> list[str]:
    big = [p for p in points if p.delta_actual >= least]
    if not big:
        return ["0", *["-"] * (len(DELTA_HEADER) - 1)]
    errors = [p.delta_predicted - p.delta_actual for p in big]
    ape = [abs(pct(e, p.delta_actual)) for e, p in zip(errors, big)]
    signed = [pct(e, p.delta_actual) for e, p in zip(errors, big)]
    ratio = [p.delta_actual / p.estimated for p in big if p.estimated]
    return [f"{len(big):,}", f"{statistics.median(p.delta_actual for p in big):,.0f}",
            f"{statistics.median(ape):.1f}", f"{quantile(ape, 0.9):.1f}", f"{statistics.fmean(signed):+.1f}",
            f"{pct(sum(e < 0 for e in errors), len(errors)):.0f}", f"{statistics.median(ratio):.3f}"]


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def evaluate(
    corpora: dict[str, list[Conversation]], variants: dict[str, tuple[Learner, bool]]
) -> dict[tuple[str, str], list[Point]]:
    results: dict[tuple[str, str], list[Point]] = {}
    for name, convs in corpora.items():
        for variant, (corr, learn) in variants.items():
            results[name, variant] = [p for c in convs for p in replay(c, corr, learn=learn)[0]]
    for variant in variants:
        results["overall", variant] = [p for name in corpora for p in results[name, variant]]
    return results


REQUEST_HEADER = ["n", "MdAPE %", "p90 APE %", "p90 abs err tok", "mean signed %", "under %"]
LARGE_DELTA = 2_000  # a big cell output or tool result since the last response: where padding matters
DELTA_HEADER = ["n", "median delta tok", "MdAPE %", "p90 APE %", "mean signed %",
                "under %", "true ratio"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--sweep", action="store_true", help="also compare candidate learners")
    args = parser.parse_args()
    # Claude Code sessions and their subagents, and trajectories: those of their kind (others said and left out)
    read_cc = {p: c for p in claude_code_paths(args.corpus) if (c := readable(load_claude_code, p)) is not None}
    read_swe = {p: c for p in swe_paths(args.corpus) if (c := readable(load_mini_swe, p)) is not None}
    if not read_cc and not read_swe:
        sys.exit(f"No Claude Code sessions or mini-swe-agent trajectories under {args.corpus}.")
    cc, swe = list(read_cc), list(read_swe)
    corpora = {"claude-code": list(read_cc.values()), "mini-swe-gemini3": list(read_swe.values())}
    print(f"conversations: claude-code {len(cc)}, mini-swe-gemini3 {len(swe)}")
    results = evaluate(corpora, VARIANTS)
    names = [*corpora, "overall"]
    rows = [(n, v) for n in names for v in VARIANTS]
    table("Whole request (anchor + padded delta) vs reported prompt tokens", ["corpus", "padding", *REQUEST_HEADER],
          [[n, v, *request_row(results[n, v])] for n, v in rows])
    table(f"Estimated part alone (delta since the anchor, >= {MIN_DELTA} tokens)", ["corpus", "padding", *DELTA_HEADER],
          [[n, v, *delta_row(results[n, v])] for n, v in rows])
    table(f"Large deltas only (>= {LARGE_DELTA:,} tokens)", ["corpus", "padding", *DELTA_HEADER],
          [[n, v, *delta_row(results[n, v], LARGE_DELTA)] for n, v in rows if results[n, v]
           and any(p.delta_actual >= LARGE_DELTA for p in results[n, v])])

    ends = {n: [replay(c, Correction(), learn=True)[2] for c in convs] for n, convs in corpora.items()}
    firsts = [replay(c, Correction(1.0, 1), learn=False)[1] for c in corpora["mini-swe-gemini3"]]
    first_ratio = [p.actual / p.predicted for p in firsts]
    print("\nlearned ratio at session end, median: " + ", ".join(
        f"{n} {statistics.median(r):.3f}" for n, r in ends.items() if r))
    if first_ratio:
        print(f"mini-swe first request (no anchor, system prompt as overhead): actual / unpadded estimate "
              f"median {statistics.median(first_ratio):.3f} (p10 {quantile(first_ratio, 0.1):.3f}, "
              f"p90 {quantile(first_ratio, 0.9):.3f}, n={len(first_ratio)})")

    alt = {
        "claude-code, isMeta not sent": [load_claude_code(p, send_meta=False) for p in cc],
        "claude-code, output_tokens filled": [load_claude_code(p, fill_output=True) for p in cc],
        "mini-swe, reasoning not in anchor": [load_mini_swe(p, resend_reasoning=False) for p in swe],
    }
    alt_results = evaluate(alt, VARIANTS)
    table("Sensitivity to the data choices (whole request)", ["data choice", "padding", *REQUEST_HEADER],
          [[n, v, *request_row(alt_results[n, v])] for n in alt for v in VARIANTS])
    if args.sweep:
        swept = evaluate(corpora, SWEEP)
        table("Candidate learners: whole request", ["corpus", "learner", *REQUEST_HEADER],
              [[n, v, *request_row(swept[n, v])] for n in corpora for v in SWEEP])
        table("Candidate learners: delta", ["corpus", "learner", *DELTA_HEADER],
              [[n, v, *delta_row(swept[n, v])] for n in corpora for v in SWEEP])


if __name__ == "__main__":
    main()
