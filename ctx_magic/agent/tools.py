"""Tools the model can call, declared once each: what the model sees (the spec), what runs it,
and whether microcompact may clear its old results.

`ToolRegistry` holds a session's tools and dispatches a call to its handler; any failure
becomes an error result the model can read. An `Executor` brings the tools that touch the
user's world (`python`, and the notebook's own); files.py brings the file tools and the loop
brings the context tools (compact, snip).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctx_magic.events import Event
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


class ToolError(Exception):
    """A tool failed in a way the model should read (becomes an is_error tool result)."""


@dataclass(frozen=True)
class ToolOutput:
    content: str | list[Block]
    is_error: bool = False


class ToolContext(Protocol):
    """What a handler may ask of the turn that called it."""

    def is_live_result(self, tool_use_id: str) -> bool:
        """Whether that result is still in the context, uncleared."""

    def clear_results(self, tool_use_ids: list[str]) -> tuple[list[str], list[str]]:
        """Clear those results now: (cleared, unknown or protected)."""

    def ask_compaction(self, instructions: str) -> bool:
        """Compact right after this step; False when the turn already compacted."""

    def search_transcript(self, *, query: str, regex: bool, turn: int | None, cell: int | None, ref: str,
                          offset: int) -> str:
        """The session's transcript and saved outputs searched (context/recall.py)."""

    def emit(self, event: Event) -> None:
        """Tell the turn's listeners (the cell's display) what the tool is doing."""


Handler = Callable[[ToolCall, ToolContext], ToolOutput]


@dataclass(frozen=True)
class Tool:
    """One tool: its spec as the API takes it, its handler, and whether its results may be cleared."""

    spec: Mapping[str, Any]
    run: Handler
    clearable: bool = True
    """Its output can be produced again (re-run, re-read): microcompact may clear old results."""
    offered: bool = True
    """False for tools the model cannot call but whose results are recorded (notebook cells)."""

    @property
    def name(self) -> str:
        return str(self.spec["name"])


class Executor(Protocol):
    """Brings the tools that run where the user's data lives (`python`, and any of its own), and
    says what changed there. An executor that subclasses it has nothing to say by default."""

    def tools(self) -> list[Tool]: ...

    def news(self) -> list[str]:
        """What changed where the tools run since last asked (a background run ended): a line each."""
        return []

    def context_attachments(self) -> list[str]:
        """What the context is told of where the tools run after it was compacted (the kernel's state)."""
        return []


class ToolRegistry:
    """A session's tools by name."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool

    def specs(self) -> list[dict[str, Any]]:
        """What the model is offered, in declaration order."""
        return [dict(t.spec) for t in self._tools.values() if t.offered]

    def names(self) -> list[str]:
        return [t.name for t in self._tools.values() if t.offered]

    def clearable(self) -> frozenset[str]:
        return frozenset(name for name, t in self._tools.items() if t.clearable)

    def run(self, call: ToolCall, context: ToolContext) -> ToolOutput:
        """Run one call; any failure becomes an error result the model can read."""
        tool = self._tools.get(call.name)
        if tool is None or not tool.offered:
            return ToolOutput(f"Unknown tool {call.name!r}; the tools are: {', '.join(self.names())}.", is_error=True)
        try:
            return tool.run(call, context)
        except ToolError as error:
            return ToolOutput(str(error), is_error=True)
        except (TypeError, ValueError) as error:
            return ToolOutput(f"Bad input for {call.name}: {error}. Input was {json.dumps(dict(call.input))[:300]}",
                              is_error=True)


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
class LocalExecutor(Executor):
    """Runs `python` in a plain namespace of this process (scripts, tests, the offline demo)."""

    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__agent__"})

    def tools(self) -> list[Tool]:
        return [Tool(PYTHON_TOOL, self._python)]  # the same handler each time: the call's setup is kept

    def _python(self, call: ToolCall, _context: ToolContext) -> ToolOutput:
        return self.run_python(call)

    def run_python(self, call: ToolCall) -> ToolOutput:
        code = call.input.get("code")
        if not isinstance(code, str):
            return ToolOutput("The python tool needs a 'code' string.", is_error=True)
        text, failed = run_python_source(code, self.namespace)
        return ToolOutput(text, is_error=failed)
