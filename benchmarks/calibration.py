"""How close is the token count to the real Claude API's? Measured on recorded real traffic.

Three checks over `claude-api-real/` in the shared corpus (benchmarks/calibration_corpus.py):

1. Exact requests (pydantic-ai's cassettes): the stand-in's count of each request body the real
   API answered, against the API's own figure (input + cache creation + cache read tokens), by
   class and for the half of the files the counter was fitted on against the held-out half.
   Also: how many of those requests the stand-in accepts, and whether it refuses the ones the
   API refused.
2. Claude Code deltas (spotter, claude-code-viewer, sniffly): response by response, the
   client's estimate of what was added since the previous response against the real change in
   the prompt, by the kind of content added.
3. Cache split: for the cassettes that mark cache breakpoints, the stand-in's prompt cache
   replaying each cassette's requests in order; for consecutive Claude Code responses, the
   split a prefix cache predicts (the previous prompt read, the rest written, within the
   lifetime the response's usage shows) against the real read and write figures.

    python benchmarks/calibration.py [--corpus DIR] [--only exact|deltas|cache] [--history PYDANTIC_AI_CLONE]

Text is counted with Claude's tokenizer (ctok) where it is installed; CTX_MAGIC_TOKEN_COUNTER=o200k
measures the fallback instead.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path, like `-m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calibration_corpus import Exchange, Session, load_exchanges, load_sessions  # noqa: E402
from benchmarks.calibration_models import breakdown  # noqa: E402
from benchmarks.corpus_location import corpus_missing, corpus_path  # noqa: E402
from ctx_magic.context import api_count, block_count, model_families  # noqa: E402
from ctx_magic.context.tokens import Correction, estimate_family  # noqa: E402
from ctx_magic.messages import Message  # noqa: E402
from ctx_magic.offline.cache import PromptCache, minimum_cacheable_tokens  # noqa: E402
from ctx_magic.offline.counting import input_tokens, request_segments  # noqa: E402
from ctx_magic.offline.messages_endpoint import parse_request  # noqa: E402

WITHIN = 0.05  # the bar: within 5 % of the real figure
BETAS = ("compact-2026-01-12", "context-management-2025-06-27")  # the SDK's beta client sent them
MIN_DELTA = Correction.MIN_SAMPLE_TOKENS  # smaller deltas are framing noise


# -- figures ---------------------------------------------------------------------------------

def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else math.nan


def ratio_row(pairs: Sequence[tuple[int, int]]) -> list[str]:
    """(predicted, real) pairs: n, median ratio, p10-p90, median |error|, p90 |error|, share within 5 %."""
    if not pairs:
        return ["0", "", "", "", "", ""]
    ratios = [p / r for p, r in pairs]
    errors = [abs(x - 1) for x in ratios]
    return [f"{len(pairs):,}", f"{statistics.median(ratios):.3f}",
            f"{quantile(ratios, 0.1):.2f} - {quantile(ratios, 0.9):.2f}", f"{100 * statistics.median(errors):.1f}",
            f"{100 * quantile(errors, 0.9):.1f}", f"{100 * sum(e <= WITHIN for e in errors) / len(errors):.0f}"]


RATIO_HEADER = ["n", "median predicted/real", "p10 - p90", "median err %", "p90 err %", "within 5 %"]


def table(title: str, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


# -- 1. exact requests -----------------------------------------------------------------------

def request_blocks(request: Any) -> Iterable[dict[str, Any]]:
    """Every content block of a request's messages, and the blocks inside tool results."""
    for message in request.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict):
                yield block
                inner = block.get("content")
                yield from (b for b in inner if isinstance(b, dict)) if isinstance(inner, list) else ()


def request_class(exchange: Exchange) -> str:
    """The class a request's count is reported in (the first that applies)."""
    request, usage = exchange.request, exchange.usage
    tools = [t for t in request.get("tools") or [] if isinstance(t, dict)]
    ran = usage.get("server_tool_use") or {}
    if request.get("context_management") or usage.get("iterations"):
        return "server compaction or edits (usage of the last round only)"
    if any(int(v or 0) for v in ran.values() if isinstance(v, (int, float))):
        return "server tool ran (usage adds its rounds)"
    if any(api_count.is_server_tool(t) for t in tools) or request.get("mcp_servers"):
        return "server tools (hidden prompts by kind)"
    media = [b for b in request_blocks(request) if b.get("type") in ("image", "document")]
    if any(isinstance(b.get("source"), dict) and b["source"].get("type") in ("url", "file") for b in media):
        return "images or documents by URL or file (their size is not in the request)"
    if media:
        return "images and documents"
    if (request.get("thinking") or {}).get("type") in ("enabled", "adaptive"):
        return "thinking"
    return "custom tools" if tools else "no tools"


