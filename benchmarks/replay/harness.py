"""The plain agent loop the baseline strategies share, over the billing API.

It plays a replay turn by turn: the cells the user ran enter as `notebook_cell` pairs, the
prompt as a user message, then one main call per recorded action; each reply (whatever the
stand-in answered) is appended, and the recorded outputs answer its tool calls. A strategy is a
`Context`: it may rewrite the conversation before a call, choose what is sent, replace a tool
result as it arrives, and recover from a prompt-too-long. Everything it sends is billed.

Every baseline carries the agent ctx_magic runs: the recorded session's tools and ctx_magic's
file tools (read_file, list_files, grep), which a notebook agent offers whether or not its
context is managed. What ctx_magic sends beyond them (its context tools, once it has cut the
context) is then billed as the context manager's own cost. Requests carry ctx_magic's cache
breakpoints (the system prompt, the last block, the block the previous main request ended with)
unless a strategy says otherwise (`Context.previous_breakpoint`, `Context.ttl`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.replay.billing import Bench, is_prompt_too_long
from benchmarks.replay.corpus import TOOL_SECONDS, Action, Block, Cell, Replay
from ctx_magic.agent.files import GREP_SPEC, LIST_FILES_SPEC, READ_FILE_SPEC
from ctx_magic.offline.counting import fit_output, output_tokens

MAX_OUTPUT = 16_384  # replies are capped like ctx_magic's (its default), and to a quarter of the window
IMAGE_TOKENS = 2_000  # the flat figure both the stand-in and ctx_magic's estimate use
CHARS_PER_TOKEN = 4
ESTIMATE_PADDING = 4 / 3  # the estimate: estimates of messages the API has not counted yet are padded
AGENT_TOOLS = (READ_FILE_SPEC, LIST_FILES_SPEC, GREP_SPEC)  # offered after the session's own, as ctx_magic does


class Overflow(Exception):
    """A request (or a summary) stayed over the window and the strategy could not recover."""


class Refused(Overflow):
    """The prefix check refused a request (thinking sent back after an edit of what came before
    it): a dead end for a baseline, which never handles it; the run ends there, counted."""


class ReplayDesync(Exception):
    """A reply is not the recorded action: the replay would no longer be the recorded session."""


def max_output(window: int) -> int:
    return max(256, min(MAX_OUTPUT, window // 4))


def longest_reply(replay: Replay, model: str) -> int:
    """Output tokens of the session's longest recorded reply, as the stand-in counts it for `model`."""
    return max((output_tokens(a.content(), model) for a in replay.actions()), default=0)


def replies_fit(replay: Replay, window: int, model: str) -> bool:
    """Whether every recorded reply fits the reply cap at `window` (a quarter of it, for every
    strategy) in `model`'s tokens: one that does not is cut at `max_tokens` by the stand-in, as by
    the API, and the replay would stop being the recorded session."""
    cap = max_output(window)
    return not any(fit_output(a.content(), cap, model)[1] for a in replay.actions())


@dataclass
class Msg:
    """One message of the live conversation: a role and its content blocks."""

    role: str
    content: list[Block]


def text_of(content: Any) -> str:
    """The text of a tool_result content (or any content): text blocks joined."""
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, Mapping) and b.get("type") == "text")


def images_in(content: Any) -> int:
    return 0 if isinstance(content, str) else sum(1 for b in content if b.get("type") in ("image", "document"))


def estimate_tokens(messages: Sequence[Msg]) -> int:
    """Characters / 4 (images 2,000): the rough size of messages the API has not counted yet."""
    chars = images = 0
    for message in messages:
        for block in message.content:
            kind = block.get("type")
            if kind == "text":
                chars += len(block["text"])
            elif kind == "tool_use":
                chars += len(block.get("name", "")) + len(str(block.get("input")))
            elif kind == "tool_result":
                chars += len(text_of(block.get("content", "")))
                images += images_in(block.get("content", ""))
            elif kind in ("image", "document"):
                images += 1
    return round(chars / CHARS_PER_TOKEN + images * IMAGE_TOKENS)


