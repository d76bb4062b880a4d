"""The deterministic policy as a pure function, and its extension point for memory requests."""

from __future__ import annotations

from typing import Any

import anthropic

from ctx_magic.offline import Answer, OfflineAPI, Policy, Rule, offline_client

from .offline_support import MODEL, PYTHON_TOOL, text_of, user

TWO_BLOCKS = "Run these:\n```python\nx = 1\n```\nand\n```python\nprint(x)\n```"


def _request(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 500, "messages": [user(text)], **extra}


def test_python_fences_become_one_tool_call_each() -> None:
    answer = Policy().answer(_request(TWO_BLOCKS, tools=[PYTHON_TOOL]))
    assert answer.stop_reason == "tool_use"
    assert [b["input"] for b in answer.content if b["type"] == "tool_use"] == [{"code": "x = 1"}, {"code": "print(x)"}]


def test_disable_parallel_tool_use_keeps_one_call() -> None:
    choice = {"type": "auto", "disable_parallel_tool_use": True}
    answer = Policy().answer(_request(TWO_BLOCKS, tools=[PYTHON_TOOL], tool_choice=choice))
    assert [b["input"] for b in answer.content if b["type"] == "tool_use"] == [{"code": "x = 1"}]


def test_tool_choice_naming_another_tool_gets_no_python_call() -> None:
    other = {**PYTHON_TOOL, "name": "read_file"}
    choice = {"type": "tool", "name": "read_file"}
    answer = Policy().answer(_request(TWO_BLOCKS, tools=[PYTHON_TOOL, other], tool_choice=choice))
    assert all(b["type"] == "text" for b in answer.content)


def test_fences_inside_tool_results_are_not_run() -> None:
    request = _request("x", tools=[PYTHON_TOOL])
    request["messages"] = [
        user("go"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "python", "input": {"code": "1"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": TWO_BLOCKS}]},
    ]
    answer = Policy().answer(request)
    assert answer.stop_reason == "end_turn"
    assert "python returned: Run these:" in answer.content[0]["text"]


HISTORY_TOOL = {**PYTHON_TOOL, "name": "kernel_history"}


def test_asking_to_go_on_from_earlier_work_reads_the_kernels_history() -> None:
    for ask in ("Continue from where I was.", "Pick up where I left off", "What did I do? Look at my earlier cells"):
        answer = Policy().answer(_request(ask, tools=[PYTHON_TOOL, HISTORY_TOOL]))
        assert answer.stop_reason == "tool_use"
        assert [(b["name"], b["input"]) for b in answer.content if b["type"] == "tool_use"] == [("kernel_history", {})]


def test_no_history_call_without_the_tool_or_the_ask() -> None:
    assert Policy().answer(_request("Continue from where I was.", tools=[PYTHON_TOOL])).stop_reason == "end_turn"
    assert Policy().answer(_request("Tell me a story.", tools=[HISTORY_TOOL])).stop_reason == "end_turn"
    fenced = Policy().answer(_request(f"From where I was: {TWO_BLOCKS}", tools=[PYTHON_TOOL, HISTORY_TOOL]))
    assert {b["name"] for b in fenced.content if b["type"] == "tool_use"} == {"python"}  # fences come first


def test_memory_request_gets_generic_answer_with_requested_headings() -> None:
    prompt = "Update the session memory notes file with what happened.\n\n# Session Title\n# Current State\n"
    request = _request("ignored")
    request["messages"] = [user("Fit a model on sales"), {"role": "assistant", "content": "ok"}, user(prompt)]
    policy = Policy()
    assert policy.kind(request) == "memory"
    text = policy.answer(request).content[0]["text"]
    assert text.startswith("# Session Title\nFit a model on sales")
    assert "# Current State" in text


def test_a_call_after_a_compaction_is_no_memory_request_for_what_its_summary_says() -> None:
    # An automatic compaction in a tool loop leaves one user message of background: the summary
    # (where "nothing recorded yet") and the session notes' place (session-memory.md).
    summary = ("This session is being continued from an earlier conversation that ran out of context.\n\n"
               "Summary:\n## 1. Primary Request and Intent\nnothing recorded yet")
    notes = "Session notes are kept at sessions/s1/session-memory.md (read_file to see them)."
    request = _request("ignored", tools=[PYTHON_TOOL])
    request["messages"] = [{"role": "user", "content": [{"type": "text", "text": summary},
                                                        {"type": "text", "text": notes}]}]
    policy = Policy()
    assert policy.kind(request) == "normal"
    assert not policy.answer(request).content[0]["text"].startswith("## 1. Primary Request")


def test_a_registered_rule_answers_before_the_defaults(api: OfflineAPI) -> None:
    def is_dream(request: Any) -> bool:
        return "DREAM" in str(request["messages"][-1]["content"])

    rule = Rule("dream", "memory", is_dream, lambda _request: Answer.text("consolidated"))
    custom = OfflineAPI(window=api.config.window, policy=Policy().with_rule(rule))
    client = offline_client(custom, max_retries=0)
    assert text_of(client.messages.create(model=MODEL, max_tokens=100, messages=[user("DREAM now")])) == "consolidated"
    assert text_of(client.messages.create(model=MODEL, max_tokens=100, messages=[user("hello")])) != "consolidated"
    assert custom.counts() == {"memory": 1, "normal": 1}


def test_plain_conversation_makes_no_extra_model_calls(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    client.messages.create(model=MODEL, max_tokens=100, messages=[user("hello")])
    client.messages.count_tokens(model=MODEL, messages=[user("hello")])
    client.models.retrieve(MODEL)
    assert api.model_calls() == 1
    assert api.counts() == {"normal": 1, "other": 2}


def test_recorded_requests_keep_body_and_input_tokens(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model=MODEL, max_tokens=100, messages=[user("hello")])
    record = api.requests[-1]
    assert record.path == "/v1/messages" and record.status == 200
    assert record.body["messages"] == [user("hello")]
    assert record.input_tokens == reply.usage.input_tokens
    api.reset()
    assert api.requests == []
