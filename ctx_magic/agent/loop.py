"""The turn loop: prepare (budget, snip, the decision and its clearing) -> carry out the plan
(compaction) -> call -> stream -> run tools -> append results -> repeat until the model ends
its turn.

A prompt-too-long from the API gets one reactive compaction per turn; a 413 for bytes
gets its images stripped once; thinking the API refuses (its prefix check) leaves the live
context, and the call is made again (with the API asked to drop what still fails, at most once).
Every error a user can meet ends the turn with one clear message and a valid conversation; an
interrupt closes any open tool call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctx_magic.agent import compaction
from ctx_magic.agent.context_tools import search_session
from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.model import Model, ModelReply, ModelRequest, stream_reply
from ctx_magic.agent.request import CallSetup, RequestFrame
from ctx_magic.agent.session import Session
from ctx_magic.agent.tools import ToolCall, ToolOutput, ToolRegistry
from ctx_magic.agent.usage import COMPACTION_USAGE_META
from ctx_magic.context.budget import PREVIEW_CHARS, oversized_prompt, persisted_prompt, prompt_limit_tokens
from ctx_magic.context.engine import Prepared
from ctx_magic.context.invariants import INTERRUPTED_RESULT
from ctx_magic.context.reactive import persist_oversized, strip_images
from ctx_magic.context.thinking import PREFIX_META, drop_refused_thinking, keep_valid_thinking
from ctx_magic.context.tokens import OVERHEAD_META
from ctx_magic.errors import (
    CompactionFailed,
    ContextFull,
    CtxMagicError,
    ModelError,
    PromptTooLong,
    Remedy,
    RequestTooLarge,
    SummaryBlockRefused,
    ThinkingRefused,
)
from ctx_magic.events import (
    Event,
    ImagesStripped,
    ReplyRestarted,
    ReplyWithdrawn,
    Status,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
)
from ctx_magic.messages import Block, Message, result_text, says_something, tool_result_block

MAX_MODEL_CALLS_PER_TURN = 50  # bounds one turn however the model behaves
# Thinking refused by the prefix check: removed here and asked again, then asked once with the API
# dropping what still fails; a third refusal ends the turn.
THINKING_REFUSALS_PER_TURN = 2
EMPTY_REPLY_ATTEMPTS = 2  # an answer of nothing (or only whitespace) is asked for once more
EMPTY_REPLY = "The model's reply was empty"


@dataclass
class TurnResult:
    prompt: str = ""
    text: str = ""
    error: str | None = None
    remedy: Remedy = Remedy.NONE
    interrupted: bool = False
    model_calls: int = 0
    tool_calls: int = 0
    compactions: list[str] = field(default_factory=list)
    cost_usd: float = 0.0
    """What the turn's calls cost (main and side calls made during it), at the model's prices."""

    def record_call(self) -> None:
        """The model answered one more call."""
        self.model_calls += 1

    def record_tool_calls(self, count: int) -> None:
        """An answer asked for `count` tool calls."""
        self.tool_calls += count

    def record_answer(self, content: Sequence[Block]) -> None:
        """The text of the latest answer is the turn's text."""
        self.text = "\n".join(b.get("text", "") for b in content if b.get("type") == "text")

    def interrupt(self) -> None:
        self.interrupted = True

    def fail(self, error: str, remedy: Remedy) -> None:
        self.error, self.remedy = error, remedy

    def finish(self, cost_usd: float) -> None:
        """The turn is over, having cost `cost_usd`."""
        self.cost_usd = cost_usd


