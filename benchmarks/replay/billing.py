"""Billing: every request a strategy sends goes to the offline stand-in, and its usage is priced.

The stand-in (`ctx_magic.offline.OfflineAPI`) decides what each request costs: its prompt-cache
simulation splits the input into plain, written (5-minute or 1-hour) and read tokens, and it
counts the output. Nothing here re-implements those rules, so when the stand-in's cache follows
the real API more closely, these bills follow with no change. Prices are in units of base input
tokens (Anthropic's prompt-caching price list): input 1, cache write 1.25 (5m) / 2.0 (1h), cache
read 0.1, output 5.

A `Meter` sits in front of the stand-in. Strategies of our own call it directly
(`Meter.messages`, plain JSON); ctx_magic's real loop reaches it through the anthropic SDK
(`offline_client(meter)`: it has the `handle` method the in-process transport calls). Either way
each /v1/messages request leaves one `Call` in the ledger and moves the shared clock on by the
time the reply takes.

The stand-in's policy for a replay (`ScriptedPolicy`) answers main calls with the recorded
actions, side calls with the stand-in's own replies padded to a model's length (side_output.py),
and reads each main request for the identifiers its action uses (identifiers.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.clock import ManualClock
from benchmarks.replay.corpus import CLOSING_TEXT, Action, Replay
from benchmarks.replay.identifiers import Sightings, uses_by_action
from benchmarks.replay.side_output import STAND_IN, ReplySizes, sized_block, sized_reply
from ctx_magic.agent.catalog import table_limits
from ctx_magic.agent.request_body import thinking_param
from ctx_magic.errors import is_prompt_too_long as ptl_status
from ctx_magic.offline import Answer, HttpReply, OfflineAPI, OfflineConfig, Policy
from ctx_magic.offline.counting import has_images, output_tokens
from ctx_magic.settings import Settings

MODEL = "claude-sonnet-5-5"  # the project's default model: a replay runs on it unless asked for another
API_HEADERS = {"x-api-key": "offline", "content-type": "application/json", "anthropic-version": "2023-06-01"}
MESSAGES = "/v1/messages"
THINKING_BLOCKS = ("thinking", "redacted_thinking")
COUNT_TOKENS = "/v1/messages/count_tokens"

PRICE_INPUT = 1.0
PRICE_WRITE_5M = 1.25
PRICE_WRITE_1H = 2.0
PRICE_READ = 0.1
PRICE_OUTPUT = 5.0

REPLY_SECONDS = 2.0  # time to first token of any reply
OUTPUT_TOKENS_PER_SECOND = 50.0  # then the reply streams at this pace
REFUSED_SECONDS = 0.5  # a request the API refuses comes back at once




@dataclass(frozen=True)
class Call:
    """One /v1/messages request as billed."""

    kind: str  # normal | compaction | memory | side (the stand-in's classification), or other
    status: int
    at: float
    input_tokens: int = 0
    write_5m: int = 0
    write_1h: int = 0
    read: int = 0
    output_tokens: int = 0
    rule: str = ""
    """Which of the stand-in's rules answered a side call (session-notes, memory-longterm, ...)."""
    extends: bool = False
    """A main call whose request starts with the whole previous main request (the same tools,
    system and messages, cache markers aside): the cache should hold all of it while warm."""
    images: bool = False
    """The request holds an image: a change of this from one call to the next invalidates every
    cached message block on the real API (and in the stand-in)."""
    refused_thinking: bool = False
    """The prefix check refused the request: a thinking block sent back was bound to another
    conversation (its system, tools or earlier messages changed since it was written)."""
    thinking_dropped: tuple[tuple[str, int], ...] = ()
    """The thinking blocks the API dropped from the request (drop_block): (signature, tokens) each."""
    thinking_written: int = 0
    """Tokens of the thinking blocks a main call's reply opened with (counted as when sent back)."""

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.write_5m + self.write_1h + self.read

    @property
    def cost(self) -> float:
        return price(self.input_tokens, self.write_5m, self.write_1h, self.read, self.output_tokens)

    @property
    def side(self) -> bool:
        return self.kind != "normal"


