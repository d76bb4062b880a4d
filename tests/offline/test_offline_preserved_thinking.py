"""What the models with preserved thinking do around the prefix check, as the docs describe it:
drop_block and `input_transformations`, older accounts, adaptive thinking by default, mid-
conversation system messages, server context editing and on-demand compaction, over real HTTP."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from ctx_magic.context.prompts import compact_prompt, extract_summary, for_thinking_model
from ctx_magic.context.tokens import count_text
from ctx_magic.offline import OfflineAPI, serve_in_thread
from ctx_magic.offline.__main__ import parse_args
from ctx_magic.offline.compaction import requested_sections
from ctx_magic.offline.counting import input_tokens

from .offline_support import PYTHON_TOOL, refusal, user
from .test_offline_prefix_check import BOUND, MODEL, SYSTEM, ask, conversation

BINDING_BETA = "thinking-binding-controls-2026-08-01"
ON_DEMAND_BETA = "compact-2026-09-04"
DROP = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}


def beta(client: anthropic.Anthropic, history: list[dict[str, Any]], betas: list[str], *,
         system: Any = SYSTEM, **extra: Any) -> Any:
    return client.beta.messages.create(model=MODEL, max_tokens=2_000, system=system, tools=[PYTHON_TOOL],
                                       messages=history, betas=betas, **extra)


def sent_back(reply: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}


@pytest.fixture
def history(http_client: anthropic.Anthropic) -> list[dict[str, Any]]:
    return [*conversation(http_client, ["Load the data.", "Plot it.", "Summarize it."]), user("Now save it.")]


@pytest.fixture
def old_api(api: OfflineAPI) -> OfflineAPI:
    api.config = dataclasses.replace(api.config, account="old")
    return api


# --- drop_block and input_transformations ---


def test_drop_block_drops_the_invalid_blocks_and_lists_them(api: OfflineAPI, http_client: anthropic.Anthropic,
                                                            history: list[dict[str, Any]]) -> None:
    edited = copy.deepcopy(history)
    edited[2] = user("Plot it, in blue.")
    reply = beta(http_client, edited, [BINDING_BETA], thinking=DROP)
    assert [(t.type, t.path, t.reason) for t in reply.input_transformations] == [
        ("thinking_dropped", "messages.3.content.0", "prefix_binding_mismatch"),
        ("thinking_dropped", "messages.5.content.0", "prefix_binding_mismatch")]
    assert reply.content[0].type == "thinking"  # the new turn thinks, bound to the history as sent
    assert api.requests[-1].thinking_mismatches == tuple(t.model_dump() for t in reply.input_transformations)


def test_drop_block_goes_with_between_tools_too(http_client: anthropic.Anthropic,
                                               history: list[dict[str, Any]]) -> None:
    """Sonnet 5.5's least thinking still writes bound notes between tool calls: the same choice
    covers them."""
    edited = copy.deepcopy(history)
    edited[2] = user("Plot it, in blue.")
    between = {"type": "between_tools", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    reply = beta(http_client, edited, [BINDING_BETA], thinking=between)
    assert [t.path for t in reply.input_transformations] == ["messages.3.content.0", "messages.5.content.0"]
    assert reply.content[0].type != "thinking"  # no up-front thinking after a user's message


def test_dropped_blocks_are_not_billed_as_input(api: OfflineAPI, http_client: anthropic.Anthropic,
                                                history: list[dict[str, Any]]) -> None:
    edited = copy.deepcopy(history)
    edited[2] = user("Plot it, in blue.")
    dropped = beta(http_client, edited, [BINDING_BETA], thinking=DROP)
    without = copy.deepcopy(edited)
    for index in (3, 5):
        del without[index]["content"][0]
    body = {"model": MODEL, "system": SYSTEM, "tools": [PYTHON_TOOL], "messages": without, "thinking": DROP}
    assert dropped.usage.input_tokens == input_tokens(body)
    assert dropped.usage.input_tokens < input_tokens({**body, "messages": edited})


def test_with_the_beta_and_nothing_invalid_the_list_is_empty(http_client: anthropic.Anthropic,
                                                             history: list[dict[str, Any]]) -> None:
    assert beta(http_client, history, [BINDING_BETA], thinking=DROP).input_transformations == []
    assert beta(http_client, history, [BINDING_BETA]).input_transformations == []


def test_block_binding_without_its_beta_header_is_refused(http_client: anthropic.Anthropic,
                                                          history: list[dict[str, Any]]) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(http_client, history, thinking=DROP)
    assert refusal(caught.value) == ("thinking.block_binding: This setting requires the value "
                                        f"`{BINDING_BETA}` in the `anthropic-beta` header.")


def test_an_unknown_mismatch_behavior_is_refused(http_client: anthropic.Anthropic) -> None:
    thinking = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "ignore"}}
    with pytest.raises(anthropic.BadRequestError, match="prefix_mismatch_behavior: Input should be"):
        beta(http_client, [user("hi")], [BINDING_BETA], thinking=thinking)


def test_error_behavior_answers_400_even_on_an_old_account(old_api: OfflineAPI, http_client: anthropic.Anthropic,
                                                           history: list[dict[str, Any]]) -> None:
    thinking = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "error"}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        beta(http_client, history, [BINDING_BETA], system="Edited.", thinking=thinking)
    assert refusal(caught.value) == f"messages.1.content.0: {BOUND}"


def test_drop_block_streams_its_list_in_message_start(http_client: anthropic.Anthropic,
                                                      history: list[dict[str, Any]]) -> None:
    with http_client.beta.messages.stream(model=MODEL, max_tokens=2_000, system="Edited.", tools=[PYTHON_TOOL],
                                          messages=history, betas=[BINDING_BETA], thinking=DROP) as stream:
        start = next(e for e in stream if e.type == "message_start")
        assert [t.path for t in start.message.input_transformations] == [f"messages.{i}.content.0" for i in (1, 3, 5)]
        stream.until_done()


# --- older accounts ---


def test_an_old_account_lets_failing_blocks_through_and_the_record_shows_them(
        old_api: OfflineAPI, http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    reply = ask(http_client, history, system="Edited.")
    assert reply.content[0].type == "thinking"
    assert [(m["type"], m["path"]) for m in old_api.requests[-1].thinking_mismatches] == [
        ("thinking_mismatch_allowed", f"messages.{i}.content.0") for i in (1, 3, 5)]
    listed = beta(http_client, history, [BINDING_BETA], system="Edited.")
    assert [t.type for t in listed.input_transformations] == ["thinking_mismatch_allowed"] * 3


def test_blocks_let_through_are_billed_as_sent(old_api: OfflineAPI, http_client: anthropic.Anthropic,
                                               history: list[dict[str, Any]]) -> None:
    reply = ask(http_client, history, system="Edited.")
    body = {"model": MODEL, "system": "Edited.", "tools": [PYTHON_TOOL], "messages": history}
    assert reply.usage.input_tokens == input_tokens(body)


def test_a_new_account_is_the_default_and_the_command_line_chooses(api: OfflineAPI) -> None:
    assert api.config.account == "new"
    assert parse_args(["--account", "old"]).account == "old"
    with pytest.raises(SystemExit):
        parse_args(["--account", "ancient"])


# --- adaptive thinking by default ---


def test_replies_think_without_a_thinking_parameter(http_client: anthropic.Anthropic) -> None:
    reply = ask(http_client, [user("Run this:\n```python\nprint(6 * 7)\n```")])
    assert [b.type for b in reply.content] == ["thinking", "text", "tool_use"]
    assert reply.content[0].thinking  # up-front thinking has text


def test_thinking_between_tool_calls_comes_back_with_empty_text(http_client: anthropic.Anthropic) -> None:
    question = user("Run this:\n```python\nprint(6 * 7)\n```")
    first = ask(http_client, [question])
    call = next(b for b in first.content if b.type == "tool_use")
    loop = [question, sent_back(first),
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}]}]
    after = ask(http_client, loop)
    assert after.content[0].type == "thinking" and after.content[0].thinking == ""
    assert after.content[0].signature  # still signed: it must go back exactly as returned
    assert ask(http_client, [*loop, sent_back(after), user("Thanks.")]).content
    summarized = ask(http_client, loop, thinking={"type": "adaptive", "display": "summarized"})
    assert summarized.content[0].thinking


@pytest.mark.parametrize(("model", "kind", "effort"), [
    ("claude-opus-5-5", "disabled", None), ("claude-fable-5-1", "disabled", None),
    ("claude-sonnet-5-5", "disabled", None), ("claude-haiku-5-5", "disabled", "max"),
    ("claude-sonnet-5-5", "enabled", None), ("claude-opus-5-5", "between_tools", None),
    ("claude-fable-5", "disabled", None), ("claude-mythos-5", "enabled", None)])
def test_the_thinking_types_these_models_refuse(http_client: anthropic.Anthropic, model: str, kind: str,
                                                effort: str | None) -> None:
    thinking: dict[str, Any] = {"type": kind, **({"budget_tokens": 1_024} if kind == "enabled" else {})}
    extra = {"output_config": {"effort": effort}} if effort else {}
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(http_client, [user("hi")], model=model, thinking=thinking, **extra)
    assert refusal(caught.value) == (f'"thinking.type.{kind}" is not supported for this model. Use '
                                        '"thinking.type.adaptive" and "output_config.effort" to control thinking '
                                        'behavior.')


@pytest.mark.parametrize("model", ["claude-fable-5", "claude-mythos-5"])
def test_the_adaptive_only_models_think_without_a_thinking_parameter(http_client: anthropic.Anthropic,
                                                                    model: str) -> None:
    assert ask(http_client, [user("hi")], model=model).content[0].type == "thinking"


def test_haiku_turns_thinking_off_and_sonnet_thinks_only_between_tools(http_client: anthropic.Anthropic) -> None:
    off = ask(http_client, [user("hi")], model="claude-haiku-5-5", thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"]
    question = user("Run this:\n```python\nprint(6 * 7)\n```")
    between = {"type": "between_tools"}
    first = ask(http_client, [question], thinking=between)
    assert first.content[0].type != "thinking"  # no up-front thinking
    call = next(b for b in first.content if b.type == "tool_use")
    loop = [question, sent_back(first),
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}]}]
    assert ask(http_client, loop, thinking=between).content[0].type == "thinking"


# --- mid-conversation system messages ---


def test_a_system_message_at_the_end_leaves_every_thinking_block_valid(
        http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    update = {"role": "system", "content": "The date is now Tuesday; the user prefers CSV."}
    assert ask(http_client, [*history, update]).content


def test_a_system_message_inserted_before_thinking_fails_it(http_client: anthropic.Anthropic,
                                                             history: list[dict[str, Any]]) -> None:
    inserted = [*history[:3], {"role": "system", "content": "Be brief."}, *history[3:]]
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(http_client, inserted)
    assert refusal(caught.value) == f"messages.4.content.0: {BOUND}"


def test_models_before_opus_4_8_refuse_system_messages(http_client: anthropic.Anthropic) -> None:
    history = [user("hi"), {"role": "system", "content": "Be brief."}, {"role": "assistant", "content": "Hello."},
               user("ok")]
    with pytest.raises(anthropic.BadRequestError, match="each message needs a role of 'user' or 'assistant'"):
        ask(http_client, history, model="claude-opus-4-7")
    assert ask(http_client, history, model="claude-opus-4-8").content


# --- server context editing ---


def test_context_editing_runs_after_the_check_on_the_history_as_sent(
        http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    """The server clears old thinking from what the model reads; the check reads what was sent,
    so the client's full, unedited history passes."""
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]}
    reply = beta(http_client, history, ["context-management-2025-06-27"], context_management=edits)
    assert reply.context_management.applied_edits[0].cleared_thinking_turns == 2
    cleared_by_the_client = copy.deepcopy(history)
    for index in (1, 3):
        del cleared_by_the_client[index]["content"][0]
    with pytest.raises(anthropic.BadRequestError, match="messages.5.content.0: Invalid `signature`"):
        beta(http_client, cleared_by_the_client, ["context-management-2025-06-27"], context_management=edits)


