"""Compaction as the loop runs it: auto (L4) with its circuit breaker (L6), manual (C8),
reactive (L5), the model's own `compact` tool, hooks (C9), rehydration (C7), cleanup (C10).

The engine (context/autocompact.py) decides and builds; this module supplies the model call,
the files to re-read and the hooks, and applies the result to the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ctx_magic.agent.files import ToolError
from ctx_magic.agent.session import Session
from ctx_magic.context.autocompact import CompactionResult, compact_conversation
from ctx_magic.context.reactive import reactive_split
from ctx_magic.context.session_memory import WAIT_FOR_EXTRACTION_SECONDS, session_memory_compact
from ctx_magic.context.tokens import count_context, count_text
from ctx_magic.errors import CompactionFailed, ModelError
from ctx_magic.events import BreakerReset, CompactionFailedEvent, Status
from ctx_magic.messages import Message, user_text

MAX_CONSECUTIVE_FAILURES = 3  # autoCompact.ts: 1,279 sessions once failed 50+ times in a row
POST_COMPACT_MAX_FILES = 5
POST_COMPACT_MAX_TOKENS_PER_FILE = 5_000
POST_COMPACT_TOKEN_BUDGET = 50_000
SUMMARY_MAX_OUTPUT = 20_000  # C3: the summary's output cap (p99.99 of summaries is 17,387)


class ModelSummarizer:
    """The compaction call: the main loop's system prompt and tools, tool use forbidden (C3)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def summarize(self, messages: Sequence[Message], prompt: str) -> str:
        session = self.session
        request = session.request(
            [*messages, user_text(prompt)],
            purpose="compact",
            tool_choice={"type": "none"},
            max_tokens=min(SUMMARY_MAX_OUTPUT, session.max_output()),
        )
        session.in_side_call = True
        try:
            reply = session.model.stream(request)
        finally:
            session.in_side_call = False
        session.record_usage(reply.usage)
        if reply.tool_uses:
            raise CompactionFailed("The summary reply tried to call a tool.")
        return "\n".join(b.get("text", "") for b in reply.content if b.get("type") == "text")


def rehydration(session: Session, kept: Sequence[Message]) -> list[Message]:
    """Attachments after a compaction (C7): recent files re-read fresh, within budget, and a
    note of the tools and the session's files."""
    visible = {
        str(session.files.resolve(b["input"].get("path", ""), must_exist=False))
        for m in kept for b in m.blocks("tool_use")
        if b.get("name") == "read_file" and isinstance(b.get("input"), dict) and _safe_path(session, b)
    }
    attachments: list[Message] = []
    budget = POST_COMPACT_TOKEN_BUDGET
    now = session.clock()
    own = session.store.root.resolve()  # the session's notes and saved outputs are not work files
    restored = 0
    for read in session.files.recent_reads(len(session.files.reads)):
        if restored == POST_COMPACT_MAX_FILES or budget <= 0:
            break
        if read.path in visible or Path(read.path).is_relative_to(own):
            continue
        text = _read_within(Path(read.path), min(POST_COMPACT_MAX_TOKENS_PER_FILE, budget))
        if text is None:
            continue
        restored += 1
        budget -= count_text(text)
        body = f'<recent-file path="{read.path}">\n{text}\n</recent-file>'
        attachments.append(user_text(body, kind="attachment", timestamp=now, rehydrated=read.path))
    extra = getattr(session.executor, "context_attachments", None)
    notes = list(extra()) if callable(extra) else []
    if session.store.session_memory_path.exists():
        notes.append(f"Session notes are kept at {session.store.session_memory_path} (read_file to see them).")
    tools = ", ".join(spec["name"] for spec in session.tool_specs())
    notes.append(f"Tools available: {tools}.")
    body = "\n\n".join(notes)
    attachments.append(user_text(f"<context-refresh>\n{body}\n</context-refresh>", kind="attachment", timestamp=now))
    return attachments


def _safe_path(session: Session, block: dict) -> bool:
    try:
        session.files.resolve(block["input"].get("path", ""), must_exist=False)
    except ToolError:
        return False
    return True


def _read_within(path: Path, max_tokens: int) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if count_text(text) <= max_tokens:
        return text
    cut = max_tokens * 4
    while cut > 0 and count_text(text[:cut]) > max_tokens:
        cut = int(cut * 0.8)
    return text[:cut] + f"\n[truncated to about {max_tokens:,} tokens; read_file shows the rest]"


def _run_compaction(session: Session, trigger: str, *, direction: str = "full", split_at: int | None = None,
                    instructions: str | None = None) -> CompactionResult:
    for hook in session.hooks.pre_compact:
        added = hook(trigger, instructions)
        if added:
            instructions = f"{instructions}\n{added}" if instructions else added
    settings = session.engine_settings()
    overhead = session.overhead_tokens()
    session.emit(Status("compacting", trigger))
    result = compact_conversation(
        session.messages,
        ModelSummarizer(session),
        trigger=trigger,
        now=session.clock(),
        transcript_path=str(session.store.transcript_path),
        tokens_before=session.tokens(),
        measure=lambda msgs: count_context(msgs, overhead_tokens=overhead, correction=session.state.correction).tokens,
        threshold=settings.thresholds.autocompact,
        direction=direction,
        split_at=split_at,
        instructions=instructions,
        previous_boundary=session.boundaries[-1]["boundary_uuid"] if session.boundaries else None,
        turns_since=session.turns - session.turns_at_boundary,
        attachments=lambda kept: rehydration(session, kept),
    )
    _apply(session, result)
    return result


