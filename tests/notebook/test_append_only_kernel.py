"""A real kernel on the default model (claude-sonnet-5-5, which checks the prefix of every thinking
block sent back) with default settings but a small window, against the stand-in on a new account
(a failed check is a 400): a persisted output, an idle break that clears old results and thinking,
`%memory add`, `%pin`, a snip, `%compact` and an automatic compaction, and every request is
accepted with every thinking block sent back after the prefix it was written after; the system
prompt and the tools change only where a summary starts a new prefix."""

from __future__ import annotations

import json
import re

import pytest
from agent_rig import THINKING_TYPES, thinking_prefix_problems
from builders import ManualClock
from kernel_rig import SETUP, kernel_env, start

from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.store.session import SessionDir

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

IDLE_SECONDS = 10 * 60  # past the 5-minute cache lifetime: the idle rules fire
MAX_TURNS_TO_AUTO = 20
KERNEL_CLOCK = """# ctx: skip
from ctx_magic.notebook.extension import controller_of
class Clock:
    now = 1_800_000_000.0
    def __call__(self):
        return self.now
    def advance(self, seconds):
        self.now += seconds
clock = Clock()
controller_of(get_ipython()).clock = clock"""


def part(n: int, rows: int = 300) -> str:
    return (f"%%agent\nPart {n}: list the rows.\n```python\n"
            f"print('\\n'.join(f'row {{i}}: {{i * {n}}}' for i in range({rows})))\n```")


def main_requests(api: OfflineAPI) -> list:
    return [q for q in api.requests if q.path == "/v1/messages"]


def test_a_session_on_a_model_with_the_prefix_check_is_never_refused(kernels, tmp_path):
    clock = ManualClock(1_800_000_000.0)
    api = OfflineAPI(OfflineConfig(window=200_000, account="new"), clock=clock)
    with serve_in_thread(api) as (url, _stop):
        env = kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)
        kernel = start(kernels, tmp_path, env, SETUP + "\n%config CtxMagic.context_window = 20000"
                       f"\n%config CtxMagic.user_memory_dir = {str(tmp_path / 'memories')!r}")
        kernel.execute(KERNEL_CLOCK)
        shown = [kernel.execute("data = list(range(5000))\nprint(sum(data))")]
        shown.append(kernel.execute("%%agent\nDump the raw log.\n```python\nprint('log line ' * 2_000)\n```"))
        shown.append(kernel.execute("%memory add The sensor ids start at 100."))
        shown.append(kernel.execute("%pin Always give temperatures in kelvin."))
        shown += [kernel.execute(part(n, rows=100)) for n in range(6)]
        kernel.execute(f"# ctx: skip\nclock.advance({IDLE_SECONDS})")
        clock.advance(IDLE_SECONDS)
        shown += [kernel.execute(part(n)) for n in range(6, 8)]
        shown.append(kernel.execute("%compact --snip 4"))
        shown += [kernel.execute(part(n)) for n in range(8, 10)]
        shown.append(kernel.execute("%compact"))
        shown += [kernel.execute(part(n)) for n in range(10, 20)]
        text = kernel.execute("%ctx status --json")
        sid = json.loads(text[text.index("{"):])["session_id"]
    records = SessionDir(tmp_path / ".ctx_magic", sid).load_transcript().records
    events = [r.get("event") for r in records]
    # A compaction from the session notes records the trigger "session-memory" whether the user asked for it
    # or it was automatic (as on main): who asked is in its reason.
    compactions = ["manual" if r.get("reason", "").startswith("the user asked for it")
                   else "auto" if r.get("trigger") in ("auto", "session-memory") else r.get("trigger")
                   for r in records if r.get("event") == "compacted"]
    calls = main_requests(api)
    assert all("Traceback" not in s and "refused" not in s for s in shown)
    said = "\n".join(shown)
    for why in ("after an idle gap", "that followed an edit of the conversation",  # each drop said in one line
                "that the compaction left without what came before them"):
        assert re.search(rf"Cleared \d+ thinking blocks? {why}", said), why
    assert {"persisted", "cleared", "snipped", "thinking_cleared"} <= set(events)
    assert "manual" in compactions and "auto" in compactions[compactions.index("manual"):]
    assert [(q.status, q.thinking_mismatches) for q in calls if q.status != 200 or q.thinking_mismatches] == []
    assert thinking_prefix_problems(api.requests) == []
    assert sum(1 for q in calls[-3:] for m in q.body["messages"] if m["role"] == "assistant"
               for b in m["content"] if b.get("type") in THINKING_TYPES) > 0  # thinking is sent back to the end
    normal = [q for q in calls if q.kind == "normal"]
    frames = [json.dumps([q.body["system"][0]["text"], q.body["tools"]]) for q in normal]
    for before, after, frame, next_frame in zip(normal, normal[1:], frames, frames[1:]):  # only a summary starts anew
        assert frame == next_frame or len(after.body["messages"]) < len(before.body["messages"])
    offered = [{t["name"] for t in q.body["tools"]} >= {"compact", "snip", "search_transcript"} for q in normal]
    assert not offered[0] and offered[-1]  # the context tools joined at a compaction, not before