class Turn:
    """One turn in progress: what its tools may ask of it (the ToolContext)."""

    def __init__(self, session: Session, result: TurnResult) -> None:
        self.session = session
        self._live, self._store = session.live, session.store
        self.result = result
        self.compact_request: str | None = None
        self._setup: CallSetup | None = None
        """The setup of the model call whose tool calls are running."""

    def is_live_result(self, tool_use_id: str) -> bool:
        return self._live.is_live_result(tool_use_id)

    def clear_results(self, tool_use_ids: list[str]) -> tuple[list[str], list[str]]:
        setup = self._setup if self._setup is not None else self.session.setup()
        return self._live.clear_results(tool_use_ids, "model", setup)

    def ask_compaction(self, instructions: str) -> bool:
        if "model" in self.result.compactions or self.compact_request is not None:
            return False
        self.compact_request = instructions
        return True

    def take_compact_request(self) -> str | None:
        """The compaction the model asked for, if it did (asked once: the request is cleared)."""
        instructions, self.compact_request = self.compact_request, None
        return instructions

    def search_transcript(self, **query: Any) -> str:
        return search_session(self._store, **query)

    def emit(self, event: Event) -> None:
        self.session.emit(event)

    def run_tools(self, reply: ModelReply, setup: CallSetup) -> None:
        """Run each tool call of `reply` (the answer to the call made with `setup`) and append one
        message with all their results."""
        session, self._setup = self.session, setup
        registry: ToolRegistry = setup.tools
        outputs: list[Block] = []
        calls = [ToolCall(b["id"], b["name"], b.get("input") or {}) for b in reply.tool_uses]
        current: ToolCall | None = None
        try:
            for call in calls:
                current = call
                session.emit(ToolStarted(call.id, call.name, dict(call.input)))
                session.emit(Status("running", call.name))
                output: ToolOutput = registry.run(call, self)
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
        session.take_news()  # after the results: a tool result must come first in its message


def run_turn(session: Session, prompt: str | Sequence[Block]) -> TurnResult:
    """One turn of the conversation: the user's message and everything it leads to."""
    blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else list(prompt)
    result = TurnResult(prompt="\n".join(b.get("text", "") for b in blocks if b.get("type") == "text"))
    session.begin_turn()
    meter, store, turns = session.meter, session.store, session.compaction
    spent_before = meter.snapshot().cost_usd
    try:
        session.take_news()  # before the user's words, which stay the last thing the model reads
        fitted = _fitted(session, session.setup(), blocks, lambda n, text: store.write_tool_result(
            f"prompt-{turns.turns}-{n}", text))
        session.append(Message("user", tuple(fitted), timestamp=session.clock()))
        _loop(session, Turn(session, result))
    except KeyboardInterrupt:
        result.interrupt()
        session.notice("Interrupted: the conversation is intact.", "warning", Remedy.RUN_AGAIN)
    except CtxMagicError as error:
        result.fail(str(error), error.remedy)
        session.notice(str(error), "error", error.remedy)
    finally:
        result.finish(meter.snapshot().cost_usd - spent_before)
        session.emit(Status("idle"))
        session.end_turn()
    session.turn_ended(result)
    return result


def _fitted(session: Session, setup: CallSetup, blocks: list[Block], save: Callable[[int, str], Path]
            ) -> list[Block]:
    """The user's text blocks, each too large for the conversation saved to a file first (`save`
    writes the `n`th block's text)."""
    threshold = setup.context.thresholds.autocompact
    out: list[Block] = []
    for n, block in enumerate(blocks):
        text = block.get("text", "") if block.get("type") == "text" else ""
        if text and oversized_prompt(text, threshold):
            path = save(n, text)
            preview_chars = min(PREVIEW_CHARS, prompt_limit_tokens(threshold) * 2)
            block = {"type": "text", "text": persisted_prompt(str(path), text, preview_chars)}
            session.notice(f"Your message ({len(text):,} characters) is too large for the conversation: it was "
                           f"saved to {path}, and the agent sees its start and can read the rest.", "warning")
        out.append(block)
    return out


