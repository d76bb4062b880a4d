"""LLM compaction: one model call turns the conversation into a summary.

A compaction is one `Compaction` value, built once: where the live context is split, and what
the new context is built with. Summarizing and rebuilding are separate steps. The engine does
not know the API: `summarize_with_retries` asks a `Summarize` function (the loop's side call)
to answer the compaction prompt with tools forbidden; `rebuild` makes the new live context of
the reply: boundary, summary, pins, kept messages, attachments (or of the compaction block the
API wrote instead, agent/on_demand.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctx_magic.context.audit import MESSAGES_SHARE_OF_THRESHOLD, audit_summary
from ctx_magic.context.pins import Pin, pins_message
from ctx_magic.context.prompts import (
    FROM_MARKER,
    PTL_RETRY_MARKER,
    compact_prompt,
    extract_summary,
    summary_message_text,
    summary_note_text,
)
from ctx_magic.context.reactive import without_media
from ctx_magic.context.snip import safe_cuts, snipped_count
from ctx_magic.context.tokens import Correction, count_context, message_tokens
from ctx_magic.errors import CompactionFailed, ModelError, PromptTooLong, Remedy
from ctx_magic.events import Compacted
from ctx_magic.messages import Block, Message, text_block, user_text

MAX_PTL_RETRIES = 3  # Claude Code: give up on the summary after three truncations
PTL_FALLBACK_DROP_SHARE = 0.2  # when the error gives no token gap, drop a fifth of the groups
AUTO_TRIGGERS = frozenset({"auto", "reactive", "session-memory"})


Summarize = Callable[[Sequence[Message], str], str]
"""One model call answering the compaction prompt as plain text (the loop's side call). It
raises PromptTooLong when the request is over the window, CompactionFailed when the reply
calls a tool, and ModelError for anything else."""


@dataclass(frozen=True)
class CompactionResult:
    messages: list[Message]
    """The new live context."""
    new_messages: list[Message]
    """Messages this compaction created (boundary, summary, attachments, extra): for the transcript."""
    event: Compacted


# -- what the summarizer sees -----------------------------------------------------------------


def summary_input(messages: Sequence[Message]) -> list[Message]:
    """Sent messages only, images and documents as [image]/[document].

    Re-injected attachments (files re-read after a compaction, the tool list) stay where they
    are, unlike Claude Code's summarizer input: they sit right after the previous summary, so dropping them
    changes the request from its first message on and the call can no longer read the main
    loop's cached prefix (benchmarks/cache.py measured 74.6% -> 82.5% cache reads keeping them).
    The prompt tells the model to leave them out of the summary instead.
    """
    return [m.with_content(without_media(b, "[{}]".format) for b in m.content) for m in messages if m.sent]


# -- head truncation when the compaction request itself is too long --------------------------


def api_round_groups(messages: Sequence[Message]) -> list[list[Message]]:
    """One group per model response with the tool results that answer it; leading user
    messages form the first group."""
    groups: list[list[Message]] = []
    current_id: object = object()
    for message in messages:
        starts_round = message.role == "assistant" and (message.api_id or message.uuid) != current_id
        if starts_round or not groups:
            groups.append([])
            if message.role == "assistant":
                current_id = message.api_id or message.uuid
        groups[-1].append(message)
    return groups


def truncate_head_for_ptl(messages: Sequence[Message], gap: int | None) -> list[Message] | None:
    """Drop the oldest API-round groups covering `gap` tokens (a fifth of them without a gap).

    The marker a previous retry prepended is stripped first: left in, it would be a group of
    its own at the head and the 20% fallback would drop only the marker, then re-add it, and
    never make progress (a self-referential bug Claude Code had). Returns None when nothing is left.
    """
    body = list(messages)
    if body and body[0].meta.get("ptl_retry_marker"):
        body = body[1:]
    groups = api_round_groups(body)
    if len(groups) < 2:
        return None
    if gap:
        dropped, freed = 0, 0
        while dropped < len(groups) and freed < gap:
            freed += sum(message_tokens(m) for m in groups[dropped])
            dropped += 1
    else:
        dropped = max(1, math.floor(len(groups) * PTL_FALLBACK_DROP_SHARE))
    if dropped >= len(groups):
        return None
    kept = [m for group in groups[dropped:] for m in group]
    if kept[0].role == "assistant":
        marker = Message("user", (text_block(PTL_RETRY_MARKER),), meta={"ptl_retry_marker": True})
        kept.insert(0, marker)
    return kept


def summarize_with_retries(summarize: Summarize, messages: Sequence[Message], prompt: str) -> str:
    """The summary text, retrying up to three times with a shorter head on prompt-too-long."""
    attempt = list(messages)
    for retry in range(MAX_PTL_RETRIES + 1):
        try:
            reply = summarize(attempt, prompt)
        except PromptTooLong as error:
            shorter = truncate_head_for_ptl(attempt, error.gap) if retry < MAX_PTL_RETRIES else None
            if shorter is None:
                raise CompactionFailed(
                    "The conversation is too long to summarize even after dropping its oldest parts.",
                    remedy=Remedy.SNIP_OR_NEW,
                ) from error
            attempt = shorter
            continue
        except ModelError as error:
            raise CompactionFailed(f"The summary call failed: {error}") from error
        summary = extract_summary(reply)
        if summary is None:
            raise CompactionFailed("The summary reply had no <summary> block.")
        return summary
    raise AssertionError("unreachable")  # pragma: no cover


# -- the new context (boundary, summary, kept messages) ---------------------------------------


def without_usage(message: Message) -> Message:
    """A kept message whose usage described the old context: it must not anchor the new (anchored) count."""
    return dataclasses.replace(message, usage=None) if message.usage is not None else message


@dataclass(frozen=True)
class Split:
    """Which live messages are summarized and which are kept, before or after the summary."""

    kept_before: list[Message]
    to_summarize: list[Message]
    kept_after: list[Message]
    direction: str


def plan_split(messages: Sequence[Message], direction: str = "full", index: int | None = None) -> Split:
    """Cut at a place that separates no tool_use from its result (moving the cut earlier).

    full / up_to: summarize messages[:index] (all by default), keep the rest after the summary.
    from: keep messages[:index] as they are, summarize the rest.
    """
    n = len(messages)
    cut = n if index is None else max(0, min(index, n))
    safe = safe_cuts(messages)
    while cut > 0 and not safe[cut]:
        cut -= 1
    if direction == "from":
        return Split(list(messages[:cut]), list(messages[cut:]), [], "from")
    return Split([], list(messages[:cut]), list(messages[cut:]), direction)


@dataclass(frozen=True)
class Compaction:
    """One compaction: which live messages it summarizes and keeps, and what the new context is
    built with. Built once, before the summary is asked for."""

    split: Split
    trigger: str
    """auto, manual, model, reactive or session-memory: recorded on the boundary."""
    now: float
    tokens_before: int
    threshold: int
    """The auto-compact threshold: a new context still over it is reported (it rebounds)."""
    transcript_path: str
    overhead_tokens: int = 0
    """What the system prompt and the tools add to every request (the new context is measured with it)."""
    correction: Correction = Correction()
    """The estimate's correction in force (the new context is measured with it)."""
    previous_boundary: str | None = None
    turns_since: int = 0
    pins: tuple[Pin, ...] = ()
    """The user's pins: they follow the summary word for word."""
    auto: bool | None = None
    """Whether the summary tells the model to go on without asking (None: by the trigger). A
    compaction the user asked for never does, whatever served it."""


def summary_request(split: Split, instructions: str | None = None) -> tuple[list[Message], str]:
    """What the summarizer is sent (`summary_input`) and the prompt for the split's direction; CompactionFailed
    when the span holds no message of the user's."""
    to_summarize = summary_input(split.to_summarize)
    if not any(m.role == "user" for m in to_summarize):
        raise CompactionFailed("There is nothing to summarize yet.")
    if to_summarize[0].role == "assistant":
        to_summarize.insert(0, user_text(FROM_MARKER))
    kind = split.direction if split.direction in ("from", "up_to") else "full"
    return to_summarize, compact_prompt(kind, instructions)


def rebuild(job: Compaction, summary_text: str, *, originals: Sequence[Message] = (),
            attachments: Callable[[Sequence[Message]], Sequence[Message]] = lambda kept: (),
            block: Block | None = None) -> CompactionResult:
    """The new live context of a summary: boundary, summary, pins, the kept messages and what
    `attachments` re-reads for them (before the boundary for a 'from' split, after it otherwise).
    Whatever wrote the summary, the coverage audit appends what it left out (context/audit.py),
    reading also the span's `originals`: its messages as first written, before a clearing or a
    persisting changed them, so an error line in a cleared result is still audited.
    `block`: the API wrote the summary (a compaction block, `summary_text` its summary); it opens
    the new context as the assistant message the API returned, and what ctx_magic's own summary
    message says around the summary follows it as a user message."""
    split, now = job.split, job.now
    auto = job.trigger in AUTO_TRIGGERS if job.auto is None else job.auto
    audit = audit_summary([*split.to_summarize, *originals], summary_text, transcript_path=job.transcript_path,
                          message_budget=int(job.threshold * MESSAGES_SHARE_OF_THRESHOLD))
    carried = [[m.uuid, m.text] for m in audit.carried]
    if block is None:
        summaries = [user_text(summary_message_text(summary_text, job.transcript_path, auto=auto,
                                                    partial=split.direction, audit=audit.text),
                               kind="summary", timestamp=now, user_messages=carried)]
    else:
        summaries = [Message("assistant", (block,), kind="summary", timestamp=now,
                             meta={"user_messages": carried, "summary_by": "api"}),
                     user_text(summary_note_text(job.transcript_path, auto=auto, audit=audit.text),
                               kind="summary", timestamp=now)]
    pinned = [pins_message(job.pins, now)] if job.pins else []
    kept_before = [without_usage(m) for m in split.kept_before]
    kept_after = [without_usage(m) for m in split.kept_after]
    extra = list(attachments([*kept_before, *kept_after]))
    summarized = [m for m in split.to_summarize if m.sent]
    count = sum(snipped_count(m) for m in summarized)
    boundary_meta = {
        "trigger": job.trigger,
        "direction": split.direction,
        "tokens_before": job.tokens_before,
        "messages_summarized": count,
        "previous_boundary": job.previous_boundary,
        "turns_since_previous": job.turns_since,
    }
    boundary = user_text(f"[compaction boundary: {job.trigger}]", kind="boundary", timestamp=now, **boundary_meta)
    if split.direction == "from":
        live = [*kept_before, boundary, *summaries, *pinned, *extra]
    else:
        live = [boundary, *summaries, *pinned, *kept_after, *extra]
    tokens_after = count_context(live, overhead_tokens=job.overhead_tokens, correction=job.correction).tokens
    boundary = Message(
        boundary.role, boundary.content, kind="boundary", uuid=boundary.uuid, timestamp=now,
        meta={**boundary_meta, "tokens_after": tokens_after},
    )
    live = [boundary if m.uuid == boundary.uuid else m for m in live]
    event = Compacted(
        trigger=job.trigger,
        tokens_before=job.tokens_before,
        tokens_after=tokens_after,
        messages_summarized=count,
        boundary_uuid=boundary.uuid,
        live_uuids=tuple(m.uuid for m in live),
        summary=summary_text,
        rebound=tokens_after >= job.threshold,
        summarized_uuids=tuple(m.uuid for m in summarized),
        audit=audit.report,
        pins=tuple(p.id for p in job.pins),
    )
    return CompactionResult(live, [boundary, *summaries, *pinned, *extra], event)
