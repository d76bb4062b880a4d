"""A TextModel (the memory package's model seam) over the real SDK and the offline server."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ctx_magic.agent.model import AnthropicModel
from ctx_magic.agent.request import build_request
from ctx_magic.messages import Message, user_text


@dataclass
class SdkTextModel:
    """The TextModel protocol over the real SDK model, the way the agent's side call does it."""

    model: AnthropicModel
    prompts: list[str] = field(default_factory=list)

    def complete(self, messages: Sequence[Message], prompt: str) -> str:
        self.prompts.append(prompt)
        request = build_request([*messages, user_text(prompt)], system="You are a data-science assistant.", tools=[],
                                max_tokens=4_096, cache_ttl="5m")
        reply = self.model.stream(request)
        return "".join(b.get("text", "") for b in reply.content if b.get("type") == "text")
