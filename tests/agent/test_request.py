"""From the live context to the request body (agent/request.py): what is sent, merged, cached."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import assistant, text

from ctx_magic.agent.request_body import build_request, cache_control, system_blocks
from ctx_magic.messages import Message, tool_result_block, tool_use_block, user_text

EPHEMERAL = {"type": "ephemeral"}
EPHEMERAL_1H = {"type": "ephemeral", "ttl": "1h"}


def user(*blocks: dict[str, Any], kind: str = "normal") -> Message:
    return Message("user", tuple(blocks), kind=kind)  # type: ignore[arg-type]


def sent(messages: list[Message], *, cache_ttl: str | None = "5m",
         cached_tail: str | None = None) -> list[dict[str, Any]]:
    """The messages of the request `build_request` makes of `messages` (what every call sends)."""
    return list(build_request(messages, system="s", tools=[], max_tokens=1, cache_ttl=cache_ttl,  # type: ignore[arg-type]
                              cached_tail=cached_tail).messages)


def cached_blocks(turns: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(turn, block) positions of every block carrying cache_control."""
    return [
        (t, b) for t, turn in enumerate(turns) for b, block in enumerate(turn["content"]) if "cache_control" in block
    ]


def conversation() -> list[Message]:
    use = tool_use_block("toolu_1", "python", {"code": "1 + 1"})
    return [
        user_text("add one and one"),
        assistant(text("running it"), use),
        user(tool_result_block("toolu_1", "2")),
        assistant(text("it is 2")),
        user_text("thanks"),
    ]


# --- what is sent ---------------------------------------------------------------------------


def test_boundary_and_meta_messages_are_not_sent() -> None:
    messages = [
        user_text("compacted summary", kind="summary"),
        user_text("=== compact boundary ===", kind="boundary"),
        assistant(text("ok")),
        user_text("internal note", kind="meta"),
        user_text("next question"),
    ]
    turns = sent(messages, cache_ttl=None)
    all_text = [b["text"] for t in turns for b in t["content"]]
    assert all_text == ["compacted summary", "ok", "next question"]


def test_only_unsent_messages_gives_no_turns() -> None:
    assert sent([user_text("b", kind="boundary"), user_text("m", kind="meta")]) == []


def test_empty_conversation_gives_no_turns() -> None:
    assert sent([]) == []


def test_turns_have_only_role_and_content() -> None:
    turns = sent(conversation(), cache_ttl=None)
    assert all(set(turn) == {"role", "content"} for turn in turns)
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant", "user"]


def test_attachment_and_summary_messages_are_sent() -> None:
    messages = [user_text("summary", kind="summary"), user_text("file", kind="attachment")]
    turns = sent(messages, cache_ttl=None)
    assert turns == [{"role": "user", "content": [text("summary"), text("file")]}]


# --- merging --------------------------------------------------------------------------------


def test_consecutive_user_messages_merge_into_one_turn() -> None:
    turns = sent([user_text("one"), user_text("two"), user_text("three")], cache_ttl=None)
    assert turns == [{"role": "user", "content": [text("one"), text("two"), text("three")]}]


def test_consecutive_assistant_messages_merge_into_one_turn() -> None:
    use = tool_use_block("toolu_1", "python", {"code": "x"})
    messages = [user_text("go"), assistant(text("first")), assistant(use), user(tool_result_block("toolu_1", "ok"))]
    turns = sent(messages, cache_ttl=None)
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == [text("first"), use]


def test_messages_either_side_of_a_dropped_boundary_merge() -> None:
    messages = [user_text("summary", kind="summary"), user_text("b", kind="boundary"), user_text("go on")]
    turns = sent(messages, cache_ttl=None)
    assert turns == [{"role": "user", "content": [text("summary"), text("go on")]}]


@pytest.mark.parametrize(
    "roles",
    [
        ["user", "user", "assistant", "assistant", "user"],
        ["user", "assistant", "user", "user", "user", "assistant", "user"],
        ["user", "assistant", "assistant", "assistant", "user", "user"],
    ],
)
def test_merged_turns_alternate_roles_and_keep_every_block_in_order(roles: list[str]) -> None:
    messages = [Message(role, (text(f"{role} {n}"),)) for n, role in enumerate(roles)]  # type: ignore[arg-type]
    turns = sent(messages, cache_ttl=None)
    assert all(a["role"] != b["role"] for a, b in zip(turns, turns[1:]))
    assert [b["text"] for t in turns for b in t["content"]] == [f"{r} {n}" for n, r in enumerate(roles)]


