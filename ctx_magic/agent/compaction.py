"""Compaction as the loop runs it: auto with its circuit breaker, manual (whole or partial),
reactive after a prompt-too-long, the model's own `compact` tool, from the session's notes,
and what follows the API's own compaction; the hooks, the files re-read after a summary and
the cleanup.

Each compaction is one value (context/autocompact.Compaction) built once from the session;
the engine summarizes and rebuilds, this module supplies the model call, the files to re-read
and the hooks, and applies the result to the session.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

from ctx_magic.agent.plugins import PreCompactVerdict
from ctx_magic.agent.request import CallSetup
from ctx_magic.agent.server_side import server_compaction
from ctx_magic.agent.session import Session
from ctx_magic.agent.tools import ToolError
from ctx_magic.agent.usage import COMPACTION_USAGE_META
from ctx_magic.context.audit import MESSAGES_SHARE_OF_THRESHOLD, audit_summary
from ctx_magic.context.autocompact import (
    Compaction,
    CompactionResult,
    Split,
    plan_split,
    rebuild,
    summarize_with_retries,
    summary_request,
)
from ctx_magic.context.compaction_state import MAX_CONSECUTIVE_FAILURES
from ctx_magic.context.decide import COMPACT_FROM_NOTES, Plan
from ctx_magic.context.notes import WAIT_FOR_EXTRACTION_SECONDS, compact_from_notes, notes_split
from ctx_magic.context.pins import pins_message
from ctx_magic.context.reactive import reactive_split
from ctx_magic.context.tokens import Correction, count_context, count_text
from ctx_magic.errors import CompactionFailed, ModelError, Remedy
from ctx_magic.events import AuditReport, BreakerReset, CompactionFailedEvent, ServerCompacted, Status
from ctx_magic.messages import Message, Usage, user_text

POST_COMPACT_MAX_FILES = 5
POST_COMPACT_MAX_TOKENS_PER_FILE = 5_000
POST_COMPACT_TOKEN_BUDGET = 50_000
MIN_TOKENS_PER_FILE = 200  # the re-read budgets shrink with the window, never below a file's first lines


def rehydration(session: Session, setup: CallSetup, kept: Sequence[Message]) -> list[Message]:
    """Attachments after a compaction: recent files re-read fresh, within budget, and a note of
    the tools and the session's files."""
    calls = [b["input"] for m in kept for b in m.blocks("tool_use")
             if b.get("name") == "read_file" and isinstance(b.get("input"), dict)]
    visible = {path for path in (_resolved(session, call) for call in calls) if path is not None}
    attachments: list[Message] = []
    # 50,000 tokens of files would overflow a small window at once: they scale with it.
    scale = setup.context.thresholds.scale
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
    notes = list(session.frame.executor.context_attachments())
    if session.store.notes_path.exists():
        notes.append(f"Session notes are kept at {session.store.notes_path} (read_file to see them).")
    tools = ", ".join(setup.tool_names_after_cut())  # the context tools come in with this cut
    notes.append(f"Tools available: {tools}.")
    body = "\n\n".join(notes)
    attachments.append(user_text(f"<context-refresh>\n{body}\n</context-refresh>", kind="attachment", timestamp=now))
    return attachments


def _resolved(session: Session, tool_input: dict) -> str | None:
    """Where a read_file call's path leads (None: outside the session's folders)."""
    try:
        return str(session.files.resolve(tool_input.get("path", ""), must_exist=False))
    except ToolError:
        return None


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
        i in session.live.state.cleared or i in session.live.state.persisted for i in m.tool_result_ids)}
    if not changed:
        return []
    try:
        return [m for m in session.store.load_transcript().messages() if m.uuid in changed]
    except (OSError, ValueError):  # an unreadable transcript: the audit reads the live span alone
        return []


