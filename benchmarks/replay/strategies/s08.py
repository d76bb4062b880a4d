"""learn-claude-code's s08 pipeline (shareAI-lab/learn-claude-code, s08_context_compact), its
rules reproduced in our own code. Before every main call, on the conversation itself:

1. tool-result budget: when the tool results of the last message exceed 200,000 characters,
   the largest ones over 30,000 are saved to disk and replaced by their path and first 2,000
   characters;
2. snip: over 50 messages, keep the first 3 and the last 47, one marker message between;
3. micro-compact: every tool result but the last 3 whose content is longer than 120 is replaced
   by a placeholder (a result with image blocks has a list as content, whose length is its block
   count: the original leaves those alone, and so does this);
4. auto-compact: when the conversation's printed form (`str(messages)`) exceeds 50,000
   characters, one summary call (no system prompt, no tools, the conversation as JSON cut to
   80,000 characters inside the prompt, 2,000 tokens out) and the whole history becomes the
   summary;
5. reactive compact once after a prompt-too-long (the count resets after a call succeeds): a
   summary of everything, followed by the last 5 messages.

Two departures, both needed to replay at all: the snip and the reactive tail keep tool_use /
tool_result pairs together (as many later copies of the lesson do; without it the first snip
sends an orphan result, which the API refuses), and main calls carry raw's two cache
breakpoints (the lesson sends none, which would bill like raw-uncached). The summary prompt asks
for <analysis> and numbered <summary> sections so that the stand-in answers it as a summary.
"""

from __future__ import annotations

import json

from benchmarks.replay.billing import Bench
from benchmarks.replay.harness import Context, Msg, Outcome, Run, play

CONTEXT_LIMIT_CHARS = 50_000  # s08 compares len(str(messages)) with this, whatever the window
KEEP_RECENT = 3
PLACEHOLDER_ABOVE = 120  # results this long or shorter stay
PERSIST_THRESHOLD = 30_000
LAST_MESSAGE_BUDGET = 200_000
PREVIEW_CHARS = 2_000
MAX_MESSAGES = 50
KEEP_HEAD = 3
SUMMARY_INPUT_CHARS = 80_000
SUMMARY_MAX_TOKENS = 2_000
REACTIVE_TAIL = 5
MAX_REACTIVE_RETRIES = 1
PLACEHOLDER = "[An earlier tool result was compacted; run the tool again if it is needed.]"
SUMMARY_PROMPT = """Write a summary of the coding-agent conversation below so that the work can go on from it alone.
Think it through inside <analysis></analysis>, then give the summary inside <summary></summary> with these sections:
1. Current goal: what the user wants done.
2. Key findings and decisions: what was learned and settled.
3. Files read or changed: paths and what happened to them.
4. Remaining work: what is left to do.
5. User constraints: rules the user set.
Be brief and concrete."""


def _has_tool_use(message: Msg) -> bool:
    return message.role == "assistant" and any(b.get("type") == "tool_use" for b in message.content)


def _has_tool_result(message: Msg) -> bool:
    return message.role == "user" and any(b.get("type") == "tool_result" for b in message.content)


def _tail_start(history: list[Msg], start: int) -> int:
    """Move a cut back by one when it would separate a tool result from its call."""
    if 0 < start < len(history) and _has_tool_result(history[start]) and _has_tool_use(history[start - 1]):
        return start - 1
    return start


def persist_large(run: Run, history: list[Msg]) -> None:
    last = history[-1] if history else None
    if last is None or last.role != "user":
        return
    results = [b for b in last.content if b.get("type") == "tool_result"]
    total = sum(len(str(b.get("content", ""))) for b in results)
    for block in sorted(results, key=lambda b: len(str(b.get("content", ""))), reverse=True):
        if total <= LAST_MESSAGE_BUDGET:
            break
        content = str(block.get("content", ""))
        if len(content) <= PERSIST_THRESHOLD:
            continue
        path = f".task_outputs/tool-results/{block.get('tool_use_id')}.txt"
        block["content"] = f"<persisted-output>\nSaved to: {path}\nFirst part:\n{content[:PREVIEW_CHARS]}\n" \
                           "</persisted-output>"
        run.events["persist"] += 1
        total = sum(len(str(b.get("content", ""))) for b in results)


def snip(run: Run, history: list[Msg]) -> list[Msg]:
    if len(history) <= MAX_MESSAGES:
        return history
    head_end, tail_start = KEEP_HEAD, len(history) - (MAX_MESSAGES - KEEP_HEAD)
    if _has_tool_use(history[head_end - 1]):
        while head_end < len(history) and _has_tool_result(history[head_end]):
            head_end += 1
    tail_start = _tail_start(history, tail_start)
    if head_end >= tail_start:
        return history
    run.events["snip"] += 1
    marker = Msg("user", [{"type": "text", "text": f"[{tail_start - head_end} messages snipped]"}])
    return [*history[:head_end], marker, *history[tail_start:]]


def micro_compact(run: Run, history: list[Msg]) -> None:
    results = [b for m in history if m.role == "user" for b in m.content if b.get("type") == "tool_result"]
    for block in results[:-KEEP_RECENT] if len(results) > KEEP_RECENT else []:
        if len(block.get("content", "")) > PLACEHOLDER_ABOVE:
            block["content"] = PLACEHOLDER
            run.events["clear"] += 1


def printed_size(history: list[Msg]) -> int:
    return len(str([{"role": m.role, "content": m.content} for m in history]))


def summarize(run: Run, history: list[Msg]) -> str:
    conversation = json.dumps([{"role": m.role, "content": m.content} for m in history], default=str)
    blocks = [{"type": "text", "text": SUMMARY_PROMPT}, {"type": "text", "text": conversation[:SUMMARY_INPUT_CHARS]}]
    request = {"model": run.bench.model, "max_tokens": SUMMARY_MAX_TOKENS,
               "messages": [{"role": "user", "content": blocks}]}
    return run.side_call(request).strip() or "(empty summary)"


class S08(Context):
    name = "s08"
    cached = True

    def __init__(self) -> None:
        self.reactive_retries = 0

    def before_call(self, run: Run) -> None:
        persist_large(run, run.history)
        run.history[:] = snip(run, run.history)
        micro_compact(run, run.history)
        if printed_size(run.history) > CONTEXT_LIMIT_CHARS:
            summary = summarize(run, run.history)
            run.history[:] = [Msg("user", [{"type": "text", "text": f"[Compacted]\n\n{summary}"}])]
            run.events["auto"] += 1

    def after_call(self, run: Run, reply: object) -> None:
        self.reactive_retries = 0

    def on_too_long(self, run: Run) -> bool:
        if self.reactive_retries >= MAX_REACTIVE_RETRIES:
            return False
        self.reactive_retries += 1
        summary = summarize(run, run.history)
        tail = run.history[_tail_start(run.history, max(0, len(run.history) - REACTIVE_TAIL)):]
        run.history[:] = [Msg("user", [{"type": "text", "text": f"[Reactive compact]\n\n{summary}"}]), *tail]
        run.events["reactive"] += 1
        return True


def run_s08(bench: Bench) -> Outcome:
    return play(bench, S08())