# --- on-demand compaction ---


@pytest.fixture
def wide_url() -> Iterator[str]:
    with serve_in_thread(OfflineAPI(window=200_000)) as (url, _stop):
        yield url


def test_on_demand_compaction_returns_the_block_alone_and_kept_turns_stay_valid(http_client: anthropic.Anthropic,
                                                                                history: list[dict[str, Any]]) -> None:
    summarized, kept = history[:4], history[4:]  # the compaction request carries the first two turns
    compacted = beta(http_client, summarized, [ON_DEMAND_BETA], compaction={"type": "summarize"})
    assert compacted.stop_reason == "compaction"
    assert [b.type for b in compacted.content] == ["compaction"] and compacted.content[0].content
    assert compacted.usage.output_tokens > 0
    follow = [sent_back(compacted), *kept]  # the block first, then the kept turns exactly as they were
    assert beta(http_client, follow, [ON_DEMAND_BETA]).content[0].type == "thinking"
    skipped = [sent_back(compacted), *history[5:]]  # the first kept message left out: the thinking after it fails
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0: Invalid `signature`"):
        beta(http_client, skipped, [ON_DEMAND_BETA])


def test_on_demand_instructions_replace_the_servers_prompt(http_client: anthropic.Anthropic,
                                                          history: list[dict[str, Any]]) -> None:
    """Instructions asking for an analysis and numbered sections (ctx_magic's summary prompt) get
    them; none get the server's own summary."""
    asked = compact_prompt("full", "keep the values")
    written = beta(http_client, history[:4], [ON_DEMAND_BETA], compaction={"type": "summarize", "instructions": asked})
    own = beta(http_client, history[:4], [ON_DEMAND_BETA], compaction={"type": "summarize"})
    summary = extract_summary(written.content[0].content)
    assert written.content[0].content.startswith("<analysis>") and summary is not None
    assert [title for _, title in requested_sections(asked)] == re.findall(r"^## \d+\. (.+)$", summary, re.MULTILINE)
    assert "<analysis>" not in own.content[0].content and "## 6. All User Messages" in own.content[0].content


