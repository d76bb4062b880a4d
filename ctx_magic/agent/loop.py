"""The turn loop: prepare (L1-L3) -> auto-compact if due (L4) -> call -> stream -> run tools ->
append results -> repeat until the model ends its turn.

A prompt-too-long from the API gets one reactive compaction per turn (L5); a 413 for bytes
gets its images stripped once. Every error a user can meet ends the turn with one clear
message and a valid conversation (SPEC M5, N5); an interrupt closes any open tool call.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctx_magic.agent import compaction
from ctx_magic.agent.files import ToolError
from ctx_magic.agent.model import ModelReply
from ctx_magic.agent.session import MAX_MODEL_CALLS_PER_TURN, Session
from ctx_magic.agent.tools import ToolCall, ToolOutput
from ctx_magic.context.budget import PREVIEW_CHARS, oversized_prompt, persisted_prompt, prompt_limit_tokens
from ctx_magic.context.engine import Prepared, clear_now
from ctx_magic.context.invariants import INTERRUPTED_RESULT
from ctx_magic.context.reactive import persist_oversized, strip_images
from ctx_magic.context.tokens import ContextCount
from ctx_magic.errors import CompactionFailed, CtxMagicError, PromptTooLong, RequestTooLarge, StreamDropped
from ctx_magic.events import ImagesStripped, ReplyRestarted, Status, TextDelta, ToolFinished, ToolStarted, UsageUpdated
from ctx_magic.messages import Block, Message, result_text, tool_result_block

STREAM_ATTEMPTS = 3  # a reply whose connection broke mid-stream is asked for again, twice at most


class ContextFull(CtxMagicError):
    """The context is past the blocking limit and could not be compacted."""


@dataclass
class TurnResult:
    prompt: str = ""
    text: str = ""
    error: str | None = None
    interrupted: bool = False
    model_calls: int = 0
    tool_calls: int = 0
    compactions: list[str] = field(default_factory=list)


def run_turn(session: Session, prompt: str | Sequence[Block]) -> TurnResult:
    """One turn of the conversation: the user's message and everything it leads to."""
    blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else list(prompt)
    result = TurnResult(prompt="\n".join(b.get("text", "") for b in blocks if b.get("type") == "text"))
    session.turns += 1
    try:
        session.append(Message("user", tuple(_fitted(session, blocks)), timestamp=session.clock()))
        _loop(session, result)
    except KeyboardInterrupt:
        result.interrupted = True
        session.notice("Interrupted: the conversation is intact; run %%agent again to go on.", "warning")
    except CtxMagicError as error:
        result.error = str(error)
        session.notice(str(error), "error")
    finally:
        session.emit(Status("idle"))
        session.end_turn()
    for callback in list(session.after_turn):
        try:
            callback(session, result)
        except Exception as error:  # noqa: BLE001 - a listener's failure must not fail the turn
            session.notice(f"An after-turn task failed: {error}", "warning")
    return result


def _fitted(session: Session, blocks: list[Block]) -> list[Block]:
    """The user's text blocks, each too large for the conversation saved to a file first."""
    threshold = session.engine_settings().thresholds.autocompact
    out: list[Block] = []
    for n, block in enumerate(blocks):
        text = block.get("text", "") if block.get("type") == "text" else ""
        if text and oversized_prompt(text, threshold):
            path = session.store.write_tool_result(f"prompt-{session.turns}-{n}", text)
            preview_chars = min(PREVIEW_CHARS, prompt_limit_tokens(threshold) * 2)
            block = {"type": "text", "text": persisted_prompt(str(path), text, preview_chars)}
            session.notice(f"Your message ({len(text):,} characters) is too large for the conversation: it was "
                           f"saved to {path}, and the agent sees its start and can read the rest.", "warning")
        out.append(block)
    return out


