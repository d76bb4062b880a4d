"""The 'server' strategy: ctx_magic's own settings mapped onto the API's
context edits and server compaction, which the offline stand-in applies deterministically; the
edits are recorded and shown, the compaction block goes back unchanged, and what the API does
not do (the transcript, resume, savings) stays ctx_magic's."""

from __future__ import annotations

import dataclasses
import json

from agent_rig import rig

from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.session import open_session
from ctx_magic.context.server import (
    COMPACTION_BETA,
    CONTEXT_MANAGEMENT_BETA,
    MIN_SERVER_COMPACTION_TRIGGER,
    server_plan,
)
from ctx_magic.events import Cleared, Compacted, ServerCompacted, ServerEdited, UsageUpdated
from ctx_magic.messages import Usage
from ctx_magic.notebook.panel_link import replayed
from ctx_magic.offline.app import OfflineConfig
from ctx_magic.offline.server_context import CLEARED_RESULT
from ctx_magic.prices import model_prices
from ctx_magic.settings import Settings
from ctx_magic.ui.marks import CellIndex
from ctx_magic.ui.panel import ContextPanel

SERVER = Settings(strategy="server")


def big(n: int) -> str:
    """A turn whose code prints about 14,000 tokens in two runs, each under the tool-result budget's limit (50,000
    characters scaled to the 100,000-token window: 25,000)."""
    # Words and a run of letters: about 24 tokens a line with Claude's tokenizer and with o200k alike.
    run = f"```python\nprint('\\n'.join(f'row {n}-{{i}}: ' + 'data ' * 8 + 'x' * 9 for i in range(300)))\n```"
    return f"Turn {n}: dump batch {n}.\n{run}\n{run}"


def main_calls(api) -> list:  # type: ignore[no-untyped-def]
    return [q for q in api.requests if q.path == "/v1/messages"]


def test_the_edits_are_ctx_magics_own_settings():
    plan = server_plan(warning=162_904, autocompact=182_904, keep_recent=5, clear_at_least=20_000, thinking=True,
                       supported=("clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112"),
                       tools=("python", "read_file", "memory", "snip"), clearable_tools=("python", "read_file"))
    assert plan.context_management == {"edits": [
        {"type": "clear_thinking_20251015", "keep": "all"},  # Claude Code: every thinking turn stays while active
        {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 162_904},
         "keep": {"type": "tool_uses", "value": 5}, "clear_at_least": {"type": "input_tokens", "value": 20_000},
         "exclude_tools": ["memory", "snip"]},
        {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 182_904}},
    ]}
    assert plan.betas == (CONTEXT_MANAGEMENT_BETA, COMPACTION_BETA) and plan.server_compacts and plan.server_clears


def test_what_the_model_or_the_window_cannot_take_stays_on_the_client():
    small = server_plan(warning=10_000, autocompact=MIN_SERVER_COMPACTION_TRIGGER - 1, keep_recent=5,
                        clear_at_least=1_000, thinking=False, supported=("clear_tool_uses_20250919",
                                                                         "compact_20260112"),
                        tools=("python",), clearable_tools=("python",))
    assert [e["type"] for e in small.edits] == ["clear_tool_uses_20250919"] and not small.server_compacts
    assert "under the API's minimum 50,000" in small.notes[0]
    older = server_plan(warning=10_000, autocompact=90_000, keep_recent=5, clear_at_least=1_000, thinking=False,
                        supported=(), tools=("python",), clearable_tools=("python",))
    assert older.context_management is None and not older.server_clears and len(older.notes) == 2


def test_server_clearing_is_applied_recorded_shown_and_priced(tmp_path):
    with rig(tmp_path, window=100_000, config=dataclasses.replace(SERVER, keep_recent=2)) as r:
        events: list = []
        r.session.listeners.append(events.append)
        for n in range(10):
            assert run_turn(r.session, big(n)).error is None
        calls = main_calls(r.api)
        status = r.session.status().to_json()
        records = r.session.store.load_transcript().records
        panel = ContextPanel()
        for event in events:
            panel.handle(event)
        panel.flush()
    thresholds = r.session.setup().context.thresholds
    sent = [e for e in calls[-1].body["context_management"]["edits"] if e["type"] == "clear_tool_uses_20250919"]
    assert sent[0]["trigger"]["value"] == thresholds.warning and sent[0]["keep"]["value"] == 2
    edited = [e for e in events if isinstance(e, ServerEdited)]
    assert edited and edited[0].applied_edits[0]["type"] == "clear_tool_uses_20250919"
    assert edited[0].tokens_cleared >= r.session.setup().context.clear_threshold
    assert not [e for e in events if isinstance(e, (Cleared, Compacted))]  # the client left it to the API
    assert all(q.status == 200 for q in calls)
    # The client keeps every result; what the model saw was cleared (the stand-in's count says so).
    assert all(CLEARED_RESULT not in json.dumps(m.content) for m in r.session.live.messages)
    assert calls[-1].input_tokens < max(q.input_tokens for q in calls) / 2
    assert any(rec.get("event") == "server_edited" for rec in records)
    assert status["cost"]["saved_by"]["cleared"] > 0
    assert any(entry["kind"] == "clearing" and entry["trigger"] == "server" for entry in panel.timeline)
    assert "by the API&#x27;s own context editing" in panel.cards.box.children[0].value  # the card says when


