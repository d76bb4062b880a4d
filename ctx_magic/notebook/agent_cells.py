"""The agent's code as notebook cells, and those cells back in the agent's context.

Each block of code the agent runs (or asks to run, in `ask` mode) is offered as a cell. Its block
in the `%%agent` cell's output carries a MIME type of ours, `AGENT_CODE_MIME`: the cell's source,
its outputs as nbformat outputs, the session, the tool call, its place in the turn and the
execution count it ran under (the `%%agent` cell's, which the cell gets). The labextension renders an
"Insert as cell" button beside the block from it and, with `CtxMagic.agent_cells = 'insert'`,
makes the cells by itself below the `%%agent` cell; a frontend that does not know the type shows
the block as before. Where the labextension is absent (VS Code, the classic notebook), IPython's
own next-input mechanism places the cells instead, one per execution: the kernel cannot put
outputs or metadata in a cell that way, and a reply carries a single next input.

Every agent cell starts with a marker line naming its call, `# ctx: agent <tool_use_id>`. That
line is how the kernel knows the cell when the user runs it, in every frontend (a cell placed by
next-input has no metadata): run unchanged, the agent is told it is its own code from that call
and gets only the new output; edited, it gets a diff against the version it last saw. Delete the
line and the cell is the user's own.
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import itertools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctx_magic.messages import Block, Message, text_block, tool_use_block
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.display import shown_text
from ctx_magic.notebook.outputs import CellRecord, printed, strip_ansi
from ctx_magic.notebook.runs.cell_code import running_cell_number

AGENT_CODE_MIME = "application/vnd.ctx-magic.agent-code+json"
"""The MIME type of a block of the agent's code, rendered by the labextension (src/agentcells.ts)."""
AGENT_MARKER = "# ctx: agent"
_MARKER_LINE = re.compile(r"^#\s*ctx:\s*agent\s+([A-Za-z0-9_-]+)\s*$", re.IGNORECASE)
FRONTEND_ENV = "CTX_MAGIC_FRONTEND"
"""Set in the kernel's environment by the labextension as it connects to a Python kernel: the
frontend makes agent cells itself, so the next-input mechanism stays unused."""
AGENT_CALL_KEY = "agent_call"
"""Meta key, on a notebook_cell tool_use message, naming the python call whose code the cell ran."""
CODE_KEY = "code"
"""Meta key beside it: the code as the cell ran it (what the agent has now, for the next diff)."""
AGENT_TAG = "ctx-agent"
"""The cell tag of an agent cell (the labextension adds it; the export too)."""
RAN_AGAIN = ("The user ran your code from call {call} again, unchanged (the code is in that call); "
             "only its new output follows.")
EDITED = "The user edited your code from call {call} and ran it (the change is in this call's input); its output:"
EDITED_WHOLE = ("The user rewrote your code from call {call} and ran it (the new code is in this call's "
                "input); its output:")


def marked(call_id: str, code: str) -> str:
    """A cell's source for the code of `call_id`: the marker line, then the code."""
    return f"{AGENT_MARKER} {call_id}\n{code.strip(chr(10))}"


def agent_call_of(source: str) -> tuple[str, str] | None:
    """(call id, the code below the marker) for a cell whose first line is the agent marker."""
    first, _, rest = source.lstrip("\n").partition("\n")
    match = _MARKER_LINE.match(first.strip())
    return (match.group(1), rest.strip("\n")) if match else None


def marker_before_cell_magic(lines: list[str]) -> list[str]:
    """An input transformer: an agent cell whose code is a cell magic (`%%bash`, `%%time`) has the
    marker line above it, where IPython would take the magic for an unknown line magic (a cell
    magic must open its cell). The marker is a comment: it goes, and the magic opens the cell."""
    if len(lines) > 1 and _MARKER_LINE.match(lines[0].strip()) and lines[1].startswith("%%"):
        return lines[1:]
    return lines


# -- the block as a cell: its nbformat outputs and the MIME payload -------------------------------


def _bundle(data: Mapping[str, Any]) -> dict[str, Any]:
    """A display's data as nbformat keeps it: text joined, bytes as base64."""
    out: dict[str, Any] = {}
    for mime, value in data.items():
        if isinstance(value, bytes):
            out[mime] = base64.b64encode(value).decode("ascii")
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[mime] = "".join(value)
        else:
            out[mime] = value
    return out


