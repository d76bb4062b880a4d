"""The python tool (agent/tools.py): LocalExecutor and run_python_source behave like a notebook cell."""

from __future__ import annotations

import pytest

from ctx_magic.agent.tools import (
    PYTHON_TOOL,
    LocalExecutor,
    Tool,
    ToolCall,
    ToolError,
    ToolOutput,
    ToolRegistry,
    run_python_source,
)


class NoContext:
    """A turn that nothing is asked of."""

    def is_live_result(self, tool_use_id: str) -> bool:
        return False

    def clear_results(self, tool_use_ids: list[str]) -> tuple[list[str], list[str]]:
        return [], list(tool_use_ids)

    def ask_compaction(self, instructions: str) -> bool:
        return False


def call(executor: LocalExecutor, tool_call: ToolCall) -> ToolOutput:
    return ToolRegistry(executor.tools()).run(tool_call, NoContext())


def run(executor: LocalExecutor, code: str) -> ToolOutput:
    return call(executor, ToolCall("toolu_1", "python", {"code": code}))


@pytest.fixture
def executor() -> LocalExecutor:
    return LocalExecutor()


# --- output like a notebook cell -----------------------------------------------------------


def test_printed_output_is_returned(executor: LocalExecutor) -> None:
    assert run(executor, "print('hello')\nprint(1, 2)") == ToolOutput("hello\n1 2\n", is_error=False)


def test_last_expression_value_is_shown_as_its_repr(executor: LocalExecutor) -> None:
    assert run(executor, "x = [1, 2]\nx + [3]").content == "[1, 2, 3]\n"
    assert run(executor, "'text'").content == "'text'\n"


def test_printed_output_comes_before_the_last_expression(executor: LocalExecutor) -> None:
    assert run(executor, "print('first')\n40 + 2").content == "first\n42\n"


def test_only_the_last_expression_is_shown(executor: LocalExecutor) -> None:
    assert run(executor, "1\n2\n3").content == "3\n"


def test_last_expression_evaluating_to_none_shows_nothing(executor: LocalExecutor) -> None:
    assert run(executor, "None").content == "(no output)"
    assert run(executor, "print('side effect')").content == "side effect\n"


def test_assignment_only_code_says_no_output(executor: LocalExecutor) -> None:
    assert run(executor, "a = 1\nb = a + 1") == ToolOutput("(no output)", is_error=False)


def test_empty_code_says_no_output(executor: LocalExecutor) -> None:
    assert run(executor, "") == ToolOutput("(no output)", is_error=False)


def test_stderr_is_captured_after_stdout(executor: LocalExecutor) -> None:
    out = run(executor, "import sys\nsys.stderr.write('warn\\n')\nprint('out')")
    assert out == ToolOutput("out\nwarn\n", is_error=False)


def test_last_expression_defined_in_a_block_is_not_echoed(executor: LocalExecutor) -> None:
    assert run(executor, "for i in range(3):\n    i").content == "(no output)"


# --- errors ---------------------------------------------------------------------------------


def test_exception_returns_traceback_text_as_an_error(executor: LocalExecutor) -> None:
    out = run(executor, "def f():\n    return 1 / 0\nf()")
    assert out.is_error is True
    assert isinstance(out.content, str)
    assert out.content.startswith("Traceback (most recent call last):")
    assert "in f" in out.content
    assert out.content.rstrip().endswith("ZeroDivisionError: division by zero")


def test_output_printed_before_an_exception_is_kept(executor: LocalExecutor) -> None:
    out = run(executor, "print('partial')\nraise ValueError('bad value')")
    assert out.is_error is True
    assert isinstance(out.content, str)
    assert out.content.startswith("partial\n")
    assert "ValueError: bad value" in out.content


def test_exception_in_the_last_expression_is_an_error(executor: LocalExecutor) -> None:
    out = run(executor, "d = {}\nd['missing']")
    assert out.is_error is True and "KeyError: 'missing'" in str(out.content)


def test_failing_repr_of_the_last_expression_is_an_error(executor: LocalExecutor) -> None:
    code = "class Bad:\n    def __repr__(self):\n        raise RuntimeError('no repr')\nBad()"
    out = run(executor, code)
    assert out.is_error is True and "RuntimeError: no repr" in str(out.content)


def test_traceback_starts_at_the_agents_code_not_inside_ctx_magic(executor: LocalExecutor) -> None:
    out = str(run(executor, "1 / 0").content)
    assert 'File "<agent>", line 1' in out
    assert "run_python_source" not in out and "tools.py" not in out


def test_syntax_error_is_an_error_result(executor: LocalExecutor) -> None:
    out = run(executor, "x = (")
    assert out.is_error is True
    assert "SyntaxError" in str(out.content)
    assert "'(' was never closed" in str(out.content)


def test_compile_time_syntax_error_is_an_error_result(executor: LocalExecutor) -> None:
    out = run(executor, "return 5")
    assert out.is_error is True and "'return' outside function" in str(out.content)


def test_nothing_runs_when_the_code_does_not_parse(executor: LocalExecutor) -> None:
    out = run(executor, "ran = True\nx = (")
    assert out.is_error is True
    assert "ran" not in executor.namespace


