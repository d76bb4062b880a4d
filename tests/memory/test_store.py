"""Long-term memory store: decay, selection, files, index, dedupe, secrets."""

from __future__ import annotations

import difflib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import platformdirs
import pytest

from ctx_magic.context.tokens import count_text
from ctx_magic.memory.prompts import memory_prompt_section, prompt_line, select_for_prompt
from ctx_magic.memory.record import NEAR_DUPLICATE_RATIO, Memory, memory_id, relevance, shown_text
from ctx_magic.memory.secrets import detect_secret
from ctx_magic.memory.store import INDEX_NAME, MemoryStore, SecretRefused, project_memory_dir, user_memory_dir

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def days(n: float) -> datetime:
    return T0 + timedelta(days=n)


def memory(text: str, *, age: float = 0, base: float = 1.0, decay: bool = True, kind: str = "user") -> Memory:
    created = days(-age)
    return Memory(memory_id(text), text, kind, created, created, base, decay)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore.for_project(tmp_path / ".ctx_magic", clock=lambda: T0)


# --- relevance ----------------------------------------------------------------------------


@pytest.mark.parametrize(("age", "factor"), [(0, 1.0), (30, 0.5), (60, 0.25), (90, 0.125)])
def test_relevance_halves_every_thirty_days(age: int, factor: float) -> None:
    assert relevance(0.8, T0, days(age), decay=True) == pytest.approx(0.8 * factor)


@pytest.mark.parametrize("age", [0, 30, 90, 3650])
def test_relevance_without_decay_stays_at_the_base(age: int) -> None:
    assert relevance(0.8, T0, days(age), decay=False) == 0.8


def test_relevance_of_a_memory_from_the_future_is_not_above_its_base() -> None:
    assert relevance(1.0, days(5), T0, decay=True) == 1.0


def test_memory_current_relevance_uses_its_base_and_creation() -> None:
    assert memory("x", age=30, base=0.6).current_relevance(T0) == pytest.approx(0.3)
    assert memory("x", age=30, base=0.6, decay=False).current_relevance(T0) == 0.6


# --- selection and the prompt section ------------------------------------------------------


def test_selection_takes_the_most_relevant_within_the_budget() -> None:
    memories = [memory(f"fact number {i} about the sales data", age=10 * i) for i in range(8)]
    one = count_text(prompt_line(memories[0], T0) + "\n")
    chosen = select_for_prompt(memories, T0, budget_tokens=3 * one)
    assert [m.text for m in chosen] == [m.text for m in memories[:3]]


def test_selection_prefers_stable_memories_over_decayed_ones() -> None:
    old_stable = memory("Prefers 2-space indentation.", age=200, decay=False)
    old_transient = memory("File loader.py had a bug on day 3.", age=20)
    assert select_for_prompt([old_transient, old_stable], T0, budget_tokens=1_000) == [old_stable, old_transient]


def test_selection_passes_over_one_that_does_not_fit_and_keeps_smaller_ones() -> None:
    big = memory("important " * 200, base=1.0)
    small = memory("Uses polars.", base=0.5)
    assert select_for_prompt([big, small], T0, budget_tokens=50) == [small]


def test_selection_with_no_budget_is_empty() -> None:
    assert select_for_prompt([memory("a fact")], T0, budget_tokens=0) == []


def test_memories_older_than_thirty_days_carry_an_age_note() -> None:
    section = memory_prompt_section([memory("Sales data lives in s3.", age=45), memory("Uses polars.", age=30)], T0)
    assert "- [user] Sales data lives in s3. (noted 45 days ago; may be out of date)" in section
    assert "- [user] Uses polars.\n" in section + "\n"
    assert section.startswith("# Long-term memory")


def test_an_empty_selection_gives_no_section() -> None:
    assert memory_prompt_section([], T0) == ""


# --- files and front matter --------------------------------------------------------------


def test_front_matter_round_trips() -> None:
    original = Memory("uses-polars-1", "Uses polars,\nnot pandas: it is faster.", "feedback", days(-3), T0, 0.75,
                      False, "user", "20250301-120000-abcdef")
    assert Memory.from_markdown(original.to_markdown(), scope="user") == original