CLASSES = ["no tools", "custom tools", "thinking", "images and documents",
           "images or documents by URL or file (their size is not in the request)",
           "server tools (hidden prompts by kind)",
           "server tool ran (usage adds its rounds)", "server compaction or edits (usage of the last round only)"]
COUNTABLE = CLASSES[:4]  # what a count of the request alone can know


def exact_requests(exchanges: Sequence[Exchange], history: Path | None = None) -> None:
    answered = [e for e in exchanges if e.status == 200 and e.real_tokens]
    pairs = {id(e): (input_tokens(e.request), e.real_tokens) for e in answered}
    groups: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for e in answered:
        c = request_class(e)
        groups[c].append(pairs[id(e)])
        if c in COUNTABLE:
            groups["all countable"].append(pairs[id(e)])
            groups["held out" if e.held_out else "fitted on"].append(pairs[id(e)])
            groups[f"family {model_families.family_of(e.request.get('model')).name}"].append(pairs[id(e)])
            if e.endpoint == "count_tokens":
                groups["count_tokens answers"].append(pairs[id(e)])
        groups["everything recorded"].append(pairs[id(e)])
    families = sorted(name for name in groups if name.startswith("family "))
    order = [*CLASSES, "all countable", "fitted on", "held out", *families, "count_tokens answers",
             "everything recorded"]
    table("Exact requests: the stand-in's count against the real API's (pydantic-ai cassettes)",
          ["class", *RATIO_HEADER], [[name, *ratio_row(groups[name])] for name in order if name in groups])
    countable = [e for e in answered if request_class(e) in COUNTABLE]
    breakdown(countable, pairs, ratio_row, RATIO_HEADER, table, request_class, history)


def acceptance(exchanges: Sequence[Exchange]) -> None:
    answered = [e for e in exchanges if e.status == 200]
    refusals: dict[str, int] = defaultdict(int)
    for e in answered:
        _, error = parse_request(json.dumps(e.request).encode(), betas=BETAS,
                                 max_output=None if e.endpoint == "count_tokens" else 128_000)
        if error is not None:
            reason = re.sub(r"messages\.\d+\.content\.\d+: ", "", error.message)[:70]
            refusals[reason] += 1
    print(f"\nAccepted by the stand-in: {len(answered) - sum(refusals.values())} of the {len(answered)} requests the "
          "real API answered 200. Refused:")
    for reason, n in sorted(refusals.items(), key=lambda kv: -kv[1]):
        print(f"- {n}: {reason}")
    for e in exchanges:
        if e.status != 200:
            _, error = parse_request(json.dumps(e.request).encode(), betas=BETAS,
                                     max_output=None if e.endpoint == "count_tokens" else 128_000)
            print(f"- the API refused {e.file} ({e.status}); the stand-in: {error.status if error else 200}")


# -- 2. Claude Code deltas -------------------------------------------------------------------

@dataclass(frozen=True)
class Delta:
    real: int  # the change in the prompt from one response to the next
    family_estimate: int  # the added messages counted as the API does, in the model's family
    engine_estimate: int  # the same in the unit the engine counts in (tokens.estimate_family)
    kind: str
    held_out: bool


