"""The engine's passes in an append-only conversation (context/engine.py): every edit of what was
sent drops the thinking after its first change and nothing before it; idle thinking clearing keeps
none (the last turn's would follow the first block cleared)."""

from __future__ import annotations

import dataclasses

from builders import assistant, call, results, text

from ctx_magic.context.engine import ContextSettings, clear_now, prepare, snip_now
from ctx_magic.context.index import sync_index
from ctx_magic.context.state import ContextState
from ctx_magic.context.thinking import has_thinking, is_thinking, thinking_turns
from ctx_magic.events import Cleared, Snipped, ThinkingCleared
from ctx_magic.images import limit_images
from ctx_magic.messages import Message, tool_use_block, user_text

APPEND_ONLY = ContextSettings(append_only=True)
NOW = 10_000.0


def thought(n: int) -> dict:
    return {"type": "thinking", "thinking": f"reasoning {n} " * 40, "signature": f"sig{n}"}


def turns(count: int, t: float = 0.0) -> list[Message]:
    """`count` user turns, each an answer opening with thinking and a python call, its result, a reply."""
    out: list[Message] = []
    for n in range(count):
        use = call(tool_use_id=f"t{n}")
        out += [user_text(f"prompt {n}", timestamp=t), assistant(thought(n), use, t=t),
                results((use["id"], f"output {n} " * 300), t=t), assistant(text(f"done {n}"), t=t)]
    return out


def test_idle_thinking_clearing_keeps_no_thinking_when_append_only():
    messages = turns(3)
    prepared = prepare(messages, ContextState(), now=NOW, settings=APPEND_ONLY)
    cleared = [e for e in prepared.events if isinstance(e, ThinkingCleared)]
    assert [e.trigger for e in cleared] == ["idle"] and cleared[0].blocks == 3
    assert thinking_turns(prepared.messages) == []
    editing = prepare(messages, ContextState(), now=NOW, settings=ContextSettings())
    assert len(thinking_turns(editing.messages)) == 1  # a model without the check keeps the last turn


def test_clearing_a_result_drops_the_thinking_after_it_only_when_append_only():
    messages = turns(3)
    _, state, _ = sync_index(messages, ContextState())
    msgs, _, events, _ = clear_now(messages, state, ["t1"], "model", append_only=True)
    assert [type(e) for e in events] == [Cleared, ThinkingCleared]
    assert events[1].trigger == "edit" and events[1].blocks == 1  # turn 2's; turns 0 and 1 wrote theirs before it
    assert [has_thinking(m) for m in msgs if m.role == "assistant"] == [True, False, True, False, False, False]
    msgs, _, events, _ = clear_now(messages, state, ["t1"], "model")
    assert [type(e) for e in events] == [Cleared]
    assert len(thinking_turns(msgs)) == 3


def test_a_snip_drops_the_thinking_it_kept_after_the_marker():
    messages = turns(8)
    settings = dataclasses.replace(APPEND_ONLY, clear_idle_thinking=False)
    msgs, _, events = snip_now(messages, ContextState(), NOW, settings, keep_last=4)
    snipped = [e for e in events if isinstance(e, Snipped)]
    dropped = [e for e in events if isinstance(e, ThinkingCleared)]
    assert snipped and dropped and dropped[0].trigger == "edit"
    marker = next(i for i, m in enumerate(msgs) if m.uuid == snipped[0].marker_uuid)
    assert not any(has_thinking(m) for m in msgs[marker:])
    assert msgs[:marker] == messages[:marker] and any(has_thinking(m) for m in msgs[:marker])  # the head keeps its own
    kept, _, plain = snip_now(messages, ContextState(), NOW, dataclasses.replace(settings, append_only=False), 4)
    assert not any(isinstance(e, ThinkingCleared) for e in plain)
    assert any(has_thinking(m) for m in kept[-4:])


def test_images_left_out_past_the_limit_drop_the_thinking_after_them_once():
    """Past the API's 100 images a request leaves the oldest out (20 at a time): what came before the
    thinking after them changed, so that thinking leaves the live context, said in one event, and
    the thinking before them stays. The thinking written afterwards was written after the request
    as sent: while the same images are left out it stays, and nothing more is said."""
    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    settings = dataclasses.replace(APPEND_ONLY, idle_seconds=10**9)
    messages: list[Message] = [user_text("start"), assistant(thought(0), text("ok"))]
    for n in range(101):  # one image over the limit: the 20 oldest are left out
        use = tool_use_block(f"p{n}", "python", {"code": "plot()"})
        messages += [assistant(thought(n + 1), use), results((f"p{n}", [png]))]
    messages.append(user_text("and now?"))

    def thinking_sent(msgs: list[Message]) -> list[str]:  # in the messages a request is built from
        return [b["signature"] for m in limit_images(msgs)[0] if m.sent for b in m.content if is_thinking(b)]

    first = prepare(messages, ContextState(), NOW, settings)
    dropped = [e for e in first.events if isinstance(e, ThinkingCleared)]
    assert [(e.trigger, e.blocks) for e in dropped] == [("images", 100)]  # t2 .. t101: after the first image
    assert thinking_sent(first.messages) == ["sig0", "sig1"]  # the first image's result follows t1
    later = [*first.messages, assistant(thought(200), text("here")), user_text("more?")]
    second = prepare(later, first.state, NOW, settings)
    assert not [e for e in second.events if isinstance(e, ThinkingCleared)]
    assert thinking_sent(second.messages) == ["sig0", "sig1", "sig200"]
    resumed = ContextState.from_json(second.state.to_json())  # what state.json keeps across a restart
    assert len(resumed.left_out_images) == 20
    assert not [e for e in prepare(later, resumed, NOW, settings).events if isinstance(e, ThinkingCleared)]
    plain = prepare(messages, ContextState(), NOW, dataclasses.replace(settings, append_only=False))
    assert not [e for e in plain.events if isinstance(e, ThinkingCleared)]
    assert len(thinking_sent(plain.messages)) == 102  # a model without the check takes them all
