"""Long-term memory extraction, parsing, and the real SDK against the offline stand-in."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from memory_rig import SdkTextModel

from ctx_magic.agent.model import AnthropicModel
from ctx_magic.memory.longterm import (
    MAX_PER_SESSION,
    Candidate,
    MemoryTargets,
    extract_memories,
    parse_candidates,
    tagged_block,
)
from ctx_magic.memory.prompts import LONGTERM_HEADING
from ctx_magic.memory.store import MemoryStore
from ctx_magic.messages import Message, text_block, user_text
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.transport import offline_client

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
MODEL = "claude-offline-test"


@dataclass
class CannedModel:
    """A TextModel that always answers the same text."""

    reply: str
    calls: int = 0

    def complete(self, messages: Sequence[Message], prompt: str) -> str:
        self.calls += 1
        return self.reply


@pytest.fixture
def api() -> OfflineAPI:
    return OfflineAPI(OfflineConfig(window=200_000))


@pytest.fixture
def model(api: OfflineAPI) -> SdkTextModel:
    return SdkTextModel(AnthropicModel(offline_client(api, max_retries=0), name=MODEL))


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore.for_project(tmp_path, clock=lambda: NOW)


def said(text: str) -> Message:
    return user_text(text)


def replied(text: str) -> Message:
    return Message("assistant", (text_block(text),), api_id="msg_x")


def session(*user_lines: str) -> list[Message]:
    messages: list[Message] = []
    for line in user_lines:
        messages += [said(line), replied("Done.")]
    return messages


# --- parsing -----------------------------------------------------------------------------


def test_parsing_skips_junk_lines_and_keeps_good_ones() -> None:
    reply = """Here you go:
<memories>
- {"text": "Prefers plotly.", "type": "user", "decay": false}
not json at all
{"text": "Broken JSON", "type":
{"text": "", "type": "user"}
{"type": "user"}
["a", "list"]
{"text": "Uses the finance.sales table.", "type": "invented", "decay": "false"}
{"text": "Deadline is Friday.", "type": "project"}
</memories>
Trailing chatter."""
    assert parse_candidates(reply) == [
        Candidate("Prefers plotly.", "user", False),
        Candidate("Uses the finance.sales table.", "project", False),
        Candidate("Deadline is Friday.", "project", True),
    ]


def test_a_reply_without_the_block_parses_to_none_and_an_empty_block_to_nothing() -> None:
    assert parse_candidates("I could not find anything.") is None
    assert parse_candidates("<memories></memories>") == []


def test_an_unclosed_block_is_read_to_the_end() -> None:
    assert tagged_block('<memories>\n{"text": "a"}', "memories") == '\n{"text": "a"}'


def test_the_last_block_wins_when_a_reply_quotes_the_format_first() -> None:
    reply = '<memories>{"text": "example"}</memories> and then <memories>\n{"text": "real"}\n</memories>'
    assert [c.text for c in parse_candidates(reply) or []] == ["real"]


# --- extraction through the real SDK and the offline stand-in -----------------------------


def test_user_preferences_become_memories(api: OfflineAPI, model: SdkTextModel, store: MemoryStore) -> None:
    messages = session(
        "Load sales.csv and plot revenue by month.",
        "I prefer plotly over matplotlib for charts.",
        "Never use seaborn in this project.",
        "We use the finance.sales table as the source of truth.",
        "What is the mean of column x?",
        "Remember that the quarterly report is due on Friday.",
    )
    added = extract_memories(model, messages, MemoryTargets(store), now=NOW, session_id="s1", already_extracted=0)
    assert [(m.text, m.type, m.decay) for m in added] == [
        ("I prefer plotly over matplotlib for charts.", "user", False),
        ("Never use seaborn in this project.", "feedback", False),
        ("We use the finance.sales table as the source of truth.", "project", False),
        ("The quarterly report is due on Friday.", "project", True),
    ]
    assert all(m.source_session == "s1" and m.created == NOW for m in added)
    assert store.all() == sorted(added, key=lambda m: m.id)
    assert api.model_calls("memory") == 1
    assert api.model_calls() == 1
    assert model.prompts[0].startswith(LONGTERM_HEADING)


def test_a_session_stores_at_most_twenty(api: OfflineAPI, model: SdkTextModel, store: MemoryStore) -> None:
    messages = session(*(f"Always label axis {n} in plots." for n in range(25)))
    added = extract_memories(model, messages, MemoryTargets(store), now=NOW, session_id="s1", already_extracted=0)
    assert len(added) == MAX_PER_SESSION == 20
    assert "At most 20 entries." in model.prompts[0]


def test_the_cap_counts_what_the_session_already_stored(
    api: OfflineAPI, model: SdkTextModel, store: MemoryStore
) -> None:
    messages = session(*(f"Always label axis {n} in plots." for n in range(25)))
    added = extract_memories(model, messages, MemoryTargets(store), now=NOW, session_id="s1", already_extracted=15)
    assert len(added) == 5
    assert "At most 5 entries." in model.prompts[0]


def test_a_session_at_its_cap_makes_no_call(api: OfflineAPI, model: SdkTextModel, store: MemoryStore) -> None:
    messages = session("I prefer plotly over matplotlib for charts.")
    assert extract_memories(model, messages, MemoryTargets(store), now=NOW, session_id="s1", already_extracted=20) == []
    assert api.model_calls() == 0


def test_the_cap_holds_even_when_the_model_ignores_it(store: MemoryStore) -> None:
    lines = "\n".join(json.dumps({"text": f"Fact {n}: column c{n} is in euros.", "type": "project"}) for n in range(30))
    added = extract_memories(CannedModel(f"<memories>\n{lines}\n</memories>"), [], MemoryTargets(store), now=NOW,
                             session_id="s1", already_extracted=3)
    assert len(added) == 17


def test_existing_memories_are_not_stored_again(api: OfflineAPI, model: SdkTextModel, store: MemoryStore) -> None:
    known = store.add("I prefer plotly over matplotlib for charts.", now=NOW, type="user", decay=False)
    messages = session("i prefer plotly over matplotlib for charts", "Never use seaborn in this project.")
    added = extract_memories(model, messages, MemoryTargets(store), now=NOW, session_id="s2", already_extracted=0)
    assert [m.text for m in added] == ["Never use seaborn in this project."]
    assert len(store.all()) == 2
    assert f"- {known.text}" in model.prompts[0]  # the prompt lists what is already known


def test_near_duplicates_within_one_reply_are_stored_once(store: MemoryStore) -> None:
    reply = "<memories>\n" + "\n".join(
        json.dumps({"text": t, "type": "user"}) for t in ["Uses polars for dataframes.", "Uses polars for dataframes!"]
    ) + "\n</memories>"
    added = extract_memories(CannedModel(reply), [], MemoryTargets(store), now=NOW, session_id="s", already_extracted=0)
    assert len(added) == 1


def test_secrets_the_user_mentioned_are_dropped(api: OfflineAPI, model: SdkTextModel, store: MemoryStore) -> None:
    messages = session("Remember the staging password=hunter22 for later.", "Always round money to 2 decimals.")
    added = extract_memories(model, messages, MemoryTargets(store), now=NOW, session_id="s1", already_extracted=0)
    assert [m.text for m in added] == ["Always round money to 2 decimals."]
    assert "hunter22" not in "".join(p.read_text() for p in store.folder.iterdir())


def test_extraction_refuses_secrets_said_in_words_and_names_their_kind(store: MemoryStore) -> None:
    reply = "<memories>\n" + "\n".join(json.dumps({"text": t, "type": "project"}) for t in [
        "The database password is Tr0ub4dor&3", "aws_key_id " + "AKIA" + "2OGYBAH6TP4WVLXZ", "Reports go out Mondays."]
    ) + "\n</memories>"
    refused: list[str] = []
    added = extract_memories(CannedModel(reply), [], MemoryTargets(store), now=NOW, session_id="s", refused=refused)
    assert [m.text for m in added] == ["Reports go out Mondays."]
    assert refused == ["a password in plain words (T**********)", "an AWS access key id (AKIA************…)"]


def test_a_conversation_without_durable_statements_stores_nothing(
    api: OfflineAPI, model: SdkTextModel, store: MemoryStore
) -> None:
    messages = session("Load sales.csv.", "Plot revenue by month.", "What is the mean of x?")
    assert extract_memories(model, messages, MemoryTargets(store), now=NOW, session_id="s1", already_extracted=0) == []
    assert api.model_calls("memory") == 1


def test_a_reply_without_a_block_stores_nothing(store: MemoryStore) -> None:
    model = CannedModel("Sorry, I cannot help with that.")
    assert extract_memories(model, [], MemoryTargets(store), now=NOW, session_id="s1", already_extracted=0) == []
    assert model.calls == 1