def error_output(text: str) -> dict[str, Any]:
    """An nbformat error output from a formatted traceback (its last line names the error)."""
    lines = strip_ansi(text).rstrip("\n").splitlines() or ["Error"]
    last = next((line for line in reversed(lines) if line.strip()), "Error")
    name, _, value = last.partition(": ")
    return {"output_type": "error", "ename": name.strip() or "Error", "evalue": value, "traceback": lines}


def notebook_outputs(record: CellRecord | None, count: int | None = None) -> list[dict[str, Any]]:
    """What one run of the agent's code showed, as the outputs of a notebook cell (each text
    capped as the block in the `%%agent` cell caps it); `count` is the execution it ran in."""
    if record is None:
        return []
    outputs: list[dict[str, Any]] = []
    for name, pieces in (("stdout", record.stdout), ("stderr", record.stderr)):
        if pieces:
            outputs.append({"output_type": "stream", "name": name, "text": shown_text(printed(pieces))})
    for data in record.displays:
        outputs.append({"output_type": "display_data", "data": _bundle(data), "metadata": {}})
    if record.result is not None:
        outputs.append({"output_type": "execute_result", "data": _bundle(record.result), "metadata": {},
                        "execution_count": count})
    if record.error:
        outputs.append(error_output(record.error))
    return outputs


Offer = tuple[Mapping[str, Any], str]
"""What a block of the agent's code adds to its display: the MIME entry the labextension renders,
and a line for frontends without it."""
NO_OFFER: Offer = ({}, "")


class AgentCells:
    """Offers each block of the agent's code as a cell, by the labextension or by next-input."""

    def __init__(self, shell: Any, settings: CtxMagic, env: Mapping[str, str] = os.environ) -> None:
        self.shell = shell
        self._settings = settings
        """`agent_cells`, read at each block: 'off', 'button' or 'insert'."""
        self._env = env
        """The kernel's live environment: the labextension announces itself there after start."""
        self._order = itertools.count(1)
        self._in_turn = itertools.count(1)
        """The block's place in its turn, for the cell's label ("block 2 of the turn in [5]")."""
        self.cell_id: str | None = None
        """The frontend's id of the cell running now (the `%%agent` cell during a turn)."""
        self.waiting: list[tuple[str, str]] = []
        """(call id, source) of this turn's blocks the next-input mechanism has yet to place."""
        self._placed: str | None = None
        """The call id next-input placed last: running that cell places the next one below it."""

    def extension_present(self) -> bool:
        return bool(self._env.get(FRONTEND_ENV))

    def cell_started(self, info: Any) -> None:
        """pre_run_cell: which cell runs (JupyterLab and Notebook 7 send its id)."""
        self.cell_id = getattr(info, "cell_id", None) or None

    def begin_turn(self) -> None:
        """A new turn's blocks replace the last turn's that were never placed."""
        self.waiting, self._placed = [], None
        self._in_turn = itertools.count(1)

    def offer(self, session_id: str, call_id: str, code: str, record: CellRecord | None, *, ran: bool) -> Offer:
        """The block of `call_id` as a cell: the payload for the labextension and, without it, a
        hint (and, in 'insert' mode, the cell placed by next-input, or queued behind the first)."""
        mode = self._settings.current.agent_cells
        if mode == "off" or not code.strip():
            return NO_OFFER
        source = marked(call_id, code)
        count = running_cell_number(self.shell)  # the `%%agent` cell's: the code ran inside its execution
        payload = {"session": session_id, "call": call_id, "source": source, "code": code,
                   "outputs": notebook_outputs(record if ran else None, count), "mode": mode, "ran": ran,
                   "cell": self.cell_id, "order": next(self._order), "index": next(self._in_turn),
                   "count": count if ran else None}
        if self.extension_present():
            return {AGENT_CODE_MIME: payload}, ""
        if mode == "insert" and ran:
            self._place_or_queue(call_id, source)
        return {AGENT_CODE_MIME: payload}, f"To make this code a cell: run %ctx cell {call_id} in an empty cell."

    def _place_or_queue(self, call_id: str, source: str) -> None:
        if self._placed is None:
            self._next_input(call_id, source)
        else:
            self.waiting.append((call_id, source))

    def _next_input(self, call_id: str, source: str, *, replace: bool = False) -> None:
        self._placed = call_id
        self.shell.set_next_input(source, replace=replace)

    def cell_finished(self, source: str) -> None:
        """post_run_cell: running the cell next-input placed last places the turn's next block
        below it, so the blocks come in order, one per execution."""
        found = agent_call_of(source)
        if self.waiting and found is not None and found[0] == self._placed:
            self._next_input(*self.waiting.pop(0))

    def place(self, session_messages: Iterable[Message], call_id: str | None) -> str:
        """`%ctx cell [ID]`: the cell that runs it becomes the code of call ID (else this turn's
        next block waiting, else the agent's latest code), as `%load` does. Returns the call id."""
        if call_id is None and self.waiting:
            call_id, source = self.waiting.pop(0)
            self._next_input(call_id, source, replace=True)
            return call_id
        codes = python_calls(session_messages)
        if not codes:
            raise LookupError("The agent has run no code in this session yet.")
        if call_id is None:
            call_id = next(reversed(codes))
        if call_id not in codes:
            raise LookupError(f"No python call {call_id} in this session (the ids are in each block's hint).")
        self._next_input(call_id, marked(call_id, codes[call_id]), replace=True)
        return call_id


