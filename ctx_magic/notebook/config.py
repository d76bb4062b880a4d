"""`CtxMagic`: every setting a typed, documented trait, settable with `%config CtxMagic.x = y`."""

from __future__ import annotations

from traitlets import Bool, CaselessStrEnum, Float, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from ctx_magic.agent.model import DEFAULT_MAX_OUTPUT, DEFAULT_MODEL
from ctx_magic.agent.session import AgentConfig


class CtxMagic(Configurable):
    """ctx_magic's settings for this kernel (see `%ctx config`)."""

    model = Unicode(DEFAULT_MODEL, help="Model id sent to the Messages API.").tag(config=True)
    context_window = Int(0, help="Context window in tokens; 0 asks the Models API.").tag(config=True)
    max_output_tokens = Int(DEFAULT_MAX_OUTPUT, help="Cap on each reply, in tokens.").tag(config=True)
    autocompact_pct = Float(
        0.0, help="Auto-compact at this percent of the effective window (0 = the default threshold)."
    ).tag(config=True)
    keep_recent = Int(5, help="Most recent tool results that microcompact always keeps.").tag(config=True)
    idle_minutes = Float(0.0, help="Idle minutes after which old tool results are cleared (0 = the cache TTL).").tag(
        config=True
    )
    cache_ttl = CaselessStrEnum(["5m", "1h"], default_value="5m", help="Prompt-cache TTL: '5m' or '1h'.").tag(
        config=True
    )
    storage_dir = Unicode(
        "", help="Folder for sessions and memories; empty = .ctx_magic beside the notebook (or the working folder)."
    ).tag(config=True)
    permission = CaselessStrEnum(
        ["ask", "auto", "off"], default_value="ask",
        help="Running code: 'ask' before each run, 'auto' runs, 'off' refuses.",
    ).tag(config=True)
    snip_max_messages = Int(200, help="Live messages past which the middle of the conversation is snipped.").tag(
        config=True
    )
    clear_at_least = Int(0, help="Tokens a pressure microcompact must free to be worth a cache break; "
                         "0 = 20,000 scaled to small windows.").tag(
        config=True
    )
    image_max_bytes = Int(1_000_000, help="Largest image (bytes, base64) a cell output may send to the model.").tag(
        config=True
    )
    user_memory_dir = Unicode(
        "", help="Folder of the user-scope long-term memories; empty = the per-user data folder (platformdirs)."
    ).tag(config=True)
    memory_budget_tokens = Int(2_000, help="Tokens of long-term memories put in the system prompt.").tag(config=True)
    idle_timer = Bool(True, help="Also check for an idle gap from a timer thread (in memory only).").tag(config=True)
    max_retries = Int(2, help="Retries the anthropic SDK makes on 429, 5xx and failed connections.").tag(config=True)
    show_tool_output = Bool(True, help="Show the agent's tool calls and their outputs in the cell.").tag(config=True)

    @validate("context_window", "max_output_tokens", "keep_recent", "snip_max_messages", "clear_at_least",
              "image_max_bytes", "max_retries", "idle_minutes", "memory_budget_tokens")
    def _non_negative(self, proposal):  # type: ignore[no-untyped-def]
        if proposal["value"] < 0:
            raise TraitError(f"{proposal['trait'].name} must be 0 or more, got {proposal['value']}")
        return proposal["value"]

    @validate("autocompact_pct")
    def _percent(self, proposal):  # type: ignore[no-untyped-def]
        value = proposal["value"]
        if not 0 <= value <= 100:
            raise TraitError(f"autocompact_pct is a percentage (0-100), got {value}")
        return value

    def agent_config(self, system_prompt: str | None = None) -> AgentConfig:
        config = AgentConfig(
            model=self.model,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            autocompact_pct=self.autocompact_pct,
            keep_recent=self.keep_recent,
            idle_minutes=self.idle_minutes,
            cache_ttl=self.cache_ttl,
            snip_max_messages=self.snip_max_messages,
            clear_at_least=self.clear_at_least,
        )
        if system_prompt:
            config.system_prompt = system_prompt
        return config

    def describe(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in sorted(self.trait_names(config=True))}
