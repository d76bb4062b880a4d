"""A session wired to the offline Messages-API server over real HTTP, for the loop's tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
from builders import ManualClock

from ctx_magic.agent.model import AnthropicModel
from ctx_magic.agent.session import Session, open_session
from ctx_magic.agent.tools import Executor, LocalExecutor
from ctx_magic.context.invariants import check_invariants
from ctx_magic.messages import Message
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.policy import Answer, Policy
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.settings import Settings


@dataclass
class Rig:
    api: OfflineAPI
    session: Session
    clock: ManualClock
    url: str


CLIENT_SUMMARY = "claude-sonnet-4-5"  # the API writes no summary on demand for it: ctx_magic writes its own


@contextlib.contextmanager
def rig(tmp_path: Path, *, window: int = 20_000, max_output: int = 4_096, max_retries: int = 0,
        config: Settings | None = None, executor: Executor | None = None,
        model: str = "claude-sonnet-5-5") -> Iterator[Rig]:
    """A session talking to a live offline server on 127.0.0.1 through the real SDK; the
    server's prompt cache runs on the session's clock, so an idle gap also expires it."""
    clock = ManualClock()
    api = OfflineAPI(OfflineConfig(window=window, max_output=max_output), clock=clock)
    with serve_in_thread(api) as (url, _stop):
        client = anthropic.Anthropic(api_key="test-key", base_url=url, max_retries=max_retries)
        session, _ = open_session(AnthropicModel(client, name=model), executor or LocalExecutor(),
                                  tmp_path / ".ctx_magic", config or Settings(model=model),
                                  root=tmp_path, clock=clock, sleep=clock.advance)
        yield Rig(api, session, clock, url)
        session.recorder.close()


def request_messages(record) -> list[Message]:  # type: ignore[no-untyped-def]
    """A recorded request's messages as ctx_magic messages (to check the API's rules on what was sent)."""
    out = []
    for n, message in enumerate(record.body.get("messages", [])):
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        out.append(Message.from_json({"uuid": str(n), "role": message["role"], "content": content}))
    return out


def assert_m5(record) -> None:  # type: ignore[no-untyped-def]
    check_invariants(request_messages(record))


def request_text(record) -> str:  # type: ignore[no-untyped-def]
    return json.dumps(record.body.get("messages", []), ensure_ascii=False)


class CompactionMisbehaves:
    """A policy whose compaction answers go wrong in a chosen way (the model misbehaving)."""

    def __init__(self, mode: str) -> None:
        self.base = Policy()
        self.mode = mode

    def kind(self, request):  # type: ignore[no-untyped-def]
        return self.base.kind(request)

    def answer(self, request):  # type: ignore[no-untyped-def]
        if self.base.kind(request) != "compaction":
            return self.base.answer(request)
        if self.mode == "tool_call":
            call = {"type": "tool_use", "name": "python", "input": {"code": "print('summarize?')"}}
            return Answer(({"type": "text", "text": "Let me look first."}, call), "tool_use")
        return Answer.text("Here is a summary, but I forgot the tags.")


def prompt(n: int) -> str:
    """A user turn asking for code whose output is a few thousand tokens."""
    return (
        f"Turn {n}: summarise batch {n} of the sensor data.\n"
        "```python\n"
        f"rows = [f'sensor-{n}-{{i}}: {{(i * 37 + {n}) % 1000 / 10:.1f}} C' for i in range(200)]\n"
        "print('\\n'.join(rows))\n"
        "```"
    )


THINKING_TYPES = ("thinking", "redacted_thinking")


def _plain(value):  # type: ignore[no-untyped-def]
    """A request part without its cache breakpoints (they move from call to call; the prefix is the content)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _prefix(body, turns: int | None = None):  # type: ignore[no-untyped-def]
    messages = body.get("messages", [])
    return _plain([body.get("system"), body.get("tools"), messages if turns is None else messages[:turns]])


def thinking_prefix_problems(requests) -> list[str]:  # type: ignore[no-untyped-def]
    """Every thinking block sent back whose prefix (system, tools and the messages before its turn)
    is not the whole request of the main call that wrote it: what a model with the prefix check
    refuses or drops. A block is known by its signature and the prefix it is sent after (the
    stand-in's thinking texts repeat); it was written by the last accepted main call before the
    first request that sends it back after that prefix, so a block sent after an edited prefix
    meets a writer whose request was another."""
    writer: dict[tuple[str, str], int] = {}
    problems: list[str] = []
    last_main: int | None = None
    for n, record in enumerate(requests):
        body = record.body if isinstance(record.body, dict) else {}
        for turn, message in enumerate(body.get("messages", [])):
            content = message.get("content")
            if message.get("role") != "assistant" or not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") not in THINKING_TYPES:
                    continue
                prefix = json.dumps(_prefix(body, turn), sort_keys=True)
                key = (str(block.get("signature") or block.get("data")), prefix)
                written_by = writer.setdefault(key, last_main) if last_main is not None else None
                if written_by is None or _prefix(requests[written_by].body) != _prefix(body, turn):
                    problems.append(f"request {n} ({record.kind}): the thinking of messages.{turn} was written "
                                    f"after another prefix (by request {written_by})")
        if record.kind == "normal" and record.status == 200:
            last_main = n
    return problems
