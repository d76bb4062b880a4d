"""What ctx_magic knows about Claude models when the Models API cannot tell it: windows, output
limits, the thinking types each accepts, which need a beta header for their long window, which
take the server's context edits and compaction (at a threshold, or on demand), which check the
prefix of the thinking sent back to them, and their ids on Bedrock and Vertex.

The Models API is asked first (agent/model.py); this table is the fallback, and the only source
on Bedrock and Vertex, whose SDK clients have no Models API. Figures from each model's overview
page on platform.claude.com and the context-window, extended-thinking, context-editing and
compaction pages (read 2026-10): the 5 and 5.5 families and Opus 4.6-4.8 / Sonnet 4.6 have a 1M
window and 128k output natively; Sonnet 4 and 4.5 have 200k, and 1M with the
`context-1m-2025-08-07` beta header (billed at long-context rates above 200k prompt tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from ctx_magic.prices import canonical_model
from ctx_magic.settings import ALWAYS_THINKS, CONTEXT_EDITS, ModelLimits

ONE_MILLION = 1_000_000
STANDARD_WINDOW = 200_000
LONG_CONTEXT_BETA = "context-1m-2025-08-07"  # opens the 1M window of Sonnet 4 / 4.5
FALLBACK_LIMITS = (200_000, 32_000)  # an unknown model: the common window, a modest output cap

ADAPTIVE = ("adaptive",)
BUDGET = ("enabled",)
BOTH = ("adaptive", "enabled")
EDITS = ("clear_tool_uses_20250919", "clear_thinking_20251015")  # context editing: 4.x and later
EDITS_AND_COMPACTION = CONTEXT_EDITS  # server compaction: Opus / Sonnet 4.6 and later


@dataclass(frozen=True)
class ModelSpec:
    """One row of the fallback table, matched by id prefix (longest first)."""

    prefix: str
    window: int
    max_output: int
    thinking: tuple[str, ...]
    edits: tuple[str, ...] = EDITS
    long_window: int = 0
    long_context_beta: str = ""
    bedrock_id: str = ""
    """Bedrock's id when it is not `anthropic.<id>`."""
    vertex_id: str = ""
    """Vertex's id when it is not the first-party id."""
    prefix_check: bool = False
    """Every thinking block sent back must come after the same `system`, `tools` and messages as
    when it was written, else it (and all thinking after it) is refused or dropped."""
    on_demand: bool = False
    """The API writes a summary on demand (the top-level `compaction` parameter): the on-demand
    compaction page lists the model."""
    thinking_off: str = ""
    """What thinking 'off' sends to a model that thinks unasked (ModelLimits.thinking_off)."""
    budget_deprecated: bool = False
    """A thinking budget is deprecated on the model (ModelLimits.budget_deprecated)."""

    def limits(self) -> ModelLimits:
        return ModelLimits(self.window, self.max_output, "table", thinking_types=self.thinking,
                           long_window=self.long_window, long_context_beta=self.long_context_beta,
                           context_edits=self.edits, prefix_check=self.prefix_check, thinking_off=self.thinking_off,
                           budget_deprecated=self.budget_deprecated)