def _loop(session: Session, result: TurnResult) -> None:
    reactive_used = stripped = False
    for _ in range(MAX_MODEL_CALLS_PER_TURN):
        prepared = _checked(session, session.prepare())
        if prepared.compact_due and compaction.auto_compact(session):
            result.compactions.append("auto")
            prepared = session.prepare()
        if prepared.zone == "blocked":
            raise ContextFull(
                f"The context is full ({prepared.tokens:,} of {session.engine_settings().thresholds.window:,} "
                "tokens) and could not be compacted. Run %compact, or start over with %agent --new."
            )
        try:
            reply = _call(session, prepared.count)
        except PromptTooLong as error:
            if reactive_used:
                raise CtxMagicError(
                    f"{error} It happened again after compacting; the conversation is kept as it was. "
                    "Run %compact with instructions, or %agent --new."
                ) from error
            reactive_used = True
            session.notice(f"{error} Compacting and retrying once.", "warning")
            try:
                compaction.reactive_compact(session)
            except CompactionFailed as failure:
                raise CtxMagicError(f"{error} Compaction to recover failed too: {failure}") from failure
            result.compactions.append("reactive")
            continue
        except RequestTooLarge:
            if stripped:
                raise
            stripped = True
            _shrink_request(session)
            continue
        result.model_calls += 1
        result.tool_calls += len(reply.tool_uses)
        session.append(Message("assistant", reply.content, timestamp=session.clock(), api_id=reply.api_id,
                               usage=reply.usage))
        result.text = "\n".join(b.get("text", "") for b in reply.content if b.get("type") == "text")
        if not reply.tool_uses:
            return
        compact_request = _run_tools(session, reply, may_compact="model" not in result.compactions)
        if compact_request is not None:
            compaction.manual_compact(session, compact_request or None, trigger="model")
            result.compactions.append("model")
    session.notice(f"Stopped after {MAX_MODEL_CALLS_PER_TURN} model calls in one turn.", "warning")


def _checked(session: Session, prepared: Prepared) -> Prepared:
    """Past the threshold, an estimate is checked against the API's exact count (T3): a
    compaction the conversation does not need yet is a summary's worth of lost detail, and a
    refusal to send it would be worse. Without an estimated part the count is the API's own."""
    if not prepared.compact_due or prepared.count.estimated_tokens == 0:
        return prepared
    exact = session.exact_tokens()
    if exact is None:
        return prepared
    thresholds = session.engine_settings().thresholds
    return dataclasses.replace(prepared, compact_due=exact >= thresholds.autocompact, zone=thresholds.zone(exact))


def _call(session: Session, count: ContextCount) -> ModelReply:
    session.emit(Status("thinking"))
    for attempt in range(1, STREAM_ATTEMPTS + 1):
        try:
            reply = session.model.stream(session.request(), on_text=lambda text: session.emit(TextDelta(text)))
            break
        except StreamDropped as error:
            # The SDK retries a request that failed to start, not one that broke mid-reply; a
            # broken reply left nothing in the context, so asking again is safe.
            if attempt == STREAM_ATTEMPTS:
                raise
            session.emit(ReplyRestarted(attempt + 1, STREAM_ATTEMPTS, str(error)))
    session.record_usage(reply.usage)
    session.observe_cache(reply.usage)
    # What the estimate stood for, as the API billed it: the prompt less the anchored part (and
    # less what a clearing removed from that part, only while the same response anchors the count).
    actual_new = reply.usage.prompt_tokens - (count.anchor_tokens - count.freed_tokens)
    estimated_prompt = count.tokens
    correction = session.state.correction.observe(count.estimated_tokens, actual_new)
    session.state = dataclasses.replace(session.state, correction=correction)
    session.emit(UsageUpdated(reply.usage, estimated_prompt, session.state.correction.ratio,
                              dataclasses.asdict(session.usage), round(session.usage.cache_hit_ratio, 4)))
    return reply