def _job(session: Session, setup: CallSetup, split: Split, trigger: str, auto: bool | None = None) -> Compaction:
    """The compaction of `split`, with what the session builds its new context with."""
    live, compaction = session.live, session.compaction
    # A compaction cuts the context, which brings the context tools in: the size after it counts
    # their definitions, as the next request will.
    after = setup if setup.context_tools else session.frame.setup(live.messages, session.store, context_tools=True)
    return Compaction(
        split, trigger, now=session.clock(), tokens_before=live.tokens(setup.overhead_tokens),
        threshold=setup.context.thresholds.autocompact, transcript_path=str(session.store.transcript_path),
        overhead_tokens=after.overhead_tokens, correction=live.state.correction,
        previous_boundary=compaction.previous_boundary, turns_since=compaction.turns_since_boundary,
        pins=session.pin_board.pins, auto=auto)


def pre_compact(session: Session, trigger: str, instructions: str | None) -> PreCompactVerdict:
    """The PreCompact hooks, given the context's figures. A veto holds back only an automatic
    compaction (auto_compact); any other is asked for or forced, so the veto is said and overridden."""
    verdict = session.hooks.run_pre_compact(trigger, instructions, session.report())
    if verdict.veto is not None and trigger != "auto":
        session.notice(f"A PreCompact hook vetoed this compaction ({verdict.veto.reason}); overridden: it was "
                       f"{'asked for' if trigger in ('manual', 'model') else 'forced by the API'}.", "warning")
    return verdict


def _summarize(session: Session, trigger: str, *, direction: str = "full", split_at: int | None = None,
               instructions: str | None = None, hooked: bool = False) -> CompactionResult:
    """A compaction with a summary: the model asked, the new context built and applied.
    CompactionFailed leaves the conversation as it was. `hooked`: the PreCompact hooks already ran."""
    if not hooked:
        instructions = pre_compact(session, trigger, instructions).instructions
    setup = session.setup()
    session.emit(Status("compacting", trigger))
    job = _job(session, setup, plan_split(session.live.messages, direction, split_at), trigger)
    messages, prompt = summary_request(job.split, instructions)
    summary = summarize_with_retries(session.side_calls.summarize, messages, prompt)
    result = rebuild(job, summary, originals=first_written(session, job.split.to_summarize),
                     attachments=functools.partial(rehydration, session, setup))
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
    """Swap in the new context, record it, run the post-compact and session-start hooks."""
    result = dataclasses.replace(result, event=dataclasses.replace(result.event, reason=reason))
    session.compacted(result.new_messages, result.messages, result.event)
    if session.frame.window.append_only:  # kept messages follow the summary now: their thinking's prefix is gone
        session.live.drop_thinking("compaction")
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
    there, and what follows ctx_magic's own summaries follows the API's too: what the coverage
    audit finds missing from it, the pins word for word, the files and the kernel's state.
    Returned, not appended: they go after the answer's tool results, which must follow it.
    None when `answer` holds no compaction."""
    live = session.live.messages
    first = answer.content[0] if answer.content else {}
    at = next((i for i, m in enumerate(live) if m.uuid == answer.uuid), None)
    if first.get("type") != "compaction" or at is None:
        return None
    before = [m for m in live[:at] if m.sent]
    setup = session.setup()
    pins = session.pin_board.pins
    audit = audit_summary([*before, *first_written(session, before)], str(first.get("content") or ""),
                          transcript_path=str(session.store.transcript_path),
                          message_budget=int(setup.context.thresholds.autocompact * MESSAGES_SHARE_OF_THRESHOLD))
    marker, kept, event = server_compaction(live, at, session.clock(), audit=audit.report, pins=[p.id for p in pins],
                                            carried=[(m.uuid, m.text) for m in audit.carried])
    event = dataclasses.replace(event, **_server_figures(answer, kept, setup, session.live.state.correction, event))
    session.recorder.message(marker)
    session.record(event)
    session.live.replace(kept)
    session.meter.freed("compacted", event.tokens_before - event.tokens_after)
    now = session.clock()
    followup = [user_text(audit.text, kind="attachment", timestamp=now, audit=True)] if audit.text else []
    followup += [pins_message(pins, now)] if pins else []
    if audit.report.added:
        session.notice(audit_line(audit.report), "info")
    return [*followup, *rehydration(session, setup, session.live.messages)]


def _server_figures(answer: Message, kept: Sequence[Message], setup: CallSetup, correction: Correction,
                    event: ServerCompacted) -> dict[str, int]:
    """The server compaction's sizes as `%ctx status` counts the context (system prompt and tools
    included): before, what the API's compaction call read (its own count, billed with the
    answer); after, the context the answer leaves, anchored on the answer's usage."""
    parts = answer.meta.get(COMPACTION_USAGE_META) or []
    before = Usage.from_json(parts[0]).prompt_tokens if parts and isinstance(parts[0], Mapping) else (
        event.tokens_before + setup.overhead_tokens)
    after = count_context(kept, overhead_tokens=setup.overhead_tokens, correction=correction).tokens
    return {"tokens_before": before, "tokens_after": after}


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