def test_add_writes_a_markdown_file_with_front_matter_and_an_index(store: MemoryStore) -> None:
    added = store.add("Prefers plotly over matplotlib.", now=T0, type="user", decay=False, source_session="s1")
    text = (store.folder / f"{added.id}.md").read_text()
    assert text.startswith("---\nid: prefers-plotly-over-matplotlib-")
    for line in ("type: user", "created: 2025-03-01T12:00:00Z", "updated: 2025-03-01T12:00:00Z",
                 "relevance: 1.0", "decay: false", "scope: project", "source_session: s1"):
        assert f"\n{line}\n" in text
    assert text.endswith("---\nPrefers plotly over matplotlib.\n")
    index = (store.folder / INDEX_NAME).read_text()
    assert f"- [{added.id}]({added.id}.md) · user · 1.00 · Prefers plotly over matplotlib." in index
    assert store.all() == [added]
    assert store.get(added.id) == added


def test_folders_of_the_two_scopes(tmp_path: Path) -> None:
    assert project_memory_dir(tmp_path) == tmp_path / "memory"
    assert MemoryStore.for_user(tmp_path / "data").folder == tmp_path / "data" / "memory"
    assert MemoryStore.for_user(tmp_path / "data").scope == "user"
    assert user_memory_dir() == Path(platformdirs.user_data_dir("ctx_magic")) / "memory"  # computed, not created


def test_user_scope_memories_say_so(tmp_path: Path) -> None:
    added = MemoryStore.for_user(tmp_path).add("Writes in British English.", now=T0)
    assert "\nscope: user\n" in (tmp_path / "memory" / f"{added.id}.md").read_text()


def test_index_lists_memories_most_relevant_first_with_current_relevance(store: MemoryStore) -> None:
    store.add("An old transient fact about the cache.", now=days(-60))
    store.add("A fresh fact about the loader.", now=T0)
    lines = [line for line in store.index.text().splitlines() if line.startswith("- [")]
    assert [line.split(" · ")[2] for line in lines] == ["1.00", "0.25"]


def test_no_temporary_files_are_left_behind(store: MemoryStore) -> None:
    store.add("Uses polars.", now=T0)
    assert sorted(p.name for p in store.folder.iterdir()) == sorted([INDEX_NAME, f"{memory_id('Uses polars.')}.md"])


# --- dedupe ------------------------------------------------------------------------------


def test_adding_the_same_text_returns_the_existing_memory(store: MemoryStore) -> None:
    first = store.add("Prefers plotly over matplotlib.", now=T0)
    again = store.add("  prefers PLOTLY over   matplotlib ", now=days(3), type="feedback")
    assert again == first
    assert len(store.all()) == 1


def test_a_near_duplicate_returns_the_existing_memory(store: MemoryStore) -> None:
    first = store.add("The sales table is refreshed every Monday morning.", now=T0)
    assert store.add("The sales table is refreshed every monday mornings", now=T0) == first
    assert len(store.all()) == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Always label axis 0 in plots.", "Always label axis 1 in plots."),
        (
            "Always round amounts to cents in the customers table.",
            "Always round amounts to cents in the shipments table.",
        ),
    ],
)
def test_close_texts_that_swap_a_word_are_different_memories(store: MemoryStore, first: str, second: str) -> None:
    assert difflib.SequenceMatcher(None, first.lower(), second.lower()).ratio() >= NEAR_DUPLICATE_RATIO
    store.add(first, now=T0)
    store.add(second, now=T0)
    assert len(store.all()) == 2


def test_a_different_memory_is_added(store: MemoryStore) -> None:
    store.add("The sales table is refreshed every Monday morning.", now=T0)
    store.add("The costs table is refreshed on the first of the month.", now=T0)
    assert len(store.all()) == 2


# --- forget ------------------------------------------------------------------------------


def test_forget_removes_the_file_and_its_index_line(store: MemoryStore) -> None:
    keep = store.add("Uses polars.", now=T0)
    gone = store.add("Prefers dark themes in plots.", now=T0)
    assert store.forget(gone.id) is True
    assert store.all() == [keep]
    assert gone.id not in store.index.text()
    assert keep.id in store.index.text()


@pytest.mark.parametrize("unknown", ["no-such-memory", "../secrets", "UPPER", ""])
def test_forget_of_an_unknown_or_invalid_id_is_false(store: MemoryStore, unknown: str) -> None:
    store.add("Uses polars.", now=T0)
    assert store.forget(unknown) is False
    assert len(store.all()) == 1


