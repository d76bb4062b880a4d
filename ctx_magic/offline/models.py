"""The Models API's `capabilities` object, as the stand-in's model has them (thinking types and
context-management strategies are configurable; everything else is reported as unsupported)."""

from __future__ import annotations

from typing import Any


def _support(flag: bool) -> dict[str, bool]:
    return {"supported": flag}


def capabilities(thinking_types: tuple[str, ...], context_edits: tuple[str, ...]) -> dict[str, Any]:
    """The Models API's `capabilities` object, as the stand-in's model has them."""
    edits = ("clear_thinking_20251015", "clear_tool_uses_20250919", "compact_20260112")
    return {
        "batch": _support(False), "citations": _support(False), "code_execution": _support(False),
        "context_management": {"supported": bool(context_edits), **{e: _support(e in context_edits) for e in edits}},
        "effort": {"supported": False, **{level: _support(False) for level in ("low", "medium", "high", "max")}},
        "image_input": _support(True), "pdf_input": _support(False),
        "server_tools": {"supported": False, "code_execution": _support(False), "web_search": _support(False)},
        "structured_outputs": _support(False),
        "thinking": {"supported": bool(thinking_types), "types": {
            "adaptive": _support("adaptive" in thinking_types), "enabled": _support("enabled" in thinking_types),
            "disabled": _support(True), "between_tools": _support(False)}},
    }
