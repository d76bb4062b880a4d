"""The kernel executor: the agent's `python` runs in the user's namespace, its outputs shown in
the agent's cell and returned as the tool result; `notebook` reads the notebook's cells.

Code execution follows the permission mode: `ask` asks at an input prompt before
each run, `auto` runs, `off` refuses with a tool error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ctx_magic.agent.tools import PYTHON_TOOL, Tool, ToolCall, ToolContext, ToolError, ToolInterrupted, ToolOutput
from ctx_magic.events import ApprovalAsked, Notice, ToolOutputDelta
from ctx_magic.notebook.capture import OutputRecorder
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.inventory import inventory
from ctx_magic.notebook.outputs import CellRecord, strip_ansi
from ctx_magic.notebook.runs.board import RunBoard
from ctx_magic.notebook.runs.news import live_lines, news
from ctx_magic.notebook.runs.run import Run
from ctx_magic.notebook.runs.wording import stalled_text, started_text
from ctx_magic.notebook.workspace import Workspace

NOTEBOOK_TOOL = {
    "name": "notebook",
    "description": (
        "Read the cells of the user's notebook (as last saved): their index, type, source and a short "
        "view of their outputs. Optional start/end (cell indexes) or a search string."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "start": {"type": "integer", "minimum": 0},
            "end": {"type": "integer", "minimum": 0},
            "search": {"type": "string"},
        },
    },
}
KERNEL_PYTHON_TOOL = {
    **PYTHON_TOOL,
    "input_schema": {
        "type": "object",
        "properties": {
            **PYTHON_TOOL["input_schema"]["properties"],  # type: ignore[index]
            "background": {"type": "boolean", "description": (
                "Start it as a background run and return at once with its id: for long work (training, a sweep, "
                "a download). It runs beside your next steps and the user's cells; read its output with the task "
                "tool. You are told when it ends or stalls.")},
        },
        "required": ["code"],
    },
}
"""`python` in a kernel: the same tool, which can also start a background run (one way to run code,
one approval; a run that stalls in the foreground goes on in the background anyway)."""
TASK_TOOL = {
    "name": "task",
    "description": (
        "A background run of your python code, by its id: 'read' its new output (from where you last read, or "
        "from a byte `offset` of its log), 'answer' what it waits for (`text`: one line for its input(), getpass() "
        "or a subprocess it started), or 'stop' it."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "action": {"type": "string", "enum": ["read", "answer", "stop"]},
            "offset": {"type": "integer", "minimum": 0},
            "text": {"type": "string"},
        },
        "required": ["id", "action"],
    },
}
NOTEBOOK_CELL_TOOL = {"name": "notebook_cell"}
"""A cell the user ran, recorded as a tool call; never offered to the model."""
NOTEBOOK_OUTPUT_CHARS = 500  # each cell's outputs, shortened: the notebook tool is for orientation
NOTEBOOK_MAX_CELLS = 60
TURNED_OFF = "Running code is turned off here (CtxMagic.permission = 'off')."
NO_APPROVER = "Nobody can approve running code here"
DECLINED = "The user chose not to run this code."
NO_CODE = "The python tool needs a non-empty 'code' string."
NO_AWAIT = "Top-level await cannot run here"
NOT_RUN = (TURNED_OFF, NO_APPROVER, DECLINED, NO_CODE, NO_AWAIT)
"""How the result of a python call whose code never ran begins (the export leaves such code unrun)."""
RECENT_CODE_KEPT = 3  # the agent's most recent runs, re-announced after a compaction (rehydration)


class KernelExecutor:
    """Runs the agent's tools inside this kernel."""

    def __init__(self, shell: Any, recorder: OutputRecorder, settings: CtxMagic, workspace: Workspace,
                 runs: RunBoard, *, ask: Callable[[str], str] | None = None,
                 extra_tools: tuple[Tool, ...] = ()) -> None:
        self.shell = shell
        self.recorder = recorder
        self.runs = runs
        """Where the code runs: a thread of its own, in the foreground or as a background run."""
        self._settings = settings
        """The settings in force, read at each run: permission, image_max_bytes, kernel_inventory_tokens."""
        self._workspace = workspace
        self.ask = ask or input  # the kernel's own input() where the executor is made, inside a cell's run
        """Asks the person at the input prompt (`ask` mode); the stdin channel answers mid-execution."""
        self.running = False
        self.recent_code: list[str] = []
        self.last_record: CellRecord | None = None
        self.last_call: str | None = None
        """The tool_use_id `last_record` ran for."""
        self._extra_tools = extra_tools
        """Tools of the kernel's own besides `python` and `notebook` (its input history)."""

    def tools(self) -> list[Tool]:
        """`python`, `task`, and `notebook` when the notebook's path is known, and the extra tools;
        cells the user runs are recorded as `notebook_cell` results the model cannot call but that
        may be cleared."""
        tools = [Tool(KERNEL_PYTHON_TOOL, self._python), Tool(TASK_TOOL, self._task)]
        if self._workspace.notebook_path() is not None:
            tools.append(Tool(NOTEBOOK_TOOL, self._notebook))
        return [*tools, *self._extra_tools, Tool(NOTEBOOK_CELL_TOOL, _not_callable, offered=False)]

    def _allowed(self, code: str, context: ToolContext) -> ToolOutput | None:
        mode = self._settings.current.permission
        if mode == "off":
            return ToolOutput(TURNED_OFF, is_error=True)
        if mode == "auto":
            return None
        context.emit(ApprovalAsked(code))
        try:
            answer = self.ask("Run this code? [y]es / [n]o: ")
        except Exception:  # noqa: BLE001 - no stdin (headless runs): nobody can approve
            return ToolOutput(
                f"{NO_APPROVER} (no input prompt available). The user can allow it "
                "with %config CtxMagic.permission = 'auto'.", is_error=True)
        if answer.strip().lower() not in ("y", "yes"):
            return ToolOutput(DECLINED, is_error=True)
        return None

    def _python(self, call: ToolCall, context: ToolContext) -> ToolOutput:
        code = call.input.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolOutput(NO_CODE, is_error=True)
        refused = self._no_await_here(code) or self._allowed(code, context)  # never ask to approve what cannot run
        if refused is not None:
            return refused
        self.recent_code = [*self.recent_code, code][-RECENT_CODE_KEPT:]
        if call.input.get("background") is True:
            return ToolOutput(started_text(self.runs.start(code, background=True)))
        run, ended = self._foreground(code, context)
        if not ended:
            return ToolOutput(stalled_text(run))
        record = self.recorder.finish(run.record, None)  # says in the cell which images the agent will not get
        self.last_record, self.last_call = record, call.id
        if isinstance(run.outcome, KeyboardInterrupt):
            raise ToolInterrupted(self._printed_before_interrupt(run))
        return ToolOutput(record.content(self._settings.current.image_max_bytes), is_error=record.error is not None)

    @staticmethod
    def _printed_before_interrupt(run: Run) -> str:
        """What an interrupted run showed, for its tool result; the interrupt's own traceback
        (stopped runs end in one) says nothing the interrupted note does not."""
        record = run.record
        if not (record.stdout or record.stderr or record.displays):
            return ""
        record.failed(None)
        return record.text()

    def _foreground(self, code: str, context: ToolContext) -> tuple[Run, bool]:
        """Run `code` while the turn waits, its printed lines passed on as progress; (the run, whether
        it ended): one that stalled goes on as a background run, and the cell says so in one line. The shell's
        cell events fire around it as around a cell (inline plots are shown at its end)."""
        from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult

        info = ExecutionInfo(code, False, False, True, None)

        def before(run: Run) -> None:
            with self.runs.io.bound(run):
                self.shell.events.trigger("pre_execute")
                self.shell.events.trigger("pre_run_cell", info)

        self.running = True
        try:
            run = self.runs.start(code, background=False, before=before)
            try:
                ended = self.runs.supervise(run, on_output=lambda text: context.emit(ToolOutputDelta(text)))
            except KeyboardInterrupt:
                raise ToolInterrupted(self._printed_before_interrupt(run)) from None
            if not ended:
                context.emit(Notice("warning", f"The code is waiting for input after '{run.info().detail}': it goes "
                                               f"on as background run {run.id}, and the agent was told."))
                return run, False
            result = ExecutionResult(info)
            result.error_in_exec = run.outcome
            with self.runs.io.bound(run):
                self.shell.events.trigger("post_execute")
                self.shell.events.trigger("post_run_cell", result)
            return run, True
        finally:
            self.running = False

    def _task(self, call: ToolCall, _context: ToolContext) -> ToolOutput:
        run_id = str(call.input.get("id") or "").strip()
        action = call.input.get("action")
        if action == "read":
            offset = call.input.get("offset")
            return ToolOutput(self.runs.read(run_id, offset if isinstance(offset, int) else None))
        if action == "stop":
            return ToolOutput(self.runs.stop(run_id))
        if action == "answer":
            text = call.input.get("text")
            if not isinstance(text, str):
                raise ToolError("task 'answer' needs the line to send in `text`.")
            return ToolOutput(self.runs.answer(run_id, text))
        raise ToolError(f"task's action is one of 'read', 'answer', 'stop' (not {action!r}).")

    def news(self) -> list[str]:
        """One line per background run whose state changed since the agent was last told."""
        return news(self.runs)

    def _no_await_here(self, code: str) -> ToolOutput | None:
        """Top-level `await` needs the kernel's event loop, which is busy running this very turn."""
        try:
            asyncio.get_running_loop()
            needs_loop = self.shell.should_run_async(code, transformed_cell=self.shell.transform_cell(code),
                                                     preprocessing_exc_tuple=None)
        except Exception:  # noqa: BLE001 - no running loop (a terminal), or code IPython cannot parse
            return None
        if not needs_loop:
            return None
        return ToolOutput(
            f"{NO_AWAIT}: the kernel's event loop is busy with this agent turn. Run the "
            "coroutine on a loop of its own instead, e.g. `import asyncio, concurrent.futures; "
            "concurrent.futures.ThreadPoolExecutor(1).submit(asyncio.run, main()).result()`.", is_error=True)

    def _notebook(self, call: ToolCall, _context: ToolContext) -> ToolOutput:
        path = self._workspace.notebook_path()
        if path is None:
            return ToolOutput("The notebook's path is not known in this kernel.", is_error=True)
        import nbformat

        try:
            notebook = nbformat.read(str(path), as_version=4)
        except Exception as error:  # noqa: BLE001 - unreadable file: tell the model
            return ToolOutput(f"Could not read {path.name}: {error}", is_error=True)
        cells = list(enumerate(notebook.cells))
        start = int(call.input.get("start") or 0)
        end = int(call.input.get("end") or len(cells) - 1)
        search = str(call.input.get("search") or "")
        chosen = [(i, c) for i, c in cells if start <= i <= end and (not search or search in c.source)]
        lines = [f"{path.name}: {len(cells)} cells (as last saved)"]
        for index, cell in chosen[:NOTEBOOK_MAX_CELLS]:
            lines.append(f"--- cell {index} ({cell.cell_type}) ---\n{cell.source}")
            outputs = _outputs_text(cell)
            if outputs:
                lines.append(f"[outputs]\n{outputs}")
        if len(chosen) > NOTEBOOK_MAX_CELLS:
            lines.append(f"[{len(chosen) - NOTEBOOK_MAX_CELLS} more cells; narrow start/end or search]")
        return ToolOutput("\n".join(lines))

    def context_attachments(self) -> list[str]:
        """What the agent was last running, re-announced after a compaction (rehydration), and what the
        kernel holds now (its variables, functions and modules, read at this moment)."""
        notes = []
        if self.recent_code:
            shown = "\n\n".join(f"```python\n{code}\n```" for code in self.recent_code)
            notes.append(f"The most recent code you ran in the notebook's kernel:\n{shown}")
        state = inventory(self.shell.user_ns, self._settings.current.kernel_inventory_tokens,
                          getattr(self.shell, "user_ns_hidden", None))
        runs = live_lines(self.runs)
        return [*notes, *([state] if state else []), *(["\n".join(runs)] if runs else [])]


def _not_callable(call: ToolCall, _context: ToolContext) -> ToolOutput:
    return ToolOutput(f"{call.name} records the user's cells; it cannot be called.", is_error=True)


def _outputs_text(cell: Any) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif output.get("output_type") in ("execute_result", "display_data"):
            parts.append(str(output.get("data", {}).get("text/plain", "[rich output]")))
        elif output.get("output_type") == "error":
            parts.append(strip_ansi(f"{output.get('ename')}: {output.get('evalue')}"))
    text = "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)
    return text[:NOTEBOOK_OUTPUT_CHARS] + ("…" if len(text) > NOTEBOOK_OUTPUT_CHARS else "")
