"""The picture at the top of the panel: the headline, the composition bar, the chart of model
calls with its lines and markers."""

from __future__ import annotations

import html
import re

from ctx_magic.ui.picture import chart_html, composition_html, headline_html, next_call_html, pct

CALLS = [{"prompt": 1_000, "read": 0, "write": 900, "output": 50},
         {"prompt": 1_600, "read": 900, "write": 600, "output": 40},
         {"prompt": 2_100, "read": 1_500, "write": 500, "output": 30}]
LINES = {"warning": 2_000, "threshold": 2_500, "blocking": 2_800}


def test_headline_reads_tokens_against_the_window_and_names_the_threshold():
    line = headline_html({"tokens": 5_749, "window": 30_000, "threshold": 13_700, "zone": "ok",
                          "percent_left": 58.0})
    text = html.unescape(re.sub(r"<[^>]+>", "", line))
    assert "5,749 tokens of a 30,000-token window (19%)" in text
    assert "compaction at 13,700" in text and "58% left" in text


def test_a_sliver_of_usage_is_never_shown_as_zero():
    assert pct(10, 200_000) == "<1%" and pct(0, 200_000) == "0%" and pct(50, 100) == "50%"


def test_composition_bar_draws_every_part_in_use_and_lists_all_parts_with_tokens_and_percent():
    parts = {"system": 120, "tools": 500, "memory": 0, "messages": 300, "tool_results": 80, "persisted": 0,
             "free": 17_000, "buffer": 2_000, "reserve": 10_000}
    bar = composition_html(parts, 1_000, 30_000)
    assert re.findall(r'class="ctx-magic-seg" data-part="(\w+)"', bar) == [
        "system", "tools", "messages", "tool_results", "free", "buffer", "reserve"]  # nothing for empty parts
    assert 'style="flex-grow:80"' in bar  # proportional; the stylesheet's min-width keeps it visible
    legend = html.unescape(re.sub(r"<[^>]+>", " ", bar))
    assert "Reply reserve" in legend and "10,000 · 33%" in legend and "80 · <1%" in legend
    assert "Memory & pins" in legend and "0 · 0%" in legend


def test_chart_has_a_bar_per_call_split_by_cache_use_and_a_marker_per_change():
    changes = [{"kind": "compaction", "key": "compaction-b1", "at": 2, "label": "auto compaction"},
               {"kind": "clearing", "key": "clearing-1", "at": 3, "label": "cleared 2 tool results"}]
    chart = chart_html(CALLS, changes, LINES)
    assert chart.count('class="ctx-magic-call"') == 3
    assert chart.count("ctx-magic-bar-read") == 2 and chart.count("ctx-magic-bar-write") == 3
    markers = re.findall(r'class="ctx-magic-marker" type="button" data-kind="(\w+)" data-ctx-card="([\w-]+)"',
                         chart)
    assert markers == [("compaction", "compaction-b1"), ("clearing", "clearing-1")]
    assert chart.count('class="ctx-magic-change-line"') == 2
    assert "3 model calls" in chart


def test_changes_at_one_call_stack_in_rows_instead_of_covering_each_other():
    changes = [{"kind": "clearing", "key": "clearing-1", "at": 2, "label": "cleared 3 tool results"},
               {"kind": "snip", "key": "snip-2", "at": 2, "label": "folded 2 old cells"},
               {"kind": "compaction", "key": "compaction-b1", "at": 3, "label": "auto compaction"}]
    chart = chart_html([*CALLS] * 10, changes, LINES)  # 30 calls: call 2 and call 3 are 3 % apart
    tops = re.findall(r'data-ctx-card="([\w-]+)" style="[^"]*top:(\d+)px"', chart)
    assert tops == [("clearing-1", "0"), ("snip-2", "20"), ("compaction-b1", "40")]
    assert 'class="ctx-magic-markers" style="height:60px"' in chart
    far = chart_html([*CALLS] * 10, [changes[0], {**changes[2], "at": 20}], LINES)
    assert re.findall(r'top:(\d+)px', far) == ["0", "0"]  # far apart: one row


def test_threshold_lines_near_the_data_are_drawn_and_far_ones_named_off_the_chart():
    near = chart_html(CALLS, [], LINES)
    assert re.findall(r'class="ctx-magic-line" data-line="(\w+)"', near) == ["warning", "threshold", "blocking"]
    far = chart_html(CALLS, [], {"warning": 150_616, "threshold": 170_616, "blocking": 180_616})
    assert 'class="ctx-magic-line"' not in far
    assert "Off the chart: warning at 150,616 · compaction at 170,616 · blocking at 180,616." in far


def test_an_empty_session_has_a_placeholder_not_an_empty_chart():
    assert "ctx-magic-empty" in chart_html([], [], LINES)


def test_chart_prices_each_call_on_hover_and_sums_them_under_the_chart():
    priced = [{**c, "usd": usd} for c, usd in zip(CALLS, (0.0031, 0.0012, 0.0009), strict=True)]
    chart = chart_html(priced, [], LINES)
    assert "30 generated, $0.0009</title>" in chart
    assert "3 model calls, $0.0052</span>" in chart
    assert "$" not in chart_html(CALLS, [], LINES)  # prices unknown: no dollar figure at all


def test_the_next_call_line_prices_a_cold_cache_and_names_a_compaction_ahead():
    cold = {"cache": {"state": "cold", "reason": "idle 6 min, past the cache's 5m lifetime", "write_tokens": 12_345,
                      "write_usd": 0.0309}, "ahead": {"tokens": 150_000, "cost_usd": 0.0412, "deferred": False}}
    text = html.unescape(re.sub(r"<[^>]+>", "\n", next_call_html(cold)))
    assert "Next call: the prompt cache is cold (idle 6 min, past the cache's 5m lifetime): it writes 12,345 " \
           "tokens, $0.0309" in text
    assert "The next turn compacts 150,000 tokens, about $0.0412" in text
    assert 'data-state="cold"' in next_call_html(cold)
    warm = next_call_html({"cache": {"state": "warm", "seconds_left": 90, "ttl": "5m"}, "ahead": None})
    assert "warm for 1.5 min more (5m lifetime)" in warm and 'data-state="warm"' in warm
    assert next_call_html({}) == ""


def test_a_long_session_draws_runs_of_calls_as_one_bar_each_priced_whole():
    calls = [{"prompt": 1_000 + i, "read": 900, "write": 50, "output": 10, "usd": 0.001} for i in range(1_000)]
    calls[700]["prompt"] = 30_000  # call 701: the largest of its bar
    changes = [{"kind": "compaction", "key": "compaction-b1", "at": 500, "label": "auto compaction"}]
    chart = chart_html(calls, changes, LINES)
    assert chart.count('class="ctx-magic-call"') == 200  # 1,000 calls, 5 a bar: at most 240 bars
    assert 'viewBox="0 0 200 100"' in chart
    assert "calls 701-705, the largest: 30,000 tokens sent" in chart
    assert "10 generated, the 5 calls cost $0.0050</title>" in chart
    assert 'x1="100.0"' in chart and "left:clamp(0.6em, 50.00%" in chart  # the marker where call 500 falls
    assert "1,000 model calls, $1.00</span>" in chart
