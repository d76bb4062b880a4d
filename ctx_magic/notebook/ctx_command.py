"""What `%ctx` does beyond status and config, once its line is parsed: the export of a session as
a notebook, the agent's code as a cell, and the agent's background runs (list, answer, stop)."""

from __future__ import annotations

import dataclasses
import getpass
import json
from pathlib import Path
from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from ctx_magic.agent.session import Session
from ctx_magic.agent.status import ContextReport
from ctx_magic.agent.tools import ToolError
from ctx_magic.errors import CtxMagicError
from ctx_magic.notebook.display import notice, plain_or_rich
from ctx_magic.notebook.export import Target, export_notebook, export_transcript
from ctx_magic.notebook.runs.news import elsewhere, rows
from ctx_magic.notebook.runs.wording import runs_listing
from ctx_magic.notebook.wording import status_text
from ctx_magic.store.session import SessionDir

if TYPE_CHECKING:
    from ctx_magic.notebook.controller import Controller


class CtxCommand:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def status(self, session: Session, *, as_json: bool) -> ContextReport | None:
        """`%ctx status [--json]`: the figures shown, and as a value for scripts (`ctx_magic.context()` too).
        The panel is refreshed with them: what changed since the turn ended (the session's notes
        written in the background, which price a compaction ahead) is shown alike in both."""
        status = self.controller.host.status(session)
        self.controller.panel.refresh()
        if as_json:
            print(json.dumps(status.to_json(), indent=1))
            return None
        return dataclasses.replace(status.report(), details=status_text(status))  # shown once: as the cell's value

    def config(self) -> None:
        """`%ctx config`: every setting with its value."""
        plain_or_rich({"text/plain": json.dumps(self.controller.settings.describe(), indent=1)})

    def export(self, session_id: str, store: SessionDir, rest: list[str], *, transcript: bool, force: bool) -> None:
        """`%ctx export [PATH] [--transcript] [--force]` of the session `session_id` (its folder `store`)."""
        records = store.load_transcript().records
        named = " ".join(rest)  # a path with spaces, typed bare or in one pair of quotes as in a shell
        if len(named) > 1 and named[0] == named[-1] and named[0] in "'\"":
            named = named[1:-1]
        # No PATH: into the session's own folder, private like the rest of it, replaced each time.
        default = store.root / ("transcript.ipynb" if transcript else "notebook.ipynb")
        target = Target(Path(named), force=force) if named else Target(default, private=True)
        if transcript:
            written = export_transcript(records, session_id, target)
            notice(f"Wrote the full transcript to {written}.")
        else:
            written = export_notebook(records, session_id, target, self._run_state)
            notice(f"Wrote the session as a notebook to {written}; it runs without ctx_magic.")

    def cell(self, store: SessionDir, rest: list[str]) -> None:
        """`%ctx cell [ID]`: this cell becomes the code of the agent's call (in the session's folder `store`)."""
        self.controller.commands.refuse_inside_turn("%ctx cell")
        try:
            placed = self.controller.agent_cells.place(store.load_transcript().messages(),
                                                       rest[0] if rest else None)
        except LookupError as missing:
            raise CtxMagicError(str(missing)) from None
        notice(f"The code of call {placed} replaces this cell's source (where the frontend takes IPython's "
               "next input).")

    def _run_state(self, run_id: str) -> str | None:
        """A background run's last state, as `%ctx tasks` shows it (a dead kernel's run has ended)."""
        _run, info, _path = self.controller.runs.find(run_id)
        return info.state if info is not None else None

    def runs(self, command: str, words: list[str]) -> None:
        """`%ctx tasks`, `%ctx answer ID [TEXT]`, `%ctx stop ID`: the agent's background runs."""
        runs = self.controller.runs
        if command == "tasks":
            plain_or_rich({"text/plain": runs_listing(rows(runs), elsewhere(runs))})
            return
        if not words:
            raise UsageError(f"%ctx {command} needs the id of a background run (see %ctx tasks).")
        run_id = words[0]

        def ask(waiting: str) -> str:  # no TEXT: asked at the input prompt, hidden for a password
            return (getpass.getpass if waiting == "password" else input)(f"Answer for run {run_id}: ")

        try:
            if command == "stop":
                notice(runs.stop(run_id))
                return
            notice(runs.answer(run_id, " ".join(words[1:]) or ask))
        except ToolError as error:
            raise CtxMagicError(str(error)) from None
        self.controller.panel.runs_changed()
