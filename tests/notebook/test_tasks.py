"""Background runs end to end in-process (a real InteractiveShell, the offline stand-in through
the real SDK, the run board on a manual clock): started by the agent, read by offset, answered,
stopped, stalled or not, and what the agent is told before its next request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from notebook_rig import controller, run
from tasks_rig import WAIT, board_shell, log_text, only_run, wait_for

from ctx_magic.notebook.outputs import KERNEL_RUN
from ctx_magic.notebook.runs.log import read_log
from ctx_magic.notebook.runs.news import news
from ctx_magic.notebook.runs.wording import OTHER_SESSIONS_RUNS
from ctx_magic.settings import DEFAULTS

PACED = """```python background
for i in range(3):
    gate.acquire()
    print(f"step {i}", flush=True)
    said.release()
```"""


@pytest.fixture
def rig(tmp_path, monkeypatch):
    with board_shell(tmp_path, monkeypatch) as found:
        yield found


def requests(shell) -> list[dict]:
    stand_in = controller(shell).host.backend.stand_in
    return [r.body for r in stand_in.requests if r.path == "/v1/messages" and r.kind == "normal"]


def last_user_blocks(shell) -> list[dict]:
    return requests(shell)[-1]["messages"][-1]["content"]


def news_blocks(blocks: list[dict]) -> list[str]:
    return [b["text"] for b in blocks if b.get("type") == "text" and b["text"].startswith("<background-runs>")]


def paced(shell):
    import threading

    shell.user_ns.update(gate=threading.Semaphore(0), said=threading.Semaphore(0))
    return shell.user_ns["gate"], shell.user_ns["said"]


def test_a_background_run_starts_at_once_and_writes_its_log_as_it_prints(rig):
    shell, board, _clock = rig
    gate, said = paced(shell)
    _, shown = run(shell, f"%%agent\nstart it\n{PACED}")
    assert "Started background run t1" in shown
    started = only_run(board)
    assert started.live and started.log_path.name == "t1.log"
    gate.release()
    assert said.acquire(timeout=20)
    assert log_text(board, "t1") == "step 0\n"  # in the file already, while the run goes on
    gate.release(2)
    assert started.done.wait(20)
    assert log_text(board, "t1") == "step 0\nstep 1\nstep 2\n"
    saved = json.loads(started.log_path.with_suffix(".json").read_text())
    assert (saved["id"], saved["state"], saved["kernel"]) == ("t1", "finished", KERNEL_RUN)


def test_what_a_run_prints_while_the_user_runs_a_cell_stays_out_of_that_cell(rig):
    shell, board, _clock = rig
    gate, said = paced(shell)
    run(shell, f"%%agent\nstart it\n{PACED}")
    _, shown = run(shell, "gate.release(); said.acquire(timeout=20); print('my own line')")
    assert "my own line" in shown and "step 0" not in shown
    assert "".join(controller(shell).cells.pending[-1].stdout) == "my own line\n"
    assert log_text(board, "t1") == "step 0\n"
    gate.release(2)
    assert only_run(board).done.wait(20)


def test_what_a_run_prints_while_the_users_cell_redirects_stdout_stays_in_its_log(rig):
    shell, board, _clock = rig
    gate, said = paced(shell)
    run(shell, f"%%agent\nstart it\n{PACED}")
    _, shown = run(shell, "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()) as mine:\n"
                          "    gate.release(); said.acquire(timeout=20)\n    print('my own line')\n"
                          "print('mine:', repr(mine.getvalue()))")
    assert shown.startswith("mine: 'my own line\\n'\n")
    assert log_text(board, "t1") == "step 0\n"
    gate.release(2)
    assert only_run(board).done.wait(20)


def test_a_runs_own_redirection_of_stdout_takes_nothing_of_the_users_cell(rig):
    shell, board, _clock = rig
    gate, said = paced(shell)
    code = ("import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()) as kept:\n    gate.acquire()\n"
            "    print('kept')\n    said.release()\n    gate.acquire()\nprint('kept:', repr(kept.getvalue()))")
    run(shell, f"%%agent\nstart it\n```python background\n{code}\n```")
    _, shown = run(shell, "gate.release(); said.acquire(timeout=20); print('my own line')")
    assert shown.startswith("my own line\n")
    gate.release()
    assert only_run(board).done.wait(20)
    assert log_text(board, "t1") == "kept: 'kept\\n'\n"


def test_the_agent_reads_a_run_incrementally_by_offset(rig):
    shell, board, _clock = rig
    gate, said = paced(shell)
    run(shell, f"%%agent\nstart it\n{PACED}")
    gate.release()
    assert said.acquire(timeout=20)
    _, first = run(shell, "%%agent\nhow is it going?\ntask read t1")
    assert "Output from offset 0 to 7:\nstep 0\n[next offset: 7]" in first
    gate.release(2)
    assert only_run(board).done.wait(20)
    _, second = run(shell, "%%agent\nand now?\ntask read t1")
    assert "Output from offset 7 to 21:\nstep 1\nstep 2\n[next offset: 21]" in second
    _, again = run(shell, "%%agent\nonce more\ntask read t1")
    assert "no new output since offset 21" in again
    _, whole = run(shell, "%%agent\nfrom the start\ntask read t1 0")
    assert "Output from offset 0 to 21:\nstep 0\nstep 1\nstep 2" in whole


def test_an_offset_past_the_end_of_the_log_says_so_and_keeps_where_the_agent_read_to(rig):
    shell, board, _clock = rig
    run(shell, "%%agent\ngo\n```python background\nprint('step 0')\n```")
    assert only_run(board).done.wait(20)
    _, shown = run(shell, "%%agent\nfurther on\ntask read t1 5000")
    assert "Run t1: finished after 0 s; its log has 7 bytes; offset 5,000 is past its end: nothing there." in shown
    assert "Output from offset 5,000" not in shown
    _, rest = run(shell, "%%agent\nfrom where I was\ntask read t1")
    assert "Output from offset 0 to 7:\nstep 0\n[next offset: 7]" in rest


def test_what_a_script_magic_prints_reaches_the_run_not_the_cell(rig):
    shell, board, _clock = rig
    _, shown = run(shell, "%%agent\nin bash\n```python\n%%bash\necho hi from bash\n```")
    result = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")][-1]
    assert result["content"] == "hi from bash"  # its output is written by IPython's script-magic thread
    run(shell, "%%agent\nin the background\n```python background\n%%bash\necho hi again\n```")
    assert only_run(board).done.wait(20)
    assert log_text(board, "t1") == "hi again\n"


def test_input_in_the_agents_code_ends_the_turns_wait_at_once_and_the_answer_reaches_it(rig):
    shell, board, _clock = rig
    _, shown = run(shell, "%%agent\nask me\n```python\nname = input('Name? ')\nprint('hi', name)\n```")
    assert "The code is waiting for input after 'Name?': it goes on as background run t1" in shown
    result = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")][-1]
    assert "stalled: waiting for input after 'Name?'" in result["content"]
    stalled = only_run(board)
    assert stalled.state == "stalled" and stalled.waiting == "input"
    run(shell, "%%agent\nanswer it\ntask answer t1 Ada")
    assert stalled.done.wait(20)
    assert shell.user_ns["name"] == "Ada"
    assert log_text(board, "t1") == "Name? Ada\nhi Ada\n"


def test_getpass_stalls_and_the_users_answer_never_reaches_the_log_or_the_agent(rig):
    shell, board, _clock = rig
    code = "import getpass\nsecret = getpass.getpass('Password: ')\nprint('got', len(secret), 'characters')"
    _, shown = run(shell, f"%%agent\nlog in\n```python\n{code}\n```")
    assert "waiting for input after 'Password:'" in shown
    _, answered = run(shell, "%ctx answer t1 s3cr3t")
    assert "Sent to the getpass() of run t1." in answered
    assert only_run(board).done.wait(20)
    assert shell.user_ns["secret"] == "s3cr3t"
    assert "s3cr3t" not in log_text(board, "t1") and "got 6 characters" in log_text(board, "t1")
    run(shell, "%%agent\nwhat happened?\ntask read t1")
    assert "s3cr3t" not in json.dumps(requests(shell)[-1])


def test_a_subprocess_prompt_is_a_stall_once_the_threshold_has_passed_and_an_answer_reaches_it(rig):
    shell, board, clock = rig
    child = "print('got', input('Overwrite existing files? [Y/n] '))"
    run(shell, f"%%agent\ngo\n```python background\nimport subprocess, sys\n"
               f"done = subprocess.run([sys.executable, '-c', {child!r}])\n```")
    started = only_run(board)
    wait_for(started, lambda: "[Y/n]" in started.tail, "the child's prompt")
    clock.advance(DEFAULTS.stall_seconds - 1)
    board.check()
    assert started.state == "running"
    clock.advance(1)
    board.check()
    assert started.state == "stalled" and started.info().detail == "Overwrite existing files? [Y/n]"
    assert started.info().silent_for == DEFAULTS.stall_seconds
    assert board.answer("t1", "y") == "Sent to the stdin of the subprocess of run t1."
    assert started.done.wait(20)
    assert log_text(board, "t1").endswith("Overwrite existing files? [Y/n] y\ngot y\n")


def test_a_silent_loop_whose_last_line_is_not_a_prompt_is_never_a_stall(rig):
    shell, board, clock = rig
    import threading

    shell.user_ns["resume"] = threading.Event()
    run(shell, "%%agent\ntrain\n```python background\nprint('epoch 1 loss 0.52', flush=True)\nresume.wait()\n"
               "print('epoch 2 loss 0.31')\n```")
    started = only_run(board)
    wait_for(started, lambda: "epoch 1" in started.tail)
    for _ in range(12):  # three hours without a line
        clock.advance(900)
        board.check()
        assert started.state == "running"
    assert news(board) == []
    shell.user_ns["resume"].set()
    assert started.done.wait(20) and started.state == "finished"


def test_a_foreground_prompt_ends_the_turns_wait_once_the_threshold_has_passed(rig):
    shell, board, clock = rig
    import threading

    child = "print('got', input('Continue? [y/n] '))"
    started = board.start(f"import subprocess, sys\ndone = subprocess.run([sys.executable, '-c', {child!r}])",
                          background=False)

    def move_the_clock_once_prompted() -> None:
        wait_for(started, lambda: "[y/n]" in "".join(started.record.stdout))
        clock.advance(DEFAULTS.stall_seconds)
        with started.changed:
            started.changed.notify_all()

    helper = threading.Thread(target=move_the_clock_once_prompted, daemon=True)
    helper.start()
    printed: list[str] = []
    assert board.supervise(started, printed.append) is False  # stalled: the wait is over, the run goes on
    helper.join(20)
    assert started.state == "stalled" and started.id == "t1" and started.reported == "stalled"
    assert "Continue? [y/n]" in "".join(printed)
    assert news(board) == []  # the tool's own result told the agent
    board.answer("t1", "n")
    assert started.done.wait(20)
    assert log_text(board, "t1").endswith("Continue? [y/n] n\ngot n\n")


def test_stopping_a_run_kills_its_subprocess_and_ends_it(rig):
    shell, board, _clock = rig
    run(shell, "%%agent\nwait\n```python background\nimport subprocess, sys\nchild = subprocess.Popen([sys.executable, "
               "'-c', 'import time; print(\"sleeping\", flush=True); time.sleep(600)'])\nchild.wait()\n```")
    started = only_run(board)
    wait_for(started, lambda: "sleeping" in started.tail)
    _, shown = run(shell, "%%agent\nenough\ntask stop t1")
    assert "Run t1 stopped." in shown
    assert started.state == "stopped"
    assert shell.user_ns["child"].poll() is not None  # killed (its status went to the interrupted wait)


def test_stopping_a_run_kills_what_its_subprocess_started_too(rig, tmp_path):
    shell, board, _clock = rig
    pid_file = tmp_path / "training.pid"
    script = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
              "print('training', flush=True); time.sleep(600)")
    run(shell, f"%%agent\ntrain\n```python background\nimport shlex, subprocess, sys\nscript = {script!r}\n"
               "subprocess.run(sys.executable + ' -c ' + shlex.quote(script) + ' && echo done', shell=True)\n```")
    started = only_run(board)
    wait_for(started, lambda: "training" in started.tail)  # the shell's child, not the shell, prints it
    assert board.stop("t1") == "Run t1 stopped."
    started.children._pump_thread.join(WAIT)
    assert not started.children._pump_thread.is_alive()  # nothing holds the run's output pipe any more
    stat = Path(f"/proc/{pid_file.read_text()}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"  # gone, or dead unreaped


def test_stopping_a_busy_python_loop_ends_it(rig):
    shell, board, _clock = rig
    run(shell, "%%agent\nspin\n```python background\nn = 0\nwhile True:\n    n += 1\n```")
    assert board.stop("t1") == "Run t1 stopped."
    assert only_run(board).state == "stopped" and shell.user_ns["n"] > 0


def gated(shell):
    import threading

    shell.user_ns["go"] = threading.Event()
    return shell.user_ns["go"]


def test_a_run_blocked_in_a_call_python_cannot_interrupt_stops_when_the_call_returns(rig):
    shell, board, _clock = rig
    go = gated(shell)
    run(shell, "%%agent\nblock\n```python background\ngo.wait()\nprint('never printed')\n```")
    board.stop_grace = 0  # the answer comes at once; the run is told to stop all the same
    assert board.stop("t1") == ("Run t1 is stopping: it is inside a call Python cannot interrupt and stops when "
                                "it returns.")
    go.set()
    started = only_run(board)
    assert started.done.wait(20) and started.state == "stopped"
    assert "never printed" not in log_text(board, "t1")


def test_a_failed_run_says_its_error_and_keeps_the_traceback_in_its_log(rig):
    shell, board, clock = rig
    go = gated(shell)
    run(shell, "%%agent\ndivide\n```python background\ngo.wait()\nprint('about to fail')\n1 / 0\n```")
    clock.advance(5)
    go.set()
    assert only_run(board).done.wait(20)
    (line,) = news(board)
    assert line.startswith("Background run t1 failed after 5 s: ZeroDivisionError: division by zero; ")
    assert line.endswith("of its output not read yet (task, action 'read').")
    assert "ZeroDivisionError" in log_text(board, "t1")
    assert news(board) == []  # told once


def test_the_traceback_of_the_agents_code_starts_at_its_code_as_a_cells_does(rig):
    shell, _board, _clock = rig
    run(shell, "%%agent\ndivide\n```python\nx = 1\nx / 0\n```")
    result = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")][-1]
    error = result["content"].split("[error]\n", 1)[1]
    assert "notebook/runs/" not in error and "_main" not in error  # nothing of ctx_magic's own frames
    assert error.splitlines()[:4] == [
        "-" * 75, "ZeroDivisionError                         Traceback (most recent call last)",
        error.splitlines()[2], "      1 x = 1"]
    assert error.splitlines()[2].startswith("Cell In[")


def test_the_traceback_of_the_agents_code_names_the_agent_cell_it_ran_in(rig):
    shell, _board, _clock = rig
    result, _ = run(shell, "%%agent\ndivide\n```python\nx = 1\nx / 0\n```")
    tool_result = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")][-1]
    error = tool_result["content"].split("[error]\n", 1)[1]
    # Not the number the user's next cell gets: IPython counts the next cell while one runs.
    assert error.splitlines()[2] == f"Cell In[{result.execution_count}], line 2"


def test_what_a_background_run_displays_goes_to_its_log_and_it_cannot_clear_a_cell(rig):
    shell, board, _clock = rig
    code = ("from IPython.display import display, clear_output\nimport pandas as pd\n"
            "display(pd.DataFrame({'a': [1, 2]}))\nclear_output()\nprint('after')")
    _, shown = run(shell, f"%%agent\nshow\n```python background\n{code}\n```")
    assert only_run(board).done.wait(20)
    logged = log_text(board, "t1")
    assert logged.startswith("[displayed text/plain]\n   a\n0  1\n1  2\n") and logged.endswith("after\n")


def test_the_news_of_a_state_change_comes_once_before_the_users_words(rig):
    shell, board, _clock = rig
    go = gated(shell)
    run(shell, "%%agent\nquick\n```python background\ngo.wait()\nprint('done quickly')\n```")
    go.set()
    assert only_run(board).done.wait(20)
    run(shell, "%%agent\nnext question")
    blocks = last_user_blocks(shell)
    assert [b["type"] for b in blocks[-2:]] == ["text", "text"] and blocks[-1]["text"] == "next question"
    assert news_blocks(blocks) == ["<background-runs>\nBackground run t1 finished after 0 s; 13 bytes of its output "
                                   "not read yet (task, action 'read').\n</background-runs>"]
    run(shell, "%%agent\nand another")
    assert news_blocks(last_user_blocks(shell)) == []  # nothing changed: nothing added


def test_news_that_arrives_during_a_turn_follows_the_tool_results(rig):
    shell, board, _clock = rig
    gated(shell)
    run(shell, "%%agent\nstart\n```python background\ngo.wait()\nprint('finished its work')\n```")
    run(shell, "%%agent\nlet it finish\n```python\ngo.set()\n_runs.runs[next(iter(_runs.runs))].done.wait(20)\n```")
    request = requests(shell)[-1]["messages"]
    assert [b["type"] for b in request[-1]["content"]] == ["tool_result", "text"]
    assert news_blocks(request[-1]["content"])[0].startswith("<background-runs>\nBackground run t1 finished after")


def test_a_run_a_dead_kernel_left_running_is_seen_as_ended_and_its_log_stays_readable(rig):
    shell, board, _clock = rig
    folder = controller(shell).host.session.store.tasks_dir
    folder.mkdir()
    (folder / "t1.log").write_text("epoch 1\nepoch 2\n")
    (folder / "t1.json").write_text(json.dumps({"id": "t1", "state": "running", "started_at": 1.0,
                                                "kernel": "a-dead-kernel", "reported": "running"}))
    _, listed = run(shell, "%ctx tasks")
    assert "t1  ended with the kernel (its log is kept)" in listed
    _, shown = run(shell, "%%agent\nwhat about my run?\ntask read t1")
    assert "Background run t1 ended with the kernel (its log is kept); 16 bytes of its output not read yet" in shown
    assert "Output from offset 0 to 16:\nepoch 1\nepoch 2" in shown


def test_the_agents_running_code_cannot_start_a_turn_of_its_own(rig):
    shell, board, _clock = rig
    go = gated(shell)
    run(shell, "%%agent\nsneaky\n```python background\ngo.wait()\nget_ipython().run_cell_magic('agent', '', 'hi')\n```")
    go.set()  # the turn has ended: only the run's own thread stands in the way
    assert only_run(board).done.wait(20)
    assert "The agent's running code cannot use %%agent." in log_text(board, "t1")


def test_an_unknown_run_is_an_error_the_agent_can_read(rig):
    shell, _board, _clock = rig
    run(shell, "%%agent\nread\ntask read t9")
    result = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")][-1]
    assert result["is_error"] and "There is no background run 't9' in this session" in result["content"]


def test_ctx_tasks_lists_the_runs_with_their_last_line(rig):
    shell, board, _clock = rig
    run(shell, "%%agent\ngo\n```python background\nprint('first')\nprint('last line here')\n```")
    assert only_run(board).done.wait(20)
    _, listed = run(shell, "%ctx tasks")
    assert "t1  finished after 0 s  (21 bytes of output)\n    last line: last line here\n    log: " in listed
    _, stopped = run(shell, "%ctx stop t1")
    assert "Run t1 is not running: finished after 0 s." in stopped


def test_a_run_left_live_by_a_new_session_is_named_and_reached_from_its_own(rig):
    shell, board, _clock = rig
    gate, said = paced(shell)
    run(shell, f"%%agent\ntrain\n{PACED}")
    first = controller(shell).host.session.session_id
    _, shown = run(shell, "%agent --new")
    line = f"{OTHER_SESSIONS_RUNS}\n  t1 of session {first}: running for 0 s"
    assert line in shown
    _, listed = run(shell, "%ctx tasks")
    assert f"No background runs in this session.\n{line}" in listed
    _, stopped = run(shell, "%ctx stop t1")
    assert f"There is no background run 't1' in this session (its runs: none yet); t1 of session {first}" in stopped
    run(shell, f"%agent --resume {first}")
    _, stopped = run(shell, "%ctx stop t1")  # reached: it waits in acquire(), and stops when that returns
    assert "Run t1 is stopping: it is inside a call Python cannot interrupt" in stopped
    gate.release(3)
    assert only_run(board).done.wait(20)
    assert only_run(board).info().state == "stopped"


def test_ctx_answer_without_text_asks_at_the_input_prompt(rig, monkeypatch):
    shell, board, _clock = rig
    run(shell, "%%agent\nask\n```python\nanswer = input('Your pick? ')\n```")
    monkeypatch.setattr("builtins.input", lambda prompt="": "blue")
    _, shown = run(shell, "%ctx answer t1")
    assert "Sent to the input() of run t1." in shown
    assert only_run(board).done.wait(20) and shell.user_ns["answer"] == "blue"


def test_ctx_answer_without_text_asks_nothing_of_a_run_that_is_unknown_or_over(rig, monkeypatch):
    shell, board, _clock = rig
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "blue")
    run(shell, "%%agent\ngo\n```python background\nprint('done')\n```")
    assert only_run(board).done.wait(20)
    _, unknown = run(shell, "%ctx answer t9")
    assert "There is no background run 't9' in this session (its runs: t1)." in unknown
    _, over = run(shell, "%ctx answer t1")
    assert "Run t1 is not running: finished after 0 s." in over
    assert asked == []


def test_a_run_interrupted_in_the_foreground_is_stopped(rig):
    shell, board, _clock = rig
    import _thread
    import signal
    import threading

    # As a kernel's cell runs: SIGINT raises KeyboardInterrupt. Whatever an earlier test left there
    # (asyncio's no-op handler, after a kernel that failed to start) would swallow interrupt_main.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    board.stop_grace = WAIT  # a bound for a loaded machine: the stop is awaited, not raced against 2 s
    started = board.start("import time\nprint('working', flush=True)\nwhile True:\n    time.sleep(0.01)",
                          background=False)
    # A bound, never a pace: if the interrupt is lost the run is ended, supervise returns and the
    # test fails on pytest.raises instead of waiting for ever.
    bound = threading.Thread(target=lambda: started.done.wait(WAIT) or started.stop(), daemon=True)
    bound.start()
    try:
        with pytest.raises(KeyboardInterrupt):  # the kernel's interrupt reaches the turn while it waits
            board.supervise(started, lambda text: _thread.interrupt_main())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert started.done.is_set() and started.state == "stopped"
    bound.join(WAIT)


def test_a_long_log_reads_back_whole_in_pieces_never_cutting_a_character(rig):
    shell, board, _clock = rig
    run(shell, "%%agent\nlots\n```python background\nfor i in range(2000):\n    print('é' * 60)\n```")
    assert only_run(board).done.wait(20)
    path, offset, pieces = only_run(board).log_path, 0, []
    while offset < path.stat().st_size:
        text, offset, size = read_log(path, offset)
        pieces.append(text)
    assert size == 2000 * 121 and len(pieces) == 3
    assert "".join(pieces) == ("é" * 60 + "\n") * 2000
