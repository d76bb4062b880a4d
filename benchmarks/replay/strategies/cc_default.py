"""A plain Claude-Code-like default: the tool-result budget and auto-compaction, nothing else.

- The tool-result budget: a tool result over 50,000 characters is saved to disk as it arrives and replaced
  by a note with its path and its first 2,000 characters (cut at a line end); the decision is
  made once, so the cached prefix never changes because of it.
- Auto-compaction: before each main call the context is the last reply's usage plus an estimate
  of what came after it; at window - min(max output, 20,000) - 13,000 (the 13,000 scaled below a
  200,000 window) one summary call, with the main loop's system prompt and tools and no
  tool_choice (so it reads the cached conversation), replaces the whole history. The model's
  output cap is taken as 64,000 (the stand-in's, and a current model's), so the reserve is
  20,000, as in Claude Code.
- Breakpoints as Claude Code sends them: on the system prompt and on the last message only
  (its request builder keeps exactly one message-level marker).
- The summary call asks for min(20,000, what the window leaves after its prompt) tokens: Claude
  Code asks for 20,000, which always fits at the 200,000-token windows its reserve was tuned for
  (the trigger leaves 33,000 free) but not at 32,000, where a result that lands just before the
  trigger leaves a 12,926-token prompt with 19,074 of room. The prompt's size is the API's own
  count (count_tokens, free).
- No clearing, no snip, no session memory, no reactive compaction: a request still over the
  window is an overflow.
"""

from __future__ import annotations

import re

from benchmarks.replay.billing import Bench
from benchmarks.replay.corpus import Block
from benchmarks.replay.harness import Context, Msg, Outcome, Run, play, text_of

MAX_RESULT_CHARS = 50_000
PREVIEW_CHARS = 2_000
MODEL_MAX_OUTPUT = 64_000
SUMMARY_RESERVE = 20_000  # p99.99 of Claude Code's summaries is 17,387 tokens
AUTOCOMPACT_BUFFER = 13_000
REFERENCE_WINDOW = 200_000
SUMMARY_MAX_TOKENS = 20_000
COMPACT_PROMPT = """Stop here and write a summary of the whole conversation above: it will replace the conversation, so
the work must be able to continue from the summary alone. Answer with text only; do not call any tool.
First think inside <analysis></analysis> (walk through the conversation in order), then write the summary
inside <summary></summary> with these sections:
1. Primary Request and Intent: what the user asked for, in detail.
2. Key Technical Concepts: technologies and ideas that matter.
3. Files and Code Sections: files and code looked at or changed, and why.
4. Errors and Fixes: what went wrong and how it was fixed.
5. Problem Solving: what was solved and what is still being worked on.
6. All User Messages: every message the user wrote, verbatim.
7. Pending Tasks: what is still to do.
8. Current Work: what was being done just before this summary.
9. Optional Next Step: the next step, quoting the latest request verbatim.
Remember: text only, no tool calls."""
CONTINUATION = ("This session is being continued from an earlier conversation that was summarized when the "
                "context filled up. The summary:\n\n{summary}\n\nContinue the work from where it stopped, "
                "without asking the user further questions and without recapping.")
_ANALYSIS = re.compile(r"<analysis>.*?</analysis>\s*", re.DOTALL)


def autocompact_threshold(window: int) -> int:
    """The auto-compact threshold, its buffer scaled; never below a quarter of the window (a window too small for the
    20,000 reserve, as in tests, would otherwise compact before every call)."""
    scale = min(1.0, window / REFERENCE_WINDOW)
    threshold = window - min(MODEL_MAX_OUTPUT, SUMMARY_RESERVE) - round(AUTOCOMPACT_BUFFER * scale)
    return max(threshold, window // 4)


def preview(text: str) -> str:
    """The first PREVIEW_CHARS characters, cut back to a line end when one is in the second half."""
    head = text[:PREVIEW_CHARS]
    cut = head.rfind("\n")
    return head[:cut] if cut > PREVIEW_CHARS // 2 else head


class CCDefault(Context):
    name = "cc-default"
    cached = True
    previous_breakpoint = False  # one message-level marker, on the last message

    def on_result(self, run: Run, block: Block) -> Block:
        text = text_of(block.get("content", ""))
        if len(text) <= MAX_RESULT_CHARS:
            return block
        run.events["persist"] += 1
        path = f"tool-results/{block['tool_use_id']}.txt"
        note = (f"<persisted-output>\nThis output ({len(text):,} characters) was too large for the conversation "
                f"and was saved to {path}; read it with offset and limit to see the rest. Its start:\n"
                f"{preview(text)}\n</persisted-output>")
        return {**block, "content": note}

    def before_call(self, run: Run) -> None:
        if len(run.history) < 2 or run.tokens() < autocompact_threshold(run.bench.window):
            return
        prompt = Msg("user", [{"type": "text", "text": COMPACT_PROMPT}])
        request = run.request([*run.history, prompt], max_tokens=SUMMARY_MAX_TOKENS)
        room = run.bench.window - run.bench.meter.count_tokens(request)
        request["max_tokens"] = max(1, min(SUMMARY_MAX_TOKENS, room))
        reply = run.side_call(request)
        summary = _ANALYSIS.sub("", reply).strip()
        run.history[:] = [Msg("user", [{"type": "text", "text": CONTINUATION.format(summary=summary)}])]
        run.forget_anchor()
        run.events["auto"] += 1


def run_cc_default(bench: Bench) -> Outcome:
    return play(bench, CCDefault())