_M = ONE_MILLION
MODEL_TABLE: tuple[ModelSpec, ...] = (
    ModelSpec("claude-fable-5-1", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, prefix_check=True, on_demand=True,
              thinking_off=ALWAYS_THINKS),
    ModelSpec("claude-fable-5-2", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, prefix_check=True,
              thinking_off=ALWAYS_THINKS),
    ModelSpec("claude-mythos-5-1", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, prefix_check=True, on_demand=True,
              thinking_off=ALWAYS_THINKS),
    ModelSpec("claude-mythos-5-2", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, prefix_check=True,
              thinking_off=ALWAYS_THINKS),
    ModelSpec("claude-opus-5-5", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, prefix_check=True, on_demand=True,
              thinking_off=ALWAYS_THINKS),
    ModelSpec("claude-sonnet-5-5", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, prefix_check=True, on_demand=True,
              thinking_off="between_tools"),  # "disabled" is a 400 there; this is its least thinking
    ModelSpec("claude-haiku-5-5", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, prefix_check=True, on_demand=True,
              thinking_off="disabled"),  # at its default effort (medium); xhigh and max refuse it
    ModelSpec("claude-fable-5", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, on_demand=True,
              thinking_off=ALWAYS_THINKS),  # "disabled" is a 400
    ModelSpec("claude-mythos-5", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, on_demand=True,
              thinking_off=ALWAYS_THINKS),
    ModelSpec("claude-mythos-preview", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, on_demand=True,
              thinking_off=ALWAYS_THINKS),
    ModelSpec("claude-opus-5", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, on_demand=True),  # 5.5: thinking always on
    # a thinking budget is a 400 from Sonnet 5 on
    ModelSpec("claude-sonnet-5", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, on_demand=True),
    ModelSpec("claude-haiku-5", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION),
    ModelSpec("claude-opus-4-8", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, on_demand=True),
    ModelSpec("claude-opus-4-7", _M, 128_000, ADAPTIVE, EDITS_AND_COMPACTION, on_demand=True),
    # a thinking budget is deprecated on the 4.6 models, adaptive thinking recommended
    ModelSpec("claude-opus-4-6", _M, 128_000, BOTH, EDITS_AND_COMPACTION, on_demand=True, budget_deprecated=True),
    ModelSpec("claude-sonnet-4-6", _M, 128_000, BOTH, EDITS_AND_COMPACTION, on_demand=True, budget_deprecated=True),
    ModelSpec("claude-opus-4-5", STANDARD_WINDOW, 64_000, BUDGET, bedrock_id="anthropic.claude-opus-4-5-20251101-v1:0",
              vertex_id="claude-opus-4-5@20251101"),
    ModelSpec("claude-opus-4-1", STANDARD_WINDOW, 32_000, BUDGET, bedrock_id="anthropic.claude-opus-4-1-20250805-v1:0",
              vertex_id="claude-opus-4-1@20250805"),
    ModelSpec("claude-opus-4", STANDARD_WINDOW, 32_000, BUDGET, bedrock_id="anthropic.claude-opus-4-20250514-v1:0",
              vertex_id="claude-opus-4@20250514"),
    ModelSpec("claude-sonnet-4-5", STANDARD_WINDOW, 64_000, BUDGET, long_window=_M, long_context_beta=LONG_CONTEXT_BETA,
              bedrock_id="anthropic.claude-sonnet-4-5-20250929-v1:0", vertex_id="claude-sonnet-4-5@20250929"),
    ModelSpec("claude-sonnet-4", STANDARD_WINDOW, 64_000, BUDGET, long_window=_M, long_context_beta=LONG_CONTEXT_BETA,
              bedrock_id="anthropic.claude-sonnet-4-20250514-v1:0", vertex_id="claude-sonnet-4@20250514"),
    ModelSpec("claude-haiku-4-5", STANDARD_WINDOW, 64_000, BUDGET,
              bedrock_id="anthropic.claude-haiku-4-5-20251001-v1:0", vertex_id="claude-haiku-4-5@20251001"),
    ModelSpec("claude-3-7-sonnet", STANDARD_WINDOW, 64_000, BUDGET, (),
              bedrock_id="anthropic.claude-3-7-sonnet-20250219-v1:0", vertex_id="claude-3-7-sonnet@20250219"),
    ModelSpec("claude-3-5-haiku", STANDARD_WINDOW, 8_192, (), (), bedrock_id="anthropic.claude-3-5-haiku-20241022-v1:0",
              vertex_id="claude-3-5-haiku@20241022"),
    ModelSpec("claude-3-5-sonnet", STANDARD_WINDOW, 8_192, (), (),
              bedrock_id="anthropic.claude-3-5-sonnet-20241022-v2:0", vertex_id="claude-3-5-sonnet-v2@20241022"),
)


def model_spec(model: str) -> ModelSpec | None:
    """The table's row for a model id (a provider's id is read as its first-party id)."""
    name = canonical_model(model)
    rows = [spec for spec in MODEL_TABLE if name.startswith(spec.prefix)]
    return max(rows, key=lambda spec: len(spec.prefix), default=None)


def checks_thinking_prefix(model: str) -> bool:
    """Whether the model runs the prefix check on the thinking blocks sent back to it."""
    spec = model_spec(model)
    return spec is not None and spec.prefix_check


ON_DEMAND_PROVIDERS = ("anthropic", "vertex")
"""The platforms the on-demand compaction page lists that ctx_magic speaks to: Anthropic's API and
Google Cloud's Vertex AI. Not Amazon Bedrock, whose requests refuse a conversation opening with the
assistant message the summary comes back as."""


def compacts_on_demand(model: str, provider: str) -> bool:
    """Whether ctx_magic asks the API for a summary on demand rather than writing its own: a model
    the on-demand compaction page lists, on a platform it lists."""
    spec = model_spec(model)
    return provider in ON_DEMAND_PROVIDERS and spec is not None and spec.on_demand


def table_limits(model: str) -> ModelLimits:
    spec = model_spec(model)
    if spec is None:
        return ModelLimits(*FALLBACK_LIMITS, "table")
    return spec.limits()


def provider_model_id(model: str, provider: str) -> str:
    """The id a provider knows a model by. An id that already names a provider's model (a dot,
    an '@', a ':' or an ARN) is sent as it is; a first-party id is mapped."""
    if provider == "anthropic" or any(mark in model for mark in (".", "@", ":", "/")):
        return model
    spec = model_spec(model)
    if provider == "bedrock":
        return spec.bedrock_id if spec is not None and spec.bedrock_id else f"anthropic.{model}"
    if provider == "vertex":
        return spec.vertex_id if spec is not None and spec.vertex_id else model
    return model
