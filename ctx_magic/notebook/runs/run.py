"""The agent's code, run in a thread of the kernel: in the foreground (the agent's turn waits
for it) or as a background run (the turn goes on, and so do the user's cells).

A background run writes what it prints to `tasks/<id>.log` in the session's folder as it is
produced: the file survives a kernel crash, has no size limit, and is read by byte offset, so
nobody reads what they have read before. Its state (running, stalled, finished, failed,
stopped, ended with the kernel) is kept beside it in `tasks/<id>.json`.

A foreground run that stalls (stall.py) stops holding the turn: it goes on as a background run
the agent can answer or stop. Stopping a run raises `RunStopped` in its thread (between two
Python instructions: a call blocked inside C returns first) after killing the subprocesses it
started, and wakes an `input()` it waits in.
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import ctypes
import dataclasses
import os
import queue
import re
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ctx_magic.errors import StorageError
from ctx_magic.notebook.outputs import KERNEL_RUN, CellRecord, display_text, formatted, printed, strip_ansi
from ctx_magic.notebook.runs.routing import RunIO
from ctx_magic.notebook.runs.stall import TAIL_CHARS, is_stalled, last_line, shown_prompt
from ctx_magic.store.files import atomic_write_json, open_private_append, read_json

LIVE = ("running", "stalled")
CHECK_SECONDS = 1.0  # how often runs are looked at for a stall (and the panel's last lines refreshed)
INTERRUPT_GRACE = 2.0  # seconds an interrupted foreground run gets to stop before it is left in the background
READ_MAX_BYTES = 100_000  # one read of a log: twice the largest tool result kept inline, the rest persisted
PIPE_CHUNK = 65_536
PUMP_DRAIN_SECONDS = 2.0  # what exited subprocesses wrote is read in before the run's end is written
RUN_ID = re.compile(r"^t(\d+)$")
CODE_KEPT_CHARS = 2_000  # the code in a run's json: enough to recognize it


class RunStopped(KeyboardInterrupt):
    """Raised in a run's thread to stop it (a KeyboardInterrupt: `except Exception` lets it through)."""


def _raise_in(thread: threading.Thread, exception: type[BaseException] | None) -> None:
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
            while tb is not None and tb.tb_frame.f_code.co_filename == __file__:  # the run's thread, run_source
                tb = tb.tb_next
            lines = shell.InteractiveTB.structured_traceback(type(error), error, tb)
        return strip_ansi("\n".join(lines))
    except Exception:  # noqa: BLE001 - a traceback formatter's own failure: the exception's line
        return f"{type(error).__name__}: {error}"


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@dataclass(frozen=True)
class RunInfo:
    """A run as its json file keeps it (a run of this kernel, or one a dead kernel left)."""

    id: str
    state: str
    detail: str = ""
    started_at: float = 0.0
    ended_at: float | None = None
    kernel: str = ""
    reported: str = "running"
    read_to: int = 0
    silent_for: float = 0.0
    code: str = ""

    def words(self, now: float) -> str:
        """Its state in a few words: 'running for 2 min', 'stalled: waiting for input after ...'."""
        elapsed = duration((self.ended_at or now) - self.started_at)
        if self.state == "running":
            return f"running for {elapsed}"
        if self.state == "stalled":
            silence = f" (no output for {duration(self.silent_for)})" if self.silent_for else ""
            return f"stalled: waiting for input after '{self.detail}'{silence}"
        if self.state == "failed":
            return f"failed after {elapsed}: {self.detail}"
        if self.state == "ended":
            return "ended with the kernel (its log is kept)"
        return f"{self.state} after {elapsed}"


