"""Background runs in real kernels, driven through the offline stand-in: a run that prints for
over a minute while the user runs cells, read by the agent bit by bit, whose log outlives the
kernel; input(), getpass() and a subprocess's [Y/n] each reported as a stall within the
threshold, a silent loop never. The run board's clock is a manual one the run's code and the
user's cells move: nothing waits on the wall clock."""

from __future__ import annotations

import json
import re

import pytest
from kernel_rig import SETUP, Kernel, kernel_env, session_id

pytestmark = pytest.mark.slow  # real kernels: minutes, not seconds

MANUAL_CLOCK = """# ctx: skip
import threading
from ctx_magic.notebook.extension import controller_of

class Clock:
    now = 1_800_000_000.0
    def __call__(self):
        return self.now
    def advance(self, seconds):
        self.now += seconds

clock = Clock()
runs = controller_of(get_ipython()).runs
runs.clock = clock
pace, printed = threading.Semaphore(0), threading.Semaphore(0)"""

A_LINE_A_SECOND = """%%agent
Train it in the background.
```python background
for second in range(90):
    pace.acquire()
    print(f"second {second}: loss {1 / (second + 1):.4f}", flush=True)
    clock.advance(1)
    printed.release()
```"""


def let_it_print(lines: int) -> str:
    """A cell of the user's that lets the run print `lines` lines meanwhile (and does its own work)."""
    return (f"pace.release({lines})\nassert all(printed.acquire(timeout=30) for _ in range({lines}))\n"
            "total = sum(range(10))\nprint('my own result', total)")


def start(kernels: list[Kernel], folder, setup: str = SETUP) -> Kernel:
    kernel = Kernel(folder, kernel_env())
    kernels.append(kernel)
    assert "ERROR" not in kernel.execute(setup)
    return kernel


def test_a_background_run_prints_for_over_a_minute_beside_the_users_cells_and_its_log_outlives_the_kernel(
        kernels, tmp_path):
    kernel = start(kernels, tmp_path)
    kernel.execute(MANUAL_CLOCK)
    assert "Started background run t1" in kernel.execute(A_LINE_A_SECOND)

    mine = kernel.execute(let_it_print(30))
    assert mine.strip() == "my own result 45"  # the run printed 30 lines meanwhile, none of them here
    first = kernel.execute("%%agent\nHow far is it?\ntask read t1")
    assert "Run t1: running for 30 s" in first
    assert re.search(r"Output from offset 0 to (\d+):\nsecond 0: loss 1.0000\n", first)
    assert "second 29: loss" in first and "second 30" not in first

    assert kernel.execute(let_it_print(40)).strip() == "my own result 45"
    second = kernel.execute("%%agent\nAnd now?\ntask read t1")
    assert "Run t1: running for 1 min 10 s" in second
    assert "\nsecond 30: loss 0.0323\n" in second and "second 0:" not in second and "second 69: loss" in second

    sid = session_id(kernel)
    kernel.kill()  # the kernel dies while the run waits for its 71st line
    log = tmp_path / ".ctx_magic" / "sessions" / sid / "tasks" / "t1.log"
    assert log.read_text().splitlines()[-1] == "second 69: loss 0.0143"

    kernel = start(kernels, tmp_path, SETUP + "\n%agent --resume")
    listed = kernel.execute("%ctx tasks")
    assert "t1  ended with the kernel (its log is kept)" in listed and "last line: second 69: loss 0.0143" in listed
    shown = kernel.execute("%%agent\nWhat happened to my run?\ntask read t1 0")
    assert "Background run t1 ended with the kernel (its log is kept)" in shown
    assert "Output from offset 0 to" in shown and "second 0: loss 1.0000" in shown and "second 69:" in shown
    saved = json.loads(log.with_suffix(".json").read_text())
    assert (saved["state"], saved["reported"]) == ("ended", "ended")


def test_input_and_getpass_in_the_agents_code_are_stalls_reported_at_once(kernels, tmp_path):
    kernel = start(kernels, tmp_path)
    asked = kernel.execute("%%agent\nAsk me.\n```python\nname = input('Your name? ')\nprint('hello', name)\n```")
    assert "The code is waiting for input after 'Your name?': it goes on as background run t1" in asked
    assert "python stalled: waiting for input after 'Your name?'" in asked  # the agent's note of its result
    answered = kernel.execute("%%agent\nI am Ada.\ntask answer t1 Ada")
    assert "Sent to the input() of run t1." in answered
    assert kernel.execute("print(name)").strip() == "Ada"

    code = "import getpass\ntoken = getpass.getpass('Password: ')\nprint('length', len(token))"
    asked = kernel.execute(f"%%agent\nLog in.\n```python\n{code}\n```")
    assert "The code is waiting for input after 'Password:': it goes on as background run t2" in asked
    assert "Sent to the getpass() of run t2." in kernel.execute("%ctx answer t2 hunter2")
    assert kernel.execute("print(len(token))").strip() == "7"
    log = kernel.execute("%%agent\nWhat did it print?\ntask read t2")
    assert "length 7" in log and "hunter2" not in log