def cache_control(ttl: str) -> dict[str, str]:
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def merged_turns(messages: Sequence[Msg]) -> list[dict[str, Any]]:
    """The Messages-API list without breakpoints: same-role runs merged, tool results first in
    each user message."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if turns and turns[-1]["role"] == message.role:
            turns[-1]["content"].extend(message.content)
        else:
            turns.append({"role": message.role, "content": list(message.content)})
    for turn in turns:
        if turn["role"] == "user":
            turn["content"].sort(key=lambda b: b.get("type") != "tool_result")  # stable: order kept otherwise
    return turns


def api_messages(messages: Sequence[Msg], *, cached: bool, ttl: str = "5m",
                 previous: Block | None = None) -> list[dict[str, Any]]:
    """The Messages-API list (`merged_turns`) with, when `cached`, a cache breakpoint on the very
    last block and one on `previous` (the block the previous main request ended with) when it is
    still sent: that one finds the cached conversation however many blocks were added since (the
    API looks back only about 20 blocks from a breakpoint), as ctx_magic's requests do."""
    turns = merged_turns(messages)
    if not cached or not turns:
        return turns
    control = cache_control(ttl)
    targets = [turns[-1]["content"][-1]] + ([previous] if previous is not None else [])
    for target in targets:
        for turn in reversed(turns):
            hit = next((i for i, b in enumerate(turn["content"]) if b is target), None)
            if hit is not None:
                turn["content"][hit] = {**target, "cache_control": control}
                break
    return turns


def last_block(messages: Sequence[Msg]) -> Block | None:
    """The block a request of `messages` ends with (where its last breakpoint goes)."""
    turns = merged_turns(messages)
    return turns[-1]["content"][-1] if turns else None


def cell_messages(cell: Cell, serial: int) -> list[Msg]:
    """A cell the user ran, as ctx_magic records it: a notebook_cell tool_use and its result."""
    tool_id = f"cell_{cell.execution_count}_{serial}"
    use = {"type": "tool_use", "id": tool_id, "name": "notebook_cell",
           "input": {"execution_count": cell.execution_count, "source": cell.source}}
    result: Block = {"type": "tool_result", "tool_use_id": tool_id, "content": cell.content}
    if cell.failed:
        result["is_error"] = True
    return [Msg("assistant", [use]), Msg("user", [result])]


class Context:
    """A strategy's context management; this base sends everything, cached, and never recovers."""

    name = "raw"
    cached = True
    previous_breakpoint = True
    """A second message breakpoint where the previous main request ended (ctx_magic's layout);
    False: one on the last block only (Claude Code's layout, and the first raw baseline's)."""
    ttl = "5m"
    """The cache lifetime every breakpoint asks for (5m, or 1h at twice the base price to write)."""

    def before_call(self, run: Run) -> None:
        """Rewrite `run.history` before a main call (side calls go through `run.side_call`)."""

    def view(self, run: Run) -> list[Msg]:
        """What the main call sends (the history itself unless the strategy masks it)."""
        return run.history

    def on_result(self, run: Run, block: Block) -> Block:
        """A tool result as it enters the history."""
        return block

    def after_call(self, run: Run, reply: Mapping[str, Any]) -> None:
        """A main call succeeded."""

    def on_too_long(self, run: Run) -> bool:
        """The API said prompt-too-long: True when the history was shrunk and the call may be retried."""
        return False


@dataclass
class Outcome:
    """How a run ended, beside what the meter billed."""

    overflow: bool = False
    error: str | None = None
    events: Counter[str] = field(default_factory=Counter)
    thinking_cleared: Counter[str] = field(default_factory=Counter)
    """Thinking the client itself took out of messages it still sends: blocks and tokens."""