def test_instructions_asking_for_no_analysis_get_the_summary_alone_and_the_thinking_is_billed(
        http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    """A model that thinks is asked to walk the conversation in its thinking: the block holds the
    sections alone, and the usage bills the thinking before it beside the summary."""
    asked = for_thinking_model(compact_prompt("full"))
    written = beta(http_client, history[:4], [ON_DEMAND_BETA], compaction={"type": "summarize", "instructions": asked},
                   thinking={"type": "adaptive", "display": "summarized"})
    block = written.content[0].content
    assert "<analysis>" not in asked and block.startswith("<summary>") and "<analysis>" not in block
    assert written.usage.output_tokens > count_text(block)  # the thinking it did first is output too


def test_a_summary_by_a_model_without_preserved_thinking_does_not_keep_thinking_valid(
        http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    bare = [{**m, "content": [b for b in m["content"] if b["type"] != "thinking"]} if m["role"] == "assistant" else m
            for m in history[:4]]  # Sonnet 4.6 reads no Sonnet 5.5 thinking
    compacted = http_client.beta.messages.create(model="claude-sonnet-4-6", max_tokens=2_000, system=SYSTEM,
                                                 tools=[PYTHON_TOOL], messages=bare, betas=[ON_DEMAND_BETA],
                                                 compaction={"type": "summarize"})
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.2\.content\.0: Invalid `signature`"):
        beta(http_client, [sent_back(compacted), *history[4:]], [ON_DEMAND_BETA])


def test_the_compaction_parameter_needs_its_beta_and_no_context_management(http_client: anthropic.Anthropic,
                                                                           history: list[dict[str, Any]]) -> None:
    with pytest.raises(anthropic.BadRequestError, match=f"requires the beta header 'anthropic-beta: {ON_DEMAND_BETA}'"):
        ask(http_client, history[:4], extra_body={"compaction": {"type": "summarize"}})
    with pytest.raises(anthropic.BadRequestError, match="cannot be combined with `context_management`"):
        beta(http_client, history[:4], [ON_DEMAND_BETA, "context-management-2025-06-27"],
             compaction={"type": "summarize"}, context_management={"edits": []})


def test_a_compaction_request_checks_the_thinking_it_sends(http_client: anthropic.Anthropic,
                                                           history: list[dict[str, Any]]) -> None:
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0: Invalid `signature`"):
        beta(http_client, history[:4], [ON_DEMAND_BETA], system="Edited.", compaction={"type": "summarize"})


def test_server_compaction_keeps_the_thinking_of_the_answer_after_it_valid(wide_url: str) -> None:
    client = anthropic.Anthropic(api_key="test-key", base_url=wide_url, max_retries=0)
    edits = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]}
    long = user("Load the data. " + "The data has many columns. " * 9_000)
    first = beta(client, [long], ["compact-2026-01-12"], context_management=edits)
    assert [b.type for b in first.content][:2] == ["compaction", "thinking"]
    follow = [long, sent_back(first), user("Plot it.")]
    assert beta(client, follow, ["compact-2026-01-12"], context_management=edits).content


