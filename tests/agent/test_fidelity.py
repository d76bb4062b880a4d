"""What survives a compaction, over real HTTP against the offline stand-in: the
coverage audit on every path, pins after every path and a resume, and the search tool."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from agent_rig import CLIENT_SUMMARY, assert_m5, prompt, request_messages, request_text, rig

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.context_tools import search_session
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.session import Session, open_session
from ctx_magic.context.audit import SEARCH_TOOL
from ctx_magic.context.budget import PREVIEW_CHARS
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.pins import PinRefused
from ctx_magic.context.span_facts import is_user_prompt
from ctx_magic.context.tokens import count_text
from ctx_magic.errors import Remedy
from ctx_magic.events import Compacted, Notice, ServerCompacted
from ctx_magic.messages import result_text
from ctx_magic.offline import server_context
from ctx_magic.offline.conversation import asked_text
from ctx_magic.offline.policy import Answer, Policy, Rule
from ctx_magic.settings import Settings

PIN = "Always report temperatures in kelvin,\n  never in celsius (the lab's convention)."


def tool_rule(name: str, trigger: str, tool_input: dict) -> Rule:
    """When the user's text contains `trigger`, call tool `name` with `tool_input`."""

    def answer(_request) -> Answer:  # type: ignore[no-untyped-def]
        call = {"type": "tool_use", "name": name, "input": tool_input}
        return Answer(({"type": "text", "text": f"calling {name}"}, call), "tool_use")

    return Rule(f"call-{name}", "normal", lambda request: trigger in asked_text(request), answer)


def code_turn(n: int, lines: int = 40) -> str:
    return f"Turn {n}\n```python\nbatch_{n} = [i * {n} for i in range({lines})]\nprint(batch_{n})\n```"


class Notes:
    """A notes source (for compaction from notes) whose notes cover the whole conversation so far."""

    def __init__(self, session: Session) -> None:
        self.covered = session.live.messages[-1].uuid

    def wait(self, timeout: float) -> None:
        pass

    def current(self) -> tuple[str, str | None]:
        return "# Session Title\nBatches of numbers\n\n# Current State\nPrinting batches.\n", self.covered

    def tokens(self) -> int:
        return count_text(self.current()[0])


def compact_by(path: str, r) -> str:  # type: ignore[no-untyped-def]
    """Compact the rig's session by `path`; returns the trigger the boundary records."""
    session = r.session
    if path == "auto":
        for n in range(40):
            if "auto" in run_turn(session, prompt(n)).compactions:
                break
    elif path == "manual":
        manual_compact(session, "keep the batches")
    elif path == "reactive":
        r.api.inject("ptl")
        assert run_turn(session, "and the next one?").compactions == ["reactive"]
    elif path == "session-memory":
        for n in range(6):  # over the 10,000 tokens session-memory compaction keeps
            run_turn(session, prompt(n))
        session.plugins.attach_notes(Notes(session))
        manual_compact(session)
    elif path == "up_to":
        manual_compact(session, direction="up_to", index=4)
    elif path == "from":
        manual_compact(session, direction="from", index=3)
    elif path == "model":  # the model's compact tool is offered once the context was cut: an idle clearing here
        r.clock.advance(600)
        r.api.policy = Policy().with_rule(tool_rule("compact", "wrap up", {"instructions": ""}))
        assert run_turn(session, "wrap up this phase").compactions == ["model"]
    return session.compaction.boundaries[-1].trigger


@pytest.mark.parametrize("path", ["auto", "manual", "reactive", "session-memory", "up_to", "from", "model"])
def test_pins_are_re_injected_word_for_word_after_every_compaction_path(tmp_path, path):
    # The model's compact tool joins at a first cut where nothing checks the prefix of the thinking sent
    # back; on a model that does, only where a prefix starts (tests/agent/test_append_only.py).
    model = "claude-sonnet-4-6" if path == "model" else "claude-sonnet-5-5"
    with rig(tmp_path, window=20_000 if path == "auto" else 60_000, model=model) as r:
        events: list[Compacted] = []
        r.session.listeners.append(lambda e: events.append(e) if isinstance(e, Compacted) else None)
        for n in range(3):
            run_turn(r.session, code_turn(n))
        pin = r.session.pin_board.pin(PIN)
        for n in range(3, 6):
            run_turn(r.session, code_turn(n))
        trigger = compact_by(path, r)
        assert trigger == {"up_to": "manual", "from": "manual"}.get(path, path)
        assert events and events[-1].pins == (pin.id,)
        live = list(r.session.live.messages)
        summary_at = max(i for i, m in enumerate(live) if m.kind == "summary")  # the API's block has a note after it
        assert live[summary_at + 1].meta.get("pins") == [pin.id] and PIN in live[summary_at + 1].text
        check_invariants(live)
        run_turn(r.session, "what is the convention?")
        sent = [q for q in r.api.requests if q.kind == "normal"][-1]
    assert json.dumps(PIN)[1:-1] in request_text(sent)  # the pin reached the model word for word


