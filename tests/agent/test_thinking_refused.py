"""Thinking the API's prefix check refuses is never a dead end (agent/loop.py, agent/side_calls.py).

A model with preserved thinking (claude-sonnet-5-5, the rig's) checks that what came before each
thinking block sent back is what it was when the block was written. A history edited after the
fact earns a 400 on a new account; the session removes the refused thinking, says so in one
line, and the same turn goes on. Everything runs through the real SDK, over HTTP, against the
stand-in's own prefix check.
"""

from __future__ import annotations

import dataclasses

from agent_rig import prompt, rig

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import BINDING_BETA, AnthropicModel
from ctx_magic.context.invariants import check_invariants
from ctx_magic.events import Notice, ThinkingCleared
from ctx_magic.messages import Message
from ctx_magic.notebook.notices import thinking_cleared_line


def _edit_first_prompt(session) -> None:  # type: ignore[no-untyped-def]
    """Change the first user message after the answers to it were written (what a client that
    rewrites its history does): every thinking block after it fails the prefix check."""
    messages = list(session.live.messages)
    first = messages[0]
    messages[0] = first.with_content([{"type": "text", "text": first.text + " (edited afterwards)"}])
    session.live.replace(messages)


def _thinking_signatures(messages: list[Message]) -> set[str]:
    return {b["signature"] for m in messages for b in m.content if b.get("type") == "thinking"}


def _sent_signatures(record) -> set[str]:  # type: ignore[no-untyped-def]
    return {b.get("signature") for m in record.body["messages"] if isinstance(m.get("content"), list)
            for b in m["content"] if b.get("type") == "thinking"}


def _main_calls(api):  # type: ignore[no-untyped-def]
    """The conversation's calls (a refused request is of no kind: the stand-in did not read it)."""
    return [q for q in api.requests if q.path == "/v1/messages" and q.kind in ("normal", "other")]


def test_a_refused_prefix_is_recovered_in_the_same_turn_and_the_next_turn_is_accepted(tmp_path):
    with rig(tmp_path) as r:
        seen = []
        r.session.listeners.append(seen.append)
        for n in range(2):
            assert run_turn(r.session, prompt(n)).error is None
        before = _thinking_signatures(list(r.session.live.messages))
        assert before  # the model thinks by default: there is thinking to check
        _edit_first_prompt(r.session)
        calls = len(_main_calls(r.api))
        result = run_turn(r.session, "and what changed since?")
        assert run_turn(r.session, "one more question").error is None
        live = list(r.session.live.messages)
    assert result.error is None and result.text
    statuses = [q.status for q in _main_calls(r.api)[calls:]]
    assert statuses[0] == 400 and set(statuses[1:]) == {200}  # refused once, then every call accepted
    refused = _main_calls(r.api)[calls]
    assert {m["type"] for m in refused.thinking_mismatches} == {"thinking_refused"}
    assert all(not _sent_signatures(q) & before for q in _main_calls(r.api)[calls + 1:])  # never sent again
    cleared = [e for e in seen if isinstance(e, ThinkingCleared)]
    assert len(cleared) == 1 and cleared[0].trigger == "prefix-check" and cleared[0].blocks == len(before)
    assert "refused" in thinking_cleared_line(cleared[0]) and "\n" not in thinking_cleared_line(cleared[0])
    assert not [e for e in seen if isinstance(e, Notice) and e.level == "error"]
    assert _thinking_signatures(live)  # the answers written after the recovery keep their (valid) thinking
    check_invariants(live)


def test_the_refused_thinking_stays_out_after_a_resume(tmp_path):
    with rig(tmp_path) as r:
        run_turn(r.session, prompt(0))
        _edit_first_prompt(r.session)
        assert run_turn(r.session, prompt(1)).error is None
        refused = {b for b in _thinking_signatures(list(r.session.store.load_transcript().messages()))}
        live = _thinking_signatures(list(r.session.live.messages))
    assert refused - live  # the transcript keeps what the live context no longer sends
    assert live  # the new answer's thinking is live


