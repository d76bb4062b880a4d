"""Snip keeps the head and the tail, pairs intact, one marker naming the transcript."""

from __future__ import annotations

import dataclasses
import math

from builders import assistant, call, exchange, results, text

from ctx_magic.context.engine import ContextSettings, prepare, snip_now
from ctx_magic.context.index import measure
from ctx_magic.context.invariants import check_invariants
from ctx_magic.context.resume import fold_transcript
from ctx_magic.context.snip import KEEP_HEAD, folded_line, safe_cuts, snip_middle
from ctx_magic.context.state import ContextState
from ctx_magic.context.thresholds import compute_thresholds
from ctx_magic.context.tokens import estimate_messages
from ctx_magic.events import FOLD_TRIGGER, Snipped
from ctx_magic.messages import Message, Usage, user_text


def long_conversation(exchanges: int):
    msgs = [user_text("the task")]
    for n in range(exchanges):
        msgs += exchange("python", f"out {n}", t=n)
    return msgs


def test_no_snip_at_or_below_the_limit():
    msgs = long_conversation(20)[:40]
    out, events = snip_middle(msgs, 40, transcript_path="t.jsonl", now=0)
    assert out == msgs and events == []


def test_keeps_first_three_and_most_recent_with_one_marker():
    msgs = long_conversation(100)  # 201 messages
    out, events = snip_middle(msgs, 50, transcript_path="/s/transcript.jsonl", now=5.0)
    assert len(out) <= 50
    assert out[:KEEP_HEAD] == msgs[:KEEP_HEAD]
    assert out[-1] == msgs[-1]
    marker = out[KEEP_HEAD]
    assert marker.uuid == events[0].marker_uuid
    assert f"{events[0].count:,} earlier messages were snipped" in marker.text
    assert "/s/transcript.jsonl" in marker.text
    assert events[0].count == len(msgs) - len(out) + 1
    check_invariants(out)


def test_never_splits_a_tool_use_from_its_result():
    """Parallel calls answered by one message: the cut moves to a safe place."""
    msgs = [user_text("task")]
    for n in range(60):
        a, b = call(), call()
        msgs += [assistant(text(f"step {n}"), a, b), results((a["id"], "x"), (b["id"], "y"))]
    for limit in range(10, 60):
        out, _ = snip_middle(msgs, limit, transcript_path="t", now=0)
        check_invariants(out)


def test_head_extends_past_a_pending_tool_use():
    use = call()
    msgs = [user_text("task"), assistant(text("a")), assistant(use), results((use["id"], "r"))]
    msgs += long_conversation(30)[1:]
    out, _ = snip_middle(msgs, 20, transcript_path="t", now=0)
    assert out[:4] == msgs[:4]  # the third message's tool_use pulls its result into the head
    check_invariants(out)


def test_snip_safe_cuts_marks_pairs():
    use = call()
    msgs = [user_text("task"), assistant(use), results((use["id"], "r"))]
    assert safe_cuts(msgs) == [True, True, False, True]


def test_repeated_snips_accumulate_the_count():
    msgs = long_conversation(100)
    out, first = snip_middle(msgs, 50, transcript_path="t", now=0)
    out += long_conversation(40)[1:]
    out2, second = snip_middle(out, 50, transcript_path="t", now=0)
    kept_originals = sum(1 for m in out2 if m.uuid != second[0].marker_uuid)
    total = len(msgs) + 80
    assert second[0].count == total - kept_originals
    assert first[0].marker_uuid in second[0].removed_uuids


def test_event_lists_removed_messages_and_tokens_freed():
    msgs = long_conversation(50)
    out, events = snip_middle(msgs, 30, transcript_path="t", now=0)
    removed = set(events[0].removed_uuids)
    assert removed == {m.uuid for m in msgs} - {m.uuid for m in out}
    assert events[0].tokens_freed > 0


def test_cuts_to_half_the_limit_so_the_next_turn_does_not_snip_again():
    """Beyond Claude Code: re-snipping at every message would rewrite the cached prefix each turn."""
    msgs = long_conversation(30)  # 61 messages
    out, events = snip_middle(msgs, 40, transcript_path="t", now=0)
    assert events and len(out) <= 20 + 1
    grown = out + long_conversation(5)[1:]
    again, more = snip_middle(grown, 40, transcript_path="t", now=0)
    assert more == [] and again == grown


# -- folding old notebook cells after an idle gap ------------------------------------------------------

def cell_pair(count: int, source: str, output: str, t: float):
    """A notebook cell as it enters the context: a notebook_cell call and its result."""
    use = call("notebook_cell", {"execution_count": count, "source": source}, tool_use_id=f"cell_{count}_ab{count}")
    return [Message("assistant", (use,), timestamp=t, meta={"cell": count}), results((use["id"], output), t=t)]


def notebook_session(sources, output=lambda n: f"table {n}: " + "values " * 40):
    """A task, the user's cells, then an answer from the model (so it has seen every cell)."""
    msgs = [user_text("look at the data", timestamp=0.0), assistant(text("Sure."), t=1.0)]
    for n, source in enumerate(sources, 1):
        msgs += cell_pair(n, source, output(n), t=10.0 + n)
    msgs += [user_text("what do the cells show?", timestamp=60.0), assistant(text("They load a table."), t=61.0)]
    return msgs


