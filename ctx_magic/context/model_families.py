"""Claude's tokenizer families: which one a model id belongs to, the frame the API builds around it,
and how its text is counted.

Text is counted with Claude's own tokenizer, reconstructed offline by the `ctok` package, in the
family the model uses (`claude_tokenizer`). Where ctok is not installed, text is counted with a
public tokenizer (o200k_base, see `o200k_tokens`) scaled by a factor per family, calibrated on
recorded traffic; `exact_counter` is the one place that chooses. The figures fitted on recorded
traffic were fitted on one half of it (split by file) and checked on the other half
(`benchmarks/calibration.py` prints both); `api_count` adds up a request's parts with them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import threading
from dataclasses import dataclass

from ctx_magic.context import claude_tokenizer
from ctx_magic.context.o200k import o200k_tokens


@dataclass(frozen=True)
class Family:
    """One tokenizer generation and the prompt framing the API builds around it."""

    name: str
    tokenizer: str
    """The family's name in ctok ("3.0", "4.7", "4.8"), for counting text exactly."""
    text_factor: float
    """Without ctok: API tokens per o200k token of ordinary text (prose, code, JSON, logs)."""
    frame: int
    """A request holding one user message costs this much beyond the message's text."""
    tool_prompt_auto: int
    """The hidden tool-use system prompt when tool_choice is auto or none."""
    tool_prompt_forced: int
    """The same when tool_choice is any or tool (the model must call one)."""
    image_long_edge: int
    """Images are scaled down to fit this many pixels on their longer side ..."""
    image_max_tokens: int
    """... and to at most this many tokens."""
    adaptive_thinking_prompt: int = 17
    """Adaptive thinking's own instructions (Opus 4.6 with and without it: 31 and 14 tokens; the
    newer family's recorded requests show none)."""
    tool_markup: float = 1.0
    """A tool call's and result's markup (their wrappers, each parameter's tags) against the Claude
    4 family's, which the Claude Code deltas measured."""


# The tokenizer Claude 3 through Opus 4.6 (Sonnet 4.x, Haiku 4.5) share. The frame (7) and the
# role-change cost are exact on every recorded request of one text block per message. The text
# factor is the best of 1.00 to 1.20 on the fitted half of the cassettes' requests without server
# tools (the Claude Code deltas' tool results alone give 1.14: code and logs count a little denser
# than prose). The tool prompt is what the recorded usage shows today: larger than the 346 (auto,
# none) and 313 (any, tool) tokens Anthropic's "tool use pricing and tokens" page lists for the
# Claude 4 models; requests recorded earlier show a prompt about 180 tokens shorter.
CLAUDE_4 = Family("claude-4", "3.0", text_factor=1.10, frame=7, tool_prompt_auto=497, tool_prompt_forced=589,
                  image_long_edge=1568, image_max_tokens=1600)
# Anthropic's token-counting docs: Opus 4.7 and later Opus models, Sonnet 5 and the 5.x family use a
# newer tokenizer that makes about 30 % more tokens of the same text. The factor is the best of 1.30 to
# 1.55 on the fitted half of these models' cassettes (27 % over Claude 4's); the frame is one token
# shorter; the tool prompt (auto) lies between what the recorded requests show (Opus 4.8, Opus 5 and
# Fable 5 about 385-392, with rows of their own in api_count; Sonnet 5 about 450), forced adds the Claude 4
# models' gap in this family's unit. The vision docs give these models a larger native resolution (2,576
# pixels on the long edge). A tool round's markup is shorter in this tokenizer: each round a request
# adds beyond its first message costs 9 to 11 tokens less than the Claude 4 family's 53 (call, one
# parameter, result) on the fitted half's Opus 5 and Opus 4.8 conversations: 43 of 53.
CLAUDE_5 = Family("claude-5", "4.8", text_factor=1.40, frame=6, tool_prompt_auto=440, tool_prompt_forced=555,
                  image_long_edge=2576, image_max_tokens=4784, adaptive_thinking_prompt=0, tool_markup=43 / 53)
