"""The prefix check of the models with preserved thinking, as the docs describe it: a thinking
block is bound to the `system`, `tools` and messages before it; a change there (or a thinking
block left out between others) fails that block and every later one, over real HTTP."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import anthropic
import pytest

from ctx_magic.offline import OfflineAPI
from ctx_magic.offline.thinking import PRESERVED_THINKING_MODELS

from .offline_support import PYTHON_TOOL, refusal, user

MODEL = "claude-sonnet-5-5"
SYSTEM = "You are a careful data assistant."
BOUND = ("Invalid `signature` in `thinking` block. The block is bound to a different conversation. Remove the "
         'block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".')
NOTE_TOOL: dict[str, Any] = {"name": "note", "description": "Keep a note.",
                             "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def ask(client: anthropic.Anthropic, history: list[dict[str, Any]], *, system: Any = SYSTEM,
        tools: list[dict[str, Any]] | None = None, model: str = MODEL, **extra: Any) -> Any:
    return client.messages.create(model=model, max_tokens=2_000, system=system, tools=tools or [PYTHON_TOOL],
                                  messages=history, **extra)


def conversation(client: anthropic.Anthropic, questions: list[str], model: str = MODEL) -> list[dict[str, Any]]:
    """One turn per question, every answer sent back exactly as returned (no `thinking` parameter:
    these models think by default)."""
    history: list[dict[str, Any]] = []
    for question in questions:
        history.append(user(question))
        history.append({"role": "assistant", "content": ask(client, history, model=model).to_dict()["content"]})
    return history


def refused(client: anthropic.Anthropic, history: list[dict[str, Any]], **extra: Any) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(client, history, **extra)
    return refusal(caught.value)


@pytest.fixture
def history(http_client: anthropic.Anthropic) -> list[dict[str, Any]]:
    """Three answered turns, each opening with a thinking block, then a new question."""
    turns = conversation(http_client, ["Load the data.", "Plot it.", "Summarize it."])
    assert [m["content"][0]["type"] for m in turns if m["role"] == "assistant"] == ["thinking"] * 3
    return [*turns, user("Now save it.")]


def test_a_conversation_sent_back_unchanged_passes(http_client: anthropic.Anthropic,
                                                   history: list[dict[str, Any]]) -> None:
    assert ask(http_client, history).content[0].type == "thinking"


def test_an_edited_system_prompt_is_refused_with_the_documented_message(
        http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    message = refused(http_client, history, system=SYSTEM + " Today is Monday.")
    assert message == f"messages.1.content.0: {BOUND}"


def test_a_tool_added_mid_conversation_is_refused(http_client: anthropic.Anthropic,
                                                  history: list[dict[str, Any]]) -> None:
    assert refused(http_client, history, tools=[PYTHON_TOOL, NOTE_TOOL]) == f"messages.1.content.0: {BOUND}"


def test_a_changed_earlier_message_fails_the_thinking_after_it_only(
        http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    edited = copy.deepcopy(history)
    edited[2] = user("Plot it, in blue.")  # before the second answer's thinking, after the first's
    assert refused(http_client, edited) == f"messages.3.content.0: {BOUND}"


def test_a_thinking_block_left_out_between_others_is_refused(
        http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    trimmed = copy.deepcopy(history)
    del trimmed[3]["content"][0]  # the middle answer's thinking, as a client clearing old thinking does
    assert refused(http_client, trimmed) == f"messages.5.content.0: {BOUND}"


def test_a_thinking_block_moved_is_refused(http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    moved = copy.deepcopy(history)
    moved[3]["content"].append(moved[3]["content"].pop(0))  # the thinking after the answer's text
    assert refused(http_client, moved) == f"messages.3.content.1: {BOUND}"


def test_a_change_after_the_last_thinking_block_passes(http_client: anthropic.Anthropic,
                                                       history: list[dict[str, Any]]) -> None:
    changed = copy.deepcopy(history)
    changed[-1] = user("Now save it, as CSV.")  # only the new message, after every thinking block
    assert ask(http_client, changed).content


def test_the_thinking_of_the_last_turn_may_be_left_out(http_client: anthropic.Anthropic,
                                                       history: list[dict[str, Any]]) -> None:
    trimmed = copy.deepcopy(history)
    del trimmed[5]["content"][0]  # no thinking after it: nothing left to fail
    assert ask(http_client, trimmed).content


def test_moving_a_cache_breakpoint_or_a_string_for_its_text_block_is_no_change(
        http_client: anthropic.Anthropic, history: list[dict[str, Any]]) -> None:
    marked = copy.deepcopy(history)
    marked[0] = {"role": "user", "content": [{"type": "text", "text": "Load the data.",
                                               "cache_control": {"type": "ephemeral"}}]}
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    assert ask(http_client, marked, system=system).content


def test_a_request_without_thinking_blocks_has_nothing_to_check(http_client: anthropic.Anthropic,
                                                                history: list[dict[str, Any]]) -> None:
    bare = [{**m, "content": [b for b in m["content"] if b["type"] != "thinking"]} if m["role"] == "assistant" else m
            for m in history]
    assert ask(http_client, bare, system="A different system prompt.", tools=[NOTE_TOOL, PYTHON_TOOL]).content


def test_thinking_produced_after_a_change_stays_valid(http_client: anthropic.Anthropic,
                                                      history: list[dict[str, Any]]) -> None:
    """Once the edited history is the one sent, what the model thinks from then on is bound to it."""
    bare = [{**m, "content": [b for b in m["content"] if b["type"] != "thinking"]} if m["role"] == "assistant" else m
            for m in history]
    bare[0] = user("Load the data, please.")
    answer = ask(http_client, bare)
    follow_up = [*bare, {"role": "assistant", "content": answer.to_dict()["content"]}, user("And then?")]
    assert ask(http_client, follow_up).content[0].type == "thinking"


def test_redacted_thinking_is_bound_too(api: OfflineAPI, http_client: anthropic.Anthropic) -> None:
    api.inject("redacted_thinking")
    history = conversation(http_client, ["Load the data.", "Plot it."])
    assert history[1]["content"][0]["type"] == "redacted_thinking"
    message = refused(http_client, [*history, user("Go on.")], system="Another prompt.")
    assert message.startswith("messages.1.content.0: Invalid `data` in `redacted_thinking` block. The block is "
                              "bound to a different conversation.")


@pytest.mark.parametrize("model", PRESERVED_THINKING_MODELS)
def test_every_model_with_preserved_thinking_runs_the_check(http_client: anthropic.Anthropic, model: str) -> None:
    history = [*conversation(http_client, ["Load the data."], model=model), user("Go on.")]
    assert ask(http_client, history, model=model).content
    assert refused(http_client, history, model=model, system="Edited.") == f"messages.1.content.0: {BOUND}"


def test_models_without_preserved_thinking_keep_their_history_editable(http_client: anthropic.Anthropic) -> None:
    thinking = {"type": "adaptive"}
    first = ask(http_client, [user("Load the data.")], model="claude-sonnet-4-6", thinking=thinking)
    history = [user("Load the data."), {"role": "assistant", "content": first.to_dict()["content"]}, user("Go on.")]
    assert history[1]["content"][0]["type"] == "thinking"
    assert ask(http_client, history, model="claude-sonnet-4-6", thinking=thinking, system="Edited.").content


def test_the_refusal_is_recorded_with_the_blocks_it_names(api: OfflineAPI, http_client: anthropic.Anthropic,
                                                          history: list[dict[str, Any]]) -> None:
    refused(http_client, history, system="Edited.")
    assert api.requests[-1].thinking_mismatches == tuple(
        {"type": "thinking_refused", "path": f"messages.{i}.content.0", "reason": "prefix_binding_mismatch"}
        for i in (1, 3, 5))


def test_the_account_setting_takes_only_new_or_old(api: OfflineAPI) -> None:
    with pytest.raises(ValueError, match="account must be one of new, old"):
        dataclasses.replace(api.config, account="ancient")


def test_a_tool_result_string_and_its_text_block_are_the_same_prefix(http_client: anthropic.Anthropic) -> None:
    question = user("Run this:\n```python\nprint(6 * 7)\n```")
    first = ask(http_client, [question])
    call = next(b for b in first.content if b.type == "tool_use")
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "42"}
    loop = [question, {"role": "assistant", "content": first.to_dict()["content"]},
            {"role": "user", "content": [result]}]
    after = ask(http_client, loop)
    as_block = copy.deepcopy(loop)
    as_block[2]["content"][0]["content"] = [{"type": "text", "text": "42"}]
    follow_up = [*as_block, {"role": "assistant", "content": after.to_dict()["content"]}, user("Thanks.")]
    assert ask(http_client, follow_up).content
    follow_up[2]["content"][0]["content"] = "41"
    assert refused(http_client, follow_up) == f"messages.3.content.0: {BOUND}"
