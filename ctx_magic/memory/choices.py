"""What the member chose about their long-term memories (the prompt's budget, the team, review),
one frozen value the memory manager is built or reconfigured with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctx_magic.settings import MEMORY_BUDGET_TOKENS, MEMORY_REVIEW, TEAM_REVIEW


@dataclass(frozen=True)
class MemorySettings:
    budget_tokens: int = MEMORY_BUDGET_TOKENS
    """Tokens of the system prompt the memories may fill."""
    team_root: Path | None = None
    """The folder every member reaches (`CtxMagic.team_memory_dir`); None: no team memory."""
    team_name: str = ""
    author: str = ""
    """Who this member is on team memories; empty: `default_author()`."""
    team_review: bool = TEAM_REVIEW
    """Extraction proposes team memories (in `proposals`) and the member accepts them."""
    memory_review: str = MEMORY_REVIEW
    """'ask': everything extraction finds waits (in `pending_stores`) until the member keeps it."""
