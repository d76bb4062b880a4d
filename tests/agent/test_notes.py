"""Session notes end to end over real HTTP: extraction in the background once a
compaction is in sight, then auto-compaction through session memory with zero model calls."""

from __future__ import annotations

from agent_rig import rig

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.notes import NotesKeeper
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.notes import sections
from ctx_magic.events import Compacted, Status
from ctx_magic.settings import Settings


def turn(n: int) -> str:
    code = f"print('\\n'.join(f'b{n} row {{i}}: {{i * {n}}}' for i in range(120)))"
    return f"Batch {n}: tabulate it.\n```python\n{code}\n```"


def keeper_rig(tmp_path, **kw):
    return rig(tmp_path, **kw)


NO_PRESSURE = Settings(clear_at_least=10**7)  # no pressure clearing: let the context grow


def until_notes(r, keeper) -> int:  # type: ignore[no-untyped-def]
    """Turns until the first extraction; none may happen below the warning level."""
    warning = r.session.setup().context.thresholds.warning
    n = 0
    while keeper.extractions == 0:
        # The last turn ended below the warning level: no compaction in sight, so no notes yet.
        assert r.session.tokens() < warning
        assert not keeper.running
        run_turn(r.session, turn(n))
        keeper.wait(15)
        n += 1
        assert n < 40, "the warning level was never reached"
    return n


def test_notes_are_extracted_in_the_background_once_a_compaction_is_in_sight(tmp_path):
    with keeper_rig(tmp_path, window=30_000, config=NO_PRESSURE) as r:
        keeper = NotesKeeper(r.session)
        until_notes(r, keeper)
        assert r.session.tokens() >= r.session.setup().context.thresholds.warning
        assert keeper.extractions == 1 and keeper.last_error is None
        notes = r.session.store.notes_path.read_text()
        body = sections(notes)
        assert "Batch 0: tabulate it." in body["Task Specification"]
        assert body["Session Title"].strip()
        assert keeper.state.covered_uuid == r.session.live.messages[-1].uuid
        assert r.api.model_calls("memory") == 1
        r.session.end_turn()
        assert r.session.store.load_state()["extra"]["session_memory"]["initialized"] is True


def test_no_notes_are_kept_while_no_compaction_is_in_sight(tmp_path):
    with keeper_rig(tmp_path, window=200_000) as r:
        keeper = NotesKeeper(r.session)
        for n in range(8):
            run_turn(r.session, turn(n))
        run_turn(r.session, "No, use the median instead of the mean")
        keeper.wait(15)
        assert keeper.extractions == 0 and r.api.model_calls("memory") == 0


def test_a_correction_is_noted_at_once_when_notes_are_kept(tmp_path):
    with keeper_rig(tmp_path, window=30_000, config=NO_PRESSURE) as r:
        keeper = NotesKeeper(r.session)
        until_notes(r, keeper)
        run_turn(r.session, "No, use the median instead of the mean")
        keeper.wait(15)
        assert keeper.extractions == 2
        notes = sections(r.session.store.notes_path.read_text())
        assert "No, use the median instead of the mean" in notes["Errors & Corrections"]


def test_auto_compaction_goes_through_the_notes_with_zero_model_calls(tmp_path):
    config = Settings(clear_at_least=10**7)  # no pressure clearing: let the threshold be reached
    with keeper_rig(tmp_path, window=40_000, config=config) as r:
        NotesKeeper(r.session)
        calls_at: dict[str, int] = {}

        def count_calls(event):
            if isinstance(event, Status) and event.state == "compacting":
                calls_at["start"] = r.api.model_calls()
            if isinstance(event, Compacted):
                calls_at["end"] = r.api.model_calls()

        r.session.listeners.append(count_calls)
        n = 0
        while not r.session.compaction.boundaries and n < 40:
            run_turn(r.session, turn(n))
            n += 1
        assert r.session.compaction.boundaries, "the threshold was never reached"
        assert r.session.compaction.boundaries[-1].trigger == "session-memory"
        assert calls_at["end"] == calls_at["start"]  # zero model calls for the compaction
        assert r.api.model_calls("compaction") == 0
        summary = next(m for m in r.session.live.messages if m.kind == "summary")
        assert "# Task Specification" in summary.text and "Batch 0: tabulate it." in summary.text
        assert "without asking" in summary.text  # auto: the work goes on
        check_invariants(r.session.live.messages)
        assert run_turn(r.session, "and now?").error is None


def test_manual_compact_uses_the_notes_unless_given_instructions(tmp_path):
    with keeper_rig(tmp_path, window=40_000, config=NO_PRESSURE) as r:
        keeper = NotesKeeper(r.session)
        n = until_notes(r, keeper)
        run_turn(r.session, turn(n))  # a tail after the notes
        manual_compact(r.session)
        assert r.session.compaction.boundaries[-1].trigger == "session-memory"
        assert r.api.model_calls("compaction") == 0
        summary = next(m for m in r.session.live.messages if m.kind == "summary")
        assert "without asking" not in summary.text  # the user asked for it: no "continue unasked"
        manual_compact(r.session, "keep the row counts")
        assert r.session.compaction.boundaries[-1].trigger == "manual"
        assert r.api.model_calls("compaction") == 1
