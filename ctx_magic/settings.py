"""ctx_magic's settings: one frozen value, every default a named constant defined here.

The notebook's traitlets config (`CtxMagic`) maps onto these fields one for one; the engine,
the loop and the notebook read them from a `Settings`. The window and the reply cap the
session works with are resolved once, by `Settings.resolve`, from these and the model's limits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctx_magic.prices import Prices

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MAX_OUTPUT = 16_384  # room for a long answer without reserving a large share of the window
KEEP_RECENT = 5  # timeBasedMCConfig: the five most recent results stay (SPEC L3)
CLEAR_AT_LEAST = 20_000  # a cache break must free at least this much to be worth it (scaled by T5)
SNIP_MAX_MESSAGES = 200  # SPEC L2: past this many live messages the middle is snipped
CACHE_TTL = "5m"  # the API's default prompt-cache lifetime
CACHE_TTL_MINUTES = {"5m": 5.0, "1h": 60.0}
PERMISSIONS = ("ask", "auto", "off")
PERMISSION = "ask"  # a person is at the notebook: ask before running code
IMAGE_MAX_BYTES = 1_000_000  # base64 bytes of one image from a cell output
MEMORY_BUDGET_TOKENS = 2_000  # memories in the system prompt: the size of one session-notes section (X3, seeds 004)
MAX_RETRIES = 2  # the anthropic SDK's own default for 429, 5xx and failed connections
MIN_REPLY_TOKENS = 256  # a reply cap below this cannot hold a useful answer
REPLY_SHARE_OF_WINDOW = 4  # the reply cap is at most a quarter of the window, so a small one keeps room
MIN_CONTEXT_WINDOW = 4_096  # below this not even the system prompt and tools fit beside a reply
THINKING_MODES = ("off", "enabled", "adaptive")  # the API's thinking types, and none
THINKING = "off"  # thinking costs output tokens on every call: the user turns it on
THINKING_BUDGET = 8_000  # room to reason through a step without reserving a large share of the window
MIN_THINKING_BUDGET = 1_024  # the API's smallest budget_tokens
PROVIDERS = ("anthropic", "bedrock", "vertex")
PROVIDER = "anthropic"
STRATEGIES = ("client", "server")
STRATEGY = "client"  # ctx_magic's own layers; 'server' hands clearing and compaction to the API
CONTEXT_EDITS = ("clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112")
PIN_BUDGET_TOKENS = 2_000  # the size of one session-notes section (S1, seeds 004): pins never crowd a summary
KERNEL_INVENTORY_TOKENS = 500  # a dozen tables and arrays with their columns: under 10% of a summarized context


@dataclass(frozen=True)
class ModelLimits:
    """What a model allows, as the Models API (or the built-in table) reports it."""

    window: int
    max_output: int
    source: str  # models-api | table
    thinking_types: tuple[str, ...] = ("enabled", "adaptive")
    """The thinking types the model accepts ('enabled' takes a budget, 'adaptive' decides itself)."""
    long_window: int = 0
    """A larger window the model opens with a beta header (0: none)."""
    long_context_beta: str = ""
    """The beta header that opens `long_window`."""
    context_edits: tuple[str, ...] = CONTEXT_EDITS
    """The server-side context-management strategies the model takes."""


@dataclass(frozen=True)
class Window:
    """The window and reply cap in force for a session, resolved once."""

    tokens: int
    reply_cap: int
    source: str  # config | models-api | table
    thinking: str = "off"
    """The thinking type sent: off, enabled or adaptive (what the model takes of the setting)."""
    thinking_budget: int = 0
    """Tokens reserved for thinking on top of the reply cap (0 without thinking)."""
    betas: tuple[str, ...] = ()
    """Beta headers the window needs (the 1M window of Sonnet 4 / 4.5)."""

    @property
    def max_tokens(self) -> int:
        """What a main call asks for: the reply cap plus the thinking budget (the API counts
        thinking inside max_tokens)."""
        return self.reply_cap + self.thinking_budget


def _bounded(low: float, high: float | None = None, *, zero_means: str = "") -> dict[str, Any]:
    return {"min": low, "max": high, "zero_means": zero_means}


@dataclass(frozen=True)
class Settings:
    """Every setting of ctx_magic, with its default."""

    model: str = DEFAULT_MODEL
    """Model id sent to the Messages API."""
    context_window: int = field(default=0, metadata=_bounded(MIN_CONTEXT_WINDOW, zero_means="ask the Models API"))
    """Context window in tokens; 0 asks the Models API (falling back to a built-in table)."""
    max_output_tokens: int = field(default=DEFAULT_MAX_OUTPUT, metadata=_bounded(MIN_REPLY_TOKENS))
    """Cap on each reply, in tokens (also capped by the model and to a quarter of the window)."""
    autocompact_pct: float = field(default=0.0, metadata=_bounded(1, 100, zero_means="the default threshold"))
    """Auto-compact at this percent of the effective window (0 = the default threshold)."""
    keep_recent: int = field(default=KEEP_RECENT, metadata=_bounded(1))
    """Most recent tool results that microcompact always keeps."""
    idle_minutes: float = field(default=0.0, metadata=_bounded(0.01, zero_means="the cache TTL"))
    """Idle minutes after which old tool results are cleared (0 = the prompt-cache TTL)."""
    cache_ttl: str = field(default=CACHE_TTL, metadata={"choices": tuple(CACHE_TTL_MINUTES)})
    """Prompt-cache TTL asked for: '5m' or '1h'."""
    snip_max_messages: int = field(default=SNIP_MAX_MESSAGES, metadata=_bounded(10))
    """Live messages past which the middle of the conversation is snipped."""
    clear_at_least: int = field(default=0, metadata=_bounded(1, zero_means="20,000 scaled to small windows"))
    """Tokens a pressure microcompact must free to be worth a cache break (0 = 20,000 scaled, T5)."""
    storage_dir: str = ""
    """Folder for sessions and memories; empty = .ctx_magic beside the notebook (or the working folder)."""
    permission: str = field(default=PERMISSION, metadata={"choices": PERMISSIONS})
    """Running code: 'ask' before each run, 'auto' runs, 'off' refuses."""
    image_max_bytes: int = field(default=IMAGE_MAX_BYTES, metadata=_bounded(0))
    """Largest image (bytes, base64) a cell output may send to the model."""
    user_memory_dir: str = ""
    """Folder of the user-scope long-term memories; empty = the per-user data folder (platformdirs)."""
    memory_budget_tokens: int = field(default=MEMORY_BUDGET_TOKENS, metadata=_bounded(0))
    """Tokens of long-term memories put in the system prompt."""
    idle_timer: bool = True
    """Also check for an idle gap from a timer thread (in memory only)."""
    max_retries: int = field(default=MAX_RETRIES, metadata=_bounded(0, 10))
    """Retries the anthropic SDK makes on 429, 5xx and failed connections."""
    show_tool_output: bool = True
    """Show the agent's tool calls and their outputs in the cell."""
    thinking: str = field(default=THINKING, metadata={"choices": THINKING_MODES})
    """Extended thinking: 'off', 'enabled' (thinking_budget tokens) or 'adaptive' (where the model takes it)."""
    thinking_budget: int = field(default=THINKING_BUDGET, metadata=_bounded(MIN_THINKING_BUDGET))
    """Tokens of thinking per call, reserved on top of the reply cap (capped at a quarter of the window)."""
    provider: str = field(default=PROVIDER, metadata={"choices": PROVIDERS})
    """Who serves Claude: 'anthropic', 'bedrock' (AWS credentials) or 'vertex' (Google credentials)."""
    region: str = ""
    """Bedrock's AWS region or Vertex's location; empty = AWS_REGION / CLOUD_ML_REGION."""
    project: str = ""
    """Vertex's Google Cloud project; empty = ANTHROPIC_VERTEX_PROJECT_ID or the credentials' own."""
    aws_profile: str = ""
    """AWS profile for Bedrock; empty = the environment's credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE)."""
    strategy: str = field(default=STRATEGY, metadata={"choices": STRATEGIES})
    """'client': ctx_magic clears and compacts; 'server': the API does (context edits, server compaction)."""
    prices: str = field(default="", metadata={"parse": Prices.parse})
    """Contract prices, USD per million tokens, e.g. 'input=2.5 output=12'; empty = the price table."""
    pin_budget_tokens: int = field(default=PIN_BUDGET_TOKENS, metadata=_bounded(0))
    """Tokens all pins together may take; a pin past it is refused (pins are re-injected after every summary)."""
    kernel_inventory_tokens: int = field(default=KERNEL_INVENTORY_TOKENS, metadata=_bounded(0))
    """Tokens of the kernel's live state (variables, shapes, columns) the agent gets after a compaction; 0 = none."""

    @property
    def idle_seconds(self) -> float:
        """The idle gap that clears old results: the setting, else the prompt-cache TTL."""
        return 60 * (self.idle_minutes or CACHE_TTL_MINUTES[self.cache_ttl])

    @property
    def cache_ttl_seconds(self) -> float:
        return 60 * CACHE_TTL_MINUTES[self.cache_ttl]

    def thinking_mode(self, limits: ModelLimits) -> str:
        """The thinking type to send: the setting when the model takes it, else the type it
        does take (a budget where adaptive is not offered, adaptive where a budget is refused)."""
        if self.thinking == "off" or not limits.thinking_types:
            return "off"
        return self.thinking if self.thinking in limits.thinking_types else limits.thinking_types[0]

    def resolve(self, limits: ModelLimits) -> Window:
        """The window (a configured one wins; past the model's standard window, the beta header
        that opens its long window goes with it), the reply cap (the setting, capped by the
        model's maximum and by a quarter of the window) and the thinking budget on top of it
        (the setting, capped by a quarter of the window and by what the model's output leaves)."""
        window = self.context_window or limits.window
        source = "config" if self.context_window else limits.source
        long = self.context_window > limits.window and bool(limits.long_window and limits.long_context_beta)
        betas = (limits.long_context_beta,) if long else ()
        quarter = window // REPLY_SHARE_OF_WINDOW
        cap = max(MIN_REPLY_TOKENS, min(self.max_output_tokens, limits.max_output, quarter))
        mode = self.thinking_mode(limits)
        budget = 0
        if mode != "off":
            budget = max(MIN_THINKING_BUDGET, min(self.thinking_budget, quarter))
            if cap + budget > limits.max_output:  # short of room: thinking gets its minimum, the reply the rest
                budget = max(MIN_THINKING_BUDGET, limits.max_output - cap)
                cap = max(MIN_REPLY_TOKENS, min(cap, limits.max_output - budget))
                budget = max(0, min(budget, limits.max_output - cap))
            mode = mode if budget >= MIN_THINKING_BUDGET or mode == "adaptive" else "off"
        return Window(window, cap, source, mode, budget if mode != "off" else 0, betas)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Settings:
        """The settings named in `values` (others at their defaults); unknown names are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


DEFAULTS = Settings()
"""Every setting at its default (where a lower floor needs one without a Settings at hand)."""


def setting_problem(name: str, value: Any) -> str | None:
    """One clear line when `value` is outside what the setting `name` accepts, else None."""
    spec = next((f for f in dataclasses.fields(Settings) if f.name == name), None)
    if spec is None:
        return None
    meta = spec.metadata
    if "choices" in meta and value not in meta["choices"]:
        return f"{name} must be one of {', '.join(map(repr, meta['choices']))}, got {value!r}"
    if "parse" in meta:
        try:
            meta["parse"](value)
        except ValueError as error:
            return f"{name}: {error}"
        return None
    if "min" not in meta or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    low, high, zero = meta["min"], meta["max"], meta["zero_means"]
    if zero and value == 0:
        return None
    if value < low or (high is not None and value > high):
        span = f"between {low:,} and {high:,}" if high is not None else f"at least {low:,}"
        allowed = f"{span} (or 0: {zero})" if zero else span
        return f"{name} must be {allowed}; got {value:,}"
    return None
