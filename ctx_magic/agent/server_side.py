"""What the API does to a session's requests under the 'server' strategy (context/server.py):
the clearings its edits report, and the compaction it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctx_magic.agent.model import ModelReply
from ctx_magic.context.audit import AuditReport
from ctx_magic.context.server import cleared_tokens
from ctx_magic.context.tokens import message_tokens
from ctx_magic.events import ServerCompacted, ServerEdited
from ctx_magic.messages import Message, user_text

SERVER_COMPACTION_MARKER = ("(The conversation before this point was compacted by the API; its summary opens the next "
                            "message.)")


class ServerEdits:
    """What the server's edits last cleared. The API re-applies them to every request while the
    client sends its full history, so the same clearing comes back each call: it is news (an
    event to record) only when it changed."""

    def __init__(self) -> None:
        self._cleared: tuple[tuple[Any, Any], ...] = ()

    def changed(self, reply: ModelReply) -> ServerEdited | None:
        cleared = tuple((e.get("type"), e.get("cleared_tool_uses", e.get("cleared_thinking_turns")))
                        for e in reply.applied_edits)
        if cleared == self._cleared:
            return None
        self._cleared = cleared
        if not reply.applied_edits:
            return None
        return ServerEdited(tuple(dict(e) for e in reply.applied_edits), cleared_tokens(reply.applied_edits),
                            reply.api_id)


def server_compaction(live: Sequence[Message], at: int, now: float, *, audit: AuditReport | None = None,
                      carried: Sequence[tuple[str, str]] = (),
                      pins: Sequence[str] = ()) -> tuple[Message, list[Message], ServerCompacted]:
    """The answer `live[at]` opens with the API's compaction block: the live context now starts
    there (behind a user marker, as the first message must be a user's); the messages before it
    leave the live context, the transcript keeps them. The marker carries the user's messages the
    API's summary now answers for (`carried`, audited again next time). Returns the marker, the
    new live context and the event."""
    answer, before = live[at], live[:at]
    marker = user_text(SERVER_COMPACTION_MARKER, kind="normal", timestamp=now, server_compaction=True,
                       **({"user_messages": [list(pair) for pair in carried]} if carried else {}))
    kept = [marker, *live[at:]]
    tokens_before = sum(message_tokens(m) for m in live if m.sent)
    tokens_after = sum(message_tokens(m) for m in kept if m.sent)
    event = ServerCompacted(answer.uuid, tuple(m.uuid for m in kept), str(answer.content[0].get("content") or ""),
                            tokens_before, tokens_after, sum(1 for m in before if m.sent),
                            tuple(m.uuid for m in before if m.sent), audit, tuple(pins))
    return marker, kept, event