def _loop(session: Session, turn: Turn) -> None:
    result, live, frame, replies = turn.result, session.live, session.frame, session.replies
    reactive_used = stripped = False
    empty = refusals = 0
    for _ in range(MAX_MODEL_CALLS_PER_TURN):
        setup, prepared = _ready(session, live, frame, result)
        request = session.request(setup)
        if refusals:  # the client's own removal did not do: the API drops what fails, this once
            request = request.dropping_invalid_thinking()
        try:
            reply = _call(session, frame.model, request)
            replies.learn(reply, prepared.count, setup)
        except SummaryBlockRefused as error:
            frame.summaries.refuse(error)
            continue
        except ThinkingRefused as error:
            refusals += 1
            if refusals > THINKING_REFUSALS_PER_TURN:
                raise
            if not _drop_refused_thinking(live, request, [(error.message_index, error.block_index)]):
                refusals = THINKING_REFUSALS_PER_TURN  # not a block of ours: only the API can drop it
            continue
        except PromptTooLong as error:
            if reactive_used:
                raise CtxMagicError(f"{error} It happened again after compacting; the conversation is kept as it "
                                    "was.", remedy=Remedy.COMPACT_WITH_INSTRUCTIONS_OR_NEW) from error
            reactive_used = True
            session.notice(f"{error} Compacting and retrying once.", "warning")
            try:
                compaction.reactive_compact(session)
            except CompactionFailed as failure:
                raise CtxMagicError(f"{error} Compaction to recover failed too: {failure}",
                                    remedy=failure.remedy) from failure
            result.compactions.append("reactive")
            continue
        except RequestTooLarge:
            if stripped:
                raise
            stripped = True
            _shrink_request(session, live, setup)
            continue
        result.record_call()
        refusals = 0
        if not says_something(reply.content):
            # Stored, an empty answer would break every later request (the API refuses empty
            # messages); asked again, the model usually answers.
            empty += 1
            if empty < EMPTY_REPLY_ATTEMPTS:
                session.emit(ReplyRestarted(empty + 1, EMPTY_REPLY_ATTEMPTS, f"{EMPTY_REPLY}."))
                continue
            session.notice(f"{EMPTY_REPLY} {EMPTY_REPLY_ATTEMPTS} times; nothing was stored.", "warning",
                           Remedy.RUN_AGAIN)
            return
        result.record_tool_calls(len(reply.tool_uses))
        meta = {**written_by(frame.model), OVERHEAD_META: setup.overhead_tokens, PREFIX_META: setup.signature}
        if reply.compaction_usage:
            meta[COMPACTION_USAGE_META] = [part.to_json() for part in reply.compaction_usage]
        answer = Message("assistant", reply.content, timestamp=session.clock(), api_id=reply.api_id,
                         usage=reply.usage, meta=meta)
        session.append(answer)
        if reply.invalid_thinking:
            # Dropped by the API (or let through), so not to be sent again; the answer's own thinking
            # goes with them, as its prefix held them: sent without them, it would fail in turn.
            if not _drop_refused_thinking(live, request, [_position(path) for path in reply.invalid_thinking]):
                session.notice(f"The API dropped {len(reply.invalid_thinking)} thinking block(s) this session does "
                               "not hold (added on the way to it) because they were bound to another conversation.")
        after_server = compaction.server_compacted(session, answer)
        if after_server is not None:
            result.compactions.append("server")
        result.record_answer(reply.content)
        if reply.tool_uses:
            turn.run_tools(reply, setup)
        for message in after_server or ():  # after the results: they must follow the answer's tool uses
            session.append(message)
        if not reply.tool_uses:
            return
        instructions = turn.take_compact_request()
        if instructions is not None:
            compaction.manual_compact(session, instructions or None, trigger="model")
            result.compactions.append("model")
    session.notice(f"Stopped after {MAX_MODEL_CALLS_PER_TURN} model calls in one turn.", "warning")


def written_by(model: Model) -> dict[str, str]:
    """Which model, on which provider, wrote an answer (its thinking blocks are bound to them)."""
    meta = {"model": model.name}
    provider = model.provider
    if provider != "anthropic":
        meta["provider"] = provider
    return meta


