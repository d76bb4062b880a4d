"""A `%config CtxMagic.x = ...` between two cells of a conversation already going on is in force
from the next cell: for a setting of the engine, of the memory and of the notebook."""

from __future__ import annotations

import warnings

from notebook_rig import cell, controller, offline_shell, run, status

from ctx_magic.agent.model import quiet_sdk_advice

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
SHOW_PNG = f"from IPython.display import Image, display\nimport base64\ndisplay(Image(data=base64.b64decode('{PNG}')))"


def test_the_engines_window_and_threshold_change_at_the_next_turn(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        run(shell, "%%agent\nhello")
        before = status(shell)
        assert (before["window"], before["threshold"]) == (200_000, 170_616)
        shell.run_line_magic("config", "CtxMagic.context_window = 30000")
        shell.run_line_magic("config", "CtxMagic.autocompact_pct = 50")
        run(shell, "%%agent\nand again")
        after = status(shell)
        assert after["session_id"] == before["session_id"] and after["turns"] == 2
        assert (after["window"], after["window_source"]) == (30_000, "config")
        assert after["threshold"] == (30_000 - after["max_output"]) // 2


def test_the_memorys_team_settings_reach_the_memory_manager_already_made(tmp_path, monkeypatch):
    (tmp_path / "shared").mkdir()
    with offline_shell(tmp_path, monkeypatch) as shell:
        _, shown = run(shell, "%memory show")
        assert "Team memory" not in shown
        manager = controller(shell).memory.manager
        for line in ("CtxMagic.team = 'analytics'", "CtxMagic.team_memory_dir = 'shared'", "CtxMagic.author = 'alice'"):
            shell.run_line_magic("config", line)
        _, shown = run(shell, "%memory show")
        assert controller(shell).memory.manager is manager  # the same manager, with the new settings
        assert "Team memory: team 'analytics' in shared/analytics, you add as 'alice'." in shown
        run(shell, "%memory add --team Revenue is in EUR.")
        assert [p.name for p in (tmp_path / "shared" / "analytics").glob("*.md") if p.name != "MEMORY.md"] != []
        shell.run_line_magic("config", "CtxMagic.team = ''")
        _, shown = run(shell, "%memory show")
        assert "Team memory" not in shown and "Revenue is in EUR." not in shown


def test_the_notebooks_image_cap_applies_to_the_next_cell(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as shell:
        cell(shell, SHOW_PNG)
        run(shell, "%%agent\nlook at the plot")
        shell.run_line_magic("config", "CtxMagic.image_max_bytes = 50")
        cell(shell, SHOW_PNG)
        run(shell, "%%agent\nand this one")
        results = [b["content"] for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")]
        first, second = results[0], results[-1]
        assert isinstance(first, list) and first[1]["type"] == "image" and first[1]["source"]["data"] == PNG
        assert isinstance(second, str) and "over the size cap" in second


def test_a_deprecated_thinking_budget_is_said_once_in_ctx_magics_words(tmp_path, monkeypatch):
    """A thinking budget is deprecated on Opus 4.6: ctx_magic honours the setting and says so in one
    line, once; the SDK's own warning, which points at ctx_magic's call, is not shown."""
    with warnings.catch_warnings(record=True) as caught, offline_shell(tmp_path, monkeypatch) as shell:
        warnings.simplefilter("always")  # any warning that gets through is caught
        quiet_sdk_advice()  # as importing ctx_magic does in a kernel (pytest resets the filters it found)
        shell.run_line_magic("config", "CtxMagic.model = 'claude-opus-4-6'")
        shell.run_line_magic("config", "CtxMagic.thinking = 'enabled'")
        _, first = run(shell, "%%agent\nhello")
        _, second = run(shell, "%%agent\nand again")
        seen = status(shell)
    advice = "A thinking budget (CtxMagic.thinking = 'enabled') is deprecated on claude-opus-4-6: Anthropic " \
             "recommends 'adaptive' for it."
    assert first.count(advice) == 1 and advice not in second and seen["turns"] == 2
    assert [str(w.message) for w in caught if "thinking.type=enabled" in str(w.message)] == []
