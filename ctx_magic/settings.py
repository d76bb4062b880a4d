"""ctx_magic's settings as one frozen value: each declared once, as a field of `Settings` with
its default, its help and its bounds (`setting`).

The notebook's `CtxMagic` (notebook/config.py) makes a traitlets trait of each field, so the user
sets them with `%config CtxMagic.x = y`, and a new `Settings` whenever one changes; the engine,
the loop, the memory and the notebook all read that value. The window and the reply cap a session
works with are resolved once, by `Settings.resolve`, from these and the model's limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CLEAR_AT_LEAST = 20_000  # a cache break must free at least this much to be worth it (scaled to the window)
CACHE_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
MIN_REPLY_TOKENS = 256  # a reply cap below this cannot hold a useful answer
REPLY_SHARE_OF_WINDOW = 4  # the reply cap is at most a quarter of the window, so a small one keeps room
MIN_CONTEXT_WINDOW = 4_096  # below this not even the system prompt and tools fit beside a reply
MIN_THINKING_BUDGET = 1_024  # the API's smallest budget_tokens
MIN_STALL_SECONDS = 1.0  # below this a run between two prints would look stalled
MAX_RETRIES_LIMIT = 10  # each retry waits longer: past ten a failing call would hold the cell for minutes
CONTEXT_EDITS = ("clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112")


def setting(default: Any, help: str, *, min: float | None = None, max: float | None = None,
            choices: tuple[str, ...] = (), zero_means: str = "") -> Any:
    """A field of `Settings` declared for the user too: its default, its help, its bounds (`min`,
    `max`; `choices` for a word; `zero_means`: 0 is allowed outside the bounds and means this).
    The notebook's `CtxMagic` makes its trait of them."""
    return field(default=default, metadata={"help": help, "min": min, "max": max, "choices": choices,
                                            "zero_means": zero_means})


ALWAYS_THINKS = "always"
"""A model's `thinking_off` when nothing turns its thinking off (it thinks on every request)."""
MODEL_DEFAULT = "default"
"""A window's `thinking_off` with thinking 'auto' on a model that thinks unasked: nothing is sent,
and the model thinks as it does by default."""
TURNED_DOWN = ("disabled", "between_tools")
"""The `thinking` types that turn down a model's own thinking."""


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
    thinking_off: str = ""
    """What thinking 'off' sends to a model that thinks when a request has no `thinking`: the type
    that turns it down ('disabled', or 'between_tools' where that is the least it takes), ALWAYS_THINKS
    where nothing does; '' for a model that thinks only when asked."""
    budget_deprecated: bool = False
    """The model takes a thinking budget ('enabled') only as deprecated: 'adaptive' is recommended."""


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
    thinking_off: str = ""
    """Where no thinking is asked for, what the model does unasked: with 'off' the type sent to turn
    it down (TURNED_DOWN), with 'auto' MODEL_DEFAULT (nothing sent, it thinks), ALWAYS_THINKS
    either way on a model nothing turns down; '' where it thinks only when asked."""

    @property
    def max_tokens(self) -> int:
        """What a main call asks for: the reply cap plus the thinking budget (the API counts
        thinking inside max_tokens)."""
        return self.reply_cap + self.thinking_budget


