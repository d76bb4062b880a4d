"""What a run's thread prints, displays and reads, and the subprocesses it starts: routed to
that run, never to the cell that happens to be running.

The agent's code runs in a thread of its own (run.py) while the user's cells run on the
kernel's main thread. Output is routed by thread: each routing point is wrapped once, and the
wrapper asks whether the calling thread belongs to a run (or runs an asyncio task the run
scheduled there); every other thread goes through untouched, so the user's own cells print and
display exactly as before.

- `sys.stdout` / `sys.stderr`: routed where the calling thread looks them up, not on whichever
  stream is current, because the main thread swaps them at any moment (IPython around each cell,
  `%%capture`, `redirect_stdout`, a test's capture) and a run's line written in such a gap would
  miss its log. The `sys` module holds one router per stream for the code that reads it directly
  (`print()`, tracebacks) and, as a module may, gets a class whose `stdout`/`stderr` properties
  give every other thread the stream last set (the one IPython and ipykernel patch), a run's
  thread the router (or what its own code set, which stays its own);
- the shell's display publisher: `display()` and `clear_output()`;
- `input()` and `getpass()`: ipykernel's own (`kernel.raw_input`, `kernel.getpass`, which it
  puts in place at every cell) and, between cells, `sys.stdin` (the builtin `input()` reads it);
- `subprocess.Popen`: a child started from a run without streams of its own gets the run's:
  its output goes to the run's log and its stdin is the run's, so an answer can reach it.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import getpass
import io
import os
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctx_magic.notebook.runs.run import Run

_GROUPS = hasattr(os, "killpg")  # POSIX: a run's subprocesses are killed with everything they started
POPEN_STREAM_ARGS = 3  # Popen(args, bufsize, executable, stdin, ...): stdin given by position is left alone


class _StdinRouter:
    """`sys.stdin` for the builtin `input()`: a run's thread reads its answers, others the real one.

    `fileno()` fails for a run's thread, so `input()` takes its non-terminal path (it writes the
    prompt to `sys.stdout` and reads a line from here) even where the kernel has a terminal."""

    def __init__(self, original: Any, current: Callable[[], Run | None]) -> None:
        self._original = original
        self._current = current

    def readline(self, size: int = -1) -> str:
        run = self._current()
        return run.read_line() if run is not None else self._original.readline(size)

    def read(self, size: int = -1) -> str:
        run = self._current()
        return run.read_line() if run is not None else self._original.read(size)

    def fileno(self) -> int:
        if self._current() is not None:
            raise io.UnsupportedOperation("a background run has no terminal")
        return self._original.fileno()

    def isatty(self) -> bool:
        return False if self._current() is not None else bool(self._original.isatty())

    def __iter__(self) -> Iterator[str]:
        return iter(self.readline, "")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class _StreamRouter:
    """What `sys.stdout` or `sys.stderr` holds for the code that reads it directly (`print()`): a
    run's thread writes to its run (or to what its own code set), every other thread to `target`,
    the stream last set."""

    def __init__(self, name: str, target: Any) -> None:
        self.name = name
        self.target = target
        self.own = threading.local()
        """`stream`: what a run's own code set `sys.<name>` to (its `redirect_stdout`), in its thread only."""

    def set_own(self, stream: Any) -> None:
        """A run's own code set `sys.<name>` (None: back to the router), for its thread only."""
        self.own.stream = stream

    def set_target(self, stream: Any) -> None:
        """Another thread set `sys.<name>` (IPython around a cell, `%%capture`): every other thread's."""
        self.target = stream

    def current(self) -> tuple[Any, Run | None]:
        """(the stream, None) a write of the calling thread goes to, or (None, its run)."""
        own = getattr(self.own, "stream", None)
        if own is not None:
            return own, None
        run = _running()
        return (None, run) if run is not None else (self.target, None)

    def write(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        stream, run = self.current()
        if run is None or not isinstance(data, str):  # bytes from a run go where they went before
            stream = stream if stream is not None else self.target
            return stream.write(data, *args, **kwargs) if stream is not None else None
        if data:  # an empty write (a poll with nothing new) is not output: it must not end a silence
            run.printed(self.name, data)
        return len(data)

    def flush(self) -> None:
        stream, _run = self.current()
        if stream is not None:
            stream.flush()

    def __getattr__(self, name: str) -> Any:
        stream, _run = self.current()
        return getattr(stream if stream is not None else self.target, name)


class RunIO:
    """The routing points of one kernel, wrapped while ctx_magic is loaded."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self._run: contextvars.ContextVar[Run | None] = contextvars.ContextVar(f"ctx_magic_run_{id(self)}",
                                                                             default=None)
        """The run of the calling thread: a context variable, not a thread-local, because asyncio
        copies it into what the run schedules on another thread's event loop (IPython's `%%bash`
        and other script magics read the process's output there and print it)."""
        self._active = False
        self._wrapped: dict[tuple[int, str], tuple[Any, str, Any, Any]] = {}
        """(owner, attribute, original, wrapper) by owner and attribute: what `uninstall` puts back
        (the latest wrapper of each; an older one was put back by whoever wrapped it)."""
        self._lock = threading.Lock()

    def current(self) -> Run | None:
        """The run the calling thread belongs to, if any."""
        return self._run.get() if self._active else None

    @contextlib.contextmanager
    def bound(self, run: Run) -> Iterator[None]:
        """The calling thread's output and input belong to `run` inside this block."""
        token = self._run.set(run)
        try:
            yield
        finally:
            self._run.reset(token)

    def install(self) -> None:
        """Wrap every routing point (once); `ensure` keeps the streams wrapped when they change."""
        with self._lock:
            if self._active:
                return
            self._active = True
            kernel = getattr(self.shell, "kernel", None)
            if kernel is not None:
                self._wrap(kernel, "raw_input", self._input)
                self._wrap(kernel, "getpass", self._getpass)
                self._wrap(kernel, "post_handler_hook", self._after_message)
            if kernel is None:  # a terminal or a test's shell: nothing swaps these per cell
                self._wrap(builtins, "input", self._input)
                self._wrap(getpass, "getpass", self._getpass)
            if sys.stdin is not None and not isinstance(sys.stdin, _StdinRouter):
                router = _StdinRouter(sys.stdin, self.current)
                self._wrapped[(id(sys), "stdin")] = (sys, "stdin", sys.stdin, router)
                sys.stdin = router  # type: ignore[assignment]
            self._wrap(subprocess.Popen, "__init__", self._popen_init)
            _route_streams(self)
        self.ensure()

    def ensure(self) -> None:
        """The current display publisher wrapped (a test's output capture swaps it; a kernel keeps
        the same one)."""
        with self._lock:
            if not self._active:
                return
            publisher = getattr(self.shell, "display_pub", None)
            if publisher is not None and not self._is_ours(publisher, "publish"):
                self._wrap(publisher, "publish", self._publish)
                self._wrap(publisher, "clear_output", self._clear_output)

    def uninstall(self) -> None:
        """Put back every original that is still ours; a wrapper something else wrapped since
        stays in its chain and only passes through from now on."""
        with self._lock:
            self._active = False
            _unroute_streams(self)
            for owner, name, original, wrapper in reversed(self._wrapped.values()):
                if getattr(owner, "__dict__", {}).get(name) is wrapper:
                    _restore(owner, name, original)
            self._wrapped = {}

    # -- wrapping ------------------------------------------------------------------------------

    def _is_ours(self, owner: Any, name: str) -> bool:
        entry = self._wrapped.get((id(owner), name))
        return entry is not None and entry[0] is owner and getattr(owner, "__dict__", {}).get(name) is entry[3]

    def _wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        had_own = name in getattr(owner, "__dict__", {})
        original = getattr(owner, name)
        wrapper = make(original)
        try:
            setattr(owner, name, wrapper)
        except (AttributeError, TypeError):  # an object whose attribute cannot be replaced: not routed
            return
        self._wrapped[(id(owner), name)] = (owner, name, original if had_own else _NOT_OWN, wrapper)

    def _after_message(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def post_handler_hook(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:
                self.ensure()  # between cells: what the last cell's end put back is wrapped again

        return post_handler_hook

    def _publish(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def publish(data: Any, *args: Any, **kwargs: Any) -> Any:
            run = self.current()
            if run is not None and isinstance(data, dict):
                run.displayed(data, update=bool(kwargs.get("update")),
                              display_id=(kwargs.get("transient") or {}).get("display_id"))
                return None
            return original(data, *args, **kwargs)

        return publish

    def _clear_output(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def clear_output(*args: Any, **kwargs: Any) -> Any:
            if self.current() is not None:
                return None  # a run clearing output would clear the cell the user is running
            return original(*args, **kwargs)

        return clear_output

    def _input(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def run_input(prompt: Any = "") -> str:
            run = self.current()
            return run.ask(str(prompt), password=False) if run is not None else original(prompt)

        return run_input

    def _getpass(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def run_getpass(prompt: str = "Password: ", *args: Any, **kwargs: Any) -> str:
            run = self.current()
            return run.ask(str(prompt), password=True) if run is not None else original(prompt, *args, **kwargs)

        return run_getpass

    def _popen_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def init(popen: Any, *args: Any, **kwargs: Any) -> None:
            run = self.current()
            if run is None or len(args) > POPEN_STREAM_ARGS:
                original(popen, *args, **kwargs)
                return
            for name, fd in run.children.streams().items():
                if kwargs.get(name) is None:
                    kwargs[name] = fd
            # A process group of its own: stopping the run kills what the child started too (a shell's
            # command, a training script's workers), and the kernel's interrupt of a cell spares it.
            grouped = _GROUPS and not {"start_new_session", "process_group"} & kwargs.keys()
            if grouped:
                kwargs["start_new_session"] = True
            original(popen, *args, **kwargs)
            run.children.adopt(popen, grouped=grouped)

        return init


_NOT_OWN = object()
"""The attribute came from the object's class (a method): restoring it means deleting the wrapper."""


def _restore(owner: Any, name: str, original: Any) -> None:
    if original is _NOT_OWN:
        with contextlib.suppress(AttributeError):
            delattr(owner, name)
    else:
        setattr(owner, name, original)


# -- sys.stdout and sys.stderr -------------------------------------------------------------------

_STREAMS = ("stdout", "stderr")
_routing: list[RunIO] = []
"""The RunIOs installed (one per loaded shell); the streams are routed while any is."""
_routing_lock = threading.Lock()


def _running() -> Run | None:
    """The run the calling thread belongs to, for any installed RunIO."""
    for run_io in list(_routing):
        run = run_io.current()
        if run is not None:
            return run
    return None


def _stream_property(name: str) -> property:
    def get(module: types.ModuleType) -> Any:
        held = module.__dict__.get(name)
        if not isinstance(held, _StreamRouter):
            return held
        own = getattr(held.own, "stream", None)
        if own is not None:
            return own
        return held if _running() is not None else held.target

    def assign(module: types.ModuleType, value: Any) -> None:
        held = module.__dict__.get(name)
        if not isinstance(held, _StreamRouter):
            module.__dict__[name] = value
        elif _running() is not None:  # a run's own redirection: its thread only
            held.set_own(None if value is held else value)
        elif value is not held:
            held.set_target(value)

    def remove(module: types.ModuleType) -> None:
        module.__dict__.pop(name, None)

    return property(get, assign, remove)


class _RoutedSys(types.ModuleType):
    """The class of `sys` while streams are routed: its streams as every thread should see them."""

    stdout = _stream_property("stdout")
    stderr = _stream_property("stderr")


def _route_streams(run_io: RunIO) -> None:
    with _routing_lock:
        if run_io not in _routing:
            _routing.append(run_io)
        if type(sys) is types.ModuleType:
            for name in _STREAMS:
                sys.__dict__[name] = _StreamRouter(name, sys.__dict__.get(name))
            sys.__class__ = _RoutedSys


def _unroute_streams(run_io: RunIO) -> None:
    """The streams last set put back in `sys` once no RunIO is installed."""
    with _routing_lock:
        if run_io in _routing:
            _routing.remove(run_io)
        if _routing or type(sys) is not _RoutedSys:
            return
        sys.__class__ = types.ModuleType
        for name in _STREAMS:
            held = sys.__dict__.get(name)
            if isinstance(held, _StreamRouter):
                sys.__dict__[name] = held.target
