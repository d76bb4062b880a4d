"""What a summary must keep: the user's messages, paths, error lines and defined
names of the span a compaction replaces."""

from __future__ import annotations

from builders import summarized_span as span

from ctx_magic.context.span_facts import defined_names, paths_in_text, span_facts
from ctx_magic.messages import Message, tool_result_block, user_text


def test_the_span_facts_are_the_users_messages_paths_errors_and_defined_names():
    facts = span_facts(span())
    assert [m.text for m in facts.user_messages] == [span()[0].text, span()[-1].text]
    assert facts.paths == ("data/sales.csv", "notes/plan.md")
    assert facts.errors == ("KeyError: 'prices'", "notes/plan.md does not exist.")
    assert facts.names == ("df", "total", "count", "clean", "Model")  # no loop variable, no _private


def test_tool_results_snip_markers_and_notes_are_not_user_messages():
    facts = span_facts([
        user_text("[40 earlier messages were snipped]", snipped_count=40),
        user_text("(Notebook cells the user ran before this conversation started follow.)", synthetic=True),
        user_text("<recent-file>", kind="attachment"),
        Message("user", (tool_result_block("t", "hello"),)),
        user_text("(The conversation before this point was compacted by the API.)", server_compaction=True),
    ])
    assert facts.user_messages == ()


def test_the_messages_an_earlier_summary_answered_for_are_carried_whatever_holds_them():
    summary = user_text("Summary: batches.", kind="summary", user_messages=[["u1", "Plot in blue."]])
    marker = user_text("(compacted by the API)", server_compaction=True, user_messages=[["u2", "Use kelvin."]])
    facts = span_facts([summary, marker, user_text("Now the median.")])
    assert [(m.uuid, m.text) for m in facts.user_messages][:2] == [("u1", "Plot in blue."), ("u2", "Use kelvin.")]
    assert [m.text for m in facts.user_messages] == ["Plot in blue.", "Use kelvin.", "Now the median."]


def test_paths_in_text_skip_urls_numbers_and_prose_slashes():
    text = ("See ./out/fig.png, /tmp/run and config.yaml; not https://x.org/a/b.csv, v1.2, e.g. 0.5 "
            "and/or df.head or np.float64.")
    assert paths_in_text(text) == ["./out/fig.png", "/tmp/run", "config.yaml"]
    assert paths_in_text("<format_example>Run it.</format_example> in /testbed") == ["/testbed"]


def test_defined_names_survive_magics_and_give_up_on_code_that_is_not_python():
    assert defined_names("%time x = 1\n!ls\ny = 2") == ["y"]
    assert defined_names("%%bash\necho hi") == []
    assert defined_names("def (") == []