def test_a_subprocess_prompt_in_the_foreground_ends_the_turns_wait(kernels, tmp_path):
    kernel = start(kernels, tmp_path, SETUP + "\n%config CtxMagic.stall_seconds = 1")
    child = "print('answered', input('Overwrite results.csv? [Y/n] '))"
    shown = kernel.execute(f"%%agent\nSave it.\n```python\nimport subprocess, sys\n"
                           f"done = subprocess.run([sys.executable, '-c', {child!r}])\n```")
    assert "The code is waiting for input after 'Overwrite results.csv? [Y/n]': it goes on as background run t1" \
        in shown
    silence = re.search(r"stalled: waiting for input after 'Overwrite results.csv\? \[Y/n\]' \(no output for (\d+) s\)",
                        shown)
    assert int(silence.group(1)) >= 1  # the wall clock's seconds: at least the 1-second threshold
    kernel.execute("%%agent\nYes.\ntask answer t1 y")
    assert "answered y" in kernel.execute("%%agent\nDid it?\ntask read t1")


def test_a_subprocess_prompt_is_a_stall_at_the_threshold_and_a_silent_loop_never_is(kernels, tmp_path):
    kernel = start(kernels, tmp_path)
    kernel.execute(MANUAL_CLOCK + "\nquiet = threading.Event()")
    child = "print('answered', input('Continue with 12 files? [Y/n] '))"
    kernel.execute(f"%%agent\nCopy them.\n```python background\nimport subprocess, sys\n"
                   f"done = subprocess.run([sys.executable, '-c', {child!r}])\n```")
    kernel.execute("%%agent\nTrain.\n```python background\nprint('epoch 1/50 loss 0.8123', flush=True)\n"
                   "while not quiet.wait(0.05):\n    pass\nprint('epoch 2/50 loss 0.6012')\n```")
    wait = ("# ctx: skip\nfor run in runs.runs.values():\n    with run.changed:\n"
            "        assert run.changed.wait_for(lambda: run.tail.strip(), 30)")
    kernel.execute(wait)  # both have printed their first line

    kernel.execute("# ctx: skip\nclock.advance(44)\nruns.check()")
    assert "stalled" not in kernel.execute("%ctx tasks")
    kernel.execute("# ctx: skip\nclock.advance(1)\nruns.check()")
    listed = kernel.execute("%ctx tasks")
    assert "t1  stalled: waiting for input after 'Continue with 12 files? [Y/n]' (no output for 45 s)" in listed
    kernel.execute("# ctx: skip\nclock.advance(3 * 3600)\nruns.check()")
    assert "t2  running for 3 h 0 min" in kernel.execute("%ctx tasks")  # three hours silent: still working

    heard = kernel.execute("%%agent\nHow are they doing?")
    assert "Heard: Background run t1 is stalled: waiting for input after 'Continue with 12 files? [Y/n]'" in heard
    assert "t2" not in heard  # nothing changed for the silent one: nothing said
    kernel.execute("%%agent\nGo on.\ntask answer t1 y")
    kernel.execute("# ctx: skip\nquiet.set()")
    done = kernel.execute("%%agent\nAnd now?\ntask read t1\ntask read t2")
    assert "answered y" in done and "epoch 2/50 loss 0.6012" in done


def test_interrupting_a_users_cell_spares_the_subprocess_of_a_background_run(kernels, tmp_path):
    kernel = start(kernels, tmp_path)
    started = kernel.execute("%%agent\nIn the background.\n```python background\nimport subprocess, sys\n"
                             "child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'])\n"
                             "child.wait()\n```")
    assert "Started background run t1" in started
    interrupted = kernel.execute("import threading\nprint('waiting', flush=True)\nthreading.Event().wait()",
                                 when=lambda text: "waiting" in text, then=kernel.interrupt)
    assert "KeyboardInterrupt" in interrupted  # the kernel's interrupt reaches the user's cell...
    assert kernel.execute("print(child.poll())") == "None\n"  # ...and not the agent's subprocess
    assert "Run t1 stopped." in kernel.execute("%ctx stop t1")
