"""What the API does to a session's requests under the 'server' strategy (context/server.py):
the edits it is asked for, the clearings it reports, the compaction it returns.

Owned by the session (`session.server`); it changes the session only through the session's
methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ctx_magic.context.audit import AuditReport
from ctx_magic.context.server import ServerPlan, cleared_tokens, server_plan
from ctx_magic.context.tokens import message_tokens
from ctx_magic.events import ServerCompacted, ServerEdited
from ctx_magic.messages import Message, user_text

if TYPE_CHECKING:
    from ctx_magic.agent.model import Model, ModelReply
    from ctx_magic.agent.request import RequestFrame
    from ctx_magic.agent.usage import UsageMeter
    from ctx_magic.context.engine import ContextSettings
    from ctx_magic.events import Event
    from ctx_magic.settings import Settings, Window
    from ctx_magic.store.recorder import Recorder

SERVER_COMPACTION_MARKER = ("(The conversation before this point was compacted by the API; its summary opens the next "
                            "message.)")


class Live(Protocol):
    """The live context, as the server side swaps it (agent/live.py's LiveContext)."""

    def replace(self, messages: Sequence[Message]) -> None: ...


class Host(Protocol):
    """What the server side reads and calls of its session (agent/session.py's Session)."""

    frame: RequestFrame
    meter: UsageMeter
    recorder: Recorder
    clock: Callable[[], float]

    @property
    def settings(self) -> Settings: ...
    @property
    def window(self) -> Window: ...
    @property
    def model(self) -> Model: ...
    @property
    def messages(self) -> tuple[Message, ...]: ...
    def context_settings(self) -> ContextSettings: ...
    def record(self, event: Event) -> None: ...
    @property
    def live(self) -> Live: ...


class ServerSide:
    def __init__(self, session: Host) -> None:
        self.session = session
        self._cleared: tuple[tuple[Any, Any], ...] = ()
        """What the server's edits last cleared (a new ServerEdited is recorded when it changes)."""

    def plan(self) -> ServerPlan | None:
        """What the API takes over under the 'server' strategy (None under 'client')."""
        session = self.session
        if session.settings.strategy != "server":
            return None
        context = session.context_settings()
        tools = session.frame.tools()
        thinking = session.window.thinking != "off" or any(
            b.get("type") in ("thinking", "redacted_thinking") for m in session.messages for b in m.content)
        return server_plan(warning=context.thresholds.warning, autocompact=context.thresholds.autocompact,
                           keep_recent=context.keep_recent, clear_at_least=context.clear_threshold,
                           thinking=thinking, supported=session.model.limits().context_edits, tools=tools.names(),
                           clearable_tools=tools.clearable())

    def compacts(self) -> bool:
        """Whether the API compacts this session's requests (the 'server' strategy, where the
        model takes it): then ctx_magic neither auto-compacts nor refuses a request as blocked."""
        plan = self.plan()
        return plan is not None and plan.server_compacts

    def edited(self, reply: ModelReply) -> None:
        """The server's edits, recorded when they changed: the API re-applies them to every request
        while the client sends its full history, so the same clearing comes back each call."""
        cleared = tuple((e.get("type"), e.get("cleared_tool_uses", e.get("cleared_thinking_turns")))
                        for e in reply.applied_edits)
        if cleared == self._cleared:
            return
        self._cleared = cleared
        if reply.applied_edits:
            self.session.record(ServerEdited(tuple(dict(e) for e in reply.applied_edits),
                                             cleared_tokens(reply.applied_edits), reply.api_id))
            self.session.meter.expect_break()  # the server's clearing rewrote the prefix it caches

    def compacted(self, message: Message, *, audit: AuditReport | None = None,
                  carried: Sequence[tuple[str, str]] = (), pins: Sequence[str] = ()) -> ServerCompacted | None:
        """An answer that opens with the API's compaction block: the live context now starts
        there (behind a user marker, as the first message must be a user's, M5); the messages
        before it leave the live context, the transcript keeps them. The marker carries the
        user's messages the API's summary now answers for (`carried`, audited again next time)."""
        session = self.session
        block = message.content[0] if message.content else {}
        if block.get("type") != "compaction" or message.uuid not in {m.uuid for m in session.messages}:
            return None
        live = list(session.messages)
        at = next(i for i, m in enumerate(live) if m.uuid == message.uuid)
        before = live[:at]
        marker = user_text(SERVER_COMPACTION_MARKER, kind="normal", timestamp=session.clock(), server_compaction=True,
                           **({"user_messages": [list(pair) for pair in carried]} if carried else {}))
        session.recorder.message(marker)
        kept = [marker, *live[at:]]
        tokens_before = sum(message_tokens(m) for m in live if m.sent)
        tokens_after = sum(message_tokens(m) for m in kept if m.sent)
        event = ServerCompacted(message.uuid, tuple(m.uuid for m in kept), str(block.get("content") or ""),
                                tokens_before, tokens_after, sum(1 for m in before if m.sent),
                                tuple(m.uuid for m in before if m.sent), audit, tuple(pins))
        session.record(event)
        session.live.replace(kept)
        session.meter.freed("compacted", tokens_before - tokens_after)
        return event
