"""How the Messages API counts a request's input tokens, part by part, without asking it.

Text is counted in the tokenizer family of the model (`model_families`: Claude's own tokenizer
where ctok is installed, else o200k scaled per family). Everything around the text follows
what Anthropic's docs say and what recorded real traffic (requests with the API's own usage)
shows: a fixed frame per request, a few tokens where the speaker changes, tool definitions
rendered into a hidden system prompt with the tool-use instructions, tool calls and results in
their wrappers, images by their size. This module walks the request (its frame, tools, system
and messages); `block_count` counts each content block by its kind. Every figure names where it
comes from; the ones fitted on recorded traffic were fitted on one half of it (split by file) and
checked on the other half (`benchmarks/calibration.py` prints both).

Both sides use this module: the offline stand-in bills with it (usage, count_tokens,
prompt-too-long, the cache's minimum), the client estimates with it what no usage has measured.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ctx_magic.context.block_count import JsonObject, block_tokens, json_text, markup
from ctx_magic.context.model_families import (
    CLAUDE_4,
    Family,
    family_of,
    keeps_thinking,
    model_version,
    text_tokens,
)

# re-exported: the agent's session names the counter from here
from ctx_magic.context.model_families import counter_name as counter_name

# -- structure --------------------------------------------------------------------------------

ROLE_CHANGE = 3  # a message whose role differs from the one before it (the turn's header); exact in the traffic
SAME_ROLE = 1  # a message continuing the previous one's role: the API joins them with a separator
# Extended thinking with a budget adds 29 tokens of its own instructions (every request of the fitted
# half with it, counted exactly); adaptive thinking's are the family's, and only 2 beside the
# tool-use prompt (the fitted half's Opus 4.6 requests with tools).
THINKING_PROMPT = {"enabled": 29}
ADAPTIVE_THINKING_WITH_TOOLS = 2
TOOL_DEFINITION = 4  # each tool's tags around its JSON
# A definition a tool_reference loads into the conversation costs a few tokens more than the same
# definition among `tools`: a round whose result holds a reference is 5 to 7 tokens further under than
# a round without one, on the fitted half's Claude 4 conversations (Sonnet 4.5 and 4.6); in the Claude
# 4 family's markup unit, so the newer tokenizer's shorter markup applies.
TOOL_REFERENCE_WRAPPER = 6
# Server tools: the API adds its own instructions for each kind, which the client never sees.
# Measured on the cassettes' first requests with each kind (Claude 4 models; scaled by the
# family's text factor for others). A request whose server tool ran (a search made, a page
# fetched) is billed for the tool's own rounds too, which no count of the request can know.
SERVER_TOOL_PROMPTS = {
    "web_search": 2200,
    "web_fetch": 530,
    "code_execution": 4640,
    "bash_code_execution": 4640,
    "text_editor_code_execution": 4640,
    "memory": 1565,
    "tool_search_tool_bm25": 1070,
    "tool_search_tool_regex": 1070,
    "advisor": 1890,
    "mcp_toolset": 0,
}
SERVER_TOOL_DEFAULT = 1000
MCP_SERVER = 2600  # a remote MCP server's tool listing (mcp_servers), as the cassettes show it
STRUCTURED_OUTPUT_PROMPT = 107  # output_config.format / output_format: instructions around the schema


def render_tool(tool: JsonObject) -> str:
    """A custom tool as the API writes it into the prompt: one JSON object per tool."""
    spec: dict[str, Any] = {}
    if tool.get("description"):
        spec["description"] = tool["description"]
    spec["name"] = tool.get("name", "")
    spec["parameters"] = tool.get("input_schema", {})
    return json_text(spec)


def is_server_tool(tool: JsonObject) -> bool:
    """A tool the API runs itself (web search, code execution, ...), declared by a type, no schema."""
    kind = tool.get("type")
    return bool(kind) and kind != "custom" and "input_schema" not in tool


def _server_kind(tool_type: str) -> str:
    return re.sub(r"_\d{8}$", "", tool_type)


def server_tool_tokens(tool: JsonObject, family: Family = CLAUDE_4) -> int:
    """The instructions the API adds for one server tool (by its kind, the version left out)."""
    tokens = SERVER_TOOL_PROMPTS.get(_server_kind(str(tool.get("type"))), SERVER_TOOL_DEFAULT)
    return round(tokens * family.text_factor / CLAUDE_4.text_factor)


def tool_tokens(tool: JsonObject, family: Family) -> int:
    """One entry of `tools` as counted (a deferred tool costs nothing until a result loads it)."""
    if tool.get("defer_loading"):
        return 0
    if is_server_tool(tool):
        return server_tool_tokens(tool, family)
    return TOOL_DEFINITION + text_tokens(render_tool(tool), family)


# The hidden tool-use prompt (auto or none, any or tool) where a model's differs from its family's.
# Claude 3: Anthropic's "tool use pricing and tokens" table. Claude 4 models before 4.5 (Sonnet 4,
# Opus 4 and 4.1) keep the shorter prompt the Claude 4.5 models had in 2025: auto fitted on the
# fitted half's Sonnet 4 requests, any/tool the table's figure for Claude 4 (313). Opus 5 and
# Fable 5: auto fitted on the fitted half's Opus 5 requests (the first of each file, one message).
# Opus 4.8: auto fitted on the fitted half's Opus 4.8 conversations (each holds a system message
# loading a tool), 9 tokens over Opus 5's. Any/tool: auto and the family's gap.
EARLIER_CLAUDE_4 = (317, 313)
TOOL_PROMPTS: dict[tuple[str, int, int], tuple[int, int]] = {
    ("opus", 3, 0): (530, 281), ("sonnet", 3, 0): (159, 235), ("haiku", 3, 0): (264, 340),
    ("sonnet", 4, 0): EARLIER_CLAUDE_4, ("opus", 4, 0): EARLIER_CLAUDE_4, ("opus", 4, 1): EARLIER_CLAUDE_4,
    ("opus", 5, 0): (383, 498), ("fable", 5, 0): (383, 498), ("opus", 4, 8): (392, 507),
}


def tool_prompt_tokens(tools: Iterable[JsonObject], tool_choice: Any, family: Family, model: str | None = None) -> int:
    """The hidden tool-use system prompt: present once any custom tool is declared; its size is
    the model's (TOOL_PROMPTS) or else its family's, by tool_choice."""
    if not any(not is_server_tool(t) for t in tools):
        return 0
    forced = isinstance(tool_choice, Mapping) and tool_choice.get("type") in ("any", "tool")
    version = model_version(model or "")
    auto_and_forced = TOOL_PROMPTS.get(version) if version else None
    if auto_and_forced is None:
        auto_and_forced = (family.tool_prompt_auto, family.tool_prompt_forced)
    return auto_and_forced[1] if forced else auto_and_forced[0]


def message_overhead(role: str, previous_role: str | None) -> int:
    """What a message adds beyond its blocks: a header where the speaker changes."""
    if previous_role is None:
        return 0
    return SAME_ROLE if role == previous_role or role == "system" else ROLE_CHANGE


# -- the request ------------------------------------------------------------------------------

def _output_format(request: Mapping[str, Any]) -> Any:
    config = request.get("output_config")
    if isinstance(config, Mapping) and config.get("format"):
        return config["format"]
    return request.get("output_format")


def request_overhead(request: Mapping[str, Any], family: Family | None = None) -> int:
    """The request-level part: the frame, the tool-use prompt, thinking's and structured
    output's instructions."""
    family = family or family_of(request.get("model"))
    tools = [t for t in request.get("tools") or [] if isinstance(t, Mapping)]
    tokens = family.frame + tool_prompt_tokens(tools, request.get("tool_choice"), family, request.get("model"))
    tokens += MCP_SERVER * len(request.get("mcp_servers") or [])
    thinking = request.get("thinking")
    if isinstance(thinking, Mapping):
        kind = str(thinking.get("type"))
        adaptive = family.adaptive_thinking_prompt
        if any(not is_server_tool(t) for t in tools):
            adaptive = min(adaptive, ADAPTIVE_THINKING_WITH_TOOLS)
        tokens += adaptive if kind == "adaptive" else THINKING_PROMPT.get(kind, 0)
    output_format = _output_format(request)
    if output_format:
        tokens += STRUCTURED_OUTPUT_PROMPT + text_tokens(json_text(output_format), family)
    return tokens


