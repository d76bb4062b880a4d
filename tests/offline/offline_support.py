"""Shared pieces of the offline API tests: constants, a fake clock, request builders."""

from __future__ import annotations

from typing import Any

WINDOW = 20_000  # a small window, so prompt-too-long is cheap to reach
MAX_OUTPUT = 8_192
MODEL = "claude-offline-test"
PYTHON_TOOL: dict[str, Any] = {
    "name": "python",
    "description": "Run Python code in the notebook's kernel.",
    "input_schema": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
}


class FakeClock:
    """A clock that only moves when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def text_of(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def words(n: int, word: str = "alpha") -> str:
    """A text of exactly `n` tokens (each `word` after the first is " word": one token)."""
    return " ".join([word] * n)


def marked(text: str, ttl: str | None = "5m") -> dict[str, Any]:
    """A text block carrying a cache breakpoint (no ttl key when ttl is None)."""
    control: dict[str, Any] = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}
    return {"type": "text", "text": text, "cache_control": control}


def api_message(client: Any, body: dict[str, Any], betas: tuple[str, ...] = ()) -> Any:
    """POST a raw body to /v1/messages through the SDK (no client-side shaping of the body), with
    `betas` in the anthropic-beta header."""
    import anthropic

    options = {"headers": {"anthropic-beta": ",".join(betas)}} if betas else {}
    return client.post("/v1/messages", body=body, cast_to=anthropic.types.Message, options=options)


def refusal(error: Any) -> str:
    """The API's own message in an SDK status error: `error.message` of the body, read from the
    body itself, as every SDK version the project supports exposes it."""
    body = getattr(error, "body", None)
    inner = body.get("error") if isinstance(body, dict) else None
    return str(inner.get("message") or "") if isinstance(inner, dict) else ""
