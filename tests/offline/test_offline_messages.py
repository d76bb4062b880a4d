"""POST /v1/messages through the real SDK: streaming, tool use, plain JSON, policy rules."""

from __future__ import annotations

import anthropic

from ctx_magic.offline import OfflineAPI
from ctx_magic.offline.transport import offline_client

from .offline_support import MODEL, PYTHON_TOOL, text_of, user

CODE_REQUEST = (
    "Load the data and plot it.\n"
    "```python\nimport pandas as pd\ndf = pd.read_csv('data/sales.csv')\nprint(df.head())\n```\n"
    'then\n```python\nprint({\'rows\': len(df), "note": "quotes and braces {}"})\n```'
)


def test_streams_text_in_several_deltas(sdk: anthropic.Anthropic) -> None:
    with sdk.messages.stream(model=MODEL, max_tokens=500, messages=[user("hello there " * 20)]) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1
    assert "".join(pieces) == text_of(final)
    assert final.stop_reason == "end_turn"
    assert final.id.startswith("msg_offline_") and final.id.endswith("_000001")
    assert "hello there" in text_of(final)


def test_tool_use_input_json_deltas_reassembled_by_sdk(sdk: anthropic.Anthropic) -> None:
    json_pieces = []
    with sdk.messages.stream(
        model=MODEL, max_tokens=1_000, tools=[PYTHON_TOOL], messages=[user(CODE_REQUEST)]
    ) as stream:
        for event in stream:
            if event.type == "input_json":
                json_pieces.append(event.partial_json)
        final = stream.get_final_message()
    calls = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use"
    assert [c.name for c in calls] == ["python", "python"]
    assert calls[0].input == {"code": "import pandas as pd\ndf = pd.read_csv('data/sales.csv')\nprint(df.head())"}
    assert calls[1].input == {"code": 'print({\'rows\': len(df), "note": "quotes and braces {}"})'}
    assert [c.id[-3:] for c in calls] == ["_01", "_02"] and calls[0].id[:-3] == calls[1].id[:-3]
    assert calls[0].id.startswith("toolu_offline_") and calls[0].id[14:-3] == final.id[12:-7]
    assert len(json_pieces) > 4  # each call's JSON came in several pieces


def test_tool_result_round_trip_ends_turn_with_note(sdk: anthropic.Anthropic) -> None:
    first = sdk.messages.create(model=MODEL, max_tokens=1_000, tools=[PYTHON_TOOL], messages=[user(CODE_REQUEST)])
    calls = [b for b in first.content if b.type == "tool_use"]
    results = [
        {"type": "tool_result", "tool_use_id": calls[0].id, "content": "   a  b\n0  1  2"},
        {
            "type": "tool_result",
            "tool_use_id": calls[1].id,
            "content": "Traceback (most recent call last):\nNameError: name 'df' is not defined",
            "is_error": True,
        },
    ]
    history = [user(CODE_REQUEST), {"role": "assistant", "content": first.to_dict()["content"]}]
    second = sdk.messages.create(
        model=MODEL, max_tokens=1_000, tools=[PYTHON_TOOL], messages=[*history, {"role": "user", "content": results}]
    )
    assert second.stop_reason == "end_turn"
    assert "python returned: a  b" in text_of(second)
    assert "python reported an error: NameError: name 'df' is not defined" in text_of(second)


def test_tool_choice_none_never_returns_tool_use(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(
        model=MODEL, max_tokens=1_000, tools=[PYTHON_TOOL], tool_choice={"type": "none"}, messages=[user(CODE_REQUEST)]
    )
    assert all(b.type != "tool_use" for b in reply.content)
    assert reply.stop_reason == "end_turn"


def test_code_fences_without_python_tool_get_a_text_reply(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model=MODEL, max_tokens=1_000, messages=[user(CODE_REQUEST)])
    assert [b.type for b in reply.content] == ["text"]


def test_max_tokens_truncates_text_and_says_so(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model=MODEL, max_tokens=5, messages=[user("tell me something long " * 30)])
    assert reply.stop_reason == "max_tokens"
    assert reply.usage.output_tokens <= 5
    assert 0 < len(text_of(reply)) < 60


def test_same_request_twice_gives_same_content(client: anthropic.Anthropic) -> None:
    kwargs = {"model": MODEL, "max_tokens": 1_000, "tools": [PYTHON_TOOL], "messages": [user(CODE_REQUEST)]}
    first, second = client.messages.create(**kwargs), client.messages.create(**kwargs)
    assert [(b.type, getattr(b, "text", None), getattr(b, "input", None)) for b in first.content] == [
        (b.type, getattr(b, "text", None), getattr(b, "input", None)) for b in second.content
    ]
    assert first.id != second.id and first.id.endswith("_000001") and second.id.endswith("_000002")


def test_reply_never_claims_to_be_claude(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model=MODEL, max_tokens=500, messages=[user("Who are you?")])
    assert "claude" not in text_of(reply).lower()
    assert "offline stand-in" in text_of(reply).lower()


def test_fallback_quotes_first_200_chars_of_latest_text(client: anthropic.Anthropic) -> None:
    text = "x" * 150 + " " + "y" * 150
    reply = client.messages.create(
        model=MODEL, max_tokens=1_000, messages=[user("first"), {"role": "assistant", "content": "ok"}, user(text)]
    )
    assert "3 message(s)" in text_of(reply)
    assert f'"{text[:200]}"' in text_of(reply)


def test_output_tokens_match_generated_content(api: OfflineAPI, client: anthropic.Anthropic) -> None:
    from ctx_magic.offline.counting import output_tokens

    reply = client.messages.create(model=MODEL, max_tokens=1_000, tools=[PYTHON_TOOL], messages=[user(CODE_REQUEST)])
    content = [{k: v for k, v in b.items() if k != "id"} for b in reply.to_dict()["content"]]
    assert reply.usage.output_tokens == output_tokens(content)


def test_ids_come_from_the_request_so_a_new_server_never_repeats_a_conversations_ids() -> None:
    replies = []
    for _ in range(2):  # two server runs, as in two kernels
        sdk = offline_client(OfflineAPI(), max_retries=0)
        replies.append(sdk.messages.create(model=MODEL, max_tokens=1_000, tools=[PYTHON_TOOL],
                                           messages=[user(CODE_REQUEST)]))
    assert replies[0].id == replies[1].id  # the same request to a fresh server: the same ids
    sdk = offline_client(OfflineAPI(), max_retries=0)
    other = sdk.messages.create(model=MODEL, max_tokens=1_000, tools=[PYTHON_TOOL],
                                messages=[user(CODE_REQUEST + "\n# and once more")])
    assert other.id != replies[0].id
    assert {b.id for b in other.content if b.type == "tool_use"}.isdisjoint(
        {b.id for b in replies[0].content if b.type == "tool_use"})