def test_thinking_off_on_the_default_model_sends_its_least_thinking_and_is_never_refused(kernels, tmp_path):
    """`thinking = 'off'` on Sonnet 5.5: every request sends `between_tools`, the answers think only
    between tool calls, and through an idle break, `%compact` and an automatic compaction every
    request is accepted with its thinking sent back after the prefix it was written after."""
    clock = ManualClock(1_800_000_000.0)
    api = OfflineAPI(OfflineConfig(window=200_000, account="new"), clock=clock)
    with serve_in_thread(api) as (url, _stop):
        env = kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)
        kernel = start(kernels, tmp_path, env, SETUP + "\n%config CtxMagic.context_window = 20000"
                       f"\n%config CtxMagic.user_memory_dir = {str(tmp_path / 'memories')!r}"
                       "\n%config CtxMagic.thinking = 'off'")
        kernel.execute(KERNEL_CLOCK)
        shown = [kernel.execute(part(n, rows=100)) for n in range(4)]
        kernel.execute(f"# ctx: skip\nclock.advance({IDLE_SECONDS})")
        clock.advance(IDLE_SECONDS)
        shown += [kernel.execute(part(n)) for n in range(4, 6)]
        shown.append(kernel.execute("%compact"))
        for n in range(6, 6 + MAX_TURNS_TO_AUTO):  # a bound, not a wait: until an automatic compaction
            shown.append(kernel.execute(f"%%agent\nPart {n}: " + f"reading {n} at the north valve. " * 120
                                        + f"\n```python\nprint({n} * 7)\n```"))  # words nothing can clear
            if "Compacted" in shown[-1]:
                break
        shown.append(kernel.execute(part(99)))
        status = kernel.execute("%ctx status")
    calls = main_requests(api)
    assert all("Traceback" not in s and "refused" not in s for s in shown)
    assert "thinking off (notes between tool calls only: the least this model takes)" in status
    assert [(q.status, q.thinking_mismatches) for q in calls if q.status != 200 or q.thinking_mismatches] == []
    assert thinking_prefix_problems(api.requests) == []
    normal = [q for q in calls if q.kind == "normal"]
    assert normal and all(q.body.get("thinking") == {"type": "between_tools"} for q in normal)
    assert sum(1 for q in normal for m in q.body["messages"] if m["role"] == "assistant"
               for b in m["content"] if b.get("type") in THINKING_TYPES) > 0  # the notes go back
    said = "\n".join(shown)
    assert re.search(r"Compacted \d+ messages: .* \((auto|session-memory)\)", said[said.index("(manual)"):])
    for why in ("after an idle gap", "that the compaction left without what came before them"):
        assert re.search(rf"Cleared \d+ thinking blocks? {why}", said), why  # the notes between tool calls
