"""The tools that act on the conversation itself: `compact` and `snip`, and
`search_transcript`, which finds what a summary or a clearing took out of it.

The results of compact and snip are never cleared: they say what happened to the context. A
search can be made again, so its old results may be.
"""

from __future__ import annotations

from typing import Any

from ctx_magic.agent.tools import Tool, ToolCall, ToolContext, ToolOutput
from ctx_magic.context import recall
from ctx_magic.context.audit import SEARCH_TOOL
from ctx_magic.store.session import SessionDir

COMPACT_SPEC = {
    "name": "compact",
    "description": (
        "Summarize the conversation so far to free context, e.g. at the end of a phase of work. "
        "Optional instructions say what the summary must keep."
    ),
    "input_schema": {"type": "object", "properties": {"instructions": {"type": "string"}}},
}
SNIP_SPEC = {
    "name": "snip",
    "description": (
        "Mark old tool results as no longer needed: their content is cleared from the context "
        "(the transcript keeps it). Give the tool_use ids of the results."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"tool_use_ids": {"type": "array", "items": {"type": "string"}}},
        "required": ["tool_use_ids"],
    },
}

SEARCH_SPEC = {
    "name": SEARCH_TOOL,
    "description": (
        "Search this session's full transcript: every message as first written, including what was "
        "summarized, cleared or snipped out of the context, and the outputs saved to disk. Give a query "
        "(text, case-insensitive; or a Python regex with regex=true), and/or a turn or a notebook cell "
        "(execution count) to look in. Each match shows its turn and a ref; call again with only ref "
        "(and offset) to read that message in full."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "regex": {"type": "boolean"},
            "turn": {"type": "integer", "minimum": 0},
            "cell": {"type": "integer", "minimum": 1},
            "ref": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
        },
    },
}


def compact(call: ToolCall, context: ToolContext) -> ToolOutput:
    """The model may compact once a turn: a second request would summarize a summary."""
    if context.ask_compaction(str(call.input.get("instructions") or "")):
        return ToolOutput("Compaction will run right after this step.")
    return ToolOutput("The context was already compacted in this turn.", is_error=True)


def snip(call: ToolCall, context: ToolContext) -> ToolOutput:
    ids = call.input.get("tool_use_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return ToolOutput("snip needs tool_use_ids: a list of tool_use id strings.", is_error=True)
    cleared, unknown = context.clear_results(ids)
    text = f"Cleared {len(cleared)} tool result(s) from the context; the transcript keeps them."
    if unknown:
        text += f" Not found, already cleared or protected: {', '.join(unknown)}."
    return ToolOutput(text, is_error=not cleared and bool(unknown))


def search_session(store: SessionDir, **query: Any) -> str:
    """The search_transcript tool's answer (context/recall.py) over a session's transcript and the
    saved files it does not hold. ValueError for a bad regex or an empty search."""
    records = store.load_transcript().records
    folder = store.tool_results_dir
    names = sorted(p.name for p in folder.glob("*.txt")) if folder.is_dir() else []
    saved = {}
    for name in recall.unrecorded_files(records, names):
        try:
            saved[str(folder / name)] = (folder / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return recall.answer(records, saved, **query)


def search_transcript(call: ToolCall, context: ToolContext) -> ToolOutput:
    """Matches with their turn and ref, or one page of a message by its ref."""
    args = call.input
    turn, cell, offset = args.get("turn"), args.get("cell"), args.get("offset")
    text = context.search_transcript(
        query=str(args.get("query") or ""), regex=bool(args.get("regex")),
        turn=int(turn) if turn is not None else None, cell=int(cell) if cell is not None else None,
        ref=str(args.get("ref") or ""), offset=int(offset or 0))
    return ToolOutput(text)


CONTEXT_TOOLS = (Tool(COMPACT_SPEC, compact, clearable=False), Tool(SNIP_SPEC, snip, clearable=False),
                 Tool(SEARCH_SPEC, search_transcript))
