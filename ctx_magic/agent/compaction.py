"""Compaction as the loop runs it: auto with its circuit breaker, manual (whole or partial),
reactive after a prompt-too-long, the model's own `compact` tool, from the session's notes;
the hooks, the files re-read after a summary and the cleanup. A whole summary is the API's where
the backend writes one on demand (agent/on_demand.py), ctx_magic's own side call otherwise; what
follows the API's own compaction is agent/after_server.py's.

Each compaction is one value (context/autocompact.Compaction) built once from the session;
the engine summarizes and rebuilds, a `Compactor` supplies the model call, the files to re-read
and the hooks, and hands the result to the session, which applies it. The Compactor is given
the session's parts it works with (`CompactionParts`, taken from the session in one place); of
the session itself it asks only its own verbs (the clock, events, the setup, the figures, and
the compaction state it alone writes).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from ctx_magic.agent.after_server import AfterServerCompaction
from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.on_demand import OnDemand
from ctx_magic.agent.pin_board import PinBoard
from ctx_magic.agent.plugins import Hooks, Plugins, PreCompactVerdict
from ctx_magic.agent.rehydration import Rehydrator
from ctx_magic.agent.request import CallSetup, RequestFrame
from ctx_magic.agent.session import Session
from ctx_magic.context.audit import audit_line
from ctx_magic.context.autocompact import (
    Compaction,
    CompactionResult,
    Split,
    Summarize,
    plan_split,
    rebuild,
    summarize_with_retries,
    summary_request,
)
from ctx_magic.context.compaction_state import MAX_CONSECUTIVE_FAILURES
from ctx_magic.context.decide import COMPACT_FROM_NOTES, Plan
from ctx_magic.context.notes import WAIT_FOR_EXTRACTION_SECONDS, compact_from_notes, notes_split
from ctx_magic.context.prompts import extract_summary
from ctx_magic.context.reactive import reactive_split
from ctx_magic.errors import CompactionFailed, ModelError, Remedy
from ctx_magic.events import BreakerReset, CompactionFailedEvent, Status
from ctx_magic.messages import Message, user_text
from ctx_magic.store.session import SessionDir


@dataclass(frozen=True)
class CompactionParts:
    """The parts of a session its compactions work with beside its verbs, taken from it in one
    place (`of`), as the notebook's controller hands its parts theirs."""

    live: LiveContext
    store: SessionDir
    frame: RequestFrame
    summarize: Summarize
    """ctx_magic's own summary: the side call that writes it."""
    on_demand: OnDemand
    """The API's own summary, where the model and provider take it."""
    hooks: Hooks
    pin_board: PinBoard
    plugins: Plugins
    """Where the session notes keeper is, when one runs."""
    rehydrator: Rehydrator

    @classmethod
    def of(cls, session: Session) -> CompactionParts:
        live, store, frame, side_calls = session.live, session.store, session.frame, session.side_calls
        return cls(live, store, frame, side_calls.summarize, session.on_demand, session.hooks, session.pin_board,
                   session.plugins, Rehydrator(session.files, store, frame.executor, live, session.clock))


