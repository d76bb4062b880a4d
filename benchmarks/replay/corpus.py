"""Recorded sessions as replayable ones: who said what, which tools ran, what they printed, when.

Three sources in the shared corpus (`../shared/corpus` beside the repository, or the folder
$CTX_MAGIC_CORPUS names; never edited):

- **mini-swe-agent** trajectories (Gemini 3 on SWE-bench): the first user message is the task;
  each assistant message holding exactly one ```bash block is one action, replayed as an
  assistant reply of its text (the block taken out) plus a `bash` tool_use whose input is the
  command; the recorded next user message is that call's tool_result. A message with no block or
  several is the harness's format error: a text-only reply ending the turn, and the harness's
  complaint is the next turn's user prompt.
- **Claude Code** session logs: the request thread of the JSONL (as benchmarks/estimation.py
  reads it); user prompts, assistant text and tool_use (thinking left out: it cannot be sent
  back without its signature), tool_results; the gaps between prompts are the recorded ones.
- **handson-ml3** notebooks, replayed as a user working through the notebook with an agent: a
  few agent turns, each asking about the next section (the notebook's own markdown), in which
  the agent runs the section's first code cell with its `python` tool and answers with the
  markdown that follows it; between turns the user runs the section's other cells, which enter
  the context as `notebook_cell` pairs the way ctx_magic records cells. Wall-clock gaps are
  seeded per notebook: cells seconds apart, some breaks between turns over the 5-minute TTL.

Every session ends with a text-only reply, so a replay is a list of turns, each a user prompt
(after the cells the user ran) and the actions that answer it, the last one without tool calls.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.corpus_location import corpus_path, readable
from benchmarks.replay.cell_render import render_cell

Block = dict[str, Any]

DEFAULT_CORPUS = corpus_path()  # CTX_MAGIC_CORPUS, else ../shared/corpus
SWE_DIR = "mini-swe-agent-gemini3"
CC_DIR = "claude-code-session-share"
NOTEBOOK_DIR = "handson-ml3"

TOOL_SECONDS = 2.0  # a recorded command's run time (the trajectories carry none)
CLOSING_TEXT = "Done: the task is complete."  # the reply after a session's last tool result
INTERRUPTED_TEXT = "(The user sent a new message before this reply.)"

# mini-swe-agent's action format: exactly one fenced bash block per reply.
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")

# Notebook replay: how a user works through a notebook beside the agent.
CELLS_PER_TURN = 12  # one agent turn per section of this many code cells (the agent runs the first)
CELL_GAP_SECONDS = (3.0, 25.0)  # between two cells the user runs
TURN_GAP_SECONDS = (20.0, 90.0)  # from the last cell to the next %%agent prompt
BREAK_EVERY = 3  # every third turn comes after a break...
BREAK_SECONDS = (420.0, 1_200.0)  # ...of 7 to 20 minutes: longer than the 5-minute cache TTL
PROMPT_CHARS = 1_500  # markdown quoted in a prompt or a reply, at most


def _schema(**properties: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
    }


BASH_TOOL = {"name": "bash", "description": "Run one shell command in the repository; returns its output.",
             "input_schema": _schema(command="string")}
PYTHON_TOOL = {"name": "python", "description": "Run Python code in the user's notebook kernel.",
               "input_schema": _schema(code="string")}


@dataclass(frozen=True)
class Cell:
    """A notebook code cell with its stored outputs (nbformat 4), run by the user or the agent."""

    execution_count: int
    source: str
    outputs: tuple[Mapping[str, Any], ...]
    gap: float = 0.0
    """Seconds since the previous event (a turn's end, or the cell before) when the user runs it."""

    @property
    def failed(self) -> bool:
        return any(o.get("output_type") == "error" for o in self.outputs)

    @functools.cached_property
    def content(self) -> str | list[Block]:
        """The tool_result content, as ctx_magic's cell capture renders it (text, then images)."""
        return render_cell(self.source, self.execution_count, self.outputs)


@dataclass(frozen=True)
class ToolRun:
    """One recorded tool call: what the model asked for and what came back."""

    name: str
    input: Mapping[str, Any]
    recorded: str | list[Block] = ""
    is_error: bool = False
    cell: Cell | None = None
    """For the notebook agent's `python` runs: the cell whose stored outputs are the result."""

    @property
    def output(self) -> str | list[Block]:
        return self.cell.content if self.cell is not None else self.recorded


@dataclass(frozen=True)
class Action:
    """One recorded assistant reply: its text and its tool calls (none ends the turn)."""

    text: str
    calls: tuple[ToolRun, ...] = ()

    def content(self) -> list[Block]:
        """The reply as Messages-API content blocks (tool_use without ids: the server gives them)."""
        blocks: list[Block] = [{"type": "text", "text": self.text}] if self.text.strip() else []
        blocks += [{"type": "tool_use", "name": c.name, "input": dict(c.input)} for c in self.calls]
        return blocks or [{"type": "text", "text": CLOSING_TEXT}]


@dataclass(frozen=True)
class Turn:
    """A user prompt (after the cells the user ran since the last turn) and the replies to it."""

    prompt: str
    actions: tuple[Action, ...]
    cells: tuple[Cell, ...] = ()
    gap: float = 0.0
    """Seconds from the previous event (the last cell, or the previous turn's end) to the prompt."""


@dataclass(frozen=True)
class Replay:
    """A recorded session ready to replay."""

    name: str
    source: str  # swe | claude-code | notebook
    system: str
    tools: tuple[Mapping[str, Any], ...]
    turns: tuple[Turn, ...] = field(default_factory=tuple)

    def actions(self) -> list[Action]:
        return [a for t in self.turns for a in t.actions]

    def tool_runs(self) -> list[ToolRun]:
        return [c for a in self.actions() for c in a.calls]

    def user_texts(self) -> list[str]:
        """What the user said (every prompt), for the fidelity check."""
        return [t.prompt for t in self.turns]

    def outputs(self) -> list[str | list[Block]]:
        """Every tool output in the order it entered the conversation (cells included)."""
        out: list[str | list[Block]] = []
        for turn in self.turns:
            out += [c.content for c in turn.cells]
            out += [c.output for a in turn.actions for c in a.calls]
        return out

    @property
    def steps(self) -> int:
        return len(self.actions())


# -- mini-swe-agent ----------------------------------------------------------------------------


def _swe_action(text: str, output: str | None) -> tuple[Action, bool]:
    """(the action, whether it is a well-formed tool call) for one assistant message."""
    commands = _BASH_BLOCK.findall(text)
    if len(commands) != 1:
        return Action(text.strip()), False
    thought = _BASH_BLOCK.sub("", text).strip()
    code = _RETURNCODE.search(output or "")
    failed = code is not None and code.group(1) != "0"
    return Action(thought, (ToolRun("bash", {"command": commands[0]}, output or "(no output)", failed),)), True


def load_swe(path: Path) -> Replay:
    data = json.loads(path.read_text(encoding="utf-8"))
    messages = data["messages"]
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    chat = [m for m in messages if m["role"] != "system"]
    turns: list[Turn] = []
    prompt, actions = chat[0]["content"], []
    for i in range(1, len(chat), 2):
        reply = chat[i + 1]["content"] if i + 1 < len(chat) else None
        action, called = _swe_action(chat[i]["content"], reply)
        actions.append(action)
        if not called:  # a format error: the harness's complaint is the next prompt
            turns.append(Turn(prompt, tuple(actions)))
            prompt, actions = reply or "", []
            if reply is None:
                break
    else:
        actions.append(Action(CLOSING_TEXT))
        turns.append(Turn(prompt, tuple(actions)))
    name = data.get("instance_id") or path.name.removesuffix(".traj.json")
    return Replay(name, "swe", system, (BASH_TOOL,), tuple(turns))


def swe_paths(corpus: Path) -> list[Path]:
    root = corpus / SWE_DIR
    return sorted(root.glob("*.traj.json")) + sorted((root / "trajs").glob("*.traj.json"))


# -- Claude Code -------------------------------------------------------------------------------


def _thread(records: Sequence[Mapping[str, Any]]) -> set[str]:
    """The request thread: ancestors of the last assistant record (abandoned branches left out)."""
    parents = {r["uuid"]: r.get("parentUuid") for r in records if r.get("uuid")}
    last = next(r for r in reversed(records) if r.get("type") == "assistant")
    thread: set[str] = set()
    cursor: str | None = last["uuid"]
    while cursor and cursor not in thread:
        thread.add(cursor)
        cursor = parents.get(cursor)
    return thread


def _stamp(record: Mapping[str, Any]) -> float:
    return datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()


def _api_content(content: Any) -> str | list[Block]:
    if isinstance(content, str):
        return content
    return [{k: v for k, v in b.items() if k in ("type", "text", "source")} for b in content]


@dataclass
class _TurnBuilder:
    """Collects a Claude Code session's records into turns."""

    turns: list[Turn] = field(default_factory=list)
    prompt: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)  # tool_use id -> (action, call)
    gap: float = 0.0
    last_time: float | None = None

    def user_text(self, text: str, at: float) -> None:
        if self.actions:
            self.close()
        if not self.prompt:
            self.gap = 0.0 if self.last_time is None else max(0.0, at - self.last_time)
        self.prompt.append(text)

    def result(self, block: Mapping[str, Any]) -> None:
        where = self.pending.pop(str(block.get("tool_use_id")), None)
        if where is None:
            return
        a, c = where
        action = self.actions[a]
        call = action.calls[c]
        done = ToolRun(call.name, call.input, _api_content(block.get("content", "")), bool(block.get("is_error")))
        calls = (*action.calls[:c], done, *action.calls[c + 1 :])
        self.actions[a] = Action(action.text, calls)

    def reply(self, blocks: Sequence[Mapping[str, Any]]) -> None:
        text = "\n\n".join(b["text"] for b in blocks if b.get("type") == "text" and b["text"].strip())
        calls = tuple(ToolRun(b["name"], b.get("input") or {}) for b in blocks if b.get("type") == "tool_use")
        for c, b in enumerate(b for b in blocks if b.get("type") == "tool_use"):
            self.pending[str(b["id"])] = (len(self.actions), c)
        self.actions.append(Action(text, calls))

    def close(self) -> None:
        if self.actions and self.actions[-1].calls:
            self.actions.append(Action(INTERRUPTED_TEXT))  # the user spoke before the model answered
        if self.prompt and self.actions:
            self.turns.append(Turn("\n\n".join(self.prompt), tuple(self.actions), gap=self.gap))
        self.prompt, self.actions, self.pending = [], [], {}


