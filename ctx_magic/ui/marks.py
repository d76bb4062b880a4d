"""Cell marks: which of the user's cells the agent no longer sees in full, and why.

A notebook cell enters the context as a `notebook_cell` tool call. When its result is
persisted (budget), cleared (microcompact) or summarized by a compaction, the panel's `cell_marks` name
the cell so the JupyterLab extension can put a badge on it. A mark is keyed by the frontend's
cell id together with the execution count it had (re-running the cell gives a new output the
agent sees again); a frontend that sends no cell id gets marks keyed by the count alone, and
only for cells run in this kernel process, because counts start again at 1 after a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.messages import Message, cell_of

NOTEBOOK_CELL = "notebook_cell"
COUNT_KEY = "count:"
"""Prefix of the key of a mark made for a cell without an id (the frontend matches the count)."""

# What the agent no longer has, and what it still has, for each kind of mark.
STILL_HAS = {
    "persisted": "its first and last lines and the path of the saved file, which it can read with read_file",
    "cleared": "a one-line stub in place of the output; the transcript keeps the full output",
    "summarized": "the compaction's summary; the transcript keeps the cell's full output",
}


@dataclass(frozen=True)
class CellRef:
    """One run of a notebook cell, as the context recorded it."""

    count: int
    """Its execution count."""
    cell_id: str | None = None
    """The frontend's cell id, when it sent one."""
    kernel: str | None = None
    """The kernel process that ran it (notebook/outputs.py KERNEL_RUN)."""

    def key(self, current_kernel: str | None) -> str | None:
        """The mark's key: the cell id; else the count, only for a cell of this kernel process."""
        if self.cell_id:
            return self.cell_id
        if self.kernel is None or self.kernel == current_kernel:
            return f"{COUNT_KEY}{self.count}"
        return None


def cell_refs(message: Message) -> dict[str, CellRef]:
    """tool_use_id -> the cell run, for the notebook_cell calls in `message`."""
    refs = {}
    for block in message.blocks("tool_use"):
        if block.get("name") != NOTEBOOK_CELL:
            continue
        tool_input = block.get("input") or {}
        count = tool_input.get("execution_count") or message.meta.get("cell") or cell_of(block["id"])
        if isinstance(count, int) and count > 0:
            refs[block["id"]] = CellRef(count, message.meta.get("cell_id") or None, message.meta.get("kernel"))
    return refs


class CellIndex:
    """Which cell run a tool result or a message stands for: learned from the messages the
    transcript replays and, on a miss, from the live context (`live`)."""

    def __init__(self, live: Callable[[], Sequence[Message]] = tuple) -> None:
        self._live = live
        self._by_result: dict[str, CellRef] = {}
        self._by_message: dict[str, list[CellRef]] = {}

    def learn(self, message: Message) -> None:
        refs = cell_refs(message)
        self._by_result.update(refs)
        found = [*refs.values(), *(self._by_result[i] for i in message.tool_result_ids if i in self._by_result)]
        if found:
            self._by_message[message.uuid] = found

    def learn_all(self, messages: Iterable[Message]) -> None:
        for message in messages:
            self.learn(message)

    def results(self, tool_use_ids: Sequence[str]) -> dict[str, CellRef]:
        """tool_use_id -> cell run, for those of `tool_use_ids` that are notebook cells."""
        if any(i not in self._by_result for i in tool_use_ids):
            self.learn_all(self._live())
        found = {i: self._by_result[i] for i in tool_use_ids if i in self._by_result}
        for tool_use_id in tool_use_ids:  # a cell id of an older transcript: the count is in the id
            count = cell_of(tool_use_id)
            if tool_use_id not in found and count is not None:
                found[tool_use_id] = CellRef(count)
        return found

    def in_messages(self, uuids: Sequence[str]) -> list[CellRef]:
        """The cell runs whose call or result is in one of the messages `uuids`."""
        if any(u not in self._by_message for u in uuids):
            self.learn_all(self._live())
        seen: dict[tuple[int, str | None, str | None], CellRef] = {}
        for uuid in uuids:
            for ref in self._by_message.get(uuid, ()):
                seen[(ref.count, ref.cell_id, ref.kernel)] = ref
        return list(seen.values())

    def clear(self) -> None:
        self._by_result.clear()
        self._by_message.clear()


def with_marks(marks: Mapping[str, Mapping[str, Any]], refs: Iterable[CellRef], *, kind: str, why: str, card: str,
               current_kernel: str | None) -> dict[str, dict[str, Any]]:
    """`marks` with these cell runs marked. A cell keeps the mark of its latest run: an older
    run's mark never replaces a newer one's (the cell shows its latest output)."""
    out = {key: dict(value) for key, value in marks.items()}
    for ref in refs:
        key = ref.key(current_kernel)
        if key is None or out.get(key, {}).get("count", 0) > ref.count:
            continue
        out[key] = {"count": ref.count, "kind": kind, "why": why, "still": STILL_HAS[kind], "card": card}
    return out