def _ready(session: Session, live: LiveContext, frame: RequestFrame,
           result: TurnResult) -> tuple[CallSetup, Prepared]:
    """The call's setup (the conversation's, worked out once) and the context prepared, the
    decision carried out: compacted when the plan says so. Prepared again only where the prefix
    changed: the first cut brought the context tools in, or a compaction replaced the context.

    Past the threshold by estimate, the API's exact count is asked first: a compaction the
    conversation does not need yet is a summary's worth of lost detail.
    """
    setup = session.setup()
    prepared, _ = session.prepare(setup)
    if frame.context_tools and not setup.context_tools:
        # The first cut (a clearing, a snip) brought the context tools in: measured again with them.
        setup = session.setup()
        prepared, _ = session.prepare(setup)
    plan = prepared.plan
    if plan.check_exact:
        exact = session.exact_tokens(setup)
        if exact is not None:
            plan = live.replan(prepared, exact)
    if plan.compact and compaction.auto_compact(session, plan):
        result.compactions.append("auto")
        setup = session.setup()
        prepared, _ = session.prepare(setup)
        plan = prepared.plan
    if plan.zone == "blocked" and not setup.server_compacts:  # the API compacts what is sent to it
        raise ContextFull(f"The context is full ({plan.tokens_after:,} of {setup.window.tokens:,} tokens) and could "
                          "not be compacted.", remedy=Remedy.COMPACT_OR_NEW)
    return setup, prepared


def _call(session: Session, model: Model, request: ModelRequest) -> ModelReply:
    """One whole reply (a stream that broke off is asked for again, model.stream_reply); when
    none comes, what the broken attempts showed in the cell is withdrawn."""
    session.emit(Status("thinking"))
    try:
        reply = stream_reply(model, request,
                             on_text=lambda text: session.emit(TextDelta(text)),
                             on_thinking=lambda text: session.emit(ThinkingDelta(text)),
                             restarted=lambda attempt, attempts, error: session.emit(
                                 ReplyRestarted(attempt, attempts, str(error))),
                             sleep=session.sleep)
    except ModelError as error:
        session.emit(ReplyWithdrawn(str(error)))
        raise
    return reply


def _position(path: str) -> tuple[int, int]:
    """(message, block) of an API path such as 'messages.3.content.0' ((-1, -1) for another)."""
    parts = path.split(".")
    if len(parts) == 4 and parts[0] == "messages" and parts[2] == "content" and parts[1].isdigit() \
            and parts[3].isdigit():
        return int(parts[1]), int(parts[3])
    return -1, -1


def _drop_refused_thinking(live: LiveContext, request: ModelRequest, positions: Sequence[tuple[int, int]]) -> bool:
    """The thinking the API refused at `positions` of `request`, and every later thinking block,
    out of the live context (recorded, and said in one line by the event); False when none of
    those blocks is there to remove."""
    sent = request.messages
    refused = [block for m, b in positions if 0 <= m < len(sent)
               for block in _content(sent[m])[b:b + 1] if b >= 0]
    messages, event = drop_refused_thinking(live.messages, refused)
    if event is None:
        return False
    live.adopt(messages, live.state, [event])
    return True


def _content(message: Any) -> list[Block]:
    content = message.get("content") if isinstance(message, dict) else None
    return list(content) if isinstance(content, list) else []


def _shrink_request(session: Session, live: LiveContext, setup: CallSetup) -> None:
    """A 413 for bytes: images out, oversized results to disk; recorded before adopted."""
    session.notice("The request was larger than the API accepts; removing images, saving oversized outputs "
                   "to disk and retrying.", "warning")
    messages, changed = strip_images(live.messages)
    settings = setup.context
    messages, persisted = persist_oversized(messages, settings.persisted_path,
                                            max_chars=settings.budget.max_result_chars,
                                            preview_chars=settings.budget.preview_chars)
    for event in persisted:
        session.record(event)
    if changed:
        session.record(ImagesStripped(tuple(changed)))
    if setup.window.append_only:  # what came before the thinking after the first change is not what it was
        messages, dropped = keep_valid_thinking(live.messages, messages)
        if dropped is not None:
            session.record(dropped)
    live.replace(messages, live.state.with_persisted(persisted))