class Run:
    """One strategy replaying one session."""

    def __init__(self, bench: Bench, context: Context) -> None:
        self.bench = bench
        self.replay = bench.replay
        self.context = context
        self.history: list[Msg] = []
        self.events: Counter[str] = Counter()
        self.max_tokens = max_output(bench.window)
        self.anchor_tokens: int | None = None
        """Prompt + output tokens of the last main reply (the API's own count, the anchor)."""
        self.anchor_index = 0
        """len(history) right after that reply: what follows it is estimated."""
        self.previous_end: Block | None = None
        """The block the last main request ended with (the cache holds the prefix up to it)."""

    # -- requests --------------------------------------------------------------------------------

    def request(self, messages: Sequence[Msg], *, cached: bool | None = None, max_tokens: int | None = None,
                with_tools: bool = True, with_system: bool = True) -> dict[str, Any]:
        cached = self.context.cached if cached is None else cached
        previous = self.previous_end if self.context.previous_breakpoint else None
        ttl = self.context.ttl
        body: dict[str, Any] = {"model": self.bench.model, "max_tokens": max_tokens or self.max_tokens,
                                "messages": api_messages(messages, cached=cached, ttl=ttl, previous=previous)}
        if with_system:
            block: Block = {"type": "text", "text": self.replay.system}
            if cached:
                block["cache_control"] = cache_control(ttl)
            body["system"] = [block]
        if with_tools:
            body["tools"] = [dict(t) for t in (*self.replay.tools, *AGENT_TOOLS)]
        if self.bench.thinking is not None:
            body["thinking"] = dict(self.bench.thinking)
        return body

    def tokens(self) -> int:
        """The context's size as a client knows it: the last reply's usage plus an estimate after it."""
        if self.anchor_tokens is None:
            overhead = estimate_tokens([Msg("user", [{"type": "text", "text": self.replay.system}])])
            return overhead + round(estimate_tokens(self.history) * ESTIMATE_PADDING)
        return self.anchor_tokens + round(estimate_tokens(self.history[self.anchor_index:]) * ESTIMATE_PADDING)

    def forget_anchor(self) -> None:
        """The history was rewritten before the anchor: the next count is an estimate."""
        self.anchor_tokens = None

    def send_main(self) -> dict[str, Any]:
        while True:
            self.context.before_call(self)
            view = self.context.view(self)
            status, body = self.bench.meter.messages(self.request(view))
            if status == 200:
                self.previous_end = last_block(view)
                usage = body["usage"]
                self.anchor_tokens = sum(int(usage.get(k) or 0) for k in (
                    "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"))
                self.context.after_call(self, body)
                return body
            if is_prompt_too_long(status, body) and self.context.on_too_long(self):
                continue
            if is_prompt_too_long(status, body):
                raise Overflow(body["error"]["message"])
            if self.bench.meter.calls and self.bench.meter.calls[-1].refused_thinking:
                raise Refused(body["error"]["message"])
            raise RuntimeError(f"the stand-in refused a request ({status}): {body}")

    def side_call(self, request: Mapping[str, Any]) -> str:
        """A summary (or other side) call; a refusal is an overflow the strategy cannot recover from."""
        status, body = self.bench.meter.messages(request)
        if status != 200:
            raise Overflow(f"side call refused ({status}): {(body.get('error') or {}).get('message', '')}")
        return "\n".join(b.get("text", "") for b in body["content"] if b.get("type") == "text")

    # -- the replay ------------------------------------------------------------------------------

    def play(self) -> Outcome:
        outcome = Outcome(events=self.events)
        try:
            for turn in self.replay.turns:
                for cell in turn.cells:
                    self.bench.clock.advance(cell.gap)
                    self.history += cell_messages(cell, len(self.history))
                self.bench.clock.advance(turn.gap)
                self.history.append(Msg("user", [{"type": "text", "text": turn.prompt}]))
                for action in turn.actions:
                    self.step(action)
        except Overflow as error:
            outcome.overflow, outcome.error = True, str(error)
        return outcome

    def step(self, action: Action) -> None:
        reply = self.send_main()
        uses = [b for b in reply["content"] if b.get("type") == "tool_use"]
        expected = [(c.name, dict(c.input)) for c in action.calls]
        if [(u["name"], u["input"]) for u in uses] != expected:
            raise ReplayDesync(f"{self.replay.name}: expected calls {expected!r}, the reply has {uses!r}")
        self.history.append(Msg("assistant", list(reply["content"])))
        self.anchor_index = len(self.history)
        if not uses:
            return
        results = []
        for use, run in zip(uses, action.calls):
            block: Block = {"type": "tool_result", "tool_use_id": use["id"], "content": run.output}
            if run.is_error:
                block["is_error"] = True
            results.append(self.context.on_result(self, block))
        self.history.append(Msg("user", results))
        self.bench.clock.advance(TOOL_SECONDS * len(uses))


def play(bench: Bench, context: Context) -> Outcome:
    return Run(bench, context).play()
