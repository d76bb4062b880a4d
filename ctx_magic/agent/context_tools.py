"""The tools that act on the conversation itself: `compact` and `snip` (SPEC L2, N3).

Their results are never cleared: they say what happened to the context.
"""

from __future__ import annotations

from ctx_magic.agent.tools import Tool, ToolCall, ToolContext, ToolOutput

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


CONTEXT_TOOLS = (Tool(COMPACT_SPEC, compact, clearable=False), Tool(SNIP_SPEC, snip, clearable=False))
