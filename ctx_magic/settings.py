"""ctx_magic's settings as one frozen value, every default a named constant defined here.

The user sets them as traits of the notebook's `CtxMagic` (notebook/config.py: each one's help
and bounds), which makes a `Settings` of them; the engine, the loop and the notebook read that.
The window and the reply cap a session works with are resolved once, by `Settings.resolve`,
from these and the model's limits.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MAX_OUTPUT = 16_384  # room for a long answer without reserving a large share of the window
KEEP_RECENT = 5  # Claude Code: the five most recent results stay when microcompact clears
CLEAR_AT_LEAST = 20_000  # a cache break must free at least this much to be worth it (scaled to the window)
SNIP_MAX_MESSAGES = 200  # snip: past this many live messages the middle is snipped
CACHE_TTL = "5m"  # the API's default prompt-cache lifetime
CACHE_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
PERMISSIONS = ("ask", "auto", "off")
PERMISSION = "ask"  # a person is at the notebook: ask before running code
IMAGE_MAX_BYTES = 1_000_000  # base64 bytes of one image from a cell output
# Extraction's facts for the team wait for a member's accept: the model wrote them from a conversation
# that holds whatever a notebook printed, and the team folder reaches every member's prompt.
TEAM_REVIEW = True
MEMORY_REVIEWS = ("off", "ask")
MEMORY_REVIEW = "off"  # extraction stores what it finds, as it always has: 'ask' is for a person who reviews
MEMORY_BUDGET_TOKENS = 2_000  # memories in the system prompt: the size of one session-notes section (as in Claude Code)
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
PIN_BUDGET_TOKENS = 2_000  # the size of one session-notes section (as in Claude Code): pins never crowd a summary
KERNEL_INVENTORY_TOKENS = 500  # a dozen tables and arrays with their columns: under 10% of a summarized context
AGENT_CELLS_MODES = ("off", "button", "insert")
AGENT_CELLS = "button"  # offered, not imposed: cells appear only where the person asks for them
STALL_SECONDS = 45.0  # silence after a prompt before a run counts as stalled: long enough for a compile's pauses
MIN_STALL_SECONDS = 1.0  # below this a run between two prints would look stalled
APPEND_ONLY_MODES = ("auto", "on", "off")
APPEND_ONLY = "auto"  # the model catalog knows which models check the prefix of the thinking sent back


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
    prefix_check: bool = False
    """The model checks the prefix of every thinking block sent back: the `system`, the `tools` and
    every message before it must be what they were when the block was written."""


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
    append_only: bool = False
    """The conversation is append-only: the system prompt and tools fixed, news appended, and
    every edit of what was sent drops the thinking after it (the model's prefix check)."""

    @property
    def max_tokens(self) -> int:
        """What a main call asks for: the reply cap plus the thinking budget (the API counts
        thinking inside max_tokens)."""
        return self.reply_cap + self.thinking_budget


@dataclass(frozen=True)
class Settings:
    """Every setting of ctx_magic at its default, as the engine and the loop read it. Each one is
    declared for the user once, as a trait of the notebook's `CtxMagic` (notebook/config.py),
    with its help and its bounds; `CtxMagic.to_settings` makes this value of them."""

    model: str = DEFAULT_MODEL
    context_window: int = 0
    max_output_tokens: int = DEFAULT_MAX_OUTPUT
    autocompact_pct: float = 0.0
    keep_recent: int = KEEP_RECENT
    idle_minutes: float = 0.0
    cache_ttl: str = CACHE_TTL
    snip_max_messages: int = SNIP_MAX_MESSAGES
    clear_at_least: int = 0
    storage_dir: str = ""
    permission: str = PERMISSION
    image_max_bytes: int = IMAGE_MAX_BYTES
    user_memory_dir: str = ""
    memory_budget_tokens: int = MEMORY_BUDGET_TOKENS
    idle_timer: bool = True
    max_retries: int = MAX_RETRIES
    show_tool_output: bool = True
    thinking: str = THINKING
    thinking_budget: int = THINKING_BUDGET
    provider: str = PROVIDER
    region: str = ""
    project: str = ""
    aws_profile: str = ""
    strategy: str = STRATEGY
    prices: str = ""
    pin_budget_tokens: int = PIN_BUDGET_TOKENS
    kernel_inventory_tokens: int = KERNEL_INVENTORY_TOKENS
    agent_cells: str = AGENT_CELLS
    stall_seconds: float = STALL_SECONDS
    team: str = ""
    team_memory_dir: str = ""
    author: str = ""
    team_review: bool = TEAM_REVIEW
    memory_review: str = MEMORY_REVIEW
    append_only: str = APPEND_ONLY

    @property
    def idle_seconds(self) -> float:
        """The idle gap that clears old results: the setting (given in minutes), else the
        prompt-cache TTL. Everything past the settings counts in seconds."""
        return 60 * self.idle_minutes if self.idle_minutes else self.cache_ttl_seconds

    @property
    def cache_ttl_seconds(self) -> float:
        return CACHE_TTL_SECONDS[self.cache_ttl]

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
        return Window(window, cap, source, mode, budget if mode != "off" else 0, betas,
                      self.is_append_only(limits))

    def is_append_only(self, limits: ModelLimits) -> bool:
        """Whether conversations are append-only: the setting, or with 'auto' the model's prefix check."""
        return limits.prefix_check if self.append_only == "auto" else self.append_only == "on"