def text_kind(text: str) -> str:
    """The kind of a piece of text, by its characters: what makes a tokenizer differ most."""
    stripped = text.strip()
    letters = sum(c.isalpha() for c in stripped)
    if letters and sum(not c.isascii() for c in stripped if c.isalpha()) > 0.3 * letters:
        return "non-Latin text"
    if stripped[:1] in "{[" and stripped[-1:] in "}]":
        return "JSON"
    visible = [c for c in stripped if not c.isspace()]
    if visible and sum(c.isdigit() or c in "|.,-+%:" for c in visible) > 0.35 * len(visible):
        return "numbers and tables"
    code_marks = len(re.findall(r"^\s*(def |class |import |from |return |if |for |const |function |\}|#include)"
                                r"|[;{}]\s*$|=>|\(\)|::", stripped, re.MULTILINE))
    lines = max(1, stripped.count("\n") + 1)
    return "code" if code_marks >= max(2, lines // 8) else "prose"


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return json.dumps(block.get("input"), ensure_ascii=False)
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")
    return str(block.get("thinking", ""))


def delta_kind(blocks: Sequence[dict[str, Any]], family: model_families.Family) -> str:
    """The kind of the largest block added: images and thinking by type, the rest by their text."""
    largest = max(blocks, key=lambda b: block_count.block_tokens(b, family))
    if largest.get("type") == "image" or any(
            isinstance(b, dict) and b.get("type") == "image" for b in largest.get("content") or [] if
            isinstance(largest.get("content"), list)):
        return "images"
    if largest.get("type") in ("thinking", "redacted_thinking"):
        return "thinking"
    if largest.get("type") == "tool_use":
        return "tool calls (their arguments)"
    kind = text_kind(_block_text(largest))
    return f"tool results: {kind}" if largest.get("type") == "tool_result" else kind


def _estimate(messages: Sequence[dict[str, Any]], previous_role: str | None, family: model_families.Family,
              model: str) -> int:
    request = {"model": model, "messages": [{"role": previous_role, "content": "x"}] if previous_role else []}
    request["messages"] = [*request["messages"], *messages]
    counts = api_count.message_counts(request, family)
    return sum(sum(row) for row in counts[1 if previous_role else 0:])


def claude_code_deltas(sessions: Sequence[Session]) -> list[Delta]:
    deltas: list[Delta] = []
    for session in sessions:
        for before, after in zip(session.responses, session.responses[1:]):
            real = after.prompt_tokens - before.prompt_tokens
            if before.model != after.model or real < MIN_DELTA:
                continue  # another model's prompt, a compaction, or framing noise
            added = [{"role": m["role"], "content": m["content"]} for m in session.messages[before.start:after.start]]
            blocks = [b for m in added for b in m["content"] if isinstance(b, dict)]
            if not blocks:
                continue
            previous = session.messages[before.start - 1]["role"] if before.start else None
            family = model_families.family_of(after.model)
            # the engine's unit: the family of the model whose answer anchors the count
            unit = estimate_family([Message("assistant", (), meta={"model": before.model})])
            deltas.append(Delta(real, _estimate(added, previous, family, after.model),
                                _estimate(added, previous, unit, after.model), delta_kind(blocks, family),
                                session.held_out))
    return deltas


def learned(deltas_by_session: Sequence[Sequence[Delta]]) -> dict[int, tuple[int, int]]:
    """The engine's figure for each delta (by id): its estimate in the engine's unit times the ratio
    learned from the session's earlier responses (Correction, reset per session)."""
    pairs: dict[int, tuple[int, int]] = {}
    for deltas in deltas_by_session:
        correction = Correction()
        for d in deltas:
            pairs[id(d)] = (math.ceil(d.engine_estimate * correction.ratio), d.real)
            correction = correction.observe(d.engine_estimate, d.real)
    return pairs


def delta_tables(sessions: Sequence[Session]) -> None:
    per_session = [claude_code_deltas([s]) for s in sessions]
    deltas = [d for ds in per_session for d in ds]
    if not deltas:
        print("\n(no two consecutive Claude Code responses with usage: the deltas tables are left out)")
        return
    engine = learned(per_session)
    groups: dict[str, list[Delta]] = defaultdict(list)
    for d in deltas:
        groups[d.kind].append(d)
        groups["all"].append(d)
        groups["held out" if d.held_out else "fitted on"].append(d)
    kinds = sorted(k for k in groups if k not in ("all", "fitted on", "held out"))
    table("Claude Code deltas: the estimate of what was added since the previous response, by kind",
          ["largest block added", "n", "median real tok", "model's family: median err %", "within 5 %",
           "median ratio", "engine (its unit x learned ratio): median err %", "within 5 %"],
          [[k, f"{len(groups[k]):,}", f"{statistics.median(d.real for d in groups[k]):,.0f}",
            *[ratio_row([(d.family_estimate, d.real) for d in groups[k]])[i] for i in (3, 5, 1)],
            *[ratio_row([engine[id(d)] for d in groups[k]])[i] for i in (3, 5)]]
           for k in [*kinds, "fitted on", "held out", "all"]])


# -- 3. cache split --------------------------------------------------------------------------

def _split_row(pairs: Sequence[tuple[int, int, int, int]]) -> list[str]:
    """(predicted read, real read, predicted write, real write): shares within 5 % (or 10 tokens)."""
    def close(p: int, r: int) -> bool:
        return abs(p - r) <= max(WITHIN * r, 10)
    both = sum(close(pr, rr) and close(pw, rw) for pr, rr, pw, rw in pairs)
    return [f"{len(pairs):,}", f"{100 * sum(close(p[0], p[1]) for p in pairs) / max(1, len(pairs)):.0f}",
            f"{100 * sum(close(p[2], p[3]) for p in pairs) / max(1, len(pairs)):.0f}",
            f"{100 * both / max(1, len(pairs)):.0f}"]


def cassette_cache(exchanges: Sequence[Exchange]) -> list[tuple[int, int, int, int]]:
    """Each cassette that marks breakpoints, replayed through the stand-in's cache in order."""
    by_file: dict[str, list[Exchange]] = defaultdict(list)
    for e in exchanges:
        if e.endpoint == "messages" and e.status == 200 and e.real_tokens and "cache_control" in json.dumps(e.request):
            by_file[e.file].append(e)
    pairs: list[tuple[int, int, int, int]] = []
    for file_exchanges in by_file.values():
        cache = PromptCache(lambda: 0.0)  # recorded back to back: within every lifetime
        for e in file_exchanges:
            if request_class(e) not in COUNTABLE:
                continue
            usage = cache.account(request_segments(e.request), minimum_cacheable_tokens(str(e.request.get("model"))))
            pairs.append((usage.cache_read_input_tokens, int(e.usage.get("cache_read_input_tokens") or 0),
                          usage.cache_creation_input_tokens, int(e.usage.get("cache_creation_input_tokens") or 0)))
    return pairs


def claude_code_cache(sessions: Sequence[Session]) -> list[tuple[int, int, int, int]]:
    """A prefix cache with breakpoints at the end of each request: the previous prompt is read
    if it was written within its lifetime (5 minutes, or an hour when the usage wrote 1h entries)."""
    pairs: list[tuple[int, int, int, int]] = []
    for session in sessions:
        for before, after in zip(session.responses, session.responses[1:]):
            if before.model != after.model or after.prompt_tokens < before.prompt_tokens:
                continue
            read = before.prompt_tokens
            pairs.append((read, int(after.usage.get("cache_read_input_tokens") or 0),
                          after.prompt_tokens - read - int(after.usage.get("input_tokens") or 0),
                          int(after.usage.get("cache_creation_input_tokens") or 0)))
    return pairs


def cache_tables(exchanges: Sequence[Exchange], sessions: Sequence[Session]) -> None:
    table("Cache split: predicted read and write against the real ones (within 5 % or 10 tokens)",
          ["traffic", "responses", "read within %", "write within %", "both within %"],
          [["cassettes with breakpoints (the stand-in's cache)", *_split_row(cassette_cache(exchanges))],
           ["consecutive Claude Code responses (prefix cache)", *_split_row(claude_code_cache(sessions))]])


# -- main ------------------------------------------------------------------------------------

SECTIONS: dict[str, Callable[[list[Exchange], list[Session], Path | None], None]] = {
    "exact": lambda ex, ss, history: (exact_requests(ex, history), acceptance(ex)),  # type: ignore[dict-item]
    "deltas": lambda ex, ss, history: delta_tables(ss),
    "cache": lambda ex, ss, history: cache_tables(ex, ss),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=None,
                        help="the shared corpus folder (default: $CTX_MAGIC_CORPUS, else ../shared/corpus)")
    parser.add_argument("--only", choices=list(SECTIONS), action="append", help="print only these sections")
    parser.add_argument("--history", type=Path, default=None,
                        help="a git clone of pydantic-ai: adds the table by the month each cassette was recorded")
    args = parser.parse_args(argv)
    corpus = args.corpus or corpus_path()
    missing = corpus_missing("claude-api-real") if args.corpus is None else (
        None if (corpus / "claude-api-real").is_dir() else f"no claude-api-real/ under {corpus}")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    exchanges = load_exchanges(corpus)
    sessions = load_sessions(corpus)
    print(f"recorded: {len(exchanges)} calls to the Messages API in {len({e.file for e in exchanges})} cassettes, "
          f"{sum(len(s.responses) for s in sessions):,} Claude Code responses in {len(sessions)} logs; "
          f"text counted with {model_families.counter_name()}")
    for name in args.only or list(SECTIONS):
        lacking = {"exact": not exchanges and "recorded calls", "deltas": not sessions and "Claude Code logs",
                   "cache": not (exchanges or sessions) and "recorded traffic"}.get(name)
        if lacking:  # another corpus, without this part
            print(f"\n(no {lacking} under {corpus}: the {name} tables are left out)")
            continue
        SECTIONS[name](exchanges, sessions, args.history)
    return 0


if __name__ == "__main__":
    sys.exit(main())