def test_merged_user_turn_puts_tool_results_first() -> None:
    use = tool_use_block("toolu_1", "python", {"code": "x"})
    cell = tool_use_block("toolu_cell", "notebook_cell", {"source": "df.head()"})
    messages = [
        user_text("go"),
        assistant(text("calling"), use),
        user(tool_result_block("toolu_1", "done")),
        user_text("and a remark from the user"),
        assistant(cell),
        user(text("before"), tool_result_block("toolu_cell", "table"), text("after")),
    ]
    turns = sent(messages, cache_ttl=None)
    assert turns[2]["content"] == [tool_result_block("toolu_1", "done"), text("and a remark from the user")]
    assert turns[4]["content"] == [tool_result_block("toolu_cell", "table"), text("before"), text("after")]


def test_text_then_tool_results_from_two_messages_reorder_results_first_keeping_their_order() -> None:
    uses = [tool_use_block(f"toolu_{n}", "python", {"code": str(n)}) for n in (1, 2)]
    messages = [
        user_text("go"),
        assistant(*uses),
        user_text("the user typed this while tools ran"),
        user(tool_result_block("toolu_1", "one"), tool_result_block("toolu_2", "two", is_error=True)),
    ]
    content = sent(messages, cache_ttl=None)[-1]["content"]
    assert [b["type"] for b in content] == ["tool_result", "tool_result", "text"]
    assert [b["tool_use_id"] for b in content[:2]] == ["toolu_1", "toolu_2"]
    assert content[1]["is_error"] is True


def test_assistant_turn_blocks_are_not_reordered() -> None:
    use = tool_use_block("toolu_1", "python", {"code": "x"})
    messages = [user_text("go"), assistant(use), assistant(text("after the call"))]
    assert sent(messages, cache_ttl=None)[1]["content"] == [use, text("after the call")]


# --- cache breakpoints ----------------------------------------------------------------------


def test_cache_control_goes_only_on_the_last_block_of_the_last_message() -> None:
    turns = sent(conversation())
    assert cached_blocks(turns) == [(len(turns) - 1, len(turns[-1]["content"]) - 1)]
    assert turns[-1]["content"][-1] == {**text("thanks"), "cache_control": EPHEMERAL}


