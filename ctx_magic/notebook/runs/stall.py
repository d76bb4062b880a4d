"""When a run is stalled: waiting for an answer nobody is going to type.

Pure rules, no clock of their own: a run is stalled when it calls `input()` or `getpass()`
(a known wait, reported at once: nothing else can answer it), or when it has printed nothing
for the threshold and the end of what it printed looks like a prompt. Long silent work whose
last line is not a prompt (a training loop between epochs) is never a stall.
"""

from __future__ import annotations

import re

TAIL_CHARS = 500  # the end of the output a prompt can be recognized in
SHOWN_TAIL_CHARS = 80  # the prompt quoted back to the agent and the user

PROMPT_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"[\[(]?\b(?:y(?:es)?/n(?:o)?|n(?:o)?/y(?:es)?)\b[\])]?\s*[:?]?\s*$", re.IGNORECASE),  # [Y/n], (yes/no)
    re.compile(r"\b(?:continue|proceed)\b[^\n]*\?\s*$", re.IGNORECASE),  # Continue? Proceed anyway?
    re.compile(r"\bpress\s+(?:any\s+key|a\s+key|enter|return)\b", re.IGNORECASE),
    re.compile(r"\bpassword\b[^\n]*:\s*$", re.IGNORECASE),
    re.compile(r"\bpassphrase\b[^\n]*:\s*$", re.IGNORECASE),  # an SSH key's passphrase
    re.compile(r"\boverwrite\b[^\n]*\?\s*(?:\[[^\]\n]*\]\s*)?$", re.IGNORECASE),
    re.compile(r"^\s*(?:\S+\s*)?[>$]\s*$"),  # a bare `>` or `$`, or a tool's own (`mysql>`, `sftp>`)
)


def last_line(text: str) -> str:
    """The line a terminal would show the cursor on: the last one with something on it (a
    carriage return rewrites its line, so only what follows the last one counts)."""
    for line in reversed(text.split("\n")):
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
        if line.strip():
            return line
    return ""


def looks_like_prompt(tail: str) -> bool:
    """Whether the end of a run's output asks for an answer."""
    line = last_line(tail[-TAIL_CHARS:])
    return bool(line) and any(pattern.search(line) for pattern in PROMPT_PATTERNS)


def is_stalled(*, now: float, last_output_at: float, threshold: float, tail: str, waiting: bool) -> bool:
    """A known wait (input(), getpass()) at once; otherwise silence past the threshold after a prompt."""
    if waiting:
        return True
    return now - last_output_at >= threshold and looks_like_prompt(tail)


def shown_prompt(tail: str) -> str:
    """The prompt as quoted in the stall's line: its last line, trimmed to a readable length."""
    line = last_line(tail[-TAIL_CHARS:]).strip()
    return line if len(line) <= SHOWN_TAIL_CHARS else "…" + line[-(SHOWN_TAIL_CHARS - 1):]
