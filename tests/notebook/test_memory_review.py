"""Approving what is remembered, through the magics in a real IPython shell against the stand-in:
with `memory_review = 'ask'` what extraction finds waits in the member's storage folder (private
files, in no prompt) until `%memory keep`, `edit` or the panel's Keep; `discard` drops it; the
team's proposals wait in the same pending store; 'off' stores at once as before."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from notebook_rig import controller, offline_shell, run

from ctx_magic.memory.extraction import SessionSource
from ctx_magic.memory.store import Memory

REPORTS = "Reports go out on Mondays."
PLOTS = "I prefer plots in dark mode."
EDITED = "Plots in dark mode, with a grid."


def ask(shell) -> None:  # type: ignore[no-untyped-def]
    shell.run_line_magic("config", "CtxMagic.memory_review = 'ask'")


def requests_since(shell, first: int) -> list[str]:  # type: ignore[no-untyped-def]
    """Every request the stand-in received from `first` on, each as its JSON text (system and messages)."""
    api = controller(shell).host.backend.stand_in
    return [json.dumps(r.body) for r in api.requests[first:]]


def request_count(shell) -> int:  # type: ignore[no-untyped-def]
    return len(controller(shell).host.backend.stand_in.requests)


def last_system(shell) -> str:  # type: ignore[no-untyped-def]
    api = controller(shell).host.backend.stand_in
    return json.dumps([r for r in api.requests if r.kind == "normal"][-1].body["system"])


def stored(root: Path) -> list[str]:
    """The texts in the project scope's folder: what reaches a prompt."""
    folder = root / ".ctx_magic" / "memory"
    return sorted(Memory.from_markdown(p.read_text()).text for p in folder.glob("*.md") if p.name != "MEMORY.md")


def extracted_ids(shown: str) -> dict[str, str]:
    """text -> id of each memory `%memory extract` left waiting."""
    found = {}
    for line in shown.splitlines():
        if "(waiting for your review: %memory keep " in line:
            text, _, rest = line[2:].partition(" (waiting for your review: %memory keep ")
            found[text] = rest.rstrip(")")
    return found


