"""How long side-call replies are in the replay: as long as a model's, not the stand-in's.

The offline stand-in answers a summary, a notes update or a memory extraction with a short
extractive text (a few hundred tokens); a model writes thousands. The bill of a strategy that
summarizes depends on that length twice: the reply is output (5 times an input token), and a
summary stays in the context every later call reads. So the benchmark keeps the stand-in's
answer (its content: what it quotes, what it drops) and pads each side-call reply to a real
reply's length with filler that carries no facts: the bill and the context's size are a
model's, what survives a compaction is still only what the stand-in kept (a fidelity figure
that errs against summarizing). The stand-in itself is unchanged: tests keep its short replies.

Where the lengths come from (`real_sizes`):

- **Summaries** (the API's on demand too: its block keeps what it was asked for, and a thinking model's
  walk through the conversation, asked of its thinking, is billed as the analysis): Claude Code's own
  compaction runs in the shared corpus (`claude-api-real/spotter/**/subagents/agent-acompact-*.jsonl`:
  five auto or manual compactions of 142,000-170,000-token conversations, Claude Code 2.1.39, Opus
  4.6). Each holds the whole reply (an `<analysis>` and a `<summary>`, 11,619-15,763 characters), but its recorded
  `output_tokens` (6 or 8) is the start-of-stream value written with the first content block (the
  record has no `stop_reason`: it was written before the stream ended). So the length is the
  reply's own text counted with the stand-in's counter (`count_text`), the unit every other token
  of this benchmark is billed in: the median reply's analysis and summary, measured at run time
  (so a change of the counting unit moves them with everything else).
- **Session notes**: the corpus holds no notes update, so a notes document is taken to be as long
  as a real summary's `<summary>` (the same job: a sectioned record to continue the work from),
  spread over its sections: a notes reply writes that share for every section it changes.
- **Memory extraction**: the corpus holds none either; a reply is billed as one notes section
  (a handful of one-line memories). The filler goes after the memories, where it is not parsed.

`P9999` is the sensitivity case: every summary as long as the p99.99 of Claude Code's summaries
(17,387 tokens: its 20,000-token reply reserve exists for it), split between analysis and summary
as the real replies are. Every reply is cut at the request's `max_tokens`, as the API would.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctx_magic.context.tokens import count_text

COMPACTION_RUNS = "claude-api-real/spotter/**/subagents/agent-acompact-*.jsonl"
P9999_SUMMARY_TOKENS = 17_387  # Claude Code's design figure for the longest summaries
NOTES_SECTIONS = 10  # the notes template's sections (context/session_memory.py)
PAD_ROUNDS = 4  # filler is added again while the count falls short
MAX_TOKENS_MARGIN = 64  # padding stops this far below max_tokens: the stand-in never has to cut it
FILLER = "This part of the record is kept as the conversation gave it. "
FILLER_LINE = "- A further detail of the session, as recorded."

_ANALYSIS = re.compile(r"(<analysis>)(.*?)(</analysis>)", re.DOTALL)
_SUMMARY = re.compile(r"(<summary>)(.*?)(</summary>)", re.DOTALL)
_CHANGE = re.compile(r'(<(section|append) title="[^"]+">\n?)(.*?)(\n?</\2>)', re.DOTALL)


@dataclass(frozen=True)
class ReplySizes:
    """Output tokens a side-call reply is padded to (0: the stand-in's own length)."""

    label: str
    analysis: int = 0
    """A summary's <analysis> (dropped once the summary is written)."""
    summary: int = 0
    """A summary's <summary> (what replaces the conversation)."""
    notes_section: int = 0
    """Each section a notes update writes."""
    memory: int = 0
    """A memory-extraction reply."""
    source: str = ""
    """Where the figures come from, one line."""

    @property
    def summary_reply(self) -> int:
        return self.analysis + self.summary


STAND_IN = ReplySizes("stand-in", source="the stand-in's own extractive replies")


def reply_text(path: Path) -> str:
    """The text of the one reply a Claude Code compaction run holds."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return "".join(block.get("text", "") for record in records if record.get("type") == "assistant"
                   for block in record["message"].get("content", []) if block.get("type") == "text")


def compaction_replies(corpus: Path) -> list[tuple[int, int]]:
    """(analysis, summary) tokens of every real compaction reply in the corpus, by the stand-in's count."""
    out = []
    for path in sorted(corpus.glob(COMPACTION_RUNS)):
        text = reply_text(path)
        analysis, summary = _ANALYSIS.search(text), _SUMMARY.search(text)
        if analysis and summary:
            out.append((count_text(analysis.group(2)), count_text(summary.group(2))))
    return out


def real_sizes(corpus: Path) -> ReplySizes:
    """The median real compaction reply, and notes and memory replies sized from it."""
    replies = compaction_replies(corpus)
    if not replies:
        raise FileNotFoundError(f"no Claude Code compaction runs under {corpus / COMPACTION_RUNS}")
    ordered = sorted(replies, key=sum)
    analysis, summary = ordered[(len(ordered) - 1) // 2]  # the median reply (the lower one of an even count)
    section = round(summary / NOTES_SECTIONS)
    totals = ", ".join(f"{a + s:,}" for a, s in ordered)
    return ReplySizes("real", analysis, summary, section, section,
                      f"the median of {len(replies)} Claude Code compaction replies ({totals} tokens)")


def p9999_sizes(real: ReplySizes) -> ReplySizes:
    """Every summary P9999_SUMMARY_TOKENS long, split as the real ones are; notes and memory as real."""
    share = real.analysis / real.summary_reply if real.summary_reply else 0.0
    analysis = round(P9999_SUMMARY_TOKENS * share)
    return ReplySizes("p99.99", analysis, P9999_SUMMARY_TOKENS - analysis, real.notes_section, real.memory,
                      "Claude Code's p99.99 summary (17,387 tokens), split as the real replies are")


def padded(text: str, tokens: int, filler: str = FILLER) -> str:
    """`text` with filler appended until it counts about `tokens` (unchanged when already that long)."""
    unit = max(1, count_text(filler))
    joiner = "\n" if filler.startswith("- ") else " "
    for _ in range(PAD_ROUNDS):  # a long text is counted by sampling: top up until it counts enough
        missing = tokens - count_text(text)
        if missing <= 0:
            break
        pad = joiner.join([filler.strip()] * math.ceil(missing / unit))
        text = f"{text.rstrip()}{joiner if text.endswith(filler.strip()) else chr(10)}{pad}" if text.strip() else pad
    return text


def _scaled(parts: tuple[int, ...], cap: int) -> tuple[int, ...]:
    total = sum(parts)
    return parts if total <= cap or total == 0 else tuple(p * cap // total for p in parts)


def sized_summary(text: str, sizes: ReplySizes, cap: int) -> str:
    analysis, summary = _ANALYSIS.search(text), _SUMMARY.search(text)
    inner = (count_text(analysis.group(2)) if analysis else 0) + (count_text(summary.group(2)) if summary else 0)
    wrapper = count_text(text) - inner  # tags and anything outside them
    analysis_tokens, summary_tokens = _scaled((sizes.analysis, sizes.summary), cap - wrapper)
    text = _ANALYSIS.sub(lambda m: m.group(1) + padded(m.group(2), analysis_tokens) + "\n" + m.group(3), text,
                         count=1)
    return _SUMMARY.sub(lambda m: m.group(1) + padded(m.group(2), summary_tokens) + "\n" + m.group(3), text,
                        count=1)


def sized_notes(text: str, sizes: ReplySizes, cap: int) -> str:
    changes = len(_CHANGE.findall(text))
    (each,) = _scaled((sizes.notes_section,), cap // max(1, changes))

    def grow(m: re.Match[str]) -> str:
        filler = FILLER_LINE if m.group(2) == "append" else FILLER
        return m.group(1) + padded(m.group(3), each, filler) + m.group(4)

    return _CHANGE.sub(grow, text)


def sized_block(request: Mapping[str, Any], text: str, sizes: ReplySizes) -> str:
    """An on-demand compaction block's summary padded as a summary reply (its analysis, when the
    instructions asked for one, and its summary; the whole text when it has neither): the API keeps
    what the model wrote, byte for byte, so the context after it carries all of it."""
    cap = max(0, int(request.get("max_tokens") or 0) - MAX_TOKENS_MARGIN)
    if not sizes.summary_reply:
        return text
    if _SUMMARY.search(text):
        return sized_summary(text, sizes, cap)
    return padded(text, min(sizes.summary_reply, cap))


def sized_reply(rule: str, request: Mapping[str, Any], text: str, sizes: ReplySizes) -> str:
    """The reply of side-call rule `rule` padded to `sizes` (within the request's max_tokens)."""
    cap = max(0, int(request.get("max_tokens") or 0) - MAX_TOKENS_MARGIN)
    if rule == "compaction" and sizes.summary_reply:
        return sized_summary(text, sizes, cap)
    if rule == "session-notes" and sizes.notes_section:
        return sized_notes(text, sizes, cap)
    if rule.startswith("memory-") and sizes.memory:
        return padded(text, min(sizes.memory, cap))
    return text