def without_markers(value: Any) -> Any:
    """A request part with its cache_control markers removed (they move from call to call)."""
    if isinstance(value, dict):
        return {k: without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_markers(v) for v in value]
    return value


def extends(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> bool:
    """Whether `after` repeats all of `before` and only adds messages (markers aside)."""
    if before is None:
        return False
    old, new = before.get("messages", []), after.get("messages", [])
    same = all(without_markers(before.get(k)) == without_markers(after.get(k)) for k in ("tools", "system"))
    return same and len(new) > len(old) and without_markers(new[:len(old)]) == without_markers(old)


def price(input_tokens: int, write_5m: int, write_1h: int, read: int, output_tokens: int) -> float:
    """Cost in base-input-token units."""
    return (input_tokens * PRICE_INPUT + write_5m * PRICE_WRITE_5M + write_1h * PRICE_WRITE_1H + read * PRICE_READ
            + output_tokens * PRICE_OUTPUT)


def usage_call(kind: str, status: int, at: float, usage: Mapping[str, Any], rule: str = "") -> Call:
    """A Call from the API's usage object (cache writes split by TTL when the usage says so)."""
    created = int(usage.get("cache_creation_input_tokens") or 0)
    split = usage.get("cache_creation") or {}
    write_1h = int(split.get("ephemeral_1h_input_tokens") or 0)
    return Call(kind, status, at, int(usage.get("input_tokens") or 0), created - write_1h, write_1h,
                int(usage.get("cache_read_input_tokens") or 0), int(usage.get("output_tokens") or 0), rule)


def reply_thinking(chunks: Sequence[bytes], stream: bool) -> list[dict[str, Any]]:
    """The thinking and redacted_thinking blocks of a reply, plain or streamed."""
    if not stream:
        return [b for b in json.loads(b"".join(chunks)).get("content", []) if b.get("type") in THINKING_BLOCKS]
    blocks: dict[int, dict[str, Any]] = {}
    for line in b"".join(chunks).decode("utf-8").splitlines():
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        if event.get("type") == "content_block_start" and event["content_block"].get("type") in THINKING_BLOCKS:
            blocks[event["index"]] = dict(event["content_block"])
        elif event.get("type") == "content_block_delta" and event["delta"].get("type") == "thinking_delta":
            blocks[event["index"]]["thinking"] += event["delta"]["thinking"]
    return list(blocks.values())


def stream_usage(chunks: Sequence[bytes]) -> dict[str, Any]:
    """The usage of a streamed reply: message_start's, updated by message_delta's."""
    usage: dict[str, Any] = {}
    for line in b"".join(chunks).decode("utf-8").splitlines():
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        if event.get("type") == "message_start":
            usage.update(event["message"].get("usage") or {})
        elif event.get("type") == "message_delta":
            usage.update(event.get("usage") or {})
    return usage


PRECISE_RULES = frozenset({"compaction", "session-notes", "memory-longterm", "memory-dream-gather",
                           "memory-dream-consolidate"})


def thinking_failures(request: Mapping[str, Any], mismatches: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """What the prefix check did to a request's thinking: refused it, or dropped these blocks
    (each named by its signature, so a block dropped from every later request counts once)."""
    dropped = []
    for mismatch in mismatches:
        if mismatch.get("type") != "thinking_dropped":
            continue
        _, i, _, j = mismatch["path"].split(".")
        block = request["messages"][int(i)]["content"][int(j)]
        dropped.append((str(block.get("signature") or block.get("data")), output_tokens([block], request["model"])))
    return {"refused_thinking": any(m.get("type") == "thinking_refused" for m in mismatches),
            "thinking_dropped": tuple(dropped)}


class ScriptedPolicy:
    """The stand-in's policy for a replay: main calls get the session's next recorded action,
    whatever the request holds; compaction, notes and memory requests get the default policy's
    answers (its extractive summaries and notes), padded to `sizes` (side_output.py).

    It also reads each main request for the identifiers its action uses (identifiers.py):
    `identifiers` holds (kept, used) for every action served, `sightings` where those not kept went."""

    def __init__(self, actions: Sequence[Action], base: Policy | None = None, *, sizes: ReplySizes = STAND_IN,
                 uses: Sequence[Sequence[str]] = ()) -> None:
        self.actions = list(actions)
        self.served = 0
        self.base = base or Policy()
        self.sizes = sizes
        self.uses = list(uses)
        self.identifiers: list[tuple[int, int]] = []
        self.sightings = Sightings()

    def kind(self, request: Mapping[str, Any]) -> str:
        """compaction or memory when a precise rule knows the prompt (the summary prompt, the
        notes and memory prompts' own headings), side for any other text-only call (no tools, or
        tools forbidden), else normal. Side calls may carry the main call's tools (they share its
        cached prefix), so tools say nothing; the default rules' word-based memory detector is not
        trusted: it reads words like "save" and "session memory" in the last user message, which
        a recorded prompt next to ctx_magic's own notes pointer has."""
        if request.get("compaction") is not None:  # on demand: the API writes the summary
            return "compaction"
        rule = self.base.rule_for(request)
        if rule.name in PRECISE_RULES:
            return rule.kind
        if not request.get("tools") or (request.get("tool_choice") or {}).get("type") == "none":
            return "side" if rule.kind == "normal" else rule.kind
        return "normal"

    def rule(self, request: Mapping[str, Any]) -> str:
        """The default rule that answers a side call ("main" for a main call)."""
        kind = self.kind(request)
        if kind == "normal":
            return "main"
        if request.get("compaction") is not None:
            return "compaction"
        return kind if kind == "side" else self.base.rule_for(request).name

    def compaction_summary(self, request: Mapping[str, Any], text: str) -> str:
        """The stand-in's on-demand summary, padded as a model's summary reply (side_output.py)."""
        return sized_block(request, text, self.sizes)

    def compaction_thinking(self, request: Mapping[str, Any]) -> int:
        """The thinking before an on-demand summary whose instructions ask for no <analysis> (the model
        walks through the conversation in its thinking): billed as a real summary's analysis."""
        instructions = str((request.get("compaction") or {}).get("instructions") or "")
        return 0 if "<analysis>" in instructions else self.sizes.analysis

    def answer(self, request: Mapping[str, Any]) -> Answer:
        if self.kind(request) != "normal":
            answer = self.base.answer(request)
            rule = self.rule(request)
            content = tuple({**b, "text": sized_reply(rule, request, b["text"], self.sizes)} if b.get("type") == "text"
                            else b for b in answer.content)
            return dataclasses.replace(answer, content=content)
        action = self.actions[self.served] if self.served < len(self.actions) else Action(CLOSING_TEXT)
        uses = self.uses[self.served] if self.served < len(self.uses) else ()
        self.identifiers.append((self.sightings.kept(uses, request), len(uses)))
        self.served += 1
        content = tuple(action.content())
        return Answer(content, "tool_use" if action.calls else "end_turn")


@dataclass
class Meter:
    """Stands in front of an OfflineAPI: records and prices every model call, moves the clock."""

    api: OfflineAPI
    clock: ManualClock
    calls: list[Call] = field(default_factory=list)
    final_request: Mapping[str, Any] | None = None
    """The last main-loop request the API answered (what the fidelity figures read)."""
    counted: int = 0
    """count_tokens requests (free on the real API; not billed)."""
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> HttpReply:
        """The OfflineAPI interface the SDK's in-process transport calls."""
        with self._lock:
            reply = self.api.handle(method, path, headers, body)
            record = self.api.requests[-1] if self.api.requests else None
            self.api.reset()  # the stand-in keeps every request body otherwise
            if record is None or record.path != MESSAGES or method.upper() != "POST":
                self.counted += record is not None and record.path.endswith("count_tokens")
                return reply
            chunks = list(reply.body)
            usage: Mapping[str, Any] = {}
            stream = any(k.lower() == "content-type" and "event-stream" in v for k, v in reply.headers)
            if reply.status == 200:
                usage = stream_usage(chunks) if stream else json.loads(b"".join(chunks)).get("usage", {})
            rule = self.api.policy.rule(record.body) if hasattr(self.api.policy, "rule") and record.body else ""
            call = usage_call(record.kind, reply.status, self.clock(), usage, rule)
            if record.thinking_mismatches:
                call = dataclasses.replace(call, **thinking_failures(record.body, record.thinking_mismatches))
            if reply.status == 200 and record.kind == "normal":
                call = dataclasses.replace(call, extends=extends(self.final_request, record.body),
                                           images=has_images(record.body),
                                           thinking_written=output_tokens(reply_thinking(chunks, stream),
                                                                          record.body.get("model")))
                self.final_request = record.body
            self.calls.append(call)
            self.clock.advance(REPLY_SECONDS + call.output_tokens / OUTPUT_TOKENS_PER_SECOND
                               if reply.status == 200 else REFUSED_SECONDS)
            return HttpReply(reply.status, reply.headers, chunks, reply.dropped)

    def count_tokens(self, request: Mapping[str, Any]) -> int:
        """POST /v1/messages/count_tokens (free on the real API, not billed): the prompt's size."""
        body = {k: v for k, v in request.items() if k not in ("max_tokens", "stream")}
        reply = self.handle("POST", COUNT_TOKENS, API_HEADERS, json.dumps(body, ensure_ascii=False).encode())
        return int(json.loads(b"".join(reply.body))["input_tokens"])

    def messages(self, request: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST /v1/messages with a plain JSON body: (status, parsed reply or error body)."""
        body = json.dumps(request, ensure_ascii=False).encode()
        reply = self.handle("POST", MESSAGES, API_HEADERS, body)
        return reply.status, json.loads(b"".join(reply.body))

    @property
    def cost(self) -> float:
        return sum(c.cost for c in self.calls)


@dataclass
class Bench:
    """One run's world: the stand-in with the replay's script, its meter, the shared clock."""

    replay: Replay
    window: int
    model: str
    """The model every request of the run names (its tokenizer, thinking and limits follow)."""
    clock: ManualClock
    api: OfflineAPI
    meter: Meter
    policy: ScriptedPolicy
    thinking_setting: str = "auto"
    """ctx_magic's `thinking` setting for the run; every strategy sends what it sends (`thinking`)."""

    @functools.cached_property
    def thinking(self) -> dict[str, Any] | None:
        """What every request of the run sends as `thinking` (worked out once: each request reads it)."""
        return thinking_sent(self.model, self.thinking_setting)


def thinking_sent(model: str, setting: str) -> dict[str, Any] | None:
    """The `thinking` parameter ctx_magic sends on `model` with its `thinking` setting: every
    strategy of a run sends the same, so the thinking the model writes costs them alike."""
    return thinking_param(Settings(model=model, thinking=setting).resolve(table_limits(model)))


_USES: dict[tuple[str, str, int, int], list[tuple[str, ...]]] = {}


def action_uses(replay: Replay) -> list[tuple[str, ...]]:
    """uses_by_action, worked out once per session (every strategy and window replays it)."""
    key = (replay.name, replay.source, len(replay.turns), replay.steps)
    if key not in _USES:
        _USES[key] = uses_by_action(replay)
    return _USES[key]


def new_bench(replay: Replay, window: int, sizes: ReplySizes = STAND_IN, *, model: str = MODEL,
              thinking: str = "auto") -> Bench:
    clock = ManualClock()
    policy = ScriptedPolicy(replay.actions(), sizes=sizes, uses=action_uses(replay))
    api = OfflineAPI(OfflineConfig(window=window), clock=clock, policy=policy)  # type: ignore[arg-type]
    return Bench(replay, window, model, clock, api, Meter(api, clock), policy, thinking)


def is_prompt_too_long(status: int, body: Mapping[str, Any]) -> bool:
    """A prompt over the window, or one that leaves less than max_tokens for the reply (the API
    refuses both; a strategy makes room the same way)."""
    message = str((body.get("error") or {}).get("message", ""))
    return ptl_status(status, message)
