"""`%%agent`'s own time before the request leaves, at 1,000 and 10,000 messages.

A session of N messages (user prompts, the agent's `python` calls with their outputs, its
answers) is written to a transcript and resumed in an in-process IPython shell with
ctx_magic loaded, the offline stand-in answering through an in-process transport. Each
measured `%%agent` cell is timed from the moment the cell is handed to IPython to the moment
the transport is handed the Messages request (its first byte is about to be sent): the
magic, the settings, the cells absorbed, the zero-call layers, the decision, the request
built and encoded by the SDK. What the model does after that is not counted. A PreCompact hook
holds back the automatic compaction (at 10,000 messages the context is past a standard window,
where an early compaction is weighed and soon pays): every measured turn carries the whole
history and decides again, as the turn before it did. Then, between turns, one-line cells of the
user's: what ctx_magic adds to a cell that is not the agent's (its hooks, the idle check), against
the same shell with ctx_magic unloaded. Last, a new session's first turn, in fresh processes: what
loading the extension leaves for it to do (the token counter's vocabularies are loaded meanwhile).

Two turns warm the session up (the first after a resume indexes the whole history); the
figures are the medians of the measured turns: the wall time, and the kernel thread's own CPU
time over the same stretch, which other processes on a shared machine do not inflate.

    python benchmarks/latency.py [--sizes 1000,10000] [--turns 7] [--trace]

`--trace` follows one measured turn at 1,000 messages instead: how many of ctx_magic's
functions are called before the request leaves (the stand-in's aside), in how many files, and
how often the path enters agent/session.py, with the files in the order first reached; and how
many times the call's setup was worked out and the live context prepared on the way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from shells import let_go, new_shell  # a sibling module: this script runs as a file

from ctx_magic.messages import Message, Usage, text_block, tool_result_block, tool_use_block
from ctx_magic.notebook.backend import Backend
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.transport import OFFLINE_API_KEY, OFFLINE_BASE_URL, OfflineTransport
from ctx_magic.store.session import SessionDir

WARM_UP_TURNS = 2  # the first turn after a resume indexes the whole history; the second settles
WINDOW = 2_000_000  # room for 10,000 messages with no compaction, so every turn does the same work
SESSION_ID = "latency"
OUTPUT_LINES = 12  # each `python` call prints a small table: a typical short cell output


class StampedTransport(OfflineTransport):
    """The stand-in's transport, noting when each Messages request is handed to it."""

    def __init__(self, api: OfflineAPI) -> None:
        super().__init__(api)
        self.sent: list[tuple[float, float]] = []
        """(wall clock, this thread's CPU clock) when each Messages request was handed over."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/v1/messages":
            self.sent.append((time.perf_counter(), time.thread_time()))
        return super().handle_request(request)


def history(count: int, now: float) -> list[Message]:
    """`count` messages in exchanges of four: a prompt, a `python` call, its output, an answer."""
    messages: list[Message] = []
    prompt_tokens = 2_000
    n = 0
    while len(messages) < count:
        at = now - 60 - (count - len(messages))  # a second apart, the last one a minute ago
        call = f"toolu_{n:06d}"
        table = "\n".join(f"{row:>4}  region-{row % 7}  {row * 37 % 1000 / 10:>6.1f}" for row in range(OUTPUT_LINES))
        exchange = [
            Message("user", (text_block(f"Step {n}: summarise batch {n} of the sensor readings."),), timestamp=at),
            Message("assistant", (text_block("Looking at it."), tool_use_block(call, "python",
                                                                                  {"code": f"show_batch({n})"})),
                    timestamp=at, api_id=f"msg_{n:06d}a",
                    usage=Usage(input_tokens=prompt_tokens, output_tokens=40)),
            Message("user", (tool_result_block(call, table),), timestamp=at),
            Message("assistant", (text_block(f"Batch {n} averages {n % 50 + 20.5} C; nothing stands out."),),
                    timestamp=at, api_id=f"msg_{n:06d}b", usage=Usage(input_tokens=prompt_tokens + 200,
                                                                      output_tokens=20)),
        ]
        messages += exchange
        prompt_tokens += 260
        n += 1
    return messages[:count] if messages[count - 1].role == "assistant" else messages[:count - 1]


def write_session(storage: Path, messages: list[Message]) -> None:
    store = SessionDir(storage, SESSION_ID).create()
    transcript = store.transcript()
    for message in messages:
        transcript.append_message(message)
    transcript.sync()
    transcript.close()


def shell_with_backend(folder: Path, transport: StampedTransport) -> Any:
    """An InteractiveShell in `folder` with ctx_magic loaded, answered by `transport`'s stand-in."""
    import anthropic

    from ctx_magic.notebook.extension import controller_of

    os.chdir(folder)
    shell = new_shell(rich=False)
    for line in ("%load_ext ctx_magic", "%config CtxMagic.permission = 'auto'", "%config CtxMagic.idle_timer = False",
                 "%config CtxMagic.user_memory_dir = '.user-data'", f"%config CtxMagic.context_window = {WINDOW}",
                 "%config CtxMagic.snip_max_messages = 1000000"):
        shell.run_cell(line, store_history=False)
    client = anthropic.Anthropic(api_key=OFFLINE_API_KEY, base_url=OFFLINE_BASE_URL, max_retries=0,
                                 http_client=httpx2.Client(transport=transport))
    backend = Backend(client, "offline", "", transport.api)
    host = controller_of(shell).host
    host.backend, host._given = backend, True
    return shell


