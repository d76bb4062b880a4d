"""The coverage audit (issue 12): what a summary left out of the span it replaces is appended
after it; a complete summary gets nothing."""

from __future__ import annotations

from ctx_magic.context.audit import (
    HEAD_LINES,
    SEARCH_TOOL,
    audit_summary,
    defined_names,
    paths_in_text,
    span_facts,
)
from ctx_magic.context.autocompact import compact_conversation
from ctx_magic.context.tokens import count_context, count_text
from ctx_magic.events import AuditReport, Compacted, event_from_json
from ctx_magic.messages import Message, text_block, tool_result_block, tool_use_block, user_text

CODE = """import pandas as pd
df = pd.read_csv('data/sales.csv')
total, count = df.price.sum(), len(df)
def clean(frame):
    return frame.dropna()
class Model:
    pass
for i in range(3):
    pass
%matplotlib inline
_private = 1
"""
TRACEBACK = (
    "---------------------------------------------------------------------------\n"
    "KeyError                                  Traceback (most recent call last)\n"
    "Cell In[3], line 1\n----> 1 df['prices']\n\nKeyError: 'prices'"
)


def span() -> list[Message]:
    return [
        user_text("Load data/sales.csv and plot the price per region. Never use seaborn."),
        Message("assistant", (text_block("Loading it."), tool_use_block("t1", "python", {"code": CODE}))),
        Message("user", (tool_result_block("t1", "(no output)"),)),
        Message("assistant", (tool_use_block("t2", "python", {"code": "df['prices']"}),)),
        Message("user", (tool_result_block("t2", TRACEBACK, is_error=True),)),
        Message("assistant", (tool_use_block("t3", "read_file", {"path": "notes/plan.md"}),)),
        Message("user", (tool_result_block("t3", "notes/plan.md does not exist.", is_error=True),)),
        user_text("The column is called price, not prices."),
    ]


COMPLETE = """The user asked: "Load data/sales.csv and plot the price per region. Never use seaborn."
Then: "The column is called price, not prices."
Code defined df, total, count, clean and Model. notes/plan.md was missing ("notes/plan.md does not exist.").
Errors: KeyError: 'prices' (fixed by using price)."""


def test_the_span_facts_are_the_users_messages_paths_errors_and_defined_names():
    facts = span_facts(span())
    assert [m.text for m in facts.user_messages] == [span()[0].text, span()[-1].text]
    assert facts.paths == ("data/sales.csv", "notes/plan.md")
    assert facts.errors == ("KeyError: 'prices'", "notes/plan.md does not exist.")
    assert facts.names == ("df", "total", "count", "clean", "Model")  # no loop variable, no _private


def test_a_complete_summary_gets_nothing_appended():
    audit = audit_summary(span(), COMPLETE, transcript_path="/s/transcript.jsonl")
    assert audit.text == ""
    assert not audit.report.added
    assert (audit.report.user_messages_checked, audit.report.paths_checked, audit.report.errors_checked,
            audit.report.names_checked) == (2, 2, 2, 5)


def test_what_the_summary_omitted_is_appended_messages_verbatim_the_rest_listed():
    messages = span()
    summary = "The user wants a plot of prices. df was loaded from a CSV."
    audit = audit_summary(messages, summary, transcript_path="/s/transcript.jsonl")
    assert messages[0].text in audit.text and messages[-1].text in audit.text  # word for word
    assert audit.report.user_messages == (messages[0].uuid, messages[-1].uuid)
    not_in = audit.text.split("Not in the summary above")[1]
    assert "notes/plan.md" in not_in
    assert "data/sales.csv" not in not_in  # said once: the appended message names it
    assert "KeyError: 'prices'" in not_in and "notes/plan.md does not exist." in not_in
    assert "total, count, clean, Model" in not_in and "df," not in not_in
    assert audit.report.tokens > 0


def test_a_summary_that_rewraps_whitespace_still_counts_as_verbatim():
    messages = [user_text("Keep   the\nunits in\tcelsius.")]
    assert audit_summary(messages, "> Keep the units in celsius.", transcript_path="t").text == ""