def load_claude_code(path: Path, name: str | None = None) -> Replay:
    records = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    thread = _thread(records)
    builder = _TurnBuilder()
    replies: dict[str, list[Mapping[str, Any]]] = {}  # message id -> its blocks, over several records
    order: list[str] = []
    for r in records:
        if r.get("type") not in ("user", "assistant"):
            continue  # system, summary, progress, queue-operation, snapshots: never sent
        if r["uuid"] not in thread and r.get("sourceToolAssistantUUID") not in thread:
            continue
        content = r["message"]["content"]
        if r["type"] == "assistant":
            message_id = r["message"]["id"]
            if message_id not in replies:
                order.append(message_id)
                replies[message_id] = []
            replies[message_id] += [b for b in content if b.get("type") in ("text", "tool_use")]
            builder.last_time = _stamp(r)
            continue
        for message_id in order:  # a user record closes the replies before it
            builder.reply(replies.pop(message_id))
        order = []
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            if block.get("type") == "tool_result":
                builder.result(block)
            elif block.get("type") == "text" and block["text"].strip():
                builder.user_text(block["text"], _stamp(r))
        builder.last_time = _stamp(r)
    for message_id in order:
        builder.reply(replies.pop(message_id))
    builder.close()
    names = sorted({c.name for t in builder.turns for a in t.actions for c in a.calls})
    tools = tuple({"name": n, "description": f"Claude Code's {n} tool.", "input_schema": {"type": "object"}}
                  for n in names)
    system = ("You are Claude Code, Anthropic's command-line coding agent. Use the tools to act in the user's "
              "project; keep answers short.")
    return Replay(name or path.stem, "claude-code", system, tools, tuple(builder.turns))