def test_cache_control_lands_after_reordering_on_the_final_block() -> None:
    messages = [user_text("go"), assistant(tool_use_block("toolu_1", "python", {})),
                user(text("note"), tool_result_block("toolu_1", "ok"))]
    last = sent(messages)[-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"]
    assert "cache_control" not in last[0]
    assert last[1]["cache_control"] == EPHEMERAL


def test_one_hour_ttl_marks_the_breakpoint_with_ttl() -> None:
    turns = sent(conversation(), cache_ttl="1h")
    assert turns[-1]["content"][-1]["cache_control"] == EPHEMERAL_1H
    assert len(cached_blocks(turns)) == 1


def test_no_cache_control_when_cache_ttl_is_none() -> None:
    assert cached_blocks(sent(conversation(), cache_ttl=None)) == []


def test_stale_cache_control_on_input_blocks_is_removed() -> None:
    messages = conversation()
    marked = Message("user", ({**text("add one and one"), "cache_control": EPHEMERAL_1H},))
    messages[0] = marked
    turns = sent(messages, cache_ttl="5m")
    assert cached_blocks(turns) == [(4, 0)]
    assert cached_blocks(sent(messages, cache_ttl=None)) == []


def test_cache_control_value_for_each_ttl() -> None:
    assert cache_control("5m") == EPHEMERAL
    assert cache_control("1h") == EPHEMERAL_1H


def test_cache_control_returns_a_fresh_dict_each_time() -> None:
    first = cache_control("5m")
    first["ttl"] = "1h"
    assert cache_control("5m") == EPHEMERAL


def test_system_blocks_carry_a_breakpoint() -> None:
    assert system_blocks("be brief") == [{"type": "text", "text": "be brief", "cache_control": EPHEMERAL}]
    assert system_blocks("be brief", cache_ttl="1h")[0]["cache_control"] == EPHEMERAL_1H


def test_system_blocks_without_cache_have_no_breakpoint() -> None:
    assert system_blocks("be brief", cache_ttl=None) == [{"type": "text", "text": "be brief"}]


# --- no side effects, no bookkeeping keys ---------------------------------------------------


def test_input_messages_are_not_mutated() -> None:
    messages = conversation() + [user_text("more"), user(tool_result_block("toolu_x", "late"))]
    before = copy.deepcopy([m.content for m in messages])
    sent(messages, cache_ttl="1h")
    sent(messages, cache_ttl="5m")
    assert [m.content for m in messages] == before


def test_building_requests_never_changes_the_messages() -> None:
    """Blocks are shared between the conversation and its requests (copying them each turn
    cost more than JSON-encoding the request): a breakpoint goes on a copy, never on them."""
    messages = conversation()
    before = copy.deepcopy([m.content for m in messages])
    for tail in (None, messages[2].uuid, messages[-1].uuid):
        turns = sent(messages, cached_tail=tail)
        turns[0]["content"].append(text("extra"))  # a request's lists are its own
    assert [m.content for m in messages] == before
    assert not any("cache_control" in b for m in messages for b in m.content)


def test_bookkeeping_keys_starting_with_underscore_are_stripped() -> None:
    tagged = {**tool_result_block("toolu_1", "2"), "_persisted": "/tmp/x.txt", "_cleared_at": 12.0}
    messages = [
        user({**text("go"), "_origin": "cell 3"}),
        assistant(tool_use_block("toolu_1", "python", {"code": "1 + 1", "_kept": "model input is data"})),
        user(tagged),
    ]
    turns = sent(messages, cache_ttl=None)
    assert turns[0]["content"] == [text("go")]
    assert turns[2]["content"] == [tool_result_block("toolu_1", "2")]
    assert turns[1]["content"][0]["input"] == {"code": "1 + 1", "_kept": "model input is data"}
    assert "_persisted" in messages[2].content[0]  # stripped in the request only


# --- breakpoints that survive many new blocks ---------------------------------------------------


def cells(count: int) -> list[Message]:
    """`count` notebook cells the user ran: a tool_use / tool_result pair each."""
    out: list[Message] = []
    for n in range(count):
        use = tool_use_block(f"cell_{n}_ab", "notebook_cell", {"source": f"x{n} = {n}"})
        out += [Message("assistant", (use,)), user(tool_result_block(f"cell_{n}_ab", f"x{n} is {n}"))]
    return out


def test_the_previous_requests_last_message_keeps_a_breakpoint_however_many_blocks_follow():
    before = conversation()
    after = [*before, *cells(30), user_text("what changed?")]
    turns = sent(after, cached_tail=before[-1].uuid)
    assert cached_blocks(turns) == [(4, 0), (len(turns) - 1, 1)]
    assert len(cached_blocks(sent(after, cached_tail="gone"))) == 1  # compacted away: only the last


def test_a_session_with_many_user_cells_between_turns_reads_its_cached_conversation(tmp_path):
    """The API finds an earlier cache entry only ~20 blocks back from a breakpoint; 30 cells
    (60 blocks) between two turns must not lose the cached conversation (the stand-in bills
    the lookback rule)."""
    from agent_rig import prompt, rig

    from ctx_magic.agent.loop import run_turn
    from ctx_magic.events import UsageUpdated

    usages = []
    with rig(tmp_path, window=200_000) as r:
        r.session.listeners.append(lambda e: usages.append(e.usage) if isinstance(e, UsageUpdated) else None)
        run_turn(r.session, prompt(0))
        for message in cells(30):
            r.session.append(message)
        run_turn(r.session, "what changed?")
    first_turn_end = usages[1]  # the call that ended the first turn (after its tool call)
    assert usages[2].cache_read_input_tokens >= first_turn_end.prompt_tokens


CONTEXT_TOOL_NAMES = {"compact", "snip", "search_transcript"}


def test_the_context_tools_join_the_requests_at_the_first_cut_of_the_context_and_stay(tmp_path):
    """Before anything was taken out of the context the tools that act on it have nothing to do
    (their definitions would be paid on every call of a session that never nears its threshold);
    the summary call still shares the main calls' cached prefix; from the first cut on every
    request offers them."""
    from agent_rig import prompt, rig

    from ctx_magic.agent.compaction import manual_compact
    from ctx_magic.agent.loop import run_turn

    with rig(tmp_path, window=200_000, model="claude-sonnet-4-6") as r:  # a model without the check
        run_turn(r.session, prompt(0))
        run_turn(r.session, prompt(1))
        before = [{t["name"] for t in q.body["tools"]} for q in r.api.requests if q.kind == "normal"]
        manual_compact(r.session)
        summary_call = next(q for q in r.api.requests if q.kind == "compaction")
        run_turn(r.session, prompt(2))
        run_turn(r.session, prompt(3))
        after = [{t["name"] for t in q.body["tools"]} for q in r.api.requests[r.api.requests.index(summary_call):]
                 if q.kind == "normal"]
    assert before and all(not names & CONTEXT_TOOL_NAMES and "python" in names for names in before)
    assert not {t["name"] for t in summary_call.body["tools"]} & CONTEXT_TOOL_NAMES
    assert after and all(CONTEXT_TOOL_NAMES <= names for names in after)


def test_a_side_calls_prompt_comes_after_the_last_breakpoint() -> None:
    """A side call's prompt is sent once: the breakpoint goes on the conversation's last block
    before it (and on the previous request's end), never on the prompt."""
    before = conversation()
    after = [*before, assistant(text("you are welcome")), user_text("Save the memories worth keeping.")]
    turns = list(build_request(after, system="s", tools=[], max_tokens=1, cache_ttl="5m",  # type: ignore[arg-type]
                               cached_tail=before[-1].uuid, prompt_once=True).messages)
    assert cached_blocks(turns) == [(4, 0), (5, 0)]
    assert "cache_control" not in turns[-1]["content"][-1]


def test_a_side_call_prompt_merged_into_a_user_turn_keeps_the_breakpoint_before_it() -> None:
    messages = [*conversation(), user_text("Summarize the conversation.")]  # two user messages: one turn
    turns = list(build_request(messages, system="s", tools=[], max_tokens=1, cache_ttl="5m",  # type: ignore[arg-type]
                               prompt_once=True).messages)
    assert cached_blocks(turns) == [(4, 0)]
    assert turns[-1]["content"][-1] == text("Summarize the conversation.")


def test_a_side_call_with_only_its_prompt_has_no_message_breakpoint() -> None:
    turns = list(build_request([user_text("Consolidate these notes.")], system="s", tools=[], max_tokens=1,
                               cache_ttl="5m", prompt_once=True).messages)  # type: ignore[arg-type]
    assert cached_blocks(turns) == []


def test_a_side_calls_prompt_is_billed_as_input_and_the_next_call_reads_what_it_cached(tmp_path):
    """Through the stand-in's cache: the memory prompt costs plain input (no cache write for it);
    the reply it followed was cached by the side call and the next main call reads it."""
    from agent_rig import prompt, rig

    from ctx_magic.agent.loop import run_turn
    from ctx_magic.context.tokens import count_text

    ask = "Save the memories worth keeping. " * 40
    with rig(tmp_path, window=200_000) as r:
        run_turn(r.session, prompt(0))
        before = r.session.meter.snapshot()
        r.session.side_calls.text(r.session.live.messages, ask)
        side = r.session.meter.snapshot()
        run_turn(r.session, prompt(1))
        after = r.session.meter.snapshot()
    written = side.cache_creation_input_tokens - before.cache_creation_input_tokens
    plain = side.input_tokens - before.input_tokens
    assert plain >= count_text(ask) and written < count_text(ask)
    read_next = after.cache_read_input_tokens - side.cache_read_input_tokens
    read_side = side.cache_read_input_tokens - before.cache_read_input_tokens
    assert read_next >= read_side + written > read_side