def test_extracted_memories_wait_in_no_prompt_until_kept_or_edited(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        ask(shell)
        run(shell, f"%%agent\nRemember that {REPORTS[0].lower()}{REPORTS[1:]} {PLOTS}")
        _, shown = run(shell, "%memory extract")
        assert "Extracted 2 memories" in shown
        ids = extracted_ids(shown)
        assert set(ids) == {REPORTS, PLOTS} and stored(tmp_path) == []  # nothing stored unapproved
        pending = tmp_path / ".ctx_magic" / "memory" / "pending" / "project"
        for memory_id in ids.values():
            assert stat.S_IMODE((pending / f"{memory_id}.md").stat().st_mode) == 0o600
        _, listing = run(shell, "%memory pending")
        assert listing.strip().startswith("2 memories found by extraction, waiting for you (in no prompt until kept)")
        assert f"- {ids[REPORTS]} [project]: {REPORTS}" in listing
        assert f"- {ids[PLOTS]} [user, no decay]: {PLOTS}" in listing
        _, shown = run(shell, "%memory show")
        assert "2 memories found by extraction wait for your review: %memory pending." in shown

        first = request_count(shell)
        run(shell, "%%agent --new\nWhat do you know about my reports?")
        seen = requests_since(shell, first)
        assert seen and all("Mondays" not in r and "dark mode" not in r for r in seen)

        _, shown = run(shell, f"%memory keep {ids[REPORTS]}")
        assert shown.strip() == f"Kept 1 memory:\n- {ids[REPORTS]}: {REPORTS}"
        _, shown = run(shell, f"%memory edit {ids[PLOTS]} {EDITED}")
        assert shown.strip().startswith("Kept as ") and shown.strip().endswith(f": {EDITED}")
        assert stored(tmp_path) == sorted([REPORTS, EDITED]) and [p.name for p in pending.glob("*.md")] == ["MEMORY.md"]
        run(shell, "%%agent --new\nAnd now?")
        system = last_system(shell)
        assert REPORTS in system and EDITED in system and PLOTS not in system
        _, listing = run(shell, "%memory pending")
        assert listing.strip().startswith("No memories wait for review")


def test_discarded_memories_reach_no_store_and_pending_ones_outlive_the_shell(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        ask(shell)
        run(shell, f"%%agent\nRemember that {REPORTS[0].lower()}{REPORTS[1:]} {PLOTS}")
        run(shell, "%memory extract")
    with offline_shell(tmp_path, monkeypatch) as shell:  # a new kernel: the memories still wait
        ask(shell)
        _, listing = run(shell, "%memory pending")
        assert listing.strip().startswith("2 memories found by extraction")
        _, shown = run(shell, "%memory discard all")
        assert shown.strip().startswith("Discarded 2 pending memories: ")
    assert stored(tmp_path) == []


def test_a_wrong_id_or_a_missing_text_is_one_line_and_nothing_changes(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        ask(shell)
        run(shell, f"%%agent\nRemember that {REPORTS[0].lower()}{REPORTS[1:]}")
        _, shown = run(shell, "%memory extract")
        [memory_id] = extracted_ids(shown).values()
        for line, said in [("%memory keep nope", "No pending memory with id 'nope' (see %memory pending)."),
                           ("%memory discard", "%memory discard needs the ids of pending memories, or all"),
                           (f"%memory edit {memory_id}", "%memory edit needs the id of a pending memory and the text"),
                           (f"%memory edit {memory_id} the token is sk-ant-api03-" + "x" * 40,
                            "Refused to store this memory")]:
            result, shown = run(shell, line)
            assert result.error_in_exec is None and said in shown and "Traceback" not in shown, line
        _, listing = run(shell, "%memory pending")
        assert f"- {memory_id} [project]: {REPORTS}" in listing
    assert stored(tmp_path) == []


def test_the_panel_lists_pending_memories_and_its_buttons_keep_and_discard(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        ask(shell)
        run(shell, f"%%agent\nRemember that {REPORTS[0].lower()}{REPORTS[1:]} {PLOTS}")
        _, shown = run(shell, "%memory extract")
        ids = extracted_ids(shown)
        panel = controller(shell).panel.widget
        assert sorted(r["text"] for r in panel.pending_memories) == sorted([REPORTS, PLOTS])
        title, *rows = panel.pending.box.children
        assert panel.pending.box.layout.display is None and "Memories waiting for review (2" in title.value
        by_id = {row.children[0].value.split('data-memory-id="')[1].split('"')[0]: row for row in rows}
        _text, keep, _discard = by_id[ids[REPORTS]].children
        keep.click()
        _text, _keep, discard = by_id[ids[PLOTS]].children
        discard.click()
        assert stored(tmp_path) == [REPORTS]
        assert panel.pending_memories == [] and panel.pending.box.layout.display == "none"
        assert [r["text"] for r in panel.memories] == [REPORTS]


def test_off_stores_what_extraction_finds_at_once(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        run(shell, f"%%agent\nRemember that {REPORTS[0].lower()}{REPORTS[1:]}")
        _, shown = run(shell, "%memory extract")
        assert f"- {REPORTS}\n" in shown + "\n" and "waiting" not in shown
    assert stored(tmp_path) == [REPORTS]


def test_with_ask_a_fact_for_the_team_waits_in_the_same_pending_store_and_keep_sends_it(tmp_path, monkeypatch):
    (tmp_path / "shared").mkdir()
    with offline_shell(tmp_path, monkeypatch) as shell:
        ask(shell)
        for line in ("CtxMagic.team = 'analytics'", "CtxMagic.team_memory_dir = 'shared'",
                     "CtxMagic.author = 'alice'", "CtxMagic.team_review = False"):
            shell.run_line_magic("config", line)
        run(shell, f"%%agent\nRemember that {REPORTS[0].lower()}{REPORTS[1:]} {PLOTS}")
        _, shown = run(shell, "%memory extract")
        team_id = shown.split("(proposed for the team: %memory accept ")[1].split(")")[0]
        team_folder = tmp_path / "shared" / "analytics"
        assert [p.name for p in team_folder.glob("*.md") if p.name != "MEMORY.md"] == []  # nothing reached the team
        _, listing = run(shell, "%memory pending")
        assert f"- {team_id} [project, for the team]: {REPORTS}" in listing
        _, shown = run(shell, f"%memory keep {team_id}")
        assert shown.strip() == f"Kept 1 memory:\n- {team_id} (for the team): {REPORTS}"
        _, review = run(shell, "%memory review")
        assert review.strip().startswith("No team memories wait for review")
    [kept] = [Memory.from_markdown(p.read_text()) for p in team_folder.glob("*.md") if p.name != "MEMORY.md"]
    assert (kept.text, kept.author) == (REPORTS, "alice") and stored(tmp_path) == []


def test_what_extraction_at_a_sessions_end_left_waiting_is_announced_after_the_next_turn(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        ask(shell)
        run(shell, f"%%agent\nRemember that {REPORTS[0].lower()}{REPORTS[1:]}")
        memory, session = controller(shell).memory, controller(shell).host.session
        memory.manager.extraction.in_background(SessionSource.of(session)).join()  # what the end of a long session runs
        _, shown = run(shell, "%%agent\nThanks.")
        assert f"From session {session.session_id}: 1 memory waits for your review: %memory pending." in shown
    assert stored(tmp_path) == []