def _apply(session: Session, result: CompactionResult) -> None:
    """Swap in the new context, record it, run the post-compact hooks and cleanup (C9, C10)."""
    for message in result.new_messages:
        session.record_message(message)
    session.record_event(result.event)
    session.replace_live(list(result.messages))
    session.turns_at_boundary = session.turns
    e = result.event
    session.boundaries.append({"trigger": e.trigger, "tokens_before": e.tokens_before, "tokens_after": e.tokens_after,
                               "messages_summarized": e.messages_summarized, "summary": e.summary,
                               "boundary_uuid": e.boundary_uuid})
    for hook in session.hooks.post_compact:
        hook(result.event)
    for hook in session.hooks.session_start:
        text = hook("compact")
        if text:
            session.append(user_text(text, kind="attachment", timestamp=session.clock(), hook="SessionStart"))
    if e.rebound:
        session.notice(f"After compaction the context is still {e.tokens_after:,} tokens, over the threshold.",
                       "warning")


def pending_prompt_index(messages: Sequence[Message]) -> int | None:
    """Index of the user's prompt awaiting an answer, kept verbatim after an auto summary."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not message.sent:
            continue
        if message.role == "user" and message.kind == "normal" and not message.tool_result_ids:
            return index
        return None
    return None


def try_session_memory(session: Session, *, auto: bool = True) -> CompactionResult | None:
    """Session-memory compaction (S3): the notes as the summary, zero model calls; None when
    there are no usable notes or the result would still be over the threshold."""
    source = session.notes_source
    if source is None:
        return None
    source.wait(WAIT_FOR_EXTRACTION_SECONDS)
    current = source.current()
    if current is None:
        return None
    notes, covered = current
    overhead = session.overhead_tokens()
    session.emit(Status("compacting", "session memory"))
    result = session_memory_compact(
        session.messages, notes, covered,
        notes_path=str(session.store.session_memory_path),
        transcript_path=str(session.store.transcript_path),
        now=session.clock(),
        tokens_before=session.tokens(),
        measure=lambda msgs: count_context(msgs, overhead_tokens=overhead, correction=session.state.correction).tokens,
        threshold=session.engine_settings().thresholds.autocompact,
        previous_boundary=session.boundaries[-1]["boundary_uuid"] if session.boundaries else None,
        turns_since=session.turns - session.turns_at_boundary,
        attachments=lambda kept: rehydration(session, kept),
        auto=auto,
    )
    if result is not None:
        _apply(session, result)
    return result


def auto_compact(session: Session) -> bool:
    """L4 with the recursion guard and the breaker; True when the context was compacted.

    Session memory is tried first (no model call), the LLM summary second.
    """
    if session.in_side_call or session.breaker_open:
        return False
    if try_session_memory(session) is not None:
        session.failures = 0
        return True
    try:
        _run_compaction(session, "auto", split_at=pending_prompt_index(session.messages))
    except CompactionFailed as error:
        session.failures += 1
        open_now = session.breaker_open
        session.record_event(CompactionFailedEvent("auto", str(error), session.failures, open_now))
        if open_now:
            session.notice(f"Auto-compaction failed {session.failures} times in a row and is off for this "
                           "session; run %compact to compact by hand.", "warning")
        else:
            session.notice(f"Auto-compaction failed: {error}", "warning")
        return False
    session.failures = 0
    return True


def manual_compact(session: Session, instructions: str | None = None, *, direction: str = "full",
                   index: int | None = None, trigger: str = "manual") -> CompactionResult:
    """%compact (C8) or the model's compact tool; a success resets the breaker (L6).

    A plain %compact (no instructions, the whole conversation) tries session memory first:
    notes cannot follow instructions, and a partial compaction has its own split.
    """
    if index is not None and not 0 <= index <= len(session.messages):
        option = "--from" if direction == "from" else "--up-to"
        raise CompactionFailed(f"{option} {index} is outside the live context, which has {len(session.messages)} "
                               "messages (numbered from 0).")
    result = None
    if trigger == "manual" and not instructions and direction == "full" and index is None:
        result = try_session_memory(session, auto=False)
    if result is None:
        result = _run_compaction(session, trigger, direction=direction, split_at=index, instructions=instructions)
    e = result.event
    if e.tokens_after >= e.tokens_before:
        session.notice(f"The summary and the files re-read after it are larger than what they replaced "
                       f"({e.tokens_before:,} -> {e.tokens_after:,} tokens): compaction pays off on longer "
                       "conversations.", "info")
    if session.failures:
        session.failures = 0
        session.record_event(BreakerReset("a manual compaction succeeded"))
    return result


def reactive_compact(session: Session) -> CompactionResult:
    """L5: summarize all but the last five messages (pairs intact) after a prompt-too-long."""
    try:
        return _run_compaction(session, "reactive", split_at=reactive_split(session.messages))
    except ModelError as error:
        raise CompactionFailed(str(error)) from error