def python_calls(messages: Iterable[Message]) -> dict[str, str]:
    """call id -> code of every python call in `messages`, in order."""
    codes: dict[str, str] = {}
    for message in messages:
        for block in message.blocks("tool_use"):
            code = (block.get("input") or {}).get("code")
            if block.get("name") == "python" and isinstance(code, str):
                codes[str(block.get("id"))] = code
    return codes


# -- a re-run agent cell in the context -----------------------------------------------------------


def known_code(messages: Sequence[Message], call_id: str) -> str | None:
    """The code of `call_id` as the live context last holds it: the call's own input, or the
    version a later run of its cell sent; None when the context no longer holds the call."""
    latest: str | None = None
    for message in messages:
        if message.meta.get(AGENT_CALL_KEY) == call_id and isinstance(message.meta.get(CODE_KEY), str):
            latest = message.meta[CODE_KEY]
            continue
        for block in message.blocks("tool_use"):
            code = (block.get("input") or {}).get("code")
            if block.get("id") == call_id and block.get("name") == "python" and isinstance(code, str):
                latest = code
    return latest


def code_diff(before: str, after: str, call_id: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"call {call_id} (your code)",
                                 "as the user ran it", n=0, lineterm="")  # no context lines: the agent has them
    return "\n".join(lines)


def kept_lines(before: str, after: str) -> int:
    """Lines the edit left as they were."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks())


def _led(content: str | list[Block], lead: str) -> str | list[Block]:
    if isinstance(content, str):
        return f"{lead}\n\n{content}"
    first, *rest = content
    return [text_block(f"{lead}\n\n{first.get('text', '')}"), *rest]


def as_agent_cell(pair: list[Message], source: str, live: Sequence[Message]) -> list[Message]:
    """A recorded cell's notebook_cell pair, told as a run of the agent's own code when the cell
    carries the marker of a call the live context still holds: without the code it has (an
    unchanged run) or with a diff (an edited one; the whole new code when no line was kept)."""
    found = agent_call_of(source)
    if found is None or len(pair) != 2:
        return pair
    call_id, code = found
    before = known_code(live, call_id)
    if before is None:  # summarized away, or another session's call: the cell goes in whole
        return pair
    use, result = pair
    [call] = use.blocks("tool_use")
    count = (call.get("input") or {}).get("execution_count")
    if code.strip() == before.strip():
        tool_input: dict[str, Any] = {"execution_count": count, "ran_again": call_id}
        lead = RAN_AGAIN.format(call=call_id)
    else:
        diff = code_diff(before, code, call_id)
        whole = not kept_lines(before, code)  # a rewrite: the diff would only repeat the old code
        tool_input = {"execution_count": count, "edited": call_id, **({"source": code} if whole else {"diff": diff})}
        lead = (EDITED_WHOLE if whole else EDITED).format(call=call_id)
    meta = {**use.meta, AGENT_CALL_KEY: call_id, CODE_KEY: code}
    new_use = dataclasses.replace(use, content=(tool_use_block(call["id"], "notebook_cell", tool_input),), meta=meta)
    [block] = result.blocks("tool_result")
    new_result = result.with_content([{**block, "content": _led(block["content"], lead)}])
    return [new_use, new_result]


def cell_code(tool_input: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The code a notebook_cell ran, from its input, or from its meta for an agent cell."""
    code = meta.get(CODE_KEY)
    return str(code) if isinstance(code, str) else str(tool_input.get("source") or "")

