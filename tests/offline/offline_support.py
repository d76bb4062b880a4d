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
