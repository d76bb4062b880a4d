"""The coverage audit: what a summary left out of the span it replaces is appended
after it; a complete summary gets nothing."""

from __future__ import annotations

import dataclasses

from builders import summarized_span as span

from ctx_magic.context.audit import HEAD_LINES, SEARCH_TOOL, audit_summary
from ctx_magic.context.autocompact import Compaction, plan_split, rebuild
from ctx_magic.context.tokens import DEFAULT_FAMILY, count_text
from ctx_magic.events import AuditReport, Compacted, event_from_json
from ctx_magic.messages import user_text

COMPLETE = """The user asked: "Load data/sales.csv and plot the price per region. Never use seaborn."
Then: "The column is called price, not prices."
Code defined df, total, count, clean and Model. notes/plan.md was missing ("notes/plan.md does not exist.").
Errors: KeyError: 'prices' (fixed by using price)."""


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


def test_a_long_message_whose_start_the_summary_quotes_gets_only_its_ref():
    # A fixed uuid: the line names the message's ref twice, and a random one moves the line's size
    # from run to run (75 to 89 tokens over 300 draws).
    message = dataclasses.replace(
        user_text("Here is the log:\n" + "\n".join(f"row {i}: {'x' * 40}" for i in range(200))),
        uuid="5d41402a-bc4b-4a76-b971-9d911017c592")
    summary = "The user's messages:\n" + message.text[:1_500] + "…"  # quoted, cut past its first lines
    audit = audit_summary([message], summary, transcript_path="/s/transcript.jsonl")
    assert audit.report.user_messages == audit.report.cut_messages == (message.uuid,)
    assert "row 1:" not in audit.text  # the head is not said twice
    assert f'ref="{message.uuid[:8]}" ({len(message.text):,} characters) is quoted above only in part' in audit.text
    assert f'{SEARCH_TOOL} with ref "{message.uuid[:8]}" reads it whole' in audit.text
    assert audit.report.tokens < 60 * DEFAULT_FAMILY.text_factor  # a line of about 60 o200k tokens


def test_user_messages_an_earlier_summary_answered_for_are_checked_again():
    earlier = user_text("summary text", kind="summary", user_messages=[["u-old", "Always plot in kelvin."]])
    audit = audit_summary([earlier, user_text("and now the mean")], "The user wants the mean.",
                          transcript_path="t")
    assert "Always plot in kelvin." in audit.text
    assert [m.uuid for m in audit.carried][0] == "u-old" and len(audit.carried) == 2


def test_compaction_appends_the_audit_after_the_summary_and_records_it_on_the_event():
    messages = span()
    job = Compaction(plan_split(messages), "manual", now=1.0, tokens_before=1_000, threshold=10_000,
                     transcript_path="/s/transcript.jsonl")
    result = rebuild(job, "The user wants a plot.")
    summary = next(m for m in result.messages if m.kind == "summary")
    assert summary.text.index("The user wants a plot.") < summary.text.index(messages[0].text)
    assert SEARCH_TOOL in summary.text  # the preamble names the recovery tool
    assert result.event.audit is not None and result.event.audit.text in summary.text
    assert summary.meta["user_messages"] == [[messages[0].uuid, messages[0].text],
                                             [messages[-1].uuid, messages[-1].text]]
    again = event_from_json(result.event.to_json())  # the transcript keeps the audit
    assert isinstance(again, Compacted) and again.audit == result.event.audit
    assert isinstance(again.audit, AuditReport)


def test_past_the_message_budget_the_oldest_messages_become_first_lines_then_a_count():
    messages = [user_text(f"Request {n}: keep detail {n}.\n" + "please keep this detail " * 30) for n in range(40)]
    audit = audit_summary(messages, "nothing", transcript_path="t", message_budget=800)
    assert count_text(audit.text) <= 800 + 60  # the heading and the other lists aside
    assert messages[-1].text in audit.text  # the newest whole
    assert messages[0].text not in audit.text
    assert f"- ref {messages[-2].uuid[:8]}: Request 38: keep detail 38." in audit.text
    assert "earlier messages are not shown here: search_transcript finds them" in audit.text
    assert set(audit.report.cut_messages) == {m.uuid for m in messages[:-1]}
    roomy = audit_summary(messages[:3], "nothing", transcript_path="t", message_budget=800)
    assert all(m.text in roomy.text for m in messages[:3]) and roomy.report.cut_messages == ()


def test_a_path_only_in_a_message_the_budget_cut_to_its_first_line_is_listed():
    # The user's messages past the budget show their first line: a file they name further down is
    # no longer in the context, so it is listed with the files the summary left out.
    saved = user_text("Let's take a peek at what was saved:\nprint(Path('out/report.json').read_text())")
    later = [user_text(f"Request {n}: keep detail {n}.\n" + "please keep this detail " * 30) for n in range(10)]
    audit = audit_summary([saved, *later], "nothing", transcript_path="t", message_budget=800)
    assert saved.uuid in audit.report.cut_messages
    assert "out/report.json" in audit.report.paths
    assert "- files: out/report.json" in audit.text
    whole = audit_summary([saved, *later], "nothing", transcript_path="t")  # no budget: the message says it
    assert saved.text in whole.text and whole.report.paths == ()
