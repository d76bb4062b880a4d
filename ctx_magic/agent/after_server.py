"""What follows the API's own compaction (the 'server' strategy): the session's live context starts
at its compaction block, and what follows ctx_magic's own summaries follows the API's too: what the
coverage audit finds missing from it, the pins word for word, the files and the kernel's state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.pin_board import PinBoard
from ctx_magic.agent.rehydration import Rehydrator
from ctx_magic.agent.request import CallSetup
from ctx_magic.agent.server_side import server_compaction
from ctx_magic.agent.session import Session
from ctx_magic.agent.usage import COMPACTION_USAGE_META
from ctx_magic.context.audit import MESSAGES_SHARE_OF_THRESHOLD, audit_line, audit_summary
from ctx_magic.context.pins import pins_message
from ctx_magic.context.tokens import Correction, count_context
from ctx_magic.events import ServerCompacted
from ctx_magic.messages import Message, Usage, user_text
from ctx_magic.store.session import SessionDir


class AfterServerCompaction:
    """The session's side of the API's compactions, made with the parts it touches; of the session
    itself it asks only its verbs (the clock, the setup, a notice, and the compaction it records)."""

    def __init__(self, session: Session, live: LiveContext, store: SessionDir, pin_board: PinBoard,
                 rehydrator: Rehydrator) -> None:
        self._session = session
        self._live = live
        self._store = store
        self._pin_board = pin_board
        self._rehydrator = rehydrator

    def followup(self, answer: Message) -> list[Message] | None:
        """The API compacted (its compaction block opens `answer`): the session's live context
        starts there, and what follows ctx_magic's own summaries follows the API's too: what the
        coverage audit finds missing from it, the pins word for word, the files and the kernel's
        state. Returned, not appended: they go after the answer's tool results, which must follow
        it. None when `answer` holds no compaction."""
        session, live = self._session, self._live.messages
        first = answer.content[0] if answer.content else {}
        at = next((i for i, m in enumerate(live) if m.uuid == answer.uuid), None)
        if first.get("type") != "compaction" or at is None:
            return None
        before = [m for m in live[:at] if m.sent]
        setup = session.setup()
        pins = self._pin_board.pins
        audit = audit_summary([*before, *self._rehydrator.first_written(before)], str(first.get("content") or ""),
                              transcript_path=str(self._store.transcript_path),
                              message_budget=int(setup.context.thresholds.autocompact * MESSAGES_SHARE_OF_THRESHOLD))
        marker, kept, event = server_compaction(live, at, session.clock(), audit=audit.report,
                                                pins=[p.id for p in pins],
                                                carried=[(m.uuid, m.text) for m in audit.carried])
        event = dataclasses.replace(event, **_server_figures(answer, kept, setup, self._live.state.correction, event))
        session.compacted([marker], kept, event)
        now = session.clock()
        followup = [user_text(audit.text, kind="attachment", timestamp=now, audit=True)] if audit.text else []
        followup += [pins_message(pins, now)] if pins else []
        if audit.report.added:
            session.notice(audit_line(audit.report), "info")
        return [*followup, *self._rehydrator.attachments(setup, self._live.messages)]


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