def hold_compaction_back(shell: Any) -> None:
    """A PreCompact hook vetoing every automatic compaction of the resumed session."""
    from ctx_magic.agent.plugins import Veto
    from ctx_magic.notebook.extension import controller_of

    session = controller_of(shell).host.session
    session.hooks.add("PreCompact", lambda trigger, instructions: Veto("the benchmark measures this size"))


def user_cells(shell: Any, count: int) -> list[float]:
    """Milliseconds each of `count` one-line cells of the user's takes to run, start to end."""
    from IPython.utils.capture import capture_output

    times = []
    for n in range(count):
        with capture_output(display=True):
            start = time.perf_counter()
            shell.run_cell(f"value_{n} = {n}", store_history=True)
            times.append((time.perf_counter() - start) * 1000)
    return times


def measure(size: int, turns: int) -> tuple[list[tuple[float, float]], list[float], list[float]]:
    """(wall, CPU) milliseconds from each measured cell's start to its Messages request, at `size`
    messages; then the milliseconds of `turns` cells of the user's between turns, with ctx_magic
    loaded and after it is unloaded."""
    from IPython.utils.capture import capture_output

    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="ctx-latency-") as folder:
        write_session(Path(folder) / ".ctx_magic", history(size, time.time()))
        transport = StampedTransport(OfflineAPI(OfflineConfig(window=WINDOW)))
        shell = shell_with_backend(Path(folder), transport)
        try:
            with capture_output(display=True):
                shell.run_cell(f"%agent --resume {SESSION_ID}", store_history=True)
            hold_compaction_back(shell)
            times = []
            for turn in range(WARM_UP_TURNS + turns):
                before = len(transport.sent)
                with capture_output(display=True):
                    start, cpu = time.perf_counter(), time.thread_time()
                    shell.run_cell(f"%%agent\nHow does batch {turn} compare with the last one?", store_history=True)
                if len(transport.sent) == before:
                    raise RuntimeError(f"turn {turn} sent no request")
                if turn >= WARM_UP_TURNS:
                    wall, thread = transport.sent[before]
                    times.append(((wall - start) * 1000, (thread - cpu) * 1000))
            loaded = user_cells(shell, turns)
            shell.run_line_magic("unload_ext", "ctx_magic")
            return times, loaded, user_cells(shell, turns)
        finally:
            if "ctx_magic" in shell.extension_manager.loaded:
                shell.run_line_magic("unload_ext", "ctx_magic")
            let_go(shell)
            os.chdir(here)


