"""Compaction as the loop runs it: auto (L4) with its circuit breaker (L6), manual (C8),
reactive (L5), the model's own `compact` tool, hooks (C9), rehydration (C7), cleanup (C10).

The engine (context/autocompact.py) decides and builds; this module supplies the model call,
the files to re-read and the hooks, and applies the result to the session.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ctx_magic.agent.session import Session
from ctx_magic.agent.tools import ToolError
from ctx_magic.context.audit import MESSAGES_SHARE_OF_THRESHOLD, audit_summary
from ctx_magic.context.autocompact import CompactionResult, compact_conversation
from ctx_magic.context.compaction_state import MAX_CONSECUTIVE_FAILURES
from ctx_magic.context.decide import COMPACT_FROM_NOTES, Plan
from ctx_magic.context.pins import pins_message
from ctx_magic.context.reactive import reactive_split
from ctx_magic.context.session_memory import WAIT_FOR_EXTRACTION_SECONDS, session_memory_compact
from ctx_magic.context.tokens import count_context, count_text
from ctx_magic.errors import CompactionFailed, ModelError, Remedy
from ctx_magic.events import AuditReport, BreakerReset, CompactionFailedEvent, Status
from ctx_magic.messages import Message, user_text

POST_COMPACT_MAX_FILES = 5
POST_COMPACT_MAX_TOKENS_PER_FILE = 5_000
POST_COMPACT_TOKEN_BUDGET = 50_000
MIN_TOKENS_PER_FILE = 200  # the C7 budgets shrink with the window (T5), never below a file's first lines


def rehydration(session: Session, kept: Sequence[Message]) -> list[Message]:
    """Attachments after a compaction (C7): recent files re-read fresh, within budget, and a
    note of the tools and the session's files."""
    visible = {
        str(session.files.resolve(b["input"].get("path", ""), must_exist=False))
        for m in kept for b in m.blocks("tool_use")
        if b.get("name") == "read_file" and isinstance(b.get("input"), dict) and _safe_path(session, b)
    }
    attachments: list[Message] = []
    # C7's 50,000 tokens of files would overflow a small window at once: they scale with it (T5).
    scale = session.context_settings().thresholds.scale
    budget = round(POST_COMPACT_TOKEN_BUDGET * scale)
    per_file = max(MIN_TOKENS_PER_FILE, round(POST_COMPACT_MAX_TOKENS_PER_FILE * scale))
    now = session.clock()
    own = session.store.root.resolve()  # the session's notes and saved outputs are not work files
    restored = 0
    for read in session.files.recent_reads(len(session.files.reads)):
        if restored == POST_COMPACT_MAX_FILES or budget <= 0:
            break
        if read.path in visible or Path(read.path).is_relative_to(own):
            continue
        text = _read_within(Path(read.path), min(per_file, budget))
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
    tools = ", ".join(session.frame.tools(cut=True).names())  # the context tools come in with this cut
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


def first_written(session: Session, span: Sequence[Message]) -> list[Message]:
    """The span's messages as the transcript first wrote them, where a layer changed them since
    (a cleared or persisted result): what the coverage audit must also read."""
    changed = {m.uuid for m in span if m.tool_result_ids and any(
        i in session.state.cleared or i in session.state.persisted for i in m.tool_result_ids)}
    if not changed:
        return []
    try:
        return [m for m in session.store.load_transcript().messages() if m.uuid in changed]
    except (OSError, ValueError):  # an unreadable transcript: the audit reads the live span alone
        return []


def _measure(session: Session):  # type: ignore[no-untyped-def]
    overhead = session.frame.overhead_tokens()
    correction = session.state.correction
    return lambda msgs: count_context(msgs, overhead_tokens=overhead, correction=correction).tokens


def _run_compaction(session: Session, trigger: str, *, direction: str = "full", split_at: int | None = None,
                    instructions: str | None = None) -> CompactionResult:
    for hook in session.hooks.pre_compact:
        added = hook(trigger, instructions)
        if added:
            instructions = f"{instructions}\n{added}" if instructions else added
    settings = session.context_settings()
    session.emit(Status("compacting", trigger))
    result = compact_conversation(
        session.messages,
        session.side_calls,
        trigger=trigger,
        now=session.clock(),
        transcript_path=str(session.store.transcript_path),
        tokens_before=session.live.tokens(),
        measure=_measure(session),
        threshold=settings.thresholds.autocompact,
        direction=direction,
        split_at=split_at,
        instructions=instructions,
        previous_boundary=session.compaction.previous_boundary,
        turns_since=session.compaction.turns_since_boundary,
        attachments=lambda kept: rehydration(session, kept),
        pins=session.pins,
        originals=lambda span: first_written(session, span),
    )
    return _apply(session, result, compaction_reason(session, trigger, instructions))


def compaction_reason(session: Session, trigger: str, instructions: str | None = None) -> str:
    """Why a compaction happens, in a few words, for the boundary's card in the panel."""
    asked = f": {instructions.strip()}" if instructions and instructions.strip() else ""
    if trigger == "manual":
        return "the user asked for it" + asked
    if trigger == "model":
        return "the agent asked for it" + asked
    if trigger == "reactive":
        return "the API refused the request as too long (prompt too long)"
    return session.live.plan.reason


def _apply(session: Session, result: CompactionResult, reason: str) -> CompactionResult:
    """Swap in the new context, record it, run the post-compact hooks and cleanup (C9, C10)."""
    result = dataclasses.replace(result, event=dataclasses.replace(result.event, reason=reason))
    session.compacted(result.new_messages, result.messages, result.event)
    for hook in session.hooks.post_compact:
        hook(result.event)
    for hook in session.hooks.session_start:
        text = hook("compact")
        if text:
            session.append(user_text(text, kind="attachment", timestamp=session.clock(), hook="SessionStart"))
    e = result.event
    if e.audit is not None and e.audit.added:
        session.notice(audit_line(e.audit), "info")
    if e.rebound:
        session.notice(f"After compaction the context is still {e.tokens_after:,} tokens, over the threshold.",
                       "warning")
    return result