SOURCES = ["import pandas as pd\ndf = pd.read_csv('housing.csv')", "df.head()", "x_train, y_train = split(df)",
           "def score(model):\n    return model.fit(x_train, y_train)", "%timeit score(m)", "df.describe()",
           "m = Model()", "score(m)"]


def prepared_after(msgs, minutes: float):
    settings = ContextSettings(thresholds=compute_thresholds(200_000, 32_000, env={}), transcript_path="t.jsonl")
    return prepare(msgs, ContextState(), msgs[-1].timestamp + minutes * 60, settings)


def test_after_an_idle_gap_old_cells_fold_into_one_marker_with_a_line_each():
    msgs = notebook_session(SOURCES)
    out = prepared_after(msgs, 6)
    (event,) = [e for e in out.events if isinstance(e, Snipped)]
    assert (event.trigger, event.count) == (FOLD_TRIGGER, 6)  # the three oldest cells; five results stay whole
    marker = next(m for m in out.messages if m.uuid == event.marker_uuid)
    assert marker.text.splitlines()[1:] == [
        "In[1]: import pandas as pd  (defines df)",
        "In[2]: df.head()",
        "In[3]: x_train, y_train = split(df)  (defines x_train, y_train)]",
    ]
    kept = [b["input"]["source"] for m in out.messages for b in m.blocks("tool_use")]
    assert kept == SOURCES[3:]
    check_invariants(out.messages)


def test_short_outputs_stay_on_their_cells_line():
    """An output too short to clear folds with its cell rather than keeping the cell's pair."""
    msgs = notebook_session(SOURCES, output=lambda n: f"{n * 7}")
    out = prepared_after(msgs, 6)
    (event,) = [e for e in out.events if isinstance(e, Snipped)]
    marker = next(m for m in out.messages if m.uuid == event.marker_uuid)
    assert "In[2]: df.head()  → 14" in marker.text.splitlines()


def test_a_cell_that_is_not_python_folds_without_names():
    assert folded_line(5, "%timeit score(m)\nprint(1)", None) == "In[5]: %timeit score(m)"


def test_no_folding_while_the_cache_is_warm():
    out = prepared_after(notebook_session(SOURCES), 4)
    assert not [e for e in out.events if isinstance(e, Snipped)]


def test_cells_the_model_has_not_answered_after_stay_whole():
    msgs = notebook_session(SOURCES)[:-2]  # the cells ran after the model's last answer
    out = prepared_after([*msgs, user_text("and now?", timestamp=70.0)], 6)
    assert not [e for e in out.events if isinstance(e, Snipped)]


def test_a_resume_rebuilds_the_folded_context():
    msgs = notebook_session(SOURCES)
    out = prepared_after(msgs, 6)
    records = [{"type": "message", **m.to_json()} for m in msgs]
    markers = [m for m in out.messages if m.meta.get("snipped_count")]
    records += [{"type": "message", **m.to_json()} for m in markers]
    records += [{"type": "event", **e.to_json()} for e in out.events if e.durable]
    live, _, problems = fold_transcript(records)
    assert problems == []
    assert [m.uuid for m in live] == [m.uuid for m in out.messages]


def test_a_snip_that_takes_the_last_response_counts_from_the_response_left():
    """The last response is snipped away (the user ran many cells after it): the count is anchored
    on the head's response, and what the snip removed came after that response, so none of it may
    be taken off its figure again."""
    head = [user_text("the task"), assistant(text("on it"), usage=Usage(1_000, 20)), user_text("go on")]
    middle = []
    for n in range(6):
        middle += exchange("python", f"result {n} " + "x" * 2_000, t=n)
    last = assistant(text("done"), usage=Usage(9_000, 50))
    cells = []
    for n in range(6):
        cells += exchange("notebook_cell", f"cell {n}", t=100 + n)
        cells[-2] = dataclasses.replace(cells[-2], api_id=None, usage=None)  # the user's cells: no response
    msgs = [*head, *middle, last, *cells]
    settings = ContextSettings(thresholds=compute_thresholds(200_000, 16_384, env={}))
    out, state, events = snip_now(msgs, ContextState(), 200.0, settings, keep_last=4)
    assert last.uuid in events[0].removed_uuids  # the last response went with the middle
    count = measure(out, state)
    assert count.anchor_tokens == 1_020  # the head's answer anchors the count now
    assert count.freed_tokens == 0
    assert count.estimated_tokens == estimate_messages(out[2:])
    assert count.tokens == 1_020 + math.ceil(count.estimated_tokens * state.correction.ratio)


def test_a_result_a_snip_indexed_first_still_meets_the_tool_result_budget():
    """The user snips before the next call (after an interrupted turn left a long output): the
    result is still persisted, as every result is before it is sent."""
    settings = ContextSettings(thresholds=compute_thresholds(200_000, 16_384, env={}))
    first = prepare(long_conversation(30), ContextState(), 100.0, settings)
    use, result = exchange("python", "row\n" * 40_000, t=200)
    msgs, state, _ = snip_now([*first.messages, use, result], first.state, 300.0, settings, keep_last=6)
    out = prepare(msgs, state, 300.0, settings)
    sent = next(b for m in out.messages for b in m.blocks("tool_result") if b["tool_use_id"] == use.tool_use_ids[0])
    assert "<persisted-output>" in sent["content"]