def test_sys_exit_is_reported_not_raised(executor: LocalExecutor) -> None:
    out = run(executor, "import sys\nprint('before')\nsys.exit(3)")
    assert out.is_error is True
    assert str(out.content).startswith("before\n")
    assert "SystemExit: 3" in str(out.content)


def test_keyboard_interrupt_propagates_to_the_loop(executor: LocalExecutor) -> None:
    with pytest.raises(KeyboardInterrupt):
        run(executor, "raise KeyboardInterrupt")


# --- the namespace --------------------------------------------------------------------------


def test_namespace_persists_across_calls(executor: LocalExecutor) -> None:
    run(executor, "counter = 41\ndef bump():\n    global counter\n    counter += 1")
    run(executor, "bump()")
    assert run(executor, "counter").content == "42\n"
    assert executor.namespace["counter"] == 42


def test_names_from_a_failed_call_stay_defined(executor: LocalExecutor) -> None:
    run(executor, "kept = 'yes'\nraise ValueError")
    assert run(executor, "kept").content == "'yes'\n"


def test_separate_executors_do_not_share_names() -> None:
    first, second = LocalExecutor(), LocalExecutor()
    run(first, "only_here = 1")
    out = run(second, "only_here")
    assert out.is_error is True and "NameError" in str(out.content)


def test_run_python_source_uses_the_given_namespace() -> None:
    namespace: dict = {"given": 5}
    assert run_python_source("given * 2", namespace) == ("10\n", False)
    assert run_python_source("made = given + 1", namespace) == ("(no output)", False)
    assert namespace["made"] == 6


# --- the executor's contract ----------------------------------------------------------------


def test_executor_offers_only_the_python_tool(executor: LocalExecutor) -> None:
    assert ToolRegistry(executor.tools()).specs() == [PYTHON_TOOL]
    assert PYTHON_TOOL["input_schema"]["required"] == ["code"]


def test_non_python_tool_is_an_error(executor: LocalExecutor) -> None:
    out = call(executor, ToolCall("toolu_1", "bash", {"command": "ls"}))
    assert out == ToolOutput("Unknown tool 'bash'; the tools are: python.", is_error=True)


def test_missing_code_is_an_error(executor: LocalExecutor) -> None:
    out = call(executor, ToolCall("toolu_1", "python", {}))
    assert out.is_error is True and "'code' string" in str(out.content)


def test_non_string_code_is_an_error_and_runs_nothing(executor: LocalExecutor) -> None:
    out = call(executor, ToolCall("toolu_1", "python", {"code": ["x = 1"]}))
    assert out.is_error is True
    assert "x" not in executor.namespace


# --- awkward output -------------------------------------------------------------------------


def test_output_with_lone_surrogates_does_not_crash(executor: LocalExecutor) -> None:
    code = "raw = b'caf\\xe9 \\xff'.decode('utf-8', 'surrogateescape')\nprint(raw)\nraw"
    out = run(executor, code)
    assert out.is_error is False
    text = str(out.content)
    text.encode("utf-8")  # writable to the transcript and the API
    assert text.startswith("caf") and "\\udce9" in text  # the repr line keeps the escape readable


def test_binary_ish_output_does_not_crash(executor: LocalExecutor) -> None:
    out = run(executor, "print(bytes(range(256)).decode('latin-1'))\nbytes(range(8))")
    assert out.is_error is False
    text = str(out.content)
    text.encode("utf-8")
    assert text.endswith("b'\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07'\n")


def test_unicode_output_is_kept_as_is(executor: LocalExecutor) -> None:
    assert run(executor, "print('naïve ∑ 日本')").content == "naïve ∑ 日本\n"


# --- the registry: a tool declared once ------------------------------------------------------


def test_the_registry_refuses_two_tools_of_one_name(executor: LocalExecutor) -> None:
    with pytest.raises(ValueError, match="two tools are named 'python'"):
        ToolRegistry([*executor.tools(), *executor.tools()])


def test_the_registry_says_which_results_may_be_cleared_and_offers_only_offered_tools() -> None:
    def ok(_call: ToolCall, _context: object) -> ToolOutput:
        return ToolOutput("ok")

    registry = ToolRegistry([Tool({"name": "a"}, ok), Tool({"name": "b"}, ok, clearable=False),
                             Tool({"name": "c"}, ok, offered=False)])
    assert registry.clearable() == frozenset({"a", "c"})
    assert registry.names() == ["a", "b"]
    assert call_one(registry, "c").is_error


def test_a_handler_failure_becomes_an_error_result_the_model_can_read() -> None:
    def broken(_call: ToolCall, _context: object) -> ToolOutput:
        raise ToolError("the file is gone")

    def bad_input(tool_call: ToolCall, _context: object) -> ToolOutput:
        return ToolOutput(str(int(tool_call.input["n"])))

    registry = ToolRegistry([Tool({"name": "broken"}, broken), Tool({"name": "count"}, bad_input)])
    assert call_one(registry, "broken") == ToolOutput("the file is gone", is_error=True)
    out = call_one(registry, "count", {"n": "many"})
    assert out.is_error and str(out.content).startswith("Bad input for count: invalid literal")


def call_one(registry: ToolRegistry, name: str, tool_input: dict | None = None) -> ToolOutput:
    return registry.run(ToolCall("toolu_9", name, tool_input or {}), NoContext())
