"""The stand-in's answer to ctx_magic's own compaction prompt: analysis, then nine sections."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import pytest

from ctx_magic.context.prompts import (
    SUMMARY_SECTIONS,
    UP_TO_SECTIONS,
    compact_prompt,
    extract_summary,
    summary_message_text,
)
from ctx_magic.offline import OfflineAPI
from ctx_magic.offline.compaction import QUOTE_LIMIT, compaction_answer, is_compaction_request, mentioned_paths

from .offline_support import MODEL, PYTHON_TOOL, text_of, user

USER_MESSAGES = [
    "Load data/sales.csv and show me the first rows.",
    "Now group by month.\nUse `df.groupby(df.date.dt.month)` and keep the totals exact: 1,234.50 not 1234.5!",
    "Never mind the plot; save the table to out/monthly.parquet instead.",
]


def _conversation() -> list[dict[str, Any]]:
    call_1 = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "python",
        "input": {"code": "import pandas as pd\ndf = pd.read_csv('data/sales.csv')\ndf.head()"},
    }
    call_2 = {
        "type": "tool_use",
        "id": "toolu_2",
        "name": "python",
        "input": {"code": "df.groupby(df.date.dt.month).sum()"},
    }
    error = (
        'Traceback (most recent call last):\n  File "<cell>", line 1\n'
        "AttributeError: Can only use .dt accessor with datetimelike values"
    )
    return [
        user(USER_MESSAGES[0]),
        {"role": "assistant", "content": [{"type": "text", "text": "Loading it."}, call_1]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "   date  total\n0  ..."}],
        },
        {"role": "assistant", "content": "Here are the first rows."},
        user(USER_MESSAGES[1]),
        {"role": "assistant", "content": [call_2]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": error, "is_error": True}],
        },
        {"role": "assistant", "content": "The date column is text; I will parse it first."},
        user(USER_MESSAGES[2]),
        {"role": "assistant", "content": "Saving it."},
    ]


def _compact(client: anthropic.Anthropic, history: list[dict[str, Any]], direction: str = "full") -> str:
    request = [*history, user(compact_prompt(direction))]
    reply = client.messages.create(
        model=MODEL, max_tokens=8_000, tools=[PYTHON_TOOL], tool_choice={"type": "none"}, messages=request
    )
    assert reply.stop_reason == "end_turn"
    return text_of(reply)


def test_compaction_reply_has_analysis_then_summary(client: anthropic.Anthropic) -> None:
    reply = _compact(client, _conversation())
    assert reply.startswith("<analysis>")
    assert reply.index("</analysis>") < reply.index("<summary>") < reply.index("</summary>")
    assert extract_summary(reply) is not None


def test_compaction_summary_has_all_nine_headings_in_order(client: anthropic.Anthropic) -> None:
    summary = extract_summary(_compact(client, _conversation())) or ""
    headings = re.findall(r"^## (\d+)\. (.+)$", summary, re.MULTILINE)
    assert headings == [(str(n), title) for n, (title, _) in enumerate(SUMMARY_SECTIONS, 1)]


def test_compaction_keeps_every_user_message_verbatim(client: anthropic.Anthropic) -> None:
    summary = extract_summary(_compact(client, _conversation())) or ""
    section = summary.split("All User Messages", 1)[1].split("\n## ", 1)[0]
    for message in USER_MESSAGES:
        assert message in section


def test_compaction_lists_files_errors_and_quotes_the_last_request(client: anthropic.Anthropic) -> None:
    summary = extract_summary(_compact(client, _conversation())) or ""
    sections = dict(re.findall(r"^## \d+\. (.+?)\n(.*?)(?=^## |\Z)", summary, re.MULTILINE | re.DOTALL))
    assert "data/sales.csv" in sections["Files and Code Sections"]
    assert "AttributeError: Can only use .dt accessor" in sections["Errors and Fixes"]
    assert USER_MESSAGES[-1] in sections["Pending Tasks"]
    assert USER_MESSAGES[-1] in sections["Current Work"]
    assert f'"{USER_MESSAGES[-1]}"' in sections["Optional Next Step"]


def test_analysis_walks_user_messages_tool_calls_and_errors_in_order(client: anthropic.Anthropic) -> None:
    reply = _compact(client, _conversation())
    analysis = reply.split("<analysis>", 1)[1].split("</analysis>", 1)[0].strip().splitlines()
    kinds = [line.split(": ", 1)[0].split(". ", 1)[1] for line in analysis]
    assert kinds == ["User said", "Called python", "User said", "Called python", "python failed", "User said"]


def test_up_to_prompt_gets_its_own_sections(client: anthropic.Anthropic) -> None:
    summary = extract_summary(_compact(client, _conversation(), "up_to")) or ""
    titles = re.findall(r"^## \d+\. (.+)$", summary, re.MULTILINE)
    assert titles == [title for title, _ in UP_TO_SECTIONS]


def test_long_user_message_is_cut_but_never_dropped(client: anthropic.Anthropic) -> None:
    long_message = "word " * 1_000
    summary = extract_summary(_compact(client, [user(long_message), {"role": "assistant", "content": "ok"}])) or ""
    assert long_message[:QUOTE_LIMIT] in summary
    assert long_message not in summary
    assert "more characters in the transcript" in summary


def test_repeated_compaction_carries_earlier_user_messages_forward(client: anthropic.Anthropic) -> None:
    first = extract_summary(_compact(client, _conversation())) or ""
    resumed = [
        user(summary_message_text(first, "/tmp/transcript.jsonl", auto=True)),
        {"role": "assistant", "content": "Continuing."},
        user("One more thing: add a total row."),
        {"role": "assistant", "content": "Done."},
    ]
    second = extract_summary(_compact(client, resumed)) or ""
    section = second.split("All User Messages", 1)[1].split("\n## ", 1)[0]
    for message in [*USER_MESSAGES, "One more thing: add a total row."]:
        assert message in section
    assert section.count("<user-message") == 4  # the earlier summary itself is not quoted again
    assert "data/sales.csv" in second.split("Files and Code Sections", 1)[1].split("\n## ", 1)[0]


def test_compaction_requests_are_counted_apart(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    client.messages.create(model=MODEL, max_tokens=100, messages=[user("hi")])
    _compact(client, _conversation())
    assert api.counts() == {"normal": 1, "compaction": 1}
    assert api.model_calls("compaction") == 1 and api.model_calls() == 2


def test_compaction_prompt_is_detected_and_plain_text_is_not() -> None:
    assert is_compaction_request({"messages": [user(compact_prompt())]})
    assert is_compaction_request({"messages": [user(compact_prompt("from", "focus on the plots"))]})
    assert not is_compaction_request({"messages": [user("Write a <summary> of <analysis>: 1. a: x")]})


def test_compaction_reply_is_deterministic() -> None:
    request = {"messages": [*_conversation(), user(compact_prompt())]}
    assert compaction_answer(request) == compaction_answer(request)


@pytest.mark.parametrize(
    ("tool_input", "paths"),
    [
        ({"path": "notes/plan.md", "offset": 0}, ["notes/plan.md"]),
        (
            {"code": "df = pd.read_csv('data/sales.csv')\ndf.to_parquet(\"out/m.parquet\")"},
            ["data/sales.csv", "out/m.parquet"],
        ),
        ({"code": "np.mean(df.head())"}, []),
        ({"pattern": "def main", "path": "src/"}, ["src/"]),
        ({"path": "/tmp/report.txt"}, ["/tmp/report.txt"]),
    ],
)
def test_paths_are_read_from_tool_inputs(tool_input: dict[str, Any], paths: list[str]) -> None:
    assert mentioned_paths(tool_input) == paths
