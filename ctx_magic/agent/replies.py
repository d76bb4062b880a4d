"""What a main call's answer teaches the session: its usage and cost, the cache watch, the
estimate's correction, and what the server's edits did to the request (the 'server' strategy)."""

from __future__ import annotations

from collections.abc import Callable

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.model import ModelReply
from ctx_magic.agent.request import CallSetup, RequestFrame
from ctx_magic.agent.server_side import ServerEdits
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.server import cleared_tokens
from ctx_magic.context.tokens import ContextCount
from ctx_magic.events import Event, UsageUpdated


class ReplyLearner:
    """Takes each main-loop answer into the parts it teaches: the meter, the frame, the live context."""

    def __init__(self, frame: RequestFrame, live: LiveContext, meter: UsageMeter, clock: Callable[[], float],
                 record: Callable[[Event], None], emit: Callable[[Event], None]) -> None:
        self._frame = frame
        self._live = live
        self._meter = meter
        self._clock = clock
        self._record = record
        self._emit = emit
        self._server_edits = ServerEdits()

    def learn(self, reply: ModelReply, count: ContextCount, setup: CallSetup) -> None:
        """A main-loop answer: its usage and cost, the cache watch, the estimate's correction,
        and what the server's edits did to the request (the 'server' strategy)."""
        cost = self._meter.add(reply.usage)
        for part in reply.compaction_usage:  # a server compaction's own call, billed with this answer
            cost += self._meter.add(part, call=False)
        self._meter.count_savings(cleared_tokens(reply.applied_edits))
        edited = self._server_edits.changed(reply)
        if edited is not None:
            self._record(edited)
            self._meter.expect_break()  # the server's clearing rewrote the prefix it caches
        self._meter.main_call(reply.usage.prompt_tokens)
        frame_changed = self._frame.sent(self._live.messages, setup)
        broke = self._meter.observe(reply.usage, self._clock(), ttl_seconds=setup.settings.cache_ttl_seconds,
                                    signature=setup.signature)
        if broke is not None:
            self._emit(broke)
        if not frame_changed:  # new tools or system prompt: the API's count moved by more than the messages
            self._live.learn_ratio(reply.usage.prompt_tokens, count)
        totals = self._meter.snapshot()
        self._emit(UsageUpdated(reply.usage, count.tokens, self._live.state.correction.ratio, totals.to_json(),
                                round(totals.cache_hit_ratio, 4), round(cost, 6)))