def notes_compaction(session: Session, *, auto: bool = True) -> CompactionResult | None:
    """Session-memory compaction: the notes as the summary, zero model calls; None when there are
    no usable notes or the result would still be over the threshold."""
    source = session.plugins.notes
    if source is None:
        return None
    source.wait(WAIT_FOR_EXTRACTION_SECONDS)
    current = source.current()
    if current is None:
        return None
    notes, covered = current
    session.emit(Status("compacting", "session memory"))
    setup = session.setup()
    split = notes_split(session.live.messages, notes, covered, setup.context.thresholds.autocompact)
    if split is None:
        return None
    job = _job(session, setup, split, "session-memory", auto)
    result = compact_from_notes(job, notes, str(session.store.notes_path),
                                originals=first_written(session, split.to_summarize),
                                attachments=functools.partial(rehydration, session, setup))
    if result is not None:
        result = _apply(session, result, compaction_reason(session, "auto" if auto else "manual"))
    return result


def auto_compact(session: Session, plan: Plan) -> bool:
    """Auto-compaction, carried out as the plan says (notes first when it lists them, then a
    summary); True when the context was compacted. A failed summary counts toward the breaker.
    A PreCompact hook's veto holds it back, in one line, unless the context is past the blocking
    limit: then it compacts anyway and says the veto was overridden."""
    verdict = pre_compact(session, "auto", None)
    if verdict.veto is not None:
        if plan.zone != "blocked":
            session.veto_noticed(f"A PreCompact hook held back the automatic compaction: {verdict.veto.reason}")
            return False
        session.notice(f"A PreCompact hook vetoed the automatic compaction ({verdict.veto.reason}); overridden: "
                       "the context is past the blocking limit.", "warning")
    if COMPACT_FROM_NOTES in plan.compact and notes_compaction(session) is not None:
        return True
    try:
        _summarize(session, "auto", split_at=pending_prompt_index(session.live.messages),
                   instructions=verdict.instructions, hooked=True)
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
    """%compact (whole or partial) or the model's compact tool; a success resets the breaker.

    A plain compaction (no instructions, the whole conversation) tries session memory first:
    notes cannot follow instructions, and a partial compaction has its own split.
    """
    if index is not None and not 0 <= index <= len(session.live.messages):
        raise CompactionFailed(f"Message {index} is outside the live context, which has {len(session.live.messages)} "
                               "messages (numbered from 0).")
    failures = session.compaction.failures
    result = None
    if trigger == "manual" and not instructions and direction == "full" and index is None:
        result = notes_compaction(session, auto=False)
    if result is None:
        result = _summarize(session, trigger, direction=direction, split_at=index, instructions=instructions)
    e = result.event
    if e.tokens_after >= e.tokens_before:
        larger = "larger than" if e.tokens_after > e.tokens_before else "as large as"
        session.notice(f"The context after compaction is {larger} before it ({e.tokens_before:,} → "
                       f"{e.tokens_after:,} tokens: the summary, what is re-read after it, the agent's context "
                       "tools): compaction pays off on longer conversations.", "info")
    if failures:
        session.record(BreakerReset("a manual compaction succeeded"))
    return result


def reactive_compact(session: Session) -> CompactionResult:
    """After a prompt-too-long: summarize all but the last five messages (pairs intact)."""
    try:
        return _summarize(session, "reactive", split_at=reactive_split(session.live.messages))
    except ModelError as error:
        raise CompactionFailed(str(error)) from error
