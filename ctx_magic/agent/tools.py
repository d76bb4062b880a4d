"""Tools the model can call, and the Executor seam for the ones that touch the user's world.

The loop handles the context tools itself (compact, snip) and the file tools (read_file,
list_files, grep); an Executor runs code (`python`) and anything environment-specific (the
notebook's `notebook` tool). The notebook plugs in a kernel executor; scripts and tests use
`LocalExecutor`.
"""

from __future__ import annotations

import ast
import contextlib
import io
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctx_magic.messages import Block, decode_output


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: Mapping[str, Any]


class ToolInterrupted(KeyboardInterrupt):
    """The user interrupted a running tool; what it had output by then goes into its result."""

    def __init__(self, partial: str = "") -> None:
        super().__init__(partial)
        self.partial = partial


@dataclass(frozen=True)
class ToolOutput:
    content: str | list[Block]
    is_error: bool = False


class Executor(Protocol):
    """Runs `python` (and any tool it declares) where the user's data lives."""

    def tool_specs(self) -> list[dict[str, Any]]: ...

    def run(self, call: ToolCall) -> ToolOutput: ...


PYTHON_TOOL = {
    "name": "python",
    "description": (
        "Run Python code in the user's session (the same namespace as their cells). Returns what it "
        "printed, the value of the last expression, and any error with its traceback."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The Python code to run."}},
        "required": ["code"],
    },
}

FILE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": (
            "Read a text file under the session folder, with line numbers. Use offset (first line, "
            "1-based) and limit (number of lines) to read part of a long file, e.g. a persisted output."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
        },
    },
    {
        "name": "list_files",
        "description": "List files under a folder of the session (recursively), optionally matching a glob pattern.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}},
        },
    },
    {
        "name": "grep",
        "description": "Search files under the session folder for a regular expression; prints path:line: text.",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
            "required": ["pattern"],
        },
    },
]

CONTEXT_TOOLS: list[dict[str, Any]] = [
    {
        "name": "compact",
        "description": (
            "Summarize the conversation so far to free context, e.g. at the end of a phase of work. "
            "Optional instructions say what the summary must keep."
        ),
        "input_schema": {"type": "object", "properties": {"instructions": {"type": "string"}}},
    },
    {
        "name": "snip",
        "description": (
            "Mark old tool results as no longer needed: their content is cleared from the context "
            "(the transcript keeps it). Give the tool_use ids of the results."
        ),
        "input_schema": {
            "type": "object",
            "properties": {"tool_use_ids": {"type": "array", "items": {"type": "string"}}},
            "required": ["tool_use_ids"],
        },
    },
]


def run_python_source(code: str, namespace: dict[str, Any]) -> tuple[str, bool]:
    """Execute `code` like a notebook cell: output, the last expression's repr, errors."""
    out, err = io.StringIO(), io.StringIO()
    failed = False
    try:
        tree = ast.parse(code, mode="exec")
    except SyntaxError:
        return traceback.format_exc(limit=0), True
    last_expr = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(tree, "<agent>", "exec"), namespace)  # noqa: S102 - running code is the tool
            if last_expr is not None:
                value = eval(compile(ast.Expression(last_expr.value), "<agent>", "eval"), namespace)  # noqa: S307
                if value is not None:
                    print(repr(value))
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the error is the tool's output, sys.exit() too
            failed = True
            # From the agent's code on, as a notebook shows it: this function's own frame is noise.
            tb = error.__traceback__.tb_next if error.__traceback__ is not None else None
            traceback.print_exception(type(error), error, tb, file=err)
    text = out.getvalue() + err.getvalue()
    return (decode_output(text) or "(no output)"), failed


@dataclass
class LocalExecutor:
    """Runs `python` in a plain namespace of this process (scripts, tests, the offline demo)."""

    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__agent__"})

    def tool_specs(self) -> list[dict[str, Any]]:
        return [PYTHON_TOOL]

    def run(self, call: ToolCall) -> ToolOutput:
        if call.name != "python":
            return ToolOutput(f"Unknown tool {call.name!r}.", is_error=True)
        code = call.input.get("code")
        if not isinstance(code, str):
            return ToolOutput("The python tool needs a 'code' string.", is_error=True)
        text, failed = run_python_source(code, self.namespace)
        return ToolOutput(text, is_error=failed)