@dataclass(frozen=True)
class Settings:
    """Every setting of ctx_magic, declared here once: its default, its help and its bounds. The
    notebook's `CtxMagic` makes a trait of each field (`%config CtxMagic.x = y`) and a new value of
    this class whenever one changes; every part reads this value."""

    model: str = setting("claude-sonnet-5-5", "Model id sent to the Messages API.")
    context_window: int = setting(0, "Context window in tokens; 0 asks the Models API (falling back to a built-in "
                                     "table).", min=MIN_CONTEXT_WINDOW, zero_means="ask the Models API")
    max_output_tokens: int = setting(16_384, "Cap on each reply, in tokens (also capped by the model and to a quarter "
                                             "of the window).", min=MIN_REPLY_TOKENS)
    """Room for a long answer without reserving a large share of the window."""
    autocompact_pct: float = setting(0.0, "Auto-compact at this percent of the effective window (0 = the default "
                                          "threshold).", min=1, max=100, zero_means="the default threshold")
    keep_recent: int = setting(5, "Most recent tool results that microcompact always keeps.", min=1)
    """Claude Code keeps the five most recent results when microcompact clears."""
    idle_minutes: float = setting(0.0, "Idle minutes after which old tool results are cleared (0 = the prompt-cache "
                                       "TTL).", min=0.01, zero_means="the cache TTL")
    cache_ttl: str = setting("5m", "Prompt-cache TTL asked for: '5m' or '1h'.", choices=tuple(CACHE_TTL_SECONDS))
    """The API's default prompt-cache lifetime."""
    snip_max_messages: int = setting(200, "Live messages past which the middle of the conversation is snipped.",
                                     min=10)
    clear_at_least: int = setting(0, "Tokens a pressure microcompact must free to be worth a cache break (0 = 20,000, "
                                     "scaled down for small windows).", min=0)
    storage_dir: str = setting("", "Folder for sessions and memories; empty = .ctx_magic beside the notebook (or the "
                                   "working folder).")
    permission: str = setting("ask", "Running code: 'ask' before each run, 'auto' runs, 'off' refuses.",
                              choices=("ask", "auto", "off"))
    """A person is at the notebook: ask before running code."""
    image_max_bytes: int = setting(1_000_000, "Largest image (bytes, base64) a cell output may send to the model.",
                                   min=0)
    user_memory_dir: str = setting("", "Folder of the user-scope long-term memories; empty = the per-user data folder "
                                       "(platformdirs).")
    memory_budget_tokens: int = setting(2_000, "Tokens of long-term memories put in the system prompt.", min=0)
    """The size of one session-notes section, as in Claude Code."""
    idle_timer: bool = setting(True, "Also check for an idle gap from a timer thread (in memory only).")
    max_retries: int = setting(2, "Retries the anthropic SDK makes on 429, 5xx and failed connections.",
                               min=0, max=MAX_RETRIES_LIMIT)
    """The anthropic SDK's own default."""
    show_tool_output: bool = setting(True, "Show the agent's tool calls and their outputs in the cell.")
    thinking: str = setting("auto", "Extended thinking: 'auto' (the model's own default: none, or adaptive on the "
                                    "models that think unasked), 'off' (the least the model takes), 'enabled' "
                                    "(thinking_budget tokens) or 'adaptive' (where the model takes it).",
                            choices=("auto", "off", "enabled", "adaptive"))
    """Thinking costs output tokens on every call: the model's own default, nothing more, until the user asks."""
    thinking_budget: int = setting(8_000, "Tokens of thinking per call, reserved on top of the reply cap (capped at a "
                                          "quarter of the window).", min=MIN_THINKING_BUDGET)
    """Room to reason through a step without reserving a large share of the window."""
    provider: str = setting("anthropic", "Who serves Claude: 'anthropic', 'bedrock' (AWS credentials) or 'vertex' "
                                         "(Google credentials).", choices=("anthropic", "bedrock", "vertex"))
    region: str = setting("", "Bedrock's AWS region or Vertex's location; empty = AWS_REGION / CLOUD_ML_REGION.")
    project: str = setting("", "Vertex's Google Cloud project; empty = ANTHROPIC_VERTEX_PROJECT_ID or the "
                               "credentials' own.")
    aws_profile: str = setting("", "AWS profile for Bedrock; empty = the environment's credentials "
                                   "(AWS_ACCESS_KEY_ID, AWS_PROFILE).")
    strategy: str = setting("client", "'client': ctx_magic clears and compacts; 'server': the API does (context "
                                      "edits, server compaction).", choices=("client", "server"))
    prices: str = setting("", "Contract prices, USD per million tokens, e.g. 'input=2.5 output=12'; empty = the price "
                              "table.")
    pin_budget_tokens: int = setting(2_000, "Tokens all pins together may take; a pin past it is refused (pins are "
                                            "re-injected after every summary).", min=0)
    """The size of one session-notes section, as in Claude Code: pins never crowd a summary."""
    kernel_inventory_tokens: int = setting(500, "Tokens of the kernel's live state (variables, shapes, columns) the "
                                                "agent gets after a compaction; 0 = none.", min=0)
    """A dozen tables and arrays with their columns: under 10% of a summarized context."""
    agent_cells: str = setting("button", "The agent's code as notebook cells: 'button' puts an Insert as cell action "
                                         "beside each block it runs, 'insert' places each block as a cell below the "
                                         "%%agent cell by itself, 'off' neither.", choices=("off", "button", "insert"))
    """Offered, not imposed: cells appear only where the person asks for them."""
    stall_seconds: float = setting(45.0, "Seconds without output after a line that looks like a prompt ([Y/n], "
                                         "Password:, Continue?) before the agent's running code counts as stalled; "
                                         "input() and getpass() count at once.", min=MIN_STALL_SECONDS)
    """Long enough for a compile's pauses."""
    team: str = setting("", "Your team's name: with team_memory_dir, long-term memories about the shared data and "
                            "code go to the team's folder and every member's sessions read them; empty = no team "
                            "memory.")
    team_memory_dir: str = setting("", "A folder every member of the team reaches (a shared home, a mounted volume); "
                                       "the team's memories are in its subfolder named after the team. It must exist: "
                                       "it is never created.")
    author: str = setting("", "Your name on the team memories you add; empty = JupyterHub's user name, else the OS "
                              "user. Other members see a name that differs from the file's OS owner marked as "
                              "claimed.")
    team_review: bool = setting(True, "Facts that extraction finds for the team wait in your own folder until you "
                                      "accept them (%memory review, %memory accept ID); off = they go to the team's "
                                      "folder at once. %memory add --team always goes at once.")
    """The model wrote them from a conversation that holds whatever a notebook printed, and the
    team folder reaches every member's prompt."""
    memory_review: str = setting("off", "'ask': every memory extraction finds (at a session's end, %memory extract) "
                                        "waits, in no prompt, until you keep it (%memory pending, keep ID, edit ID "
                                        "TEXT, discard ID, or the panel's buttons); 'off': stored at once (facts for "
                                        "the team then follow team_review).", choices=("off", "ask"))
    """Extraction stores what it finds, as it always has: 'ask' is for a person who reviews."""
    append_only: str = setting("auto", "Append-only conversations (system prompt and tools fixed, news appended, an "
                                       "edit drops the thinking after it): 'auto' where the model checks the prefix "
                                       "of the thinking sent back (the model catalog), 'on' or 'off' to force it for "
                                       "a gateway's or an unknown model id.", choices=("auto", "on", "off"))

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
        if self.thinking in ("off", "auto") or not limits.thinking_types:
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
                      self.is_append_only(limits), self._unasked(limits) if mode == "off" else "")

    def _unasked(self, limits: ModelLimits) -> str:
        """Window.thinking_off: what a model that thinks unasked does where no thinking is asked for."""
        if self.thinking == "auto" and limits.thinking_off in TURNED_DOWN:
            return MODEL_DEFAULT
        return limits.thinking_off

    def is_append_only(self, limits: ModelLimits) -> bool:
        """Whether conversations are append-only: the setting, or with 'auto' the model's prefix check."""
        return limits.prefix_check if self.append_only == "auto" else self.append_only == "on"


DEFAULTS = Settings()
"""Every setting at its default, for a part that needs one before the user's settings reach it."""