def system_blocks(request: Mapping[str, Any]) -> list[JsonObject]:
    system = request.get("system")
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    return [b for b in system or [] if isinstance(b, Mapping)]


def message_blocks(message: Mapping[str, Any]) -> list[JsonObject]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, Mapping)]


def _turn_in_progress(messages: list[Mapping[str, Any]]) -> int:
    """The last assistant message if the turn is still going on (nothing after it, or only tool
    results answering it), else -1: a new user turn closes the previous turn's thinking."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
        if any(b.get("type") != "tool_result" for b in message_blocks(messages[i])):
            return -1
    return -1


def _references(block: JsonObject) -> Iterable[str]:
    """The tools a block loads by tool_reference (in a tool result, or a system message's addition)."""
    if block.get("type") == "tool_reference":
        yield str(block.get("tool_name", ""))
    inner = block.get("tool")
    if isinstance(inner, Mapping) and inner.get("type") == "tool_reference":  # a tool_addition names it `name`
        yield str(inner.get("name", inner.get("tool_name", "")))
    content = block.get("content")
    if isinstance(content, list):
        for item in content:
            if isinstance(item, Mapping):
                yield from _references(item)


def message_counts(request: Mapping[str, Any], family: Family | None = None) -> list[list[int]]:
    """Each message's blocks as counted, the message's header folded into its first block.
    Thinking the model no longer reads (an earlier turn's, for a model that drops it) counts 0;
    a tool's definition counts again where a tool_reference loads it, deferred or not (the API
    expands every reference: a count_tokens answer with a reference to a declared tool shows it)."""
    family = family or family_of(request.get("model"))
    loading = markup(TOOL_REFERENCE_WRAPPER, family)
    deferred = {str(t.get("name")): loading + tool_tokens({**t, "defer_loading": False}, family)
                for t in request.get("tools") or [] if isinstance(t, Mapping) and not is_server_tool(t)}
    messages = [m for m in request.get("messages") or [] if isinstance(m, Mapping)]
    keeps = keeps_thinking(request.get("model"))
    current = _turn_in_progress(messages)
    counts: list[list[int]] = []
    previous: str | None = None
    for i, message in enumerate(messages):
        role = str(message.get("role", ""))
        row = []
        for block in message_blocks(message):
            dropped = block.get("type") in ("thinking", "redacted_thinking") and not keeps and i != current
            loaded = sum(deferred.get(name, 0) for name in _references(block)) if deferred else 0
            row.append(0 if dropped else block_tokens(block, family) + loaded)
        header = message_overhead(role, previous)
        if row:
            row[0] += header
        counts.append(row)
        previous = role
    return counts


def request_tokens(request: Mapping[str, Any]) -> int:
    """All input tokens of a request, as count_tokens answers and a reply's usage adds up."""
    family = family_of(request.get("model"))
    tokens = request_overhead(request, family)
    tokens += sum(tool_tokens(t, family) for t in request.get("tools") or [] if isinstance(t, Mapping))
    tokens += sum(block_tokens(b, family) for b in system_blocks(request))
    return tokens + sum(sum(row) for row in message_counts(request, family))
