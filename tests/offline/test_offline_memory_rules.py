"""The stand-in's answers to the long-term memory prompts (extraction, dream gather, consolidate)."""

from __future__ import annotations

import json
from typing import Any

from ctx_magic.context.prompts import summary_message_text
from ctx_magic.memory.longterm import Candidate, json_lines, parse_candidates, tagged_block
from ctx_magic.memory.prompts import consolidate_prompt, entry_line, gather_prompt, longterm_prompt
from ctx_magic.offline import OfflineAPI, Policy, offline_client
from ctx_magic.offline.memory_rules import durable_entries, longterm_answer

from .offline_support import MODEL, text_of, user

MINE = {"memory-longterm", "memory-dream-gather", "memory-dream-consolidate"}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def request(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 2_000, "messages": list(messages)}


def answer_text(body: dict[str, Any]) -> str:
    return str(Policy().answer(body).content[0]["text"])


def extraction(*user_lines: str, limit: int = 20) -> dict[str, Any]:
    turns: list[dict[str, Any]] = []
    for line in user_lines:
        turns += [user(line), assistant("Done. I always answer briefly.")]
    return request(*turns, user(longterm_prompt([], limit)))


# --- detection ----------------------------------------------------------------------------


def test_each_prompt_is_recognized_as_a_memory_request() -> None:
    policy = Policy()
    bodies = {
        "memory-longterm": extraction("I prefer plotly."),
        "memory-dream-gather": request(user(gather_prompt([("s1", "- Never use seaborn.")], [], 20))),
        "memory-dream-consolidate": request(user(consolidate_prompt([entry_line("m1", {"text": "a"})], []))),
    }
    for name, body in bodies.items():
        assert policy.rule_for(body).name == name
        assert policy.kind(body) == "memory"


def test_the_prompt_merged_into_the_last_user_turn_is_still_recognized() -> None:
    body = request(user("go"), {"role": "user", "content": [
        {"type": "text", "text": "I prefer plotly."},
        {"type": "text", "text": longterm_prompt([], 20)},
    ]})
    assert Policy().rule_for(body).name == "memory-longterm"


def test_ordinary_user_messages_are_never_taken_for_these_prompts() -> None:
    policy = Policy()
    ordinary = [
        "Remember that I prefer plotly. Always use it.",
        "Please extract the long-term memories of this session into <memories>.",
        f"Can you explain this? {longterm_prompt([], 20)}",  # the heading, but not at the start
        "ctx_magic long-term memory extraction. What does this feature do?",  # no output block asked for
        "ctx_magic memory consolidation (dream), consolidate phase. How does it work?",
    ]
    for text in ordinary:
        assert policy.rule_for(request(user(text))).name not in MINE, text


# --- extraction ------------------------------------------------------------------------------


def test_durable_statements_of_the_user_become_memory_lines() -> None:
    body = extraction(
        "Load sales.csv. I prefer plotly over matplotlib.",
        "Don't print whole dataframes. What is the mean?",
        "We use the finance.sales table. Remember: the deadline is Friday.",
        "Call it the revenue model.",
    )
    assert parse_candidates(answer_text(body)) == [
        Candidate("I prefer plotly over matplotlib.", "user", False),
        Candidate("Don't print whole dataframes.", "feedback", False),
        Candidate("We use the finance.sales table.", "project", False),
        Candidate("The deadline is Friday.", "project", True),
        Candidate("Call it the revenue model.", "project", False),
    ]


def test_assistant_text_questions_and_reinjected_context_are_ignored() -> None:
    body = extraction(
        "Do you always round to two decimals?",
        "<context-refresh>\nI prefer tabs.\n</context-refresh>",
        "Plot it.",
    )
    assert answer_text(body) == "<memories></memories>"


def test_a_compaction_summary_quoting_the_user_is_read() -> None:
    body = extraction("This session is being continued from a summary.\n- I prefer tabs.")
    assert parse_candidates(answer_text(body)) == [Candidate("I prefer tabs.", "user", False)]


def test_the_limit_the_prompt_names_is_respected() -> None:
    body = extraction(*(f"Always check table number {n}." for n in range(10)), limit=3)
    assert len(parse_candidates(answer_text(body)) or []) == 3


def test_sentence_classification() -> None:
    entries = durable_entries(["- I'd rather see percentages.\n1. Never use seaborn!\n# Heading with never"], 20)
    assert [(e["type"], e["decay"]) for e in entries] == [("user", False), ("feedback", False)]


# --- the dream ----------------------------------------------------------------------------------


def test_gather_reads_only_the_notes_blocks() -> None:
    notes = [
        ("s1", "# Learnings\n- We use polars, not pandas.\n- The data was loaded."),
        ("s2", "- Always log row counts."),
    ]
    body = request(user(gather_prompt(notes, ["I always want a summary first."], 20)))
    assert [c.text for c in parse_candidates(answer_text(body)) or []] == [
        "We use polars, not pandas.",
        "Always log row counts.",
    ]


def test_consolidate_merges_entries_equal_once_normalized_keeping_the_highest_relevance() -> None:
    existing = [
        entry_line("m1", {"text": "Uses polars.", "type": "user", "decay": False, "relevance": 0.4}),
        entry_line("m2", {"text": "Deadline is Friday.", "type": "project", "decay": True, "relevance": 0.9}),
        entry_line("m3", {"text": "uses  POLARS", "type": "user", "decay": True, "relevance": 0.7}),
    ]
    candidates = [entry_line("c1", {"text": "Uses polars!", "type": "user", "decay": False})]
    block = tagged_block(answer_text(request(user(consolidate_prompt(existing, candidates)))), "consolidated")
    assert json_lines(block or "") == [
        {"text": "Uses polars.", "type": "user", "decay": False, "relevance": 1.0, "from": ["m1", "m3", "c1"]}
    ]


def test_consolidate_with_nothing_to_merge_answers_an_empty_block() -> None:
    existing = [entry_line("m1", {"text": "Uses polars.", "relevance": 1.0})]
    candidates = [entry_line("c1", {"text": "Never use seaborn."})]
    assert answer_text(request(user(consolidate_prompt(existing, candidates)))) == "<consolidated></consolidated>"


# --- through the server ----------------------------------------------------------------------


def test_the_server_counts_these_requests_as_memory_calls() -> None:
    api = OfflineAPI()
    client = offline_client(api, max_retries=0)
    reply = client.messages.create(**extraction("I prefer plotly over matplotlib."))
    assert json.loads(tagged_block(text_of(reply), "memories").strip()) == {  # type: ignore[union-attr]
        "text": "I prefer plotly over matplotlib.", "type": "user", "decay": False
    }
    client.messages.create(**request(user("I prefer plotly over matplotlib.")))
    assert (api.model_calls("memory"), api.model_calls("normal")) == (1, 1)


def test_a_summary_gives_its_body_but_not_ctx_magics_framing_to_extraction():
    summary = summary_message_text("## 6. All User Messages\n- Always plot in UTC.", "/t/transcript.jsonl", auto=True)
    request = {"messages": [{"role": "user", "content": [{"type": "text", "text": summary}]},
                            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                            {"role": "user", "content": [{"type": "text", "text": longterm_prompt([], 20)}]}]}
    answer = longterm_answer(request)
    assert "Always plot in UTC" in answer
    assert "acknowledge" not in answer and "Continue the work" not in answer