def _shrink_request(session: Session) -> None:
    """A 413 for bytes (L5): images out, oversized results to disk; recorded before adopted (M2)."""
    session.notice("The request was larger than the API accepts; removing images, saving oversized outputs "
                   "to disk and retrying.", "warning")
    messages, changed = strip_images(session.messages)
    settings = session.engine_settings()
    messages, persisted = persist_oversized(messages, settings.persisted_path,
                                            max_chars=settings.budget.max_result_chars,
                                            preview_chars=settings.budget.preview_chars)
    for event in persisted:
        session.record_event(event)
    if changed:
        session.record_event(ImagesStripped(tuple(changed)))
    session.replace_live(messages)
    session.state = session.state.with_persisted(persisted)


# -- tools ------------------------------------------------------------------------------------


def _run_tools(session: Session, reply: ModelReply, *, may_compact: bool = True) -> str | None:
    """Run each tool call, append one results message; returns compact instructions if asked.

    The model may compact once a turn: a second request would summarize a summary.
    """
    outputs: list[Block] = []
    compact_request: str | None = None
    calls = [ToolCall(b["id"], b["name"], b.get("input") or {}) for b in reply.tool_uses]
    current: ToolCall | None = None
    try:
        for call in calls:
            current = call
            session.emit(ToolStarted(call.id, call.name, dict(call.input)))
            session.emit(Status("running", call.name))
            if call.name == "compact" and may_compact:
                compact_request = str(call.input.get("instructions") or "")
                output = ToolOutput("Compaction will run right after this step.")
            elif call.name == "compact":
                output = ToolOutput("The context was already compacted in this turn.", is_error=True)
            else:
                output = dispatch(session, call)
            outputs.append(tool_result_block(call.id, output.content or "(no output)", is_error=output.is_error))
            session.emit(ToolFinished(call.id, call.name, result_text(outputs[-1]), output.is_error))
    except KeyboardInterrupt as interrupt:
        done = {b["tool_use_id"] for b in outputs}
        partial = getattr(interrupt, "partial", "")
        for call in calls:
            if call.id in done:
                continue
            text = INTERRUPTED_RESULT
            if partial and current is not None and call.id == current.id:
                text += f"\n\n[output before the interrupt]\n{partial}"  # nothing it printed is lost
                session.emit(ToolFinished(call.id, call.name, text, True))
            outputs.append(tool_result_block(call.id, text, is_error=True))
        session.append(Message("user", tuple(outputs), timestamp=session.clock()))
        raise
    session.append(Message("user", tuple(outputs), timestamp=session.clock()))
    return compact_request


def dispatch(session: Session, call: ToolCall) -> ToolOutput:
    """Run one tool; any failure becomes an error result the model can read."""
    args = call.input
    try:
        if call.name == "read_file":
            return ToolOutput(session.files.read_file(
                str(args.get("path", "")), args.get("offset"), args.get("limit"),
                tool_use_id=call.id, is_live=session.is_live_result))
        if call.name == "list_files":
            return ToolOutput(session.files.list_files(args.get("path"), args.get("pattern")))
        if call.name == "grep":
            return ToolOutput(session.files.grep(str(args.get("pattern", "")), args.get("path")))
        if call.name == "snip":
            return _snip(session, args.get("tool_use_ids") or [])
        return session.executor.run(call)
    except ToolError as error:
        return ToolOutput(str(error), is_error=True)
    except (TypeError, ValueError) as error:
        return ToolOutput(f"Bad input for {call.name}: {error}. Input was {json.dumps(dict(args))[:300]}",
                          is_error=True)


def _snip(session: Session, ids: list[str]) -> ToolOutput:
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return ToolOutput("snip needs tool_use_ids: a list of tool_use id strings.", is_error=True)
    messages, state, events, unknown = clear_now(session.messages, session.state, ids, "model")
    session.apply_change(messages, state, events)
    cleared = [i for e in events for i in e.replacements]
    text = f"Cleared {len(cleared)} tool result(s) from the context; the transcript keeps them."
    if unknown:
        text += f" Not found, already cleared or protected: {', '.join(unknown)}."
    return ToolOutput(text, is_error=not cleared and bool(unknown))