def test_compact_works_when_the_history_holds_refused_thinking(tmp_path):
    """%compact right after the history was edited: the summary call is refused for the same
    thinking, asked again without any, and the next turn is accepted."""
    with rig(tmp_path) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        _edit_first_prompt(r.session)
        compacted = manual_compact(r.session)
        result = run_turn(r.session, "carry on")
    summaries = [q for q in r.api.requests if q.path == "/v1/messages" and q.kind == "compaction"]
    assert compacted.event.messages_summarized > 0
    assert [q.status for q in summaries][-1] == 200
    assert not _sent_signatures(summaries[-1])
    assert result.error is None and result.text


@dataclasses.dataclass
class DropBlockModel(AnthropicModel):
    """A model reached through a gateway that asks the API to drop failing thinking on every call."""

    def stream(self, request, on_text=None, *, on_thinking=None):  # type: ignore[no-untyped-def, override]
        return super().stream(request.dropping_invalid_thinking(), on_text, on_thinking=on_thinking)


def test_thinking_the_api_reports_dropped_is_sent_no_more(tmp_path):
    with rig(tmp_path) as r:
        r.session.frame.model = DropBlockModel(r.session.frame.model.client, name=r.session.frame.model.name)
        seen = []
        r.session.listeners.append(seen.append)
        run_turn(r.session, prompt(0))
        _edit_first_prompt(r.session)
        calls = len(_main_calls(r.api))
        assert run_turn(r.session, prompt(1)).error is None
        assert run_turn(r.session, prompt(2)).error is None
    after = _main_calls(r.api)[calls:]
    assert all(q.status == 200 and BINDING_BETA in q.betas for q in after)
    assert {m["type"] for m in after[0].thinking_mismatches} == {"thinking_dropped"}
    assert all(not q.thinking_mismatches for q in after[1:])  # the dropped blocks were not sent again
    cleared = [e for e in seen if isinstance(e, ThinkingCleared)]
    assert [e.trigger for e in cleared] == ["prefix-check"]


@dataclasses.dataclass
class ForeignThinkingGateway(AnthropicModel):
    """A gateway that opens every conversation with a turn of its own, whose thinking was written
    in another conversation: a block the client never had, so only the API can drop it."""

    foreign: tuple = ()

    def stream(self, request, on_text=None, *, on_thinking=None):  # type: ignore[no-untyped-def, override]
        opening = [{"role": "user", "content": "Context from the gateway."},
                   {"role": "assistant", "content": list(self.foreign)}]
        request = dataclasses.replace(request, messages=[*opening, *request.messages])
        return super().stream(request, on_text, on_thinking=on_thinking)


def test_a_refused_block_the_client_does_not_hold_is_dropped_by_the_api_and_the_turn_goes_on(tmp_path):
    with rig(tmp_path) as r:
        model = r.session.frame.model
        elsewhere = model.stream(dataclasses.replace(r.session.request(r.session.setup()), system=[
            {"type": "text", "text": "Another conversation."}], messages=[{"role": "user", "content": "hi"}]))
        r.session.frame.model = ForeignThinkingGateway(model.client, name=model.name, foreign=elsewhere.content)
        calls = len(_main_calls(r.api))
        seen = []
        r.session.listeners.append(seen.append)
        results = [run_turn(r.session, prompt(n)) for n in range(2)]
    assert [res.error for res in results] == [None, None]
    said = [e.text for e in seen if isinstance(e, Notice) and "does not hold" in e.text]
    assert said and all("\n" not in line for line in said)
    after = _main_calls(r.api)[calls:]
    refused = [n for n, q in enumerate(after) if q.status == 400]
    assert refused and all(after[n + 1].status == 200 and BINDING_BETA in after[n + 1].betas for n in refused)
    assert all("messages.1.content.0" in {m["path"] for m in after[n + 1].thinking_mismatches} for n in refused)
