"""The agent's code run as a cell would be, in whatever thread calls it: IPython's transforms, the
cell's number in its tracebacks, and the exception that stops it from another thread."""

from __future__ import annotations

import ast
import ctypes
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ctx_magic.notebook.outputs import strip_ansi

_PACKAGE = Path(__file__).resolve().parent  # a run's own frames (its thread, run_source) are left out of tracebacks


class RunStopped(KeyboardInterrupt):
    """Raised in a run's thread to stop it (a KeyboardInterrupt: `except Exception` lets it through)."""


def raise_in(thread: threading.Thread, exception: type[BaseException] | None) -> None:
    """Raise `exception` in `thread` at its next Python instruction (None: withdraw a pending one)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(exception) if exception else None)


def running_cell_number(shell: Any) -> int:
    """The In[] number of the cell running now; the next cell's outside one. (While a cell runs,
    IPython's execution_count already names the next cell.)"""
    running = getattr(shell.displayhook, "exec_result", None)
    count = getattr(running, "execution_count", None)
    return count if isinstance(count, int) else shell.execution_count


def run_source(shell: Any, code: str, cell_number: int) -> Any:
    """Run `code` as a cell would (IPython's transforms: magics, `!` commands, the shell's AST
    transformers) in the calling thread, its tracebacks naming it In[`cell_number`]; returns the
    value of its last expression. Nothing of the shell's per-cell state is touched (history,
    Out[], the display hook): the user's cells use it meanwhile."""
    __tracebackhide__ = "__ipython_bottom__"  # noqa: F841 - IPython hides this frame in tracebacks
    compiler = shell.compile
    transformed = shell.transform_cell(code)
    name = compiler.cache(transformed, cell_number, raw_code=code)
    tree = shell.transform_ast(compiler.ast_parse(transformed, filename=name))
    body = list(tree.body)
    quiet = shell.displayhook.semicolon_at_end_of_expression(transformed)
    last = body.pop() if body and isinstance(body[-1], ast.Expr) and not quiet else None
    exec(compiler(ast.Module(body=body, type_ignores=[]), name, "exec"), shell.user_global_ns, shell.user_ns)  # noqa: S102
    if last is None:
        return None
    return eval(compiler(ast.Expression(last.value), name, "eval"), shell.user_global_ns, shell.user_ns)  # noqa: S307


def error_text(shell: Any, error: BaseException) -> str:
    """A traceback as a cell shows it, from the agent's code on."""
    try:
        if isinstance(error, SyntaxError):
            lines = shell.SyntaxTB.structured_traceback(type(error), error, [])
        else:
            tb = error.__traceback__
            while tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve().parent == _PACKAGE:
                tb = tb.tb_next
            lines = shell.InteractiveTB.structured_traceback(type(error), error, tb)
        return strip_ansi("\n".join(lines))
    except Exception:  # noqa: BLE001 - a traceback formatter's own failure: the exception's line
        return f"{type(error).__name__}: {error}"


class CodeThread:
    """The thread a run's code runs in; a stop reaches the code only while it runs (one that comes
    after it ended is withdrawn), and `finish` gets its value or its error either way."""

    def __init__(self, run_code: Callable[[], Any], finish: Callable[[Any, BaseException | None], None],
                 routed: Callable[[], AbstractContextManager[None]]) -> None:
        self._run_code, self._finish, self._routed = run_code, finish, routed
        self._lock = threading.Lock()
        self._in_code = False
        self._thread = threading.Thread(target=self._main, name="ctx_magic run", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Raise RunStopped in the code, if it still runs."""
        with self._lock:
            if self._in_code:
                raise_in(self._thread, RunStopped)

    def _main(self) -> None:
        value, error = None, None
        try:
            with self._routed():
                try:
                    with self._lock:
                        self._in_code = True
                    value = self._run_code()
                except BaseException as raised:  # noqa: BLE001 - the code's own error is its outcome
                    error = raised
                finally:
                    self._leave_code()
        except RunStopped as stopped:  # delivered just after the code ended
            self._leave_code()
            error = error or stopped
        self._finish(value, error)

    def _leave_code(self) -> None:
        with self._lock:
            self._in_code = False
            raise_in(self._thread, None)  # a stop that came too late for the code is withdrawn