def server_compacted(session: Session, answer: Message) -> list[Message] | None:
    """The API compacted (its compaction block opens `answer`): the session's live context starts
    there, and what follows ctx_magic's own summaries follows the API's too (issue 12): what the
    coverage audit finds missing from it, the pins word for word, the files and the kernel's state
    (C7). Returned, not appended: they go after the answer's tool results, which must follow it.
    None when `answer` holds no compaction."""
    first = answer.content[0] if answer.content else {}
    at = next((i for i, m in enumerate(session.messages) if m.uuid == answer.uuid), None)
    if first.get("type") != "compaction" or at is None:
        return None
    before = [m for m in session.messages[:at] if m.sent]
    threshold = session.context_settings().thresholds.autocompact
    audit = audit_summary([*before, *first_written(session, before)], str(first.get("content") or ""),
                          transcript_path=str(session.store.transcript_path),
                          message_budget=int(threshold * MESSAGES_SHARE_OF_THRESHOLD))
    event = session.server.compacted(answer, audit=audit.report, carried=[(m.uuid, m.text) for m in audit.carried],
                                     pins=[p.id for p in session.pins])
    if event is None:
        return None
    now = session.clock()
    followup = [user_text(audit.text, kind="attachment", timestamp=now, audit=True)] if audit.text else []
    followup += [pins_message(session.pins, now)] if session.pins else []
    if audit.report.added:
        session.notice(audit_line(audit.report), "info")
    return [*followup, *rehydration(session, session.messages)]


def audit_line(report: AuditReport) -> str:
    """One line on what the coverage audit appended after a summary."""
    parts = [f"{len(items)} of {checked} {what}" for items, checked, what in (
        (report.user_messages, report.user_messages_checked, "of your messages"),
        (report.paths, report.paths_checked, "file paths"),
        (report.errors, report.errors_checked, "error lines"),
        (report.names, report.names_checked, "names the code defined"),
    ) if items]
    return f"The summary left out {', '.join(parts)}: they were added after it ({report.tokens:,} tokens)."


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
    source = session.plugins.notes
    if source is None:
        return None
    source.wait(WAIT_FOR_EXTRACTION_SECONDS)
    current = source.current()
    if current is None:
        return None
    notes, covered = current
    session.emit(Status("compacting", "session memory"))
    result = session_memory_compact(
        session.messages, notes, covered,
        notes_path=str(session.store.session_memory_path),
        transcript_path=str(session.store.transcript_path),
        now=session.clock(),
        tokens_before=session.live.tokens(),
        measure=_measure(session),
        threshold=session.context_settings().thresholds.autocompact,
        previous_boundary=session.compaction.previous_boundary,
        turns_since=session.compaction.turns_since_boundary,
        attachments=lambda kept: rehydration(session, kept),
        auto=auto,
        pins=session.pins,
        originals=lambda span: first_written(session, span),
    )
    if result is not None:
        result = _apply(session, result, compaction_reason(session, "auto" if auto else "manual"))
    return result


def auto_compact(session: Session, plan: Plan) -> bool:
    """L4, carried out as the plan says (notes first when it lists them, then a summary); True
    when the context was compacted. A failed summary counts toward the breaker (L6)."""
    if COMPACT_FROM_NOTES in plan.compact and try_session_memory(session) is not None:
        return True
    try:
        _run_compaction(session, "auto", split_at=pending_prompt_index(session.messages))
    except CompactionFailed as error:
        state = session.compaction_failed()
        session.record(CompactionFailedEvent("auto", str(error), state.failures, state.breaker_open))
        if state.breaker_open:
            session.notice(f"Auto-compaction failed {state.failures} times in a row (the limit is "
                           f"{MAX_CONSECUTIVE_FAILURES}) and is off for this session.", "warning", Remedy.COMPACT)
        else:
            session.notice(f"Auto-compaction failed: {error}", "warning")
        return False
    return True


def manual_compact(session: Session, instructions: str | None = None, *, direction: str = "full",
                   index: int | None = None, trigger: str = "manual") -> CompactionResult:
    """%compact (C8) or the model's compact tool; a success resets the breaker (L6).

    A plain compaction (no instructions, the whole conversation) tries session memory first:
    notes cannot follow instructions, and a partial compaction has its own split.
    """
    if index is not None and not 0 <= index <= len(session.messages):
        raise CompactionFailed(f"Message {index} is outside the live context, which has {len(session.messages)} "
                               "messages (numbered from 0).")
    failures = session.compaction.failures
    result = None
    if trigger == "manual" and not instructions and direction == "full" and index is None:
        result = try_session_memory(session, auto=False)
    if result is None:
        result = _run_compaction(session, trigger, direction=direction, split_at=index, instructions=instructions)
    e = result.event
    if e.tokens_after >= e.tokens_before:
        session.notice(f"The summary and the files re-read after it are larger than what they replaced "
                       f"({e.tokens_before:,} → {e.tokens_after:,} tokens): compaction pays off on longer "
                       "conversations.", "info")
    if failures:
        session.record(BreakerReset("a manual compaction succeeded"))
    return result


def reactive_compact(session: Session) -> CompactionResult:
    """L5: summarize all but the last five messages (pairs intact) after a prompt-too-long."""
    try:
        return _run_compaction(session, "reactive", split_at=reactive_split(session.messages))
    except ModelError as error:
        raise CompactionFailed(str(error)) from error