def claude_code_paths(corpus: Path) -> list[Path]:
    root = corpus / CC_DIR
    return sorted(root.glob("*.jsonl")) + sorted(root.glob("*/subagents/*.jsonl"))


# -- notebooks ---------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _sections(notebook: Mapping[str, Any]) -> Iterator[tuple[str, Cell]]:
    """Each code cell with source, and the markdown written just before it."""
    markdown: list[str] = []
    serial = 0
    for cell in notebook["cells"]:
        source = _text(cell.get("source", ""))
        if cell["cell_type"] == "markdown":
            markdown.append(source)
        elif cell["cell_type"] == "code" and source.strip():
            serial += 1
            count = cell.get("execution_count") or serial
            yield "\n\n".join(markdown).strip(), Cell(count, source, tuple(cell.get("outputs") or ()))
            markdown = []


def _quote(text: str) -> str:
    return text if len(text) <= PROMPT_CHARS else text[:PROMPT_CHARS] + " [...]"


def load_notebook(path: Path, *, cells_per_turn: int = CELLS_PER_TURN) -> Replay:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    sections = list(_sections(notebook))
    rng = random.Random(zlib.crc32(path.name.encode()))  # the same gaps on every run
    title = path.stem.replace("_", " ")
    turns: list[Turn] = []
    cells: tuple[Cell, ...] = ()
    for n, start in enumerate(range(0, len(sections), cells_per_turn)):
        chunk = sections[start : start + cells_per_turn]
        notes, first = chunk[0]
        prompt = (f"Next part of the {title} notebook:\n\n{_quote(notes)}" if notes
                  else f"Run the next cell of the {title} notebook.")
        after = chunk[1][0] if len(chunk) > 1 and chunk[1][0] else "The cell ran; its output is above."
        actions = (Action("Running the next cell.", (ToolRun("python", {"code": first.source}, cell=first),)),
                   Action(_quote(after)))
        gap = rng.uniform(*(BREAK_SECONDS if n % BREAK_EVERY == BREAK_EVERY - 1 else TURN_GAP_SECONDS))
        turns.append(Turn(prompt, actions, cells, gap if n else 0.0))
        cells = tuple(Cell(c.execution_count, c.source, c.outputs, rng.uniform(*CELL_GAP_SECONDS))
                      for _, c in chunk[1:])
    if cells:
        closing = Action("We reached the end of the notebook; every cell's output is above.")
        turns.append(Turn(f"That was the last section of the {title} notebook. Anything to note?", (closing,),
                          cells, rng.uniform(*TURN_GAP_SECONDS)))
    system = ("You are a data-science assistant working inside a Jupyter notebook. The user's own cells reach "
              "you as notebook_cell tool results; run code with the python tool. Keep replies short.")
    return Replay(path.stem, "notebook", system, (PYTHON_TOOL,), tuple(turns))


