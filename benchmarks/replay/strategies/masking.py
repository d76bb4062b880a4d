"""Observation masking: every tool result but the last ten is sent as a short placeholder.

The history itself keeps the outputs; only what is sent is masked. With prompt caching the
mask moves one result further at every step, so the request changes from the eleventh-latest
result on: that part is written again each time. No recovery from a prompt-too-long.
"""

from __future__ import annotations

from benchmarks.replay.billing import Bench
from benchmarks.replay.harness import Context, Msg, Outcome, Run, play

KEEP_LAST = 10  # results sent in full
PLACEHOLDER = "[Old tool output omitted to save context.]"


class Masking(Context):
    name = "masking"
    cached = True

    def view(self, run: Run) -> list[Msg]:
        positions = [(m, b) for m, msg in enumerate(run.history) for b, block in enumerate(msg.content)
                     if block.get("type") == "tool_result"]
        masked = {pos for pos in positions[:-KEEP_LAST]}
        if not masked:
            return run.history
        out = []
        for m, message in enumerate(run.history):
            content = [{**block, "content": PLACEHOLDER} if (m, b) in masked else block
                       for b, block in enumerate(message.content)]
            out.append(Msg(message.role, content))
        return out


def run_masking(bench: Bench) -> Outcome:
    return play(bench, Masking())