def test_pins_survive_a_resume_and_the_compaction_after_it(tmp_path):
    with rig(tmp_path) as r:
        run_turn(r.session, code_turn(0))
        first = r.session.pin_board.pin(PIN)
        second = r.session.pin_board.pin("Plots go to out/figures/.")
        assert r.session.pin_board.unpin(second.id) == second and r.session.pin_board.unpin("p9") is None
        sid = r.session.session_id
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor,
                                         tmp_path / ".ctx_magic", Settings(),
                                         session_id=sid, resume=True, root=tmp_path, clock=r.clock)
        assert problems == [] and resumed.pin_board.pins == (first,)
        result = manual_compact(resumed)
    assert result.event.pins == (first.id,)
    assert any(m.meta.get("pins") == [first.id] and PIN in m.text for m in result.messages)
    assert not any("Plots go to out/figures/." in m.text for m in result.messages if m.meta.get("pins"))


def big_turn(n: int) -> str:
    """A turn whose code prints 5,000 to 8,000 tokens as each tokenizer family counts it (under the tool-result
    budget's limit, 25,000 characters at a 100,000-token window). Words, not a run of one letter: newer
    tokenizers count a long run of one letter at several tokens per character."""
    return (f"Turn {n}: dump batch {n}.\n```python\nbatch_{n} = [f'row {n}-{{i}}: the quick brown fox jumps over "
            f"the lazy dog' for i in range(300)]"
            f"\nprint('\\n'.join(batch_{n}))\n```")


def test_the_apis_own_summary_is_audited_and_followed_by_the_pins_and_a_resume_keeps_them(tmp_path, monkeypatch):
    monkeypatch.setattr(server_context, "server_summary", lambda history: "1. Primary Request: batches.")
    config = Settings(strategy="server", keep_recent=100)  # no clearing frees enough: the API must compact
    with rig(tmp_path, window=100_000, config=config) as r:
        events: list[ServerCompacted] = []
        r.session.listeners.append(lambda e: events.append(e) if isinstance(e, ServerCompacted) else None)
        run_turn(r.session, big_turn(0))
        pin = r.session.pin_board.pin(PIN)
        turns = 1
        while not events and turns < 28:
            assert run_turn(r.session, big_turn(turns)).error is None
            turns += 1
        run_turn(r.session, "what is the convention?")
        sent = [q for q in r.api.requests if q.path == "/v1/messages" and q.kind == "normal"][-1]
        resumed, problems = open_session(r.session.frame.model, r.session.frame.executor,
                                         tmp_path / ".ctx_magic", config,
                                         session_id=r.session.session_id, resume=True, root=tmp_path, clock=r.clock)
        live = list(r.session.live.messages)
    assert len(events) == 1 and events[0].pins == (pin.id,)
    audit = events[0].audit
    assert audit is not None and audit.user_messages_checked == turns and len(audit.user_messages) == turns
    assert audit.names == ()  # the code that defined batch_N is in the appended messages
    assert_m5(sent)
    messages = sent.body["messages"]
    at = max(i for i, m in enumerate(messages) if any(b.get("type") == "compaction" for b in m["content"]))
    kept = json.dumps(messages[at:], ensure_ascii=False)  # what the API reads: it drops what precedes the block
    assert json.dumps(PIN)[1:-1] in kept and "<context-refresh>" in kept
    assert all(f"Turn {n}: dump batch {n}." in kept for n in range(turns))
    assert problems == [] and list(resumed.live.messages) == live


def test_a_pin_past_the_budget_is_refused_with_one_clear_line(tmp_path):
    with rig(tmp_path, config=Settings(pin_budget_tokens=60)) as r:
        run_turn(r.session, "hello")
        r.session.pin_board.pin("Short rule one.")
        with pytest.raises(PinRefused, match=r"over their budget of 60: nothing was pinned") as refused:
            r.session.pin_board.pin("A long rule " * 40)
        assert refused.value.remedy is Remedy.UNPIN_OR_RAISE_PIN_BUDGET
        assert len(r.session.pin_board.pins) == 1 and len(r.session.store.load_pins()) == 1