# --- corrupt files -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("just some text\n", "no front matter"),
        ("---\nid: broken\ntype: user\n", "not closed"),
        ("---\nid: broken\ncreated: 2025-01-01T00:00:00Z\nupdated: 2025-01-01T00:00:00Z\n---\nx\n", "lacks type"),
        ("---\nid: broken\ntype: idea\ncreated: 2025-01-01\nupdated: 2025-01-01\n---\nx\n", "unknown type"),
        ("---\nid: broken\ntype: user\ncreated: yesterday\nupdated: 2025-01-01\n---\nx\n", "created is not a date"),
        ("---\nid: broken\ntype: user\ncreated: 2025-01-01\nupdated: 2025-01-01\nrelevance: nan\n---\nx\n",
         "relevance"),
        ("---\nid: other\ntype: user\ncreated: 2025-01-01\nupdated: 2025-01-01\n---\nx\n", "does not match"),
    ],
)
def test_a_corrupt_memory_file_is_skipped_and_reported(store: MemoryStore, content: str, reason: str) -> None:
    good = store.add("Uses polars.", now=T0)
    (store.folder / "broken.md").write_text(content)
    scan = store.scan()
    assert scan.memories == (good,)
    assert [p.path.name for p in scan.problems] == ["broken.md"]
    assert reason in scan.problems[0].reason
    store.index.rebuild(T0)
    assert "broken.md:" in store.index.text()


def test_a_file_that_is_not_utf8_is_skipped(store: MemoryStore) -> None:
    store.folder.mkdir(parents=True)
    (store.folder / "binary.md").write_bytes(b"\xff\xfe\x00garbage")
    assert store.all() == []
    assert store.problems()[0].path.name == "binary.md"


def test_an_empty_folder_or_a_missing_one_has_no_memories(tmp_path: Path) -> None:
    assert MemoryStore(tmp_path / "nowhere").all() == []


# --- refusals ----------------------------------------------------------------------------

FAKE = "Zq8" + "x" * 13 + "Lw4" + "b" * 9  # a made-up credential body, not a real key

SECRETS = {
    "an Anthropic API key": f"Use the key sk-ant-api03-{FAKE} for the API.",
    "an API key (sk-...)": f"The OpenAI key is sk-proj-{FAKE}",
    "an AWS access key id": "The bucket is read with AKIA" + "ABCDEFGHIJKLMNOP" + ".",
    "a GitHub token": f"Push with ghp_{FAKE}",
    "a Slack token": "Post to the channel with xoxb-1234567890-" + FAKE,
    "a bearer token": f"Call it with Authorization: Bearer {FAKE}",
    "a private key block": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    "a value assigned to password": "The database login is password=hunter22",
    "a value assigned to passwd": "ssh passwd: correcthorse",
    "a value assigned to token": "Use token=abc123def for the service.",
    "a long random-looking string (a key or token?)": "The signing salt is 7Hq2LmZ9xR4tVb8NwK3pYc6FjD1sGa5E.",
}


@pytest.mark.parametrize(("kind", "text"), list(SECRETS.items()))
def test_secrets_are_refused_with_a_clear_message(store: MemoryStore, kind: str, text: str) -> None:
    with pytest.raises(SecretRefused) as refused:
        store.add(text, now=T0)
    message = str(refused.value)
    found = detect_secret(text)
    assert found is not None and found.kind == kind
    assert message.startswith(f"Refused to store this memory: {found.masked} looks like {kind}. ")
    assert "\n" not in message and "never secrets" in message
    assert FAKE not in message  # the secret itself is never echoed
    assert store.all() == []


def test_a_secret_stored_before_the_checks_never_reaches_the_prompt_nor_the_index(store: MemoryStore) -> None:
    clean = store.add("Reports go out on Mondays.", now=T0)
    leaked = memory("the database password is Tr0ub4dor&3")  # written by an older version, or by hand
    store.apply(write=[leaked], now=T0)
    assert select_for_prompt(store.all(), T0) == [clean]
    assert "Tr0ub4dor" not in store.index.text() and "Tr0ub4dor" not in shown_text(leaked)
    assert shown_text(leaked) == ("(hidden: it looks like it contains a password in plain words; it is never put in "
                                  "a prompt. %memory forget removes it)")


def test_empty_text_and_unknown_types_are_refused(store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="needs some text"):
        store.add("   ", now=T0)
    with pytest.raises(ValueError, match="unknown memory type 'idea'"):
        store.add("Uses polars.", now=T0, type="idea")  # type: ignore[arg-type]