def trace(size: int = 1_000) -> None:
    """One turn's path through ctx_magic, from the cell to the request (see the module doc)."""
    import sys

    from IPython.utils.capture import capture_output

    here = Path.cwd()
    calls: list[str] = []
    named: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="ctx-latency-") as folder:
        write_session(Path(folder) / ".ctx_magic", history(size, time.time()))
        transport = StampedTransport(OfflineAPI(OfflineConfig(window=WINDOW)))
        shell = shell_with_backend(Path(folder), transport)
        try:
            with capture_output(display=True):
                shell.run_cell(f"%agent --resume {SESSION_ID}", store_history=True)
                for turn in range(WARM_UP_TURNS):
                    shell.run_cell(f"%%agent\nWarm-up turn {turn}.", store_history=True)
            sent = len(transport.sent)

            def follow(frame: Any, event: str, _arg: Any) -> None:
                where = frame.f_code.co_filename
                if event == "call" and len(transport.sent) == sent and "/ctx_magic/" in where \
                        and "/offline/" not in where:
                    calls.append(where.split("/ctx_magic/")[1])
                    named.append((calls[-1], frame.f_code.co_name))

            with capture_output(display=True):
                sys.setprofile(follow)
                try:
                    shell.run_cell("%%agent\nHow does the last batch compare?", store_history=True)
                finally:
                    sys.setprofile(None)
        finally:
            shell.run_line_magic("unload_ext", "ctx_magic")
            let_go(shell)
            os.chdir(here)
    files = list(dict.fromkeys(calls))
    entered = sum(1 for n, f in enumerate(calls) if f == "agent/session.py" and (n == 0 or calls[n - 1] != f))
    print(f"{len(calls):,} calls of ctx_magic's functions in {len(files)} files before the request leaves; "
          f"agent/session.py entered {entered} times\n")
    print(" -> ".join(files))
    setups = named.count(("context/engine.py", "create"))  # each CallSetup worked out makes its engine settings
    prepares = named.count(("agent/live.py", "prepare"))
    print(f"\nthe call's setup worked out {setups} times, the context prepared {prepares} times")


TYPING_SECONDS = 3.0  # between %load_ext and the first %%agent cell: the person writes the message


def first_turn() -> float:
    """Milliseconds from a new session's first `%%agent` cell to its request, in this process (run
    it in a fresh one: what a process loaded once, it keeps), the cell run TYPING_SECONDS after the
    extension is loaded."""
    from IPython.utils.capture import capture_output

    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="ctx-latency-") as folder:
        transport = StampedTransport(OfflineAPI(OfflineConfig(window=200_000)))
        shell = shell_with_backend(Path(folder), transport)
        try:
            time.sleep(TYPING_SECONDS)
            with capture_output(display=True):
                start = time.perf_counter()
                shell.run_cell("%%agent\nWhat is in this folder?", store_history=True)
            return (transport.sent[0][0] - start) * 1000
        finally:
            shell.run_line_magic("unload_ext", "ctx_magic")
            let_go(shell)
            os.chdir(here)


def first_turns(runs: int) -> list[float]:
    """`first_turn` in `runs` fresh processes."""
    import subprocess
    import sys

    script = Path(__file__).resolve()
    return [float(subprocess.run([sys.executable, str(script), "--first-turn-here"], check=True, text=True,
                                 capture_output=True).stdout.split()[-1]) for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="messages in the resumed session, comma-separated")
    parser.add_argument("--turns", type=int, default=7, help="measured turns per size (after the warm-up)")
    parser.add_argument("--trace", action="store_true", help="follow one turn's path instead of timing")
    parser.add_argument("--first-turn-here", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.trace:
        trace()
        return
    if options.first_turn_here:
        print(f"{first_turn():.1f}")
        return
    print("| messages | median ms | min ms | max ms | median CPU ms | turns | a cell of the user's: median ms, "
          "ctx_magic loaded · unloaded |\n| --- | --- | --- | --- | --- | --- | --- |")
    for size in (int(s) for s in options.sizes.split(",")):
        times, loaded, unloaded = measure(size, options.turns)
        wall = [w for w, _ in times]
        cpu = statistics.median(c for _, c in times)
        print(f"| {size:,} | {statistics.median(wall):.1f} | {min(wall):.1f} | {max(wall):.1f} | {cpu:.1f} | "
              f"{len(times)} | {statistics.median(loaded):.1f} · {statistics.median(unloaded):.1f} |", flush=True)
    firsts = first_turns(3)
    print(f"\nA new session's first turn, {TYPING_SECONDS:.0f} s after %load_ext, to its request (3 fresh processes): "
          f"median {statistics.median(firsts):.1f} ms ({', '.join(f'{t:.1f}' for t in firsts)})")


if __name__ == "__main__":
    main()