class Compactor:
    """The compactions of one session, made with the parts they touch."""

    def __init__(self, session: Session, parts: CompactionParts) -> None:
        self._session, self._live, self._store, self._frame = session, parts.live, parts.store, parts.frame
        self._summarize, self._on_demand, self._pin_board = parts.summarize, parts.on_demand, parts.pin_board
        self._hooks, self._plugins, self._rehydrator = parts.hooks, parts.plugins, parts.rehydrator

    def _job(self, setup: CallSetup, split: Split, trigger: str, auto: bool | None = None) -> Compaction:
        """The compaction of `split`, with what the session builds its new context with."""
        live, compaction = self._live, self._session.compaction
        # A compaction cuts the context, which brings the context tools in: the size after it counts
        # their definitions, as the next request will.
        after = setup if setup.context_tools else self._session.setup(context_tools=True)
        return Compaction(
            split, trigger, now=self._session.clock(), tokens_before=live.tokens(setup.overhead_tokens),
            threshold=setup.context.thresholds.autocompact, transcript_path=str(self._store.transcript_path),
            overhead_tokens=after.overhead_tokens, correction=live.state.correction,
            previous_boundary=compaction.previous_boundary, turns_since=compaction.turns_since_boundary,
            pins=self._pin_board.pins, auto=auto)

    def pre_compact(self, trigger: str, instructions: str | None) -> PreCompactVerdict:
        """The PreCompact hooks, given the context's figures. A veto holds back only an automatic
        compaction (auto); any other is asked for or forced, so the veto is said and overridden."""
        verdict = self._hooks.run_pre_compact(trigger, instructions, self._session.status().report())
        if verdict.veto is not None and trigger != "auto":
            self._session.notice(f"A PreCompact hook vetoed this compaction ({verdict.veto.reason}); overridden: it "
                                 f"was {'asked for' if trigger in ('manual', 'model') else 'forced by the API'}.",
                                 "warning")
        return verdict

    # -- with a summary, or from the notes -------------------------------------------------------

    def summarize(self, trigger: str, *, direction: str = "full", split_at: int | None = None,
                  instructions: str | None = None, hooked: bool = False) -> CompactionResult:
        """A compaction with a summary: the model asked, the new context built and applied.
        CompactionFailed leaves the conversation as it was. `hooked`: the PreCompact hooks already ran."""
        if not hooked:
            instructions = self.pre_compact(trigger, instructions).instructions
        setup = self._session.setup()
        self._session.emit(Status("compacting", trigger))
        job = self._job(setup, plan_split(self._live.messages, direction, split_at), trigger)
        messages, prompt = summary_request(job.split, instructions)
        full = direction == "full"  # the API's summary cannot cut what it summarizes: a whole one only
        block = self._on_demand.summary(job.split, setup, prompt, self._live.state.correction) if full else None
        if block is not None:
            content = str(block["content"])
            summary = extract_summary(content) or content
        else:
            summary = summarize_with_retries(self._summarize, messages, prompt)
        result = rebuild(job, summary, originals=self._rehydrator.first_written(job.split.to_summarize),
                         attachments=functools.partial(self._rehydrator.attachments, setup), block=block)
        return self._apply(result, self.reason(trigger, instructions))

    def reason(self, trigger: str, instructions: str | None = None) -> str:
        """Why a compaction happens, in a few words, for the boundary's card in the panel."""
        asked = f": {instructions.strip()}" if instructions and instructions.strip() else ""
        if trigger == "manual":
            return "the user asked for it" + asked
        if trigger == "model":
            return "the agent asked for it" + asked
        if trigger == "reactive":
            return "the API refused the request as too long (prompt too long)"
        return self._live.plan.reason

    def _apply(self, result: CompactionResult, reason: str) -> CompactionResult:
        """Swap in the new context, record it, run the post-compact and session-start hooks."""
        session = self._session
        result = dataclasses.replace(result, event=dataclasses.replace(result.event, reason=reason))
        session.compacted(result.new_messages, result.messages, result.event)
        if self._frame.window.append_only:  # kept messages follow the summary now: their thinking's prefix is gone
            self._live.drop_thinking("compaction")
        for hook in self._hooks.post_compact:
            hook(result.event)
        for hook in self._hooks.session_start:
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

    def from_notes(self, *, auto: bool = True) -> CompactionResult | None:
        """Session-memory compaction: the notes as the summary, zero model calls; None when there
        are no usable notes or the result would still be over the threshold."""
        source = self._plugins.notes
        if source is None:
            return None
        source.wait(WAIT_FOR_EXTRACTION_SECONDS)
        current = source.current()
        if current is None:
            return None
        notes, covered = current
        self._session.emit(Status("compacting", "session memory"))
        setup = self._session.setup()
        split = notes_split(self._live.messages, notes, covered, setup.context.thresholds.autocompact)
        if split is None:
            return None
        job = self._job(setup, split, "session-memory", auto)
        result = compact_from_notes(job, notes, str(self._store.notes_path),
                                    originals=self._rehydrator.first_written(split.to_summarize),
                                    attachments=functools.partial(self._rehydrator.attachments, setup))
        if result is not None:
            result = self._apply(result, self.reason("auto" if auto else "manual"))
        return result

    def auto(self, plan: Plan) -> bool:
        """Auto-compaction, carried out as the plan says (notes first when it lists them, then a
        summary); True when the context was compacted. A failed summary counts toward the breaker.
        A PreCompact hook's veto holds it back, in one line, unless the context is past the blocking
        limit: then it compacts anyway and says the veto was overridden."""
        session = self._session
        verdict = self.pre_compact("auto", None)
        if verdict.veto is not None:
            if plan.zone != "blocked":
                if self._hooks.veto_news(session.compaction):  # said once a turn; each call asks again
                    session.notice(f"A PreCompact hook held back the automatic compaction: {verdict.veto.reason}",
                                   "warning")
                return False
            session.notice(f"A PreCompact hook vetoed the automatic compaction ({verdict.veto.reason}); overridden: "
                           "the context is past the blocking limit.", "warning")
        if COMPACT_FROM_NOTES in plan.compact and self.from_notes() is not None:
            return True
        try:
            self.summarize("auto", split_at=pending_prompt_index(self._live.messages),
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

    def manual(self, instructions: str | None = None, *, direction: str = "full", index: int | None = None,
               trigger: str = "manual") -> CompactionResult:
        """%compact (whole or partial) or the model's compact tool; a success resets the breaker.

        A plain compaction (no instructions, the whole conversation) tries session memory first:
        notes cannot follow instructions, and a partial compaction has its own split.
        """
        session, live = self._session, self._live.messages
        if index is not None and not 0 <= index <= len(live):
            raise CompactionFailed(f"Message {index} is outside the live context, which has {len(live)} "
                                   "messages (numbered from 0).")
        before = session.compaction  # the breaker as it stood
        result = None
        if trigger == "manual" and not instructions and direction == "full" and index is None:
            result = self.from_notes(auto=False)
        if result is None:
            result = self.summarize(trigger, direction=direction, split_at=index, instructions=instructions)
        e = result.event
        if e.tokens_after >= e.tokens_before:
            larger = "larger than" if e.tokens_after > e.tokens_before else "as large as"
            session.notice(f"The context after compaction is {larger} before it ({e.tokens_before:,} → "
                           f"{e.tokens_after:,} tokens: the summary, what is re-read after it, the agent's context "
                           "tools): compaction pays off on longer conversations.", "info")
        if before.failures:
            session.record(BreakerReset("a manual compaction succeeded"))
        return result

    def reactive(self) -> CompactionResult:
        """After a prompt-too-long: summarize all but the last five messages (pairs intact)."""
        try:
            return self.summarize("reactive", split_at=reactive_split(self._live.messages))
        except ModelError as error:
            raise CompactionFailed(str(error)) from error


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


def compactor(session: Session) -> Compactor:
    """The session's compactions, given its parts."""
    return Compactor(session, CompactionParts.of(session))


def server_compacted(session: Session, answer: Message) -> list[Message] | None:
    """What follows the API's own compaction, if `answer` opens with one (after_server.py)."""
    parts = CompactionParts.of(session)
    return AfterServerCompaction(session, parts.live, parts.store, parts.pin_board, parts.rehydrator).followup(answer)


def notes_compaction(session: Session, *, auto: bool = True) -> CompactionResult | None:
    """Session-memory compaction (Compactor.from_notes)."""
    return compactor(session).from_notes(auto=auto)


def auto_compact(session: Session, plan: Plan) -> bool:
    """Auto-compaction as the plan says (Compactor.auto); True when the context was compacted."""
    return compactor(session).auto(plan)


def manual_compact(session: Session, instructions: str | None = None, *, direction: str = "full",
                   index: int | None = None, trigger: str = "manual") -> CompactionResult:
    """%compact (whole or partial) or the model's compact tool (Compactor.manual)."""
    return compactor(session).manual(instructions, direction=direction, index=index, trigger=trigger)


def reactive_compact(session: Session) -> CompactionResult:
    """After a prompt-too-long (Compactor.reactive)."""
    return compactor(session).reactive()