def test_a_long_user_message_is_appended_as_its_first_lines_and_where_to_read_the_rest():
    pasted = "\n".join(f"row {i}: {'x' * 40}" for i in range(200))
    message = user_text("Here is the log:\n" + pasted)
    audit = audit_summary([message], "The user pasted a log.", transcript_path="/s/transcript.jsonl")
    assert audit.report.cut_messages == (message.uuid,)
    assert "row 10:" in audit.text and "row 150:" not in audit.text
    assert len([line for line in audit.text.split("</user-message>")[0].splitlines() if line.startswith("row")]) \
        == HEAD_LINES - 1
    assert f'{SEARCH_TOOL} with ref "{message.uuid[:8]}"' in audit.text and "/s/transcript.jsonl" in audit.text


def test_user_messages_an_earlier_summary_answered_for_are_checked_again():
    earlier = user_text("summary text", kind="summary", user_messages=[["u-old", "Always plot in kelvin."]])
    audit = audit_summary([earlier, user_text("and now the mean")], "The user wants the mean.",
                          transcript_path="t")
    assert "Always plot in kelvin." in audit.text
    assert [m.uuid for m in audit.carried][0] == "u-old" and len(audit.carried) == 2


def test_tool_results_snip_markers_and_notes_are_not_user_messages():
    facts = span_facts([
        user_text("[40 earlier messages were snipped]", snipped_count=40),
        user_text("(Notebook cells the user ran before this conversation started follow.)", synthetic=True),
        user_text("<recent-file>", kind="attachment"),
        Message("user", (tool_result_block("t", "hello"),)),
    ])
    assert facts.user_messages == ()


def test_paths_in_text_skip_urls_numbers_and_prose_slashes():
    text = ("See ./out/fig.png, /tmp/run and config.yaml; not https://x.org/a/b.csv, v1.2, e.g. 0.5 "
            "and/or df.head or np.float64.")
    assert paths_in_text(text) == ["./out/fig.png", "/tmp/run", "config.yaml"]


def test_defined_names_survive_magics_and_give_up_on_code_that_is_not_python():
    assert defined_names("%time x = 1\n!ls\ny = 2") == ["y"]
    assert defined_names("%%bash\necho hi") == []
    assert defined_names("def (") == []


def test_compaction_appends_the_audit_after_the_summary_and_records_it_on_the_event():
    messages = span()
    result = compact_conversation(
        messages, summarizer=None, trigger="manual", now=1.0, transcript_path="/s/transcript.jsonl",  # type: ignore[arg-type]
        tokens_before=1_000, measure=lambda ms: count_context(ms).tokens, threshold=10_000,
        summary_text="The user wants a plot.")
    summary = next(m for m in result.messages if m.kind == "summary")
    assert summary.text.index("The user wants a plot.") < summary.text.index(messages[0].text)
    assert SEARCH_TOOL in summary.text  # the preamble names the recovery tool
    assert result.event.audit is not None and result.event.audit.text in summary.text
    assert summary.meta["user_messages"] == [[messages[0].uuid, messages[0].text],
                                             [messages[-1].uuid, messages[-1].text]]
    again = event_from_json(result.event.to_json())  # the transcript keeps the audit
    assert isinstance(again, Compacted) and again.audit == result.event.audit
    assert isinstance(again.audit, AuditReport)


def test_past_the_message_budget_the_oldest_messages_become_stubs_with_their_ref():
    messages = [user_text(f"Request {n}: " + "please keep this detail " * 30) for n in range(10)]
    audit = audit_summary(messages, "nothing", transcript_path="t", message_budget=800)
    blocks = audit.text.split("Not in the summary above")[0]
    assert count_text(blocks) <= 800 + 50
    assert messages[-1].text in audit.text  # the newest whole
    assert messages[0].text not in audit.text and f'with ref "{messages[0].uuid[:8]}" reads it whole' in audit.text
    assert messages[0].uuid in audit.report.cut_messages and messages[-1].uuid not in audit.report.cut_messages
