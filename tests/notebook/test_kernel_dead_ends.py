"""No dead ends, in real kernels: every fault and every bad input of these classes
leaves a working session. Each test drives ipykernels through jupyter_client against the offline
server over HTTP (or the kernel's own stand-in), and reads what reached the API, the cell and the
disk: empty replies, a small window, tool ids across restarts, stream faults, bad settings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kernel_rig import SETUP, kernel_env, session_id, start

from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.store.session import SessionDir

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

SMALL_WINDOW = 12_000
DENSE_45K = "import json\nprint(json.dumps([[i, i * 7 % 1000] for i in range(4000)])[:45000])"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[OfflineAPI, dict[str, str]]]:
    offline = OfflineAPI(OfflineConfig())
    with serve_in_thread(offline) as (url, _stop):
        yield offline, kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)




def calls(api: OfflineAPI, since: int = 0) -> list[Any]:
    return [r for r in api.requests[since:] if r.path == "/v1/messages"]


def assert_no_traceback(shown: str) -> None:
    assert "Traceback" not in shown and "File \"" not in shown, shown


def shown_at_the_end(outputs: list[dict[str, Any]]) -> list[str]:
    """The text of every display as the cell finally shows it (updates applied in place)."""
    latest: dict[str, str] = {}
    order: list[str] = []
    for n, content in enumerate(outputs):
        key = (content.get("transient") or {}).get("display_id") or f"plain-{n}"
        data = content.get("data") or {}
        text = data.get("text/markdown", data.get("text/plain", content.get("text", "")))
        if key not in latest:
            order.append(key)
        latest[key] = str(text)
    return [latest[key] for key in order]


# -- 1. empty replies ------------------------------------------------------------------------------


def test_an_empty_or_whitespace_reply_is_never_stored_and_one_stored_before_is_repaired(tmp_path, server, kernels):
    offline, env = server
    kernel = start(kernels, tmp_path, env)
    assert "Done" in kernel.execute("%%agent\nhello")
    before = len(offline.requests)
    offline.inject("empty_reply", "whitespace_reply")  # empty, and asked again: whitespace
    shown = kernel.execute("%%agent\nsay something")
    assert "The model's reply was empty 2 times; nothing was stored." in shown
    offline.inject("whitespace_reply")  # asked again once: the answer comes
    assert "Done" in kernel.execute("%%agent\nrun\n```python\nprint(6 * 7)\n```")
    for command in ["%%agent\nwhat came back?", "%compact", "%compact --snip 2", "%%agent\nand now?"]:
        shown = kernel.execute(command)
        assert "breaks the API invariants" not in shown and "Stopped" not in shown, (command, shown)
        assert_no_traceback(shown)
    kernel.execute("%memory extract")  # a memory side call over the whole conversation
    sid = session_id(kernel)
    kernel.kill()
    store = SessionDir(tmp_path / ".ctx_magic", sid)
    stored = [json.loads(line) for line in store.transcript_path.open()]
    assert all(r["content"] and any(str(b.get("text", "x")).strip() for b in r["content"])
               for r in stored if r.get("type") == "message" and r["role"] == "assistant")
    with open(store.transcript_path, "a", encoding="utf-8") as transcript:  # what the loop used to store
        transcript.write(json.dumps({"type": "message", "uuid": "u-empty", "role": "assistant", "kind": "normal",
                                     "timestamp": 0.0, "content": []}) + "\n")
    again = start(kernels, tmp_path, env)
    resumed = again.execute(f"%agent --resume {sid}")
    assert "1 empty reply was left out of the live context" in resumed
    for command in ["%%agent\nafter the resume", "%compact", "%%agent\nonce more"]:
        shown = again.execute(command)
        assert "breaks the API invariants" not in shown and "Stopped" not in shown, (command, shown)
    refused = [r for r in calls(offline, before) if r.status == 400]
    assert refused == []  # no request, main or side, carried an empty message


# -- 2. a small window -----------------------------------------------------------------------------


def test_a_12000_token_window_with_a_45000_character_output_never_locks_up(tmp_path, kernels):
    offline = OfflineAPI(OfflineConfig(window=SMALL_WINDOW))
    with serve_in_thread(offline) as (url, _stop):
        env = kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)
        kernel = start(kernels, tmp_path, env, f"{SETUP}\n%config CtxMagic.context_window = {SMALL_WINDOW}")
        assert "Done" in kernel.execute("%%agent\nhello")
        kernel.execute(DENSE_45K)  # the user's own cell: 45,000 characters, about 20,000 tokens
        shown = [kernel.execute("%%agent\nwhat did my cell print?"),
                 kernel.execute(f"%%agent\nprint it again\n```python\n{DENSE_45K}\n```"),
                 kernel.execute("%compact"), kernel.execute("%compact --snip 2"),
                 kernel.execute("%%agent\nand now?")]
        sent = calls(offline)
    for text in shown:
        assert "The context is full" not in text and "too long to summarize" not in text and "Stopped" not in text
        assert_no_traceback(text)
    assert "Compacted" in shown[2]
    assert [r.status for r in sent] == [200] * len(sent)  # never too long, never over with its reply
    assert all(r.input_tokens + r.body["max_tokens"] <= SMALL_WINDOW for r in sent)
    assert {r.kind for r in sent} >= {"normal", "compaction"}


# -- 3. tool ids across restarts ---------------------------------------------------------------------


def test_tool_ids_stay_unique_across_kernel_restarts_and_resumes(tmp_path, kernels):
    env = kernel_env()  # the kernel's own stand-in: a new one, with new counters, in every kernel
    kernel = start(kernels, tmp_path, env)
    kernel.execute("x = 1")
    assert "Done" in kernel.execute("%%agent\nrun\n```python\nprint(x + 1)\n```")
    kernel.execute("%compact")
    kernel.execute("y = 2")  # pending when the kernel dies
    sid = session_id(kernel)
    for _ in range(2):  # the execution count starts again at 1 each time
        kernel.kill()
        kernel = start(kernels, tmp_path, env)
        assert f"Resumed session {sid}" in kernel.execute(f"%agent --resume {sid}")
        kernel.execute("%compact")  # the same live length each time: ids made of count and length would repeat
        kernel.execute("x = 1")
        shown = kernel.execute("%%agent\nrun\n```python\nprint(x + 1)\n```")
        assert "Done" in shown and "appears twice" not in shown, shown
    records = [json.loads(line) for line in SessionDir(tmp_path / ".ctx_magic", sid).transcript_path.open()]
    ids = [b["id"] for r in records if r.get("type") == "message" for b in r["content"] if b["type"] == "tool_use"]
    assert len(ids) == len(set(ids)), ids
    assert len(ids) == 7  # 4 cells (one pending at a kill), 3 runs of the agent
    assert sum(i.startswith("cell_4_") for i in ids) == 2  # the same execution count in two kernels, two ids


# -- 4. stream faults ----------------------------------------------------------------------------


def test_stream_faults_are_asked_again_withdrawn_or_said_in_one_line(tmp_path, server, kernels):
    offline, env = server
    kernel = start(kernels, tmp_path, env)
    offline.inject("overloaded_midstream")  # an `error` event after a few deltas: asked again, like a 529
    shown = kernel.execute("%%agent\nhello there")
    assert "mid-stream (overloaded_error" in shown and "asking again (attempt 2 of 3)" in shown and "Done" in shown
    offline.inject("early_close_tool")  # the stream ends cleanly just after a tool_use starts
    shown = kernel.execute("%%agent\nrun\n```python\nprint(6 * 7)\n```")
    assert "Done" in shown and "42" in shown and "ended before the reply was complete" in shown
    offline.inject("early_close", "drop", "early_close")  # three broken streams: the turn gives up
    outputs = kernel.outputs("%%agent\n" + "tell me more " * 50)
    finally_shown = shown_at_the_end(outputs)
    assert not any(text.startswith("Offline stand-in") for text in finally_shown)  # the partial reply withdrawn
    assert any(text.startswith("The reply stream ended before the reply was complete") for text in finally_shown)
    assert any(text.startswith("Stopped") for text in finally_shown)
    offline.inject("html_body", "html_body", "html_body")  # a proxy's error page with HTTP 200
    shown = kernel.execute("%%agent\nhello again")
    assert "The API answered with text/html instead of a reply stream (HTTP 200)" in shown
    assert "AssertionError" not in shown
    assert_no_traceback(shown)
    assert "Done" in kernel.execute("%%agent\nstill there?")
    offline.inject("reset")  # the connection reset mid-reply (a TCP RST): asked again, whatever the SDK calls it
    shown = kernel.execute("%%agent\n" + "and after a reset? " * 50)
    assert "reset by peer" in shown and "asking again (attempt 2 of 3)" in shown and "Done" in shown
    messages = [json.loads(line) for line in
                SessionDir(tmp_path / ".ctx_magic", session_id(kernel)).transcript_path.open()]
    uses = [b for r in messages if r.get("type") == "message" for b in r["content"] if b["type"] == "tool_use"]
    assert uses and all(b["input"].get("code") for b in uses)  # no tool ever ran with half its input


# -- 5. bad settings -----------------------------------------------------------------------------


def test_a_base_url_without_a_key_and_a_window_of_5_are_each_one_clear_line(tmp_path, kernels):
    kernel = start(kernels, tmp_path, kernel_env(ANTHROPIC_BASE_URL="http://127.0.0.1:9"), "%load_ext ctx_magic")
    shown = kernel.execute("%%agent\nhello")
    assert shown.strip() == ("ANTHROPIC_BASE_URL is set (http://127.0.0.1:9) but neither ANTHROPIC_API_KEY nor "
                             "ANTHROPIC_AUTH_TOKEN is: set the key (or a gateway's bearer token) to use that server, "
                             "or unset ANTHROPIC_BASE_URL to use the offline stand-in.")
    lines = kernel.execute("%config CtxMagic.context_window = 5").strip().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(  # after the logger's prefix (IPython's format)
        "The value of the 'context_window' trait of a CtxMagic instance should not be less than 4096, but a value "
        "of 5 was specified (or 0: ask the Models API)")
    assert kernel.execute("%config CtxMagic.context_window").strip() == "0"  # the bad value was not taken