class Run:
    """One run of the agent's code in its own thread."""

    def __init__(self, shell: Any, io: RunIO, code: str, clock: Callable[[], float], *, background: bool) -> None:
        self.shell = shell
        self._io = io
        self.code = code
        self.cell_number = running_cell_number(shell)
        """The cell it started in (the %%agent cell), which its tracebacks name."""
        self.clock = clock
        self.background = background
        """True once its output goes to its log (from the start, or since it stalled in the foreground)."""
        self.record = CellRecord(code)
        """What a foreground run printed, displayed, returned and raised (its tool result)."""
        self.id = ""
        self.log_path: Path | None = None
        self._log: IO[bytes] | None = None
        self.state = "running"
        self.detail = ""
        self.started_at = self.last_output_at = clock()
        self.ended_at: float | None = None
        self.tail = ""
        self.size = 0
        """Bytes in its log."""
        self.read_to = 0
        """Where the agent's last read of the log ended."""
        self.reported = "running"
        """The state the agent was last told."""
        self.waiting = ""
        """'input' or 'password' while its code waits in input() or getpass()."""
        self.stopping = False
        self._answers: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._children: list[subprocess.Popen[Any]] = []
        self._groups: set[int] = set()
        """The pids of its children that lead a process group of their own."""
        self._child_in: tuple[int, int] | None = None
        self._child_out: tuple[int, int] | None = None
        self._pump_thread: threading.Thread | None = None
        self._in_code = False
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._main, name="ctx_magic run", daemon=True)
        self.outcome: BaseException | None = None
        self._shown_at: dict[str, int] = {}
        """A display's id -> its place in `record.displays` (an update replaces it there)."""
        self.seen: tuple[str, int] = ("", -1)
        """(state, log size) when the watch last looked: a change is saved and shown."""

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def info(self) -> RunInfo:
        with self.lock:
            silent = self.clock() - self.last_output_at if self.state == "stalled" and not self.waiting else 0.0
            return RunInfo(self.id, self.state, self.detail, self.started_at, self.ended_at, KERNEL_RUN,
                           self.reported, self.read_to, silent, self.code[:CODE_KEPT_CHARS])

    # -- its thread ------------------------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def _main(self) -> None:
        value, error = None, None
        try:
            with self._io.bound(self):
                try:
                    with self.lock:
                        self._in_code = True
                    value = run_source(self.shell, self.code, self.cell_number)
                except BaseException as raised:  # noqa: BLE001 - the code's own error is its outcome
                    error = raised
                finally:
                    self._leave_code()
        except RunStopped as stopped:  # delivered just after the code ended
            self._leave_code()
            error = error or stopped
        self._finish(value, error)

    def _leave_code(self) -> None:
        with self.lock:
            self._in_code = False
            _raise_in(self.thread, None)  # a stop that came too late for the code is withdrawn

    def _finish(self, value: Any, error: BaseException | None) -> None:
        self._drain_children()
        with self.lock:
            if value is not None:
                self.record.result = formatted(self.shell, value)
                if self.background:
                    self._append(f"[result]\n{self.record.result.get('text/plain', '')}\n")
            if error is not None:
                self.outcome = error
                self.record.error = error_text(self.shell, error)
                if self.background and not isinstance(error, RunStopped):
                    self._append(f"{self.record.error.rstrip()}\n")
            stopped = self.stopping or isinstance(error, RunStopped)
            self.state = "stopped" if stopped else ("failed" if error is not None else "finished")
            self.detail = "" if stopped or error is None else last_line(self.record.error or "").strip()[:200]
            self.waiting = ""
            self.ended_at = self.clock()
            self.changed.notify_all()
        self.save()
        self.done.set()

    # -- what its code prints, displays and reads (routing.py routes them here) -------------------

    def printed(self, stream: str, text: str) -> None:
        with self.lock:
            if self.background:
                self._append(text)
            else:
                (self.record.stderr if stream == "stderr" else self.record.stdout).append(text)
            self._heard(text)

    def displayed(self, data: dict[str, Any], *, update: bool = False, display_id: str | None = None) -> None:
        with self.lock:
            if not self.background:
                if update and display_id in self._shown_at:
                    self.record.displays[self._shown_at[display_id]] = dict(data)  # an update: its latest state
                else:
                    if display_id:
                        self._shown_at[display_id] = len(self.record.displays)
                    self.record.displays.append(dict(data))
                self._heard("")
                return
            shown = display_text(data)
            images = [m for m in data if m.startswith("image/")]
            if shown:
                self._append(f"[displayed {shown[0]}]\n{shown[1]}\n")
            elif images:
                self._append(f"[displayed {images[0]}: images are not kept in the log]\n")
            self._heard("")

    def _heard(self, text: str) -> None:
        self.tail = (self.tail + text)[-TAIL_CHARS:]
        self.last_output_at = self.clock()
        self.changed.notify_all()

    def _append(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        if self._log is not None:
            try:
                self._log.write(data)
                self._log.flush()  # in the file, not in this process: a crashed kernel loses nothing
            except (OSError, ValueError):
                pass  # a full disk or a closed log: the run goes on, its output is lost from here
        self.size += len(data)

    def ask(self, prompt: str, *, password: bool) -> str:
        """input() or getpass() in its code: the prompt goes to its output, the answer comes from
        `answer` (the agent, or the user with %ctx answer); a stop raises RunStopped."""
        if prompt:
            self.printed("stdout", prompt)
        return self._wait_answer("password" if password else "input", echo=not password)

    def read_line(self) -> str:
        """`sys.stdin.readline()` in its code (the builtin input() between cells): one answer."""
        return self._wait_answer("input", echo=True) + "\n"

    def _wait_answer(self, kind: str, *, echo: bool) -> str:
        with self.lock:
            self.waiting = kind
            self.detail = shown_prompt(self.tail) or "(no prompt)"
            self.changed.notify_all()
        try:
            answer = self._answers.get()
        finally:
            with self.lock:
                self.waiting = ""
        if answer is None:
            raise RunStopped()
        self.printed("stdout", (answer if echo else "") + "\n")  # as a terminal shows what was typed
        return answer

    def child_streams(self) -> dict[str, int]:
        """The streams a subprocess of this run gets when its code chose none: the run's."""
        with self.lock:
            if self._child_out is None:
                self._child_out = os.pipe()
                self._pump_thread = threading.Thread(target=self._pump, args=(self._child_out[0],),
                                                     name="ctx_magic run output", daemon=True)
                self._pump_thread.start()
            if self._child_in is None:
                self._child_in = os.pipe()
            return {"stdin": self._child_in[0], "stdout": self._child_out[1], "stderr": self._child_out[1]}

    def adopt(self, child: subprocess.Popen[Any], *, grouped: bool = False) -> None:
        """A subprocess of its code; `grouped`: it leads a process group of its own, killed whole."""
        with self.lock:
            self._children.append(child)
            if grouped:
                self._groups.add(child.pid)

    def _pump(self, fd: int) -> None:
        """Its subprocesses' output into its own, until the last of them closes it."""
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while chunk := os.read(fd, PIPE_CHUNK):
                self.printed("stdout", decoder.decode(chunk))
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _drain_children(self) -> None:
        """Its ends of its subprocesses' pipes closed (their stdin sees end-of-file), and what the
        ones that exited wrote read in before its own end is written (another thread reads it)."""
        with self.lock:
            ends = [*(self._child_in or ()), *(self._child_out[1:] if self._child_out else ())]
            self._child_in = None
            exited = all(child.poll() is not None for child in self._children)
            pump = self._pump_thread
        for fd in ends:
            with contextlib.suppress(OSError):
                os.close(fd)
        if pump is not None and exited:
            pump.join(PUMP_DRAIN_SECONDS)  # a grandchild that kept the pipe open is not waited for long

    # -- what the agent and the user do to it ----------------------------------------------------

    def check(self, now: float, threshold: float) -> bool:
        """Stalled or running again, by the rules of stall.py; True when the state changed."""
        with self.lock:
            if not self.live:
                return False
            stalled = is_stalled(now=now, last_output_at=self.last_output_at, threshold=threshold, tail=self.tail,
                                 waiting=bool(self.waiting))
            state = "stalled" if stalled else "running"
            if state == self.state:
                return False
            self.state = state
            if stalled and not self.waiting:
                self.detail = shown_prompt(self.tail)
            self.changed.notify_all()
            return True

    def answer(self, text: str) -> str | None:
        """A line for what it waits on: its input(), or the stdin of its subprocesses; None when
        it waits on neither."""
        with self.lock:
            if not self.live:
                return None
            if self.waiting:
                self._answers.put(text)
                where = "the getpass()" if self.waiting == "password" else "the input()"
            elif self._child_in is not None and any(child.poll() is None for child in self._children):
                try:
                    os.write(self._child_in[1], (text + "\n").encode())
                except OSError:
                    return None
                self.printed("stdout", text + "\n")
                where = "the stdin of the subprocess"
            else:
                return None
            self.last_output_at = self.clock()
            self.state, self.reported = "running", "running"
            self.changed.notify_all()
        self.save()
        return where

    def stop(self) -> bool:
        """Kill its subprocesses, wake an input() it waits in, and raise RunStopped in its code."""
        with self.lock:
            if not self.live:
                return False
            self.stopping = True
            for child in self._children:
                if child.pid in self._groups and child.returncode is None:  # not reaped: its pid is not reused
                    with contextlib.suppress(OSError):  # one that exited may have left what it started
                        os.killpg(child.pid, signal.SIGKILL)
                elif child.poll() is None:
                    with contextlib.suppress(OSError):
                        child.kill()
            self._answers.put(None)
            if self._in_code:
                _raise_in(self.thread, RunStopped)
            return True

    # -- its log ---------------------------------------------------------------------------------

    def go_background(self, log_path: Path, run_id: str) -> None:
        """From now on its output goes to its log (what it printed so far first)."""
        with self.lock:
            self.id, self.log_path = run_id, log_path
            self._log = open_private_append(log_path)  # open for the run's lifetime
            if not self.background:
                record = self.record
                if record.stderr or record.displays:
                    self._append(record.text() + "\n")
                else:  # as printed: a prompt keeps its line, so the answer follows it there
                    self._append("".join(record.stdout))
                self.background = True
            self.save()

    def save(self) -> None:
        """Its json beside its log (its state for `%ctx tasks`, the panel, and a resumed session)."""
        if self.log_path is not None:
            write_info(self.log_path.with_suffix(".json"), self.info())

    def close_log(self) -> None:
        with self.lock:
            if self._log is not None:
                with contextlib.suppress(OSError):
                    self._log.close()
                self._log = None


def write_info(path: Path, info: RunInfo) -> None:
    """A run's json, replaced whole; a full disk loses the state, never the run."""
    try:
        atomic_write_json(path, dataclasses.asdict(info))
    except (OSError, StorageError):
        pass


def stored_info(path: Path) -> RunInfo | None:
    """A run's json read back (None when it is not a run's or cannot be read)."""
    data = read_json(path, None)
    if not isinstance(data, dict) or not RUN_ID.match(str(data.get("id", ""))):
        return None
    try:
        return RunInfo(str(data["id"]), str(data.get("state", "ended")), str(data.get("detail", "")),
                       float(data.get("started_at") or 0.0),
                       float(data["ended_at"]) if data.get("ended_at") is not None else None,
                       str(data.get("kernel", "")), str(data.get("reported", "running")),
                       int(data.get("read_to") or 0), float(data.get("silent_for") or 0.0), str(data.get("code", "")))
    except (TypeError, ValueError):
        return None


def read_log(path: Path, offset: int, limit: int = READ_MAX_BYTES) -> tuple[str, int, int]:
    """(text, end offset, log size): the log from `offset`, at most `limit` bytes, cut back to a
    whole UTF-8 character, as a terminal leaves it (carriage returns rewrite their line)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as log:
            log.seek(min(offset, size))
            data = log.read(limit)
    except OSError:
        return "", offset, 0
    start = min(offset, size)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=start + len(data) >= size)  # a character cut in two waits for the next read
    end = start + len(data) - len(decoder.getstate()[0])
    return printed([text]), end, size
