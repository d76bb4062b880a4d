"""The request checks the offline server makes before answering, as the API makes them.

A request that breaks a rule is answered with HTTP 400 invalid_request_error and a message
naming the place (`messages.3.content.0: ...`), in the API's shape. The rules:

- fields: a model, at least one message, no field the endpoint does not know; for
  /v1/messages an integer 1 <= max_tokens <= the model's output limit;
- sampling: temperature and top_p in [0, 1], top_k >= 0, and not temperature and top_p together
  from Opus 4.1 and the 4.5 models on (Claude 3, Sonnet 4 and Opus 4 take both);
  an effort level the model takes (`xhigh` from Opus 4.7 on);
- tools: custom tools named `^[a-zA-Z0-9_-]{1,64}$` with an object input_schema, server tools
  by a dated type (`web_search_20250305`, `tool_search_tool_bm25_20251119`), every name
  unique; tool_choice auto / any / tool / none, naming an offered tool, and any / tool only
  with tools;
- system: text blocks only, none empty or whitespace only;
- messages: validate_messages.py (roles, text, tool pairs and ids, images, no prefill for
  the 4.6 models and later);
- cache_control: validate_cache.py (at most 4, ephemeral, 5m / 1h, 1h before 5m);
- thinking: thinking.py (the parameter, signed blocks, the tool-loop rule).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctx_magic.context import model_families
from ctx_magic.offline.invalid import InvalidRequest, at
from ctx_magic.offline.thinking import check_thinking_param, check_thinking_turn
from ctx_magic.offline.validate_cache import check_cache_controls
from ctx_magic.offline.validate_messages import check_messages, check_no_prefill, check_text

__all__ = ["InvalidRequest", "check_request"]

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # the API's pattern for tool names
SERVER_TOOL_TYPE = re.compile(r"^[a-z][a-z0-9_]*_\d{8}$")  # Anthropic-defined tools carry a dated type
TOOL_CHOICES = ("auto", "any", "tool", "none")
FORCING_CHOICES = ("any", "tool")  # these need tools to choose from
SHARED_FIELDS = frozenset({
    "model", "messages", "system", "tools", "tool_choice", "thinking", "cache_control", "context_management",
    "mcp_servers", "output_config", "output_format", "compaction",
})
MESSAGES_FIELDS = SHARED_FIELDS | {
    "max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "stream", "metadata", "service_tier",
    "container", "inference_geo",
}
COUNT_FIELDS = SHARED_FIELDS  # count_tokens takes the prompt, not the sampling settings


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_fields(request: Mapping[str, Any], max_output: int | None) -> None:
    known = COUNT_FIELDS if max_output is None else MESSAGES_FIELDS
    extra = sorted(set(request) - known)
    if extra:
        raise at(extra[0], "Extra inputs are not permitted")
    if not isinstance(request.get("model"), str) or not request["model"]:
        raise InvalidRequest("model: Field required")
    history = request.get("messages")
    if not isinstance(history, list) or not history:
        raise InvalidRequest("messages: at least one message is required")
    if max_output is None:
        return
    max_tokens = request.get("max_tokens")
    if not _is_int(max_tokens) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Field required (an integer of at least 1)")
    if max_tokens > max_output:
        raise InvalidRequest(
            f"max_tokens: {max_tokens} > {max_output}, which is the maximum allowed number of "
            f"output tokens for {request['model']}"
        )


def _takes_temperature_with_top_p(model: str) -> bool:
    """Claude 3, Sonnet 4 and Opus 4 take both; Opus 4.1 and every later model only one (Anthropic's
    migration notes for the 4.5 models; an id that names no version is held to the stricter rule)."""
    version = model_families.model_version(model)
    return version is not None and (version[1] < 4 or version[1:] == (4, 0))


def _check_sampling(request: Mapping[str, Any]) -> None:
    for name in ("temperature", "top_p"):
        value = request.get(name)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or not 0 <= value <= 1):
            raise at(name, "Input should be a number between 0 and 1")
    top_k = request.get("top_k")
    if top_k is not None and (not _is_int(top_k) or top_k < 0):
        raise at("top_k", "Input should be an integer of at least 0")
    both = request.get("temperature") is not None and request.get("top_p") is not None
    if both and not _takes_temperature_with_top_p(str(request.get("model"))):
        raise InvalidRequest("`temperature` and `top_p` cannot both be specified for this model. Please use only one.")


def _check_tool(index: int, tool: Any) -> str:
    """One tool definition; returns its name."""
    if not isinstance(tool, Mapping):
        raise at(f"tools.{index}", "Input should be a valid dictionary")
    kind = tool.get("type")
    if kind not in (None, "custom"):
        if not isinstance(kind, str) or not SERVER_TOOL_TYPE.match(kind):
            raise at(f"tools.{index}.type", f"unknown tool type {kind!r}")
        path = f"tools.{index}.{kind}.name"
    else:
        path = f"tools.{index}.custom.name"
        schema = tool.get("input_schema")
        if not isinstance(schema, Mapping):
            raise at(f"tools.{index}.custom.input_schema", "Field required")
        if schema.get("type") != "object":
            raise at(f"tools.{index}.custom.input_schema.type", "Input should be 'object'")
    name = tool.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise at(path, f"String should match pattern '{TOOL_NAME.pattern}'")
    return name


def _check_tools(request: Mapping[str, Any]) -> list[str]:
    tools = request.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise at("tools", "Input should be a valid list")
    names = [_check_tool(i, tool) for i, tool in enumerate(tools)]
    if len(set(names)) != len(names):
        raise at("tools", "Tool names must be unique.")
    return names


def _check_tool_choice(request: Mapping[str, Any], names: list[str]) -> None:
    choice = request.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, Mapping) or choice.get("type") not in TOOL_CHOICES:
        raise at("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'")
    if choice["type"] in FORCING_CHOICES and not names:
        raise InvalidRequest("tool_choice may only be specified while providing tools.")
    if choice["type"] == "tool" and choice.get("name") not in names:
        raise at("tool_choice.name", f"tool {choice.get('name')!r} is not among the tools provided")


def _check_system(request: Mapping[str, Any]) -> None:
    system = request.get("system")
    if system is None or system == "":
        return
    if isinstance(system, str):
        if not system.strip():
            raise at("system", "text content blocks must contain non-whitespace text")
        return
    if not isinstance(system, list):
        raise at("system", "Input should be a valid string or list of text blocks")
    for i, block in enumerate(system):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise at(f"system.{i}.type", "system blocks must be text blocks")
        check_text(f"system.{i}", block)


EFFORT_LEVELS = ("low", "medium", "high", "max")
XHIGH = "xhigh"  # Opus 4.7 and later only: the API refuses it for Opus 4.6 in the recorded traffic


def _check_effort(request: Mapping[str, Any]) -> None:
    config = request.get("output_config")
    if not isinstance(config, Mapping) or config.get("effort") is None:
        return
    effort = config["effort"]
    if effort == XHIGH and model_families.family_of(str(request.get("model"))) is model_families.CLAUDE_4:
        raise InvalidRequest(f"This model does not support effort level '{XHIGH}'. "
                             f"Supported levels: {', '.join(sorted(EFFORT_LEVELS))}.")
    if effort not in (*EFFORT_LEVELS, XHIGH):
        raise at("output_config.effort", "Input should be 'low', 'medium', 'high', 'xhigh' or 'max'")


def check_request(request: Any, *, max_output: int | None, provider: str = "anthropic") -> None:
    """Raise InvalidRequest with the API's wording if the request breaks a rule.

    `max_output` is the model's output limit; None for count_tokens, which takes no max_tokens.
    `provider` is whose rules apply where they differ (Bedrock and Vertex take fewer shapes).
    """
    if not isinstance(request, Mapping):
        raise InvalidRequest("the request body must be a JSON object")
    _check_fields(request, max_output)
    _check_sampling(request)
    _check_effort(request)
    check_thinking_param(request, request.get("max_tokens") if max_output is not None else None)
    _check_tool_choice(request, _check_tools(request))
    _check_system(request)
    check_messages(request["messages"], str(request.get("model", "")), provider)
    if max_output is not None and request.get("compaction") is None:  # a compaction request may end anywhere
        check_no_prefill(request["messages"], str(request["model"]))
    check_cache_controls(request)
    check_thinking_turn(request)