# Opus 4.7 alone: the newer vocabulary under a longer frame (ctok measures 11 tokens around one
# user message, against 6 for Opus 4.8 and later).
OPUS_4_7 = dataclasses.replace(CLAUDE_5, name="claude-opus-4-7", tokenizer="4.7", frame=11)

# claude-<name>-<major>[-<minor>][-<date>], or the older claude-<major>[-<minor>]-<name>[-<date>]
_MODEL = re.compile(r"claude-(?:(\d+)(?:-(\d))?-)?(opus|sonnet|haiku|fable|mythos)"
                    r"(?:-(\d{1,2})(?!\d)(?:-(\d)(?!\d))?)?")


def names_a_family(model: str) -> bool:
    """Whether a model id names a Claude model family (opus, sonnet, haiku, fable, mythos)."""
    return _MODEL.search(model) is not None


def model_version(model: str) -> tuple[str, int, int] | None:
    """(name, major, minor) of a Claude model id (`claude-sonnet-4-6` -> ("sonnet", 4, 6)), None
    for an id that names no family."""
    match = _MODEL.search(model)
    if match is None:
        return None
    return match.group(3), int(match.group(4) or match.group(1) or 0), int(match.group(5) or match.group(2) or 0)


@functools.lru_cache(maxsize=256)
def family_of(model: str | None) -> Family:
    """The tokenizer family of a model id; an id we cannot read counts as the newest family."""
    match = _MODEL.search(model or "")
    if match is None:
        return CLAUDE_5
    major = int(match.group(4) or match.group(1) or 0)
    minor = int(match.group(5) or match.group(2) or 0)
    name = match.group(3)
    if name in ("fable", "mythos") or major >= 5:
        return CLAUDE_5
    if name == "opus" and (major, minor) == (4, 7):
        return OPUS_4_7
    if name == "opus" and (major, minor) > (4, 7):
        return CLAUDE_5
    return CLAUDE_4


def keeps_thinking(model: str | None) -> bool:
    """Whether the model keeps earlier turns' thinking in its context. Anthropic's extended
    thinking docs: Claude Opus 4.5 and later keep it; earlier models drop it, counting only the
    thinking of the turn in progress (the last assistant message, during a tool loop)."""
    family = family_of(model)
    if family is not CLAUDE_4:
        return True
    match = _MODEL.search(model or "")
    if match is None or match.group(3) != "opus":
        return False
    return (int(match.group(4) or match.group(1) or 0), int(match.group(5) or match.group(2) or 0)) >= (4, 5)


# -- text -------------------------------------------------------------------------------------

COUNTER_VARIABLE = "CTX_MAGIC_TOKEN_COUNTER"  # "o200k" counts with the fallback even where ctok is installed


@functools.cache
def exact_counter() -> bool:
    """Whether text is counted with Claude's own tokenizer (ctok) rather than o200k scaled: the one
    place that chooses, for the stand-in and the client's estimate alike."""
    return os.environ.get(COUNTER_VARIABLE) != "o200k" and claude_tokenizer.available()


def warm_up(model: str) -> threading.Thread:
    """Load the counter `model` uses in a daemon thread: ctok's vocabularies take about half a
    second, which the first turn would otherwise wait for while the person types the first cell."""
    def load() -> None:
        if exact_counter():
            claude_tokenizer.warm(family_of(model).tokenizer)

    thread = threading.Thread(target=load, name="ctx_magic-counter-warm-up", daemon=True)
    thread.start()
    return thread


def counter_name() -> str:
    """Which counter is in use, in a few words (`%ctx status`)."""
    if exact_counter():
        return f"Claude's tokenizer (ctok {claude_tokenizer.version()})"
    return "o200k scaled per model family (ctok not installed)"


def text_tokens(text: str, family: Family, kind: float = 1.0) -> int:
    """Tokens of a piece of text as the family's tokenizer counts it. Without ctok, o200k scaled,
    and `kind` scales it further for text o200k counts sparser than Claude's tokenizer does (tool
    arguments, thinking)."""
    if not text:
        return 0
    if exact_counter():
        return claude_tokenizer.text_tokens(text, family.tokenizer)
    return math.ceil(o200k_tokens(text) * family.text_factor * kind)