def test_server_compaction_goes_back_unchanged_survives_resume_and_the_client_never_compacts(tmp_path):
    config = dataclasses.replace(SERVER, keep_recent=100)  # no clearing frees enough: the conversation must compact
    # A window the twelve turns fill past the compaction trigger once, late enough to summarize most of them.
    with rig(tmp_path, window=130_000, config=config) as r:
        events: list = []
        r.session.listeners.append(events.append)
        results = [run_turn(r.session, big(n)) for n in range(12)]
        calls = main_calls(r.api)
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor,
                                         tmp_path / ".ctx_magic", config,
                                         session_id=r.session.session_id, resume=True, root=tmp_path, clock=r.clock)
        after = run_turn(resumed, big(12))
    compacted = [e for e in events if isinstance(e, ServerCompacted)]
    assert [res.error for res in results] == [None] * 12 and "server" in [c for res in results for c in res.compactions]
    assert len(compacted) == 1 and compacted[0].messages_summarized > 30
    assert "Turn 0: dump batch 0" in compacted[0].summary  # the server's summary quotes the user's messages
    assert not [q for q in calls if q.kind == "compaction"] and not [e for e in events if isinstance(e, Compacted)]
    first_after = next(i for i, q in enumerate(calls) if any(
        b.get("type") == "compaction" for m in q.body["messages"] for b in m["content"] if isinstance(b, dict)))
    block = next(b for m in calls[first_after].body["messages"] for b in m["content"] if b.get("type") == "compaction")
    assert block == r.session.live.messages[1].content[0]  # sent back exactly as it came
    assert calls[first_after].input_tokens < 30_000  # the API dropped what came before it
    assert problems == [] and after.error is None
    assert resumed.live.messages[:len(r.session.live.messages)] == r.session.live.messages


def test_a_model_without_server_compaction_keeps_ctx_magics_own(tmp_path):
    edits_only = ("clear_tool_uses_20250919", "clear_thinking_20251015")
    with rig(tmp_path, window=100_000, config=dataclasses.replace(SERVER, keep_recent=100)) as r:
        r.api.config = OfflineConfig(window=100_000, max_output=4_096, context_edits=edits_only)
        r.session.frame.reconfigure(r.session.frame.settings, type(r.session.frame.model)(r.session.frame.model.client,
                                                                               name=r.session.frame.model.name))
        results = [run_turn(r.session, big(n)) for n in range(12)]
    assert [res.error for res in results] == [None] * 12
    assert "auto" in [c for res in results for c in res.compactions]  # ctx_magic compacted
    assert "compact_20260112" not in json.dumps(main_calls(r.api)[-1].body["context_management"])


def compacted_by_the_server(tmp_path):
    """Twelve big turns under the server strategy (its compaction among them): the session's
    events and its transcript, loaded."""
    config = dataclasses.replace(SERVER, keep_recent=100)
    with rig(tmp_path, window=130_000, config=config) as r:
        events: list = []
        r.session.listeners.append(events.append)
        for n in range(12):
            run_turn(r.session, big(n))
        return events, r.session.store.load_transcript()


def test_the_panel_replayed_after_a_resume_prices_the_servers_compaction_as_the_live_one_did(tmp_path):
    """The API bills its compaction's own call beside the answer (the usage's iterations): the
    panel's model calls, replayed from the transcript, cost what they cost when they were made."""
    events, loaded = compacted_by_the_server(tmp_path)
    records = loaded.records
    assert [e for e in events if isinstance(e, ServerCompacted)]
    live = [round(e.cost_usd, 6) for e in events if isinstance(e, UsageUpdated)]
    prices = lambda model: model_prices(model or "claude-sonnet-5-5")  # noqa: E731
    replay = [e.cost_usd for e in replayed(records, CellIndex(), prices) if isinstance(e, UsageUpdated)]
    assert replay == live


def test_the_servers_compaction_is_reported_in_the_apis_own_figures_system_prompt_and_tools_included(tmp_path):
    """Before: what the API's compaction call read; after: what the answer written after the summary
    was billed for, as %ctx status counts the context (the messages alone left out the system
    prompt and the tools)."""
    events, loaded = compacted_by_the_server(tmp_path)
    compacted = next(e for e in events if isinstance(e, ServerCompacted))
    answer = next(m for m in loaded.messages() if m.uuid == compacted.message_uuid)
    summary_call = Usage.from_json(answer.meta["compaction_usage"][0])
    assert compacted.tokens_before == summary_call.prompt_tokens
    assert compacted.tokens_after == answer.usage.context_tokens


def test_a_side_call_fits_the_unedited_history_the_servers_count_does_not_see(tmp_path):
    """The API's count of the last answer is of the context after its edits; a side call (the end of
    session's memory extraction) sends the history unedited, so it is fitted by the local estimate."""
    with rig(tmp_path, window=100_000, config=dataclasses.replace(SERVER, keep_recent=2)) as r:
        for n in range(10):
            assert run_turn(r.session, big(n)).error is None
        assert any(q.body.get("context_management") for q in main_calls(r.api))
        unedited = sum(len(json.dumps(m.content)) for m in r.session.live.messages)
        text = r.session.side_calls.text(r.session.live.messages, "List the durable facts of this session.",
                                         purpose="memory", max_tokens=2_000)
        sent = main_calls(r.api)[-1]
    assert text and sent.status == 200
    assert len(json.dumps(sent.body["messages"])) < unedited  # cut to the window, not sent whole