class ForgetfulSummaries:
    """The stand-in, except that its summaries keep only the latest user message and no code."""

    def __init__(self) -> None:
        self.base = Policy()

    def kind(self, request):  # type: ignore[no-untyped-def]
        return self.base.kind(request)

    def answer(self, request):  # type: ignore[no-untyped-def]
        if self.base.kind(request) != "compaction":
            return self.base.answer(request)
        return Answer.text("<analysis>skipped</analysis>\n<summary>1. Primary Request: batches.</summary>")


def test_the_audit_appends_what_a_model_summary_omitted_and_the_model_sees_it(tmp_path):
    with rig(tmp_path, window=60_000, model=CLIENT_SUMMARY) as r:  # a summary the policy writes, forgetting
        r.api.policy = ForgetfulSummaries()
        run_turn(r.session, "Never overwrite data/raw.csv.\n```python\nrows = open('data/raw.csv').read()\n```")
        run_turn(r.session, code_turn(1))
        notices: list[Notice] = []
        r.session.listeners.append(lambda e: notices.append(e) if isinstance(e, Notice) else None)
        result = manual_compact(r.session)
        run_turn(r.session, "go on")
        sent = request_text([q for q in r.api.requests if q.kind == "normal"][-1])
    audit = result.event.audit
    assert audit is not None and audit.user_messages_checked == 2 and len(audit.user_messages) == 2
    # The appended messages hold the path and the code that defined rows and batch_1: said once.
    assert audit.paths_checked == 1 and audit.paths == ()
    assert audit.names_checked == 2 and audit.names == ()
    assert any(e.startswith("FileNotFoundError") and "data/raw.csv" in e for e in audit.errors)
    assert json.dumps("Never overwrite data/raw.csv.")[1:-1] in sent and "batch_1" in sent
    assert any(n.text.startswith("The summary left out 2 of 2 of your messages, 1 of 1 error lines: they were "
                                 "added after it") for n in notices)
    transcript = [r for r in r.session.store.load_transcript().records if r.get("event") == "compacted"]
    assert transcript[-1]["audit"]["errors"] == list(audit.errors)  # recorded for the panel and a resume


def test_a_complete_summary_gets_nothing_appended_and_earlier_messages_are_checked_again(tmp_path):
    with rig(tmp_path, window=60_000) as r:
        run_turn(r.session, "Plot the batches in blue.")
        run_turn(r.session, code_turn(1))
        first = manual_compact(r.session).event.audit
        run_turn(r.session, code_turn(2))
        second = manual_compact(r.session).event.audit
    # The stand-in quotes every user message (and the code in them) itself, earlier summaries' too.
    assert first is not None and not first.added and (first.user_messages_checked, first.names_checked) == (2, 1)
    assert second is not None and not second.added and second.user_messages_checked == 3


def test_the_search_tool_finds_a_compacted_message_and_a_persisted_output(tmp_path):
    with rig(tmp_path, window=60_000) as r:
        run_turn(r.session, "The sensor ids are in the ZX-41 family; remember that.")
        run_turn(r.session, "Dump it.\n```python\nprint('row\\n' * 20_000 + 'TAIL-MARKER-' + str(7 * 11))\n```")
        assert r.session.live.state.persisted  # the dump went to disk
        manual_compact(r.session)
        assert not any("TAIL-MARKER-77" in m.text or "TAIL-MARKER-77" in json.dumps(m.content)
                       for m in r.session.live.messages)
        r.api.policy = Policy().with_rule(tool_rule(SEARCH_TOOL, "which family", {"query": "zx-41"})).with_rule(
            tool_rule(SEARCH_TOOL, "the tail", {"query": r"TAIL-MARKER-\d+", "regex": True}))
        run_turn(r.session, "which family were the sensors?")
        run_turn(r.session, "what was at the tail of the dump?")
        results = [result_text(b) for m in r.session.live.messages for b in m.blocks("tool_result")
                   if result_text(b).split(" ", 1)[0].isdigit()]
        (dumped, path), = r.session.live.state.persisted_paths.items()
        written = next(result_text(b) for m in r.session.store.load_transcript().messages()
                       for b in m.blocks("tool_result") if b.get("tool_use_id") == dumped)
        ref = re.search(r"turn 2 · tool results · ref (\w+)", results[-1]).group(1)
        read_back = read_whole(r.session.store, ref)
    family, tail = results[-2], results[-1]
    assert "turn 1 · user · ref" in family and "The sensor ids are in the ZX-41 family" in family
    assert "turn 2 · tool results · ref" in tail and f"saved at {path}" in tail and "TAIL-MARKER-77" in tail
    assert written.endswith("TAIL-MARKER-77\n") and len(written) == 4 * 20_000 + 15
    assert Path(path).read_bytes() == written.encode("utf-8")  # the saved file: the output byte for byte
    assert read_back.endswith(written)  # and read whole through the search tool