def test_the_models_api_reports_the_thinking_types_each_model_takes(http_client: anthropic.Anthropic) -> None:
    def types(model: str) -> dict[str, bool]:
        thinking = http_client.models.retrieve(model).to_dict()["capabilities"]["thinking"]["types"]
        return {kind: value["supported"] for kind, value in thinking.items()}

    assert types("claude-sonnet-5-5") == {"adaptive": True, "enabled": False, "disabled": False, "between_tools": True}
    assert types("claude-opus-5-5") == {"adaptive": True, "enabled": False, "disabled": False, "between_tools": False}
    assert types("claude-haiku-5-5")["disabled"] is True
    assert types("claude-sonnet-4-6") == {"adaptive": True, "enabled": True, "disabled": True, "between_tools": False}


def test_an_on_demand_summary_is_no_longer_than_the_requests_max_tokens(http_client: anthropic.Anthropic) -> None:
    """The user's messages alone outgrow the reply: the summary the API writes still stops at
    max_tokens, as every answer does (the stand-in never cuts the user's messages to fit, so without
    the stop a summary that carries an earlier one forward would grow compaction after compaction)."""
    long_asks = [f"Step {n}: " + f"measure valve {n} at the north gauge and log it. " * 250 for n in range(3)]
    asked = for_thinking_model(compact_prompt("full"))
    written = beta(http_client, [*conversation(http_client, long_asks), user("Go on.")], [ON_DEMAND_BETA],
                   compaction={"type": "summarize", "instructions": asked})
    block = written.content[0].content
    assert count_text("\n".join(long_asks)) > 2_000 >= count_text(block) > 1_900
    assert block.startswith("<summary>")
