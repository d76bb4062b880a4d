"""The messages a compaction replaced, shown as a conversation: roles, cells with source and
output, tool calls and results, text as text (never a Python repr with literal backslash-n)."""

from __future__ import annotations

from builders import assistant, call, text

from ctx_magic.messages import Message, tool_result_block, tool_use_block, user_text
from ctx_magic.ui.originals import PREVIEW_CHARS, originals_html


def records(*messages: Message) -> list[dict]:
    return [{"type": "message", **m.to_json()} for m in messages]


def cell_pair(count: int, source: str, output: str) -> tuple[Message, Message]:
    use = tool_use_block(f"cell_{count}_ab12", "notebook_cell", {"execution_count": count, "source": source})
    return (Message("assistant", (use,), meta={"cell": count}),
            Message("user", (tool_result_block(use["id"], output),)))


def test_a_user_cell_shows_its_source_and_output_under_the_users_role():
    use, result = cell_pair(2, "import math\n\nprint(math.pi)", "3.141592653589793")
    shown = originals_html(records(use, result), [use.uuid, result.uuid])
    assert shown.count('data-role="user"') == 2 and 'data-role="agent"' not in shown
    assert "You ran cell [2]" in shown and "Output of cell [2]" in shown
    assert "import math\n\nprint(math.pi)" in shown  # real line breaks, in a <pre>
    assert "\\n" not in shown and "{'execution_count'" not in shown


def test_agent_text_tool_calls_and_results_carry_their_roles():
    python = call("python", {"code": "print(6 * 7)"})
    reply = assistant(text("Let me compute it."), python)
    result = Message("user", (tool_result_block(python["id"], "42"),))
    asked = user_text("what is six times seven?")
    shown = originals_html(records(asked, reply, result), [asked.uuid, reply.uuid, result.uuid])
    order = [shown.index(s) for s in ("what is six times seven?", "Let me compute it.", "print(6 * 7)",
                                      "Result of python")]
    assert order == sorted(order)
    assert ">You<" in shown and ">Agent<" in shown and "Agent called python" in shown
    assert 'data-role="tool"' in shown


def test_an_earlier_summary_and_attachments_are_labelled_as_such():
    summary = user_text("## 1. Primary Request", kind="summary")
    attached = user_text("<recent-file path='a.py'>x = 1</recent-file>", kind="attachment")
    shown = originals_html(records(summary, attached), [summary.uuid, attached.uuid])
    assert "Earlier summary" in shown and "Attached to the conversation" in shown


def test_long_blocks_are_cut_with_a_pointer_to_the_transcript_and_markup_is_escaped():
    long = user_text("<b>" + "x" * (PREVIEW_CHARS + 500))
    shown = originals_html(records(long), [long.uuid])
    assert "&lt;b&gt;" in shown and "<b>x" not in shown
    assert "503 more characters in the transcript" in shown  # "<b>" counts too


def test_only_the_named_messages_in_transcript_order():
    first, second, third = user_text("one"), user_text("two"), user_text("three")
    shown = originals_html(records(first, second, third), [third.uuid, first.uuid])
    assert "two" not in shown and shown.index("one") < shown.index("three")
    assert "none of these messages" in originals_html(records(first), ["missing"])