def test_the_model_sees_the_start_and_the_end_of_a_persisted_output_and_what_was_left_out(tmp_path):
    code = "print('HEAD-LINE'); print('\\n'.join(f'row {i}' for i in range(8_000))); print('FAILED last - KeyError: 7')"
    with rig(tmp_path, window=60_000) as r:
        run_turn(r.session, f"Dump it.\n```python\n{code}\n```")
        (dumped, path), = r.session.live.state.persisted_paths.items()
        sent = [b for record in r.api.requests if record.path == "/v1/messages"
                for m in request_messages(record) for b in m.blocks("tool_result") if b.get("tool_use_id") == dumped]
    full = Path(path).read_text("utf-8")
    assert sent and all(result_text(b) == result_text(sent[0]) for b in sent)  # the same bytes every time
    block = result_text(sent[0])
    assert f"saved at: {path}" in block and "read_file" in block and f"({len(full):,} characters)" in block
    shown = block.split("characters):\n", 1)[1].removesuffix("\n</persisted-output>")
    head, gap, tail = re.fullmatch(r"(.*)\n\[\.\.\. (.*) \.\.\.\]\n(.*)", shown, re.DOTALL).groups()
    assert len(shown) <= PREVIEW_CHARS
    assert head.startswith("HEAD-LINE\nrow 0\n") and tail.endswith("row 7999\nFAILED last - KeyError: 7\n")
    left_out = full[len(head) + 1:len(full) - len(tail)]
    assert gap.startswith(f"{left_out.count(chr(10)):,} lines ({len(left_out):,} characters) left out")
    assert "row 4000\n" in left_out and "row 4000\n" not in shown


def read_whole(store, ref: str) -> str:  # type: ignore[no-untyped-def]
    """A message read through the search tool page after page, as the model would."""
    text, offset = "", 0
    while True:
        body = search_session(store, ref=ref, offset=offset).partition("\n")[2]
        more = re.search(r"\n\[characters [\d,]+-[\d,]+ of [\d,]+; read on with ref='\w+' offset=(\d+)\]$", body)
        if more is None:
            return text + body
        text, offset = text + body[:more.start()], int(more.group(1))


def test_every_user_message_stays_recoverable_word_for_word_after_any_number_of_compactions(tmp_path):
    spec = "Here is the spec.\n" + "\n".join(f"rule {i}: keep column c{i} as it is" for i in range(120))
    found = {"in context": 0, "by search": 0}
    with rig(tmp_path, window=20_000) as r:  # a small window: the audit's budget stubs the older messages
        r.api.policy = ForgetfulSummaries()  # no summary keeps any of them
        for compactions in range(6):
            for k in range(3):
                n = 3 * compactions + k
                run_turn(r.session, spec if n == 1 else f"{code_turn(n)}\nWhy: " + f"batch {n} feeds the report. " * 12)
            manual_compact(r.session)
            run_turn(r.session, "go on")
            sent = [q for q in r.api.requests if q.kind == "normal"][-1]
            context = " ".join(" ".join(m.text for m in request_messages(sent)).split())
            users = [m for m in r.session.store.load_transcript().messages() if is_user_prompt(m)]
            for turn, message in enumerate(users, start=1):
                if " ".join(message.text.split()) in context:
                    found["in context"] += 1
                    continue
                listing = search_session(r.session.store, turn=turn)  # "N earlier messages ...: search by turn"
                ref = re.search(rf"turn {turn} · user · ref (\w+)", listing)
                assert ref is not None, (compactions, turn, listing)
                assert read_whole(r.session.store, ref.group(1)) == message.text
                found["by search"] += 1
        assert r.session.compaction.boundaries and len(r.session.compaction.boundaries) == 6
    # Both ways were exercised: more by search than the long spec's six times (older messages past
    # the audit's budget came back as first lines or a count).
    assert found["in context"] > 0 and found["by search"] > 6


def test_an_error_in_a_result_cleared_before_the_compaction_is_still_audited(tmp_path):
    with rig(tmp_path, window=60_000, config=Settings(keep_recent=1)) as r:
        r.api.policy = ForgetfulSummaries()
        run_turn(r.session, "Try it.\n```python\nimport json\njson.loads('{bad')\n```")
        for n in range(1, 4):
            run_turn(r.session, code_turn(n))
        r.clock.advance(3_600)  # idle: old results are cleared at the next prepare
        r.session.prepare()
        assert r.session.live.state.cleared  # the failed result's text is gone from the context
        audit = manual_compact(r.session).event.audit
    assert audit is not None
    assert any(e.startswith("json.decoder.JSONDecodeError: Expecting property name") for e in audit.errors)
