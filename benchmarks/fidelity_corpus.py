"""Workloads for benchmarks/fidelity.py, from the shared corpus (never edited).

- **mini-swe-agent** trajectories (Gemini 3 on SWE-bench): the task is the user's first message;
  each assistant message with exactly one ```bash block is one recorded action (its text, and a
  `bash` call answered by the recorded output); a message without one ends the turn and the
  harness's complaint that follows is the next user message.
- **Claude Code** session log: the request thread (as benchmarks/estimation.py reads it); each
  text message of the user starts a turn, each response is an action with its tool calls
  answered by the recorded results.
- **handson-ml3** `tools_pandas.ipynb`: a notebook session, see `notebook_turns`.

A replay is a list of turns; each turn is a user prompt and the recorded actions that answer it,
the last one without tool calls.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from estimation import load_claude_code

if __package__ in (None, ""):  # run as a script: the repository root on the path, like `-m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.corpus_location import corpus_path  # noqa: E402
from ctx_magic.messages import result_text  # noqa: E402

DEFAULT_CORPUS = corpus_path()  # CTX_MAGIC_CORPUS, else ../shared/corpus
SWE_DIR = "mini-swe-agent-gemini3/trajs"
CC_SESSIONS = "claude-code-session-share"  # each session's main transcript, <id>.jsonl (subagents aside)
NOTEBOOKS = "handson-ml3"
NOTEBOOK = "tools_pandas.ipynb"  # the notebook replayed, where the corpus has it (else its first)
CLOSING = "Done."  # the reply that ends a turn whose last recorded action called a tool
_BASH = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")


@dataclass(frozen=True)
class Call:
    name: str
    input: dict[str, Any]
    output: str
    is_error: bool = False


@dataclass(frozen=True)
class Action:
    text: str
    calls: tuple[Call, ...] = ()


@dataclass
class Turn:
    prompt: str
    actions: list[Action] = field(default_factory=list)


@dataclass(frozen=True)
class Replay:
    name: str
    turns: tuple[Turn, ...]

    @property
    def tools(self) -> list[str]:
        return sorted({c.name for t in self.turns for a in t.actions for c in a.calls})


def _closed(turns: list[Turn]) -> tuple[Turn, ...]:
    for turn in turns:
        if not turn.actions or turn.actions[-1].calls:
            turn.actions.append(Action(CLOSING))
    return tuple(turns)


def mini_swe(path: Path) -> Replay:
    data = json.loads(path.read_text(encoding="utf-8"))
    turns: list[Turn] = []
    pending: Action | None = None
    for message in data["messages"]:
        role, content = message["role"], message["content"]
        if role == "system":
            continue
        if role == "assistant":
            blocks = _BASH.findall(content)
            if len(blocks) == 1:
                pending = Action(_BASH.sub("", content).strip(), (Call("bash", {"command": blocks[0]}, ""),))
            else:
                turns[-1].actions.append(Action(content))
                pending = None
        elif pending is not None:  # the recorded output of the pending command
            code = _RETURNCODE.search(content)
            call = pending.calls[0]
            done = Call(call.name, call.input, content, bool(code and code.group(1) != "0"))
            turns[-1].actions.append(Action(pending.text, (done,)))
            pending = None
        else:
            turns.append(Turn(content))
    if pending is not None:
        turns[-1].actions.append(pending)
    return Replay(f"swe/{data.get('instance_id', path.stem)}", _closed(turns))


def claude_code(path: Path) -> Replay:
    conversation = load_claude_code(path)
    turns: list[Turn] = []
    outputs = {b["tool_use_id"]: b for m in conversation.messages for b in m.blocks("tool_result")}
    last_response: str | None = None
    for message in conversation.messages:
        if message.role == "user":
            if message.text.strip() and not message.tool_result_ids:
                turns.append(Turn(message.text))
            continue
        if not turns:
            continue
        calls = tuple(
            Call(b["name"], dict(b.get("input") or {}), result_text(outputs[b["id"]]) if b["id"] in outputs else "",
                 bool(outputs.get(b["id"], {}).get("is_error")))
            for b in message.blocks("tool_use"))
        action = Action(message.text.strip(), calls)
        if message.api_id == last_response and turns[-1].actions:  # one response over several records
            previous = turns[-1].actions.pop()
            action = Action("\n".join(t for t in (previous.text, action.text) if t), previous.calls + calls)
        turns[-1].actions.append(action)
        last_response = message.api_id
    return Replay(f"claude-code/{path.stem[:8]}", _closed(turns))


def claude_code_sessions(corpus: Path) -> list[Path]:
    """The main transcript of each Claude Code session in the corpus (its subagents aside)."""
    return sorted((corpus / CC_SESSIONS).glob("*.jsonl"))


def notebook_path(corpus: Path) -> Path | None:
    """The notebook the fidelity run replays: NOTEBOOK where the corpus has it, else its first (None
    when it has none)."""
    folder = corpus / NOTEBOOKS
    return folder / NOTEBOOK if (folder / NOTEBOOK).is_file() else next(iter(sorted(folder.glob("*.ipynb"))), None)


def swe_paths(corpus: Path, count: int) -> list[Path]:
    """`count` trajectories spread over the sorted list (every k-th), longest runs included."""
    paths = sorted((corpus / SWE_DIR).glob("*.traj.json"))
    if count >= len(paths):
        return paths
    step = len(paths) / count
    return [paths[int(i * step)] for i in range(count)]


# -- the notebook session ---------------------------------------------------------------------


@dataclass(frozen=True)
class NotebookTurn:
    """What the user does between two agent turns, then the agent turn itself."""

    cells: tuple[str, ...]  # cells the user runs first (real execution in the kernel)
    prompt: str  # the %%agent message


def notebook_cells(corpus: Path) -> list[tuple[str, str]]:
    """(markdown before it, code) for each code cell of the notebook, in order."""
    path = notebook_path(corpus)
    if path is None:
        raise FileNotFoundError(f"no notebook (*.ipynb) under {corpus / NOTEBOOKS}")
    notebook = json.loads(path.read_text(encoding="utf-8"))
    markdown, out = "", []
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            markdown = source
        elif source.strip():
            out.append((markdown, source))
            markdown = ""
    return out


def _question(markdown: str, n: int) -> str:
    first = next((line.strip("#* ") for line in markdown.splitlines() if line.strip()), "")
    return first[:300] if first else f"Go on with step {n}."


def notebook_turns(corpus: Path, cells_per_turn: int = 2) -> Iterator[NotebookTurn]:
    """A user working through the notebook beside the agent: each turn, the user runs the
    section's first cells, then asks the agent about the section (its own markdown) with the
    next cell as code to run. Cells that reach the Internet are left out (no network here)."""
    cells = [(md, code) for md, code in notebook_cells(corpus) if "http://" not in code and "https://" not in code]
    for n, start in enumerate(range(0, len(cells), cells_per_turn)):
        group = cells[start: start + cells_per_turn]
        *ran, (markdown, code) = group
        question = _question(markdown or next((md for md, _ in reversed(ran) if md), ""), n)
        yield NotebookTurn(tuple(c for _, c in ran), f"{question}\n```python\n{code}\n```")
