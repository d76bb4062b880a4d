"""`CtxMagic`: every setting of ctx_magic declared once, as a traitlets trait with its help and
its bounds, settable with `%config CtxMagic.x = y` and listed with its help by `%config CtxMagic`.

A value outside a trait's bounds is refused by traitlets itself with one line; `to_settings`
makes the frozen `Settings` the engine and the loop read.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from traitlets import Bool, CaselessStrEnum, Float, Int, TraitError, Unicode, validate
from traitlets.config import Configurable
from traitlets.utils.descriptions import class_of

from ctx_magic.memory.store import check_team_name
from ctx_magic.prices import Prices
from ctx_magic.settings import (
    AGENT_CELLS,
    AGENT_CELLS_MODES,
    APPEND_ONLY,
    APPEND_ONLY_MODES,
    CACHE_TTL,
    CACHE_TTL_SECONDS,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MODEL,
    IMAGE_MAX_BYTES,
    KEEP_RECENT,
    KERNEL_INVENTORY_TOKENS,
    MAX_RETRIES,
    MEMORY_BUDGET_TOKENS,
    MEMORY_REVIEW,
    MEMORY_REVIEWS,
    MIN_CONTEXT_WINDOW,
    MIN_REPLY_TOKENS,
    MIN_STALL_SECONDS,
    MIN_THINKING_BUDGET,
    PERMISSION,
    PERMISSIONS,
    PIN_BUDGET_TOKENS,
    PROVIDER,
    PROVIDERS,
    SNIP_MAX_MESSAGES,
    STALL_SECONDS,
    STRATEGIES,
    STRATEGY,
    TEAM_REVIEW,
    THINKING,
    THINKING_BUDGET,
    THINKING_MODES,
    Settings,
)

MAX_RETRIES_LIMIT = 10  # each retry waits longer: past ten a failing call would hold the cell for minutes


class FiniteFloat(Float):  # type: ignore[misc]
    """A Float that is a number: nan passes every bound (it compares false with all of them) and
    inf is no setting anyone means, so both are refused in the same one line as a value out of bounds."""

    def validate(self, obj: Any, value: Any) -> Any:
        value = super().validate(obj, value)
        if not math.isfinite(value):
            raise TraitError(f"The value of the '{self.name}' trait of {class_of(obj)} instance should be a finite "
                             f"number, but a value of {value!r} was specified")
        return value


class _ZeroMeans:
    """A number whose 0 asks for the automatic value; any other value is held to the bounds."""

    def __init__(self, default_value: Any, *, zero_means: str, **kwargs: Any) -> None:
        super().__init__(default_value, **kwargs)  # type: ignore[call-arg]
        self.zero_means = zero_means

    def validate(self, obj: Any, value: Any) -> Any:
        try:
            return super().validate(obj, value)  # type: ignore[misc]
        except TraitError as error:
            if value == 0 and not isinstance(value, bool):
                return type(self.default_value)(0)  # type: ignore[attr-defined]
            raise TraitError(f"{error} (or 0: {self.zero_means})") from None


class ZeroOrInt(_ZeroMeans, Int):  # type: ignore[misc]
    """An Int that is 0 (the automatic value) or within `min` and `max`."""


class ZeroOrFloat(_ZeroMeans, FiniteFloat):  # type: ignore[misc]
    """A Float that is 0 (the automatic value) or within `min` and `max`."""


def _choice(default: str, choices: tuple[str, ...], help_text: str) -> CaselessStrEnum:
    return CaselessStrEnum(list(choices), default_value=default, help=help_text).tag(config=True)


class CtxMagic(Configurable):
    """ctx_magic's settings for this kernel (`%config CtxMagic` lists them with their help)."""

    model = Unicode(DEFAULT_MODEL, help="Model id sent to the Messages API.").tag(config=True)
    context_window = ZeroOrInt(0, min=MIN_CONTEXT_WINDOW, zero_means="ask the Models API", help=(
        "Context window in tokens; 0 asks the Models API (falling back to a built-in table).")).tag(config=True)
    max_output_tokens = Int(DEFAULT_MAX_OUTPUT, min=MIN_REPLY_TOKENS, help=(
        "Cap on each reply, in tokens (also capped by the model and to a quarter of the window).")).tag(config=True)
    autocompact_pct = ZeroOrFloat(0.0, min=1, max=100, zero_means="the default threshold", help=(
        "Auto-compact at this percent of the effective window (0 = the default threshold).")).tag(config=True)
    keep_recent = Int(KEEP_RECENT, min=1, help=(
        "Most recent tool results that microcompact always keeps.")).tag(config=True)
    idle_minutes = ZeroOrFloat(0.0, min=0.01, zero_means="the cache TTL", help=(
        "Idle minutes after which old tool results are cleared (0 = the prompt-cache TTL).")).tag(config=True)
    cache_ttl = _choice(CACHE_TTL, tuple(CACHE_TTL_SECONDS), "Prompt-cache TTL asked for: '5m' or '1h'.")
    snip_max_messages = Int(SNIP_MAX_MESSAGES, min=10, help=(
        "Live messages past which the middle of the conversation is snipped.")).tag(config=True)
    clear_at_least = Int(0, min=0, help=(
        "Tokens a pressure microcompact must free to be worth a cache break (0 = 20,000, scaled down for "
        "small windows).")).tag(config=True)
    storage_dir = Unicode("", help=(
        "Folder for sessions and memories; empty = .ctx_magic beside the notebook (or the working "
        "folder).")).tag(config=True)
    permission = _choice(PERMISSION, PERMISSIONS, "Running code: 'ask' before each run, 'auto' runs, 'off' refuses.")
    image_max_bytes = Int(IMAGE_MAX_BYTES, min=0, help=(
        "Largest image (bytes, base64) a cell output may send to the model.")).tag(config=True)
    user_memory_dir = Unicode("", help=(
        "Folder of the user-scope long-term memories; empty = the per-user data folder "
        "(platformdirs).")).tag(config=True)
    memory_budget_tokens = Int(MEMORY_BUDGET_TOKENS, min=0, help=(
        "Tokens of long-term memories put in the system prompt.")).tag(config=True)
    idle_timer = Bool(True, help="Also check for an idle gap from a timer thread (in memory only).").tag(config=True)
    max_retries = Int(MAX_RETRIES, min=0, max=MAX_RETRIES_LIMIT, help=(
        "Retries the anthropic SDK makes on 429, 5xx and failed connections.")).tag(config=True)
    show_tool_output = Bool(True, help="Show the agent's tool calls and their outputs in the cell.").tag(config=True)
    thinking = _choice(THINKING, THINKING_MODES, (
        "Extended thinking: 'off', 'enabled' (thinking_budget tokens) or 'adaptive' (where the model takes it)."))
    thinking_budget = Int(THINKING_BUDGET, min=MIN_THINKING_BUDGET, help=(
        "Tokens of thinking per call, reserved on top of the reply cap (capped at a quarter of the "
        "window).")).tag(config=True)
    provider = _choice(PROVIDER, PROVIDERS, (
        "Who serves Claude: 'anthropic', 'bedrock' (AWS credentials) or 'vertex' (Google credentials)."))
    region = Unicode("", help=(
        "Bedrock's AWS region or Vertex's location; empty = AWS_REGION / CLOUD_ML_REGION.")).tag(config=True)
    project = Unicode("", help=(
        "Vertex's Google Cloud project; empty = ANTHROPIC_VERTEX_PROJECT_ID or the credentials' "
        "own.")).tag(config=True)
    aws_profile = Unicode("", help=(
        "AWS profile for Bedrock; empty = the environment's credentials (AWS_ACCESS_KEY_ID, "
        "AWS_PROFILE).")).tag(config=True)
    strategy = _choice(STRATEGY, STRATEGIES, (
        "'client': ctx_magic clears and compacts; 'server': the API does (context edits, server compaction)."))
    prices = Unicode("", help=(
        "Contract prices, USD per million tokens, e.g. 'input=2.5 output=12'; empty = the price "
        "table.")).tag(config=True)
    pin_budget_tokens = Int(PIN_BUDGET_TOKENS, min=0, help=(
        "Tokens all pins together may take; a pin past it is refused (pins are re-injected after every "
        "summary).")).tag(config=True)
    kernel_inventory_tokens = Int(KERNEL_INVENTORY_TOKENS, min=0, help=(
        "Tokens of the kernel's live state (variables, shapes, columns) the agent gets after a compaction; "
        "0 = none.")).tag(config=True)
    agent_cells = _choice(AGENT_CELLS, AGENT_CELLS_MODES, (
        "The agent's code as notebook cells: 'button' puts an Insert as cell action beside each block it runs, "
        "'insert' places each block as a cell below the %%agent cell by itself, 'off' neither."))
    stall_seconds = FiniteFloat(STALL_SECONDS, min=MIN_STALL_SECONDS, help=(
        "Seconds without output after a line that looks like a prompt ([Y/n], Password:, Continue?) before the "
        "agent's running code counts as stalled; input() and getpass() count at once.")).tag(config=True)
    append_only = _choice(APPEND_ONLY, APPEND_ONLY_MODES, (
        "Append-only conversations (system prompt and tools fixed, news appended, an edit drops the thinking "
        "after it): 'auto' where the model checks the prefix of the thinking sent back (the model catalog), "
        "'on' or 'off' to force it for a gateway's or an unknown model id."))

    team = Unicode("", help=(
        "Your team's name: with team_memory_dir, long-term memories about the shared data and code go to "
        "the team's folder and every member's sessions read them; empty = no team memory.")).tag(config=True)
    team_memory_dir = Unicode("", help=(
        "A folder every member of the team reaches (a shared home, a mounted volume); the team's memories "
        "are in its subfolder named after the team. It must exist: it is never created.")).tag(config=True)
    author = Unicode("", help=(
        "Your name on the team memories you add; empty = JupyterHub's user name, else the OS "
        "user. Other members see a name that differs from the file's OS owner marked as claimed.")).tag(config=True)
    team_review = Bool(TEAM_REVIEW, help=(
        "Facts that extraction finds for the team wait in your own folder until you accept them "
        "(%memory review, %memory accept ID); off = they go to the team's folder at once. %memory add --team "
        "always goes at once.")).tag(config=True)
    memory_review = _choice(MEMORY_REVIEW, MEMORY_REVIEWS, (
        "'ask': every memory extraction finds (at a session's end, %memory extract) waits, in no prompt, until "
        "you keep it (%memory pending, keep ID, edit ID TEXT, discard ID, or the panel's buttons); 'off': "
        "stored at once (facts for the team then follow team_review)."))

    @validate("team")
    def _team_name(self, proposal: dict[str, Any]) -> str:
        name = proposal["value"].strip()
        if name:
            try:
                check_team_name(name)
            except ValueError as error:
                raise TraitError(f"team: {error}") from None
        return name

    @validate("prices")
    def _prices_parse(self, proposal: dict[str, Any]) -> str:
        try:
            Prices.parse(proposal["value"])
        except ValueError as error:
            raise TraitError(f"prices: {error}") from None
        return proposal["value"]

    def to_settings(self) -> Settings:
        """The current values as the one frozen Settings the engine and the loop read."""
        return Settings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Settings)})

    def describe(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in sorted(self.trait_names(config=True))}
