"""The API's summaries sent back: its compaction blocks go back as they came, with the on-demand
beta on every request that carries one, where the model and platform take them; as text at the head
of the next user message where they do not (Bedrock, a model off the on-demand page) or where the
API refused one sent back (from then on, said in one line)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.agent.model import ModelRequest
from ctx_magic.context.prompts import extract_summary
from ctx_magic.context.server import COMPACTION_BETA, ON_DEMAND_BETA
from ctx_magic.errors import SummaryBlockRefused


@dataclass
class SummaryBlocks:
    """Whether the API's summaries (its compaction blocks) go back as blocks: until it refuses one
    sent back (a signature it no longer verifies, a beta it wants); from then on as text
    (`with_summaries`), which voids the thinking after them. The next main call takes out that
    thinking and says the refusal in one line (a side call may run in a thread)."""

    taken: bool = True
    voided: bool = False
    line: str = ""

    def refuse(self, error: SummaryBlockRefused) -> None:
        """From now on as text; raised again when they already went so."""
        if not self.taken:
            raise error
        self.taken, self.voided, self.line = False, True, f"{error} It goes as text from now on."

    def take_voided(self) -> bool:
        voided, self.voided = self.voided, False
        return voided

    def take_line(self) -> str:
        line, self.line = self.line, ""
        return line


def with_summaries(request: ModelRequest, betas: Sequence[str], *, carries: bool,
                   takes: bool) -> tuple[ModelRequest, tuple[str, ...]]:
    """The request as it sends the API's summaries (compaction blocks, which it `carries`) back, and
    its betas: with the on-demand beta (the page asks for it on every later request) where the model
    and platform take the block, else with each summary as text. The server's compaction beta covers
    its own blocks."""
    if COMPACTION_BETA in betas or not carries:
        return request, tuple(dict.fromkeys(betas))
    if takes:
        return request, tuple(dict.fromkeys([*betas, ON_DEMAND_BETA]))
    return dataclasses.replace(request, messages=summaries_as_text(request.messages)), tuple(dict.fromkeys(betas))


def summaries_as_text(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The messages with each assistant message that holds only the API's compaction blocks (its
    summary on demand) turned into the summary as text, at the head of the user message after it:
    what a model or platform that does not take the block reads instead (Bedrock's conversation must
    open with a user message). A breakpoint on the block stays on its text."""
    out: list[Mapping[str, Any]] = []
    carried: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message.get("role") == "assistant" and blocks and all(b.get("type") == "compaction" for b in blocks):
            carried += [_summary_text(b) for b in blocks if b.get("content")]
            continue
        if carried and message.get("role") == "user":
            head = [{"type": "text", "text": content}] if isinstance(content, str) else list(blocks)
            message, carried = {**message, "content": [*carried, *head]}, []
        out.append(message)
    if carried:
        out.append({"role": "user", "content": carried})
    return out


def _summary_text(block: Mapping[str, Any]) -> dict[str, Any]:
    content = str(block.get("content"))
    text: dict[str, Any] = {"type": "text", "text": f"Summary:\n{extract_summary(content) or content}"}
    if "cache_control" in block:
        text["cache_control"] = block["cache_control"]
    return text
