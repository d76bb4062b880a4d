"""The Models API as the stand-in serves it: the model list, one model's info with its
capabilities (thinking types and context-management strategies are configurable; everything
else is reported as unsupported), and the context window in force for a request."""

from __future__ import annotations

import re
from typing import Any

from ctx_magic.offline.faults import ApiError
from ctx_magic.offline.shapes import HttpReply, OfflineConfig, error_reply, json_reply, known_model
from ctx_magic.offline.thinking import refused_types

STANDARD_WINDOW = 200_000
LONG_CONTEXT_BETA = "context-1m-2025-08-07"
STANDARD_WINDOW_MODELS = re.compile(r"^claude-sonnet-4(-5)?(-\d{8})?$")  # 1M only with the beta header
MODEL_CREATED_AT = "1970-01-01T00:00:00Z"  # the SDK's epoch value for "release date unknown"


def _support(flag: bool) -> dict[str, bool]:
    return {"supported": flag}


def capabilities(thinking_types: tuple[str, ...], context_edits: tuple[str, ...], model: str = "") -> dict[str, Any]:
    """The Models API's `capabilities` object, as the stand-in's model has them (the thinking
    types `model` refuses reported as unsupported, as the Messages endpoint refuses them)."""
    refused = refused_types(model)
    edits = ("clear_thinking_20251015", "clear_tool_uses_20250919", "compact_20260112")
    return {
        "batch": _support(False), "citations": _support(False), "code_execution": _support(False),
        "context_management": {"supported": bool(context_edits), **{e: _support(e in context_edits) for e in edits}},
        "effort": {"supported": False, **{level: _support(False) for level in ("low", "medium", "high", "max")}},
        "image_input": _support(True), "pdf_input": _support(False),
        "server_tools": {"supported": False, "code_execution": _support(False), "web_search": _support(False)},
        "structured_outputs": _support(False),
        "thinking": {"supported": bool(thinking_types), "types": {
            **{kind: _support(kind in thinking_types and kind not in refused) for kind in ("adaptive", "enabled")},
            **{kind: _support(kind not in refused) for kind in ("disabled", "between_tools")}}},
    }


def window(config: OfflineConfig, model: str, betas: tuple[str, ...] = ()) -> int:
    """The window in force: Sonnet 4 and 4.5 keep the standard 200,000 unless the request
    carries the 1M-context beta header."""
    if STANDARD_WINDOW_MODELS.match(model) and LONG_CONTEXT_BETA not in betas:
        return min(config.window, STANDARD_WINDOW)
    return config.window


def model_info(config: OfflineConfig, model_id: str) -> dict[str, Any]:
    """One model as GET /v1/models/{id} describes it."""
    return {
        "id": model_id,
        "type": "model",
        "display_name": f"{model_id} (offline stand-in)",
        "created_at": MODEL_CREATED_AT,
        "lifecycle": "active",
        "max_input_tokens": window(config, model_id),  # Sonnet 4 / 4.5: 200,000 without the 1M beta
        "max_tokens": config.max_output,
        "capabilities": capabilities(config.thinking_types, config.context_edits, model_id),
    }


def model_reply(config: OfflineConfig, model_id: str) -> HttpReply:
    """GET /v1/models/{id}: an id naming a Claude model family is known, others are a 404."""
    if not known_model(model_id):
        message = f"model: {model_id}"
        return error_reply(ApiError(404, "not_found_error", message))
    return json_reply(200, model_info(config, model_id))


def models_page(config: OfflineConfig) -> HttpReply:
    """GET /v1/models: the listed models, as one page."""
    data = [model_info(config, m) for m in config.listed_models]
    page = {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None}
    page["last_id"] = data[-1]["id"] if data else None
    return json_reply(200, page)