def notebook_paths(corpus: Path) -> list[Path]:
    return sorted((corpus / NOTEBOOK_DIR).glob("*.ipynb"))


# -- everything ----------------------------------------------------------------------------------


QUICK_SWE_STRIDE = 21  # --quick: every 21st trajectory (3 of 63)...
QUICK_NOTEBOOK_TURNS = 5  # ...and the first turns of one notebook


def load_corpus(corpus: Path = DEFAULT_CORPUS, *, quick: bool = False) -> list[Replay]:
    """Every replayable session; `quick`: a small subset (three trajectories, the main Claude Code
    log, the start of one notebook) for development and tests."""
    swe = swe_paths(corpus)
    notebooks = notebook_paths(corpus)
    claude = claude_code_paths(corpus)
    if quick:
        swe, notebooks, claude = swe[::QUICK_SWE_STRIDE], notebooks[-1:], claude[:1]
    replays = [r for p in swe if (r := readable(load_swe, p)) is not None]
    replays += [r for p in claude if (r := readable(load_claude_code, p)) is not None]
    for path in notebooks:
        replay = readable(load_notebook, path)
        if replay is not None:
            replays.append(dataclasses.replace(replay, turns=replay.turns[:QUICK_NOTEBOOK_TURNS]) if quick else replay)
    return replays

