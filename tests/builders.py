"""Shared builders for tests: small conversations written the way the loop writes them."""

from __future__ import annotations

import errno
import itertools
from typing import Any

from ctx_magic.messages import Message, Usage, tool_result_block, tool_use_block, user_text

_ids = itertools.count(1)


def assistant(*blocks, api_id: str | None = None, usage: Usage | None = None, t: float = 0.0) -> Message:
    """An assistant message; gets an API id and usage unless told otherwise."""
    n = next(_ids)
    return Message(
        "assistant",
        tuple(blocks),
        api_id=api_id or f"msg_{n}",
        usage=usage if usage is not None else Usage(100, 10),
        timestamp=t,
    )


def text(s: str) -> dict:
    return {"type": "text", "text": s}


def call(tool: str = "python", tool_input: dict | None = None, tool_use_id: str | None = None) -> dict:
    return tool_use_block(tool_use_id or f"toolu_{next(_ids)}", tool, tool_input or {"code": "1"})


def results(*pairs, t: float = 0.0) -> Message:
    """A user message of tool results: pairs of (tool_use_id, content)."""
    return Message("user", tuple(tool_result_block(i, c) for i, c in pairs), timestamp=t)


def exchange(tool: str, output: str, t: float = 0.0, usage: Usage | None = None) -> list[Message]:
    """One tool call and its result."""
    use = call(tool)
    return [assistant(use, t=t, usage=usage), results((use["id"], output), t=t + 1)]


def conversation(*outputs: str, tool: str = "python", start: float = 0.0) -> list[Message]:
    """A user request followed by one tool exchange per output, ten seconds apart."""
    msgs = [user_text("please analyse the data", timestamp=start)]
    for n, out in enumerate(outputs):
        msgs += exchange(tool, out, t=start + 10 * n)
    return msgs


class ManualClock:
    """An injectable clock: tests move time, nothing sleeps."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


SPAN_CODE = """import pandas as pd
df = pd.read_csv('data/sales.csv')
total, count = df.price.sum(), len(df)
def clean(frame):
    return frame.dropna()
class Model:
    pass
for i in range(3):
    pass
%matplotlib inline
_private = 1
"""
SPAN_TRACEBACK = (
    "---------------------------------------------------------------------------\n"
    "KeyError                                  Traceback (most recent call last)\n"
    "Cell In[3], line 1\n----> 1 df['prices']\n\nKeyError: 'prices'"
)


def summarized_span() -> list[Message]:
    """A span a compaction summarizes: two user messages, code that defines names, a KeyError, a
    missing file (the coverage audit's tests)."""
    return [
        user_text("Load data/sales.csv and plot the price per region. Never use seaborn."),
        Message("assistant", (text("Loading it."), tool_use_block("t1", "python", {"code": SPAN_CODE}))),
        Message("user", (tool_result_block("t1", "(no output)"),)),
        Message("assistant", (tool_use_block("t2", "python", {"code": "df['prices']"}),)),
        Message("user", (tool_result_block("t2", SPAN_TRACEBACK, is_error=True),)),
        Message("assistant", (tool_use_block("t3", "read_file", {"path": "notes/plan.md"}),)),
        Message("user", (tool_result_block("t3", "notes/plan.md does not exist.", is_error=True),)),
        user_text("The column is called price, not prices."),
    ]


class FillingDisk:
    """The disk under a transcript, which fills when told (`full = True`): every write then raises
    ENOSPC, after half the line reaches the file with `partial`."""

    def __init__(self, transcript: Any, *, partial: bool = False) -> None:
        self.full = False
        opened, disk = transcript._open, self

        class Handle:
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            def __getattr__(self, name: str) -> Any:
                return getattr(self.inner, name)

            def write(self, data: str) -> int:
                if disk.full:
                    if partial:
                        self.inner.write(data[: len(data) // 2])  # a partial line reaches the file
                        self.inner.flush()
                    raise OSError(errno.ENOSPC, "No space left on device")
                return self.inner.write(data)

        transcript._open = lambda: Handle(opened())
