"""Claude's own token count of a piece of text, from the `ctok` package when it is installed.

`ctok` (MIT, on PyPI) reconstructs the Messages API's tokenizers offline: one family for Claude 3
through Opus 4.6, one for Opus 4.7, one for Opus 4.8 and later. It counts a text as one user
message would be billed; this module takes away that message's frame, so what it returns is the
text's own tokens, the unit `api_count` adds up block by block. Where `ctok` is absent, `api_count`
falls back to o200k_base scaled per family (`o200k.py`), calibrated on recorded traffic.

Installing it:

- Python 3.12 and later: ``pip install "ctx_magic[exact]"``.
- Python 3.10 and 3.11: ctok declares Python 3.12, so pip refuses it, yet its code runs on 3.11
  (this repository's CI installs it this way). Its one dependency, `regex`, comes with tiktoken;
  install ctok with the check skipped: ``pip install --no-deps --ignore-requires-python "ctok>=1.3"``.

`%ctx status` says which counter is in use.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from importlib import metadata
from typing import Any

FRAME_TOKEN = "⟨pad⟩"  # ctok's notation for a token of the single-message frame
# Past this size, count evenly spaced windows and scale: ctok reads about 200 kB a second, and a
# megabyte of tool output would otherwise cost seconds for one estimate.
EXACT_COUNT_CHARS = 100_000
SAMPLE_WINDOWS = 4
SAMPLE_WINDOW_CHARS = 20_000
MEMO_SIZE = 16_384  # texts remembered: a growing conversation re-sends the same blocks each turn
PROBE_FAMILY = "3.0"  # the vocabulary that tells whether ctok loads at all

_LOADING = threading.Lock()  # a warm-up thread may be loading what the kernel's thread asks for
_loaded: dict[str, Any] = {}  # "module" (None: not available), and each family whose vocabulary is in


def _once(key: str, load: Callable[[], Any]) -> Any:
    """`load()`'s value, worked out once whichever thread asks first (a failure is not kept)."""
    if key not in _loaded:
        with _LOADING:
            if key not in _loaded:
                _loaded[key] = load()
    return _loaded[key]


def _ctok() -> Any | None:
    """The ctok module, or None where it is not installed or does not load; loaded once."""
    return _once("module", _load)


def _load() -> Any | None:
    try:
        import ctok

        ctok.token_count("a", PROBE_FAMILY)  # loads a vocabulary: a broken install fails here, once
        _loaded[PROBE_FAMILY] = True
        return ctok
    except Exception:  # noqa: BLE001 - any failure means "not available": the o200k fallback counts
        return None


def _with_family(family: str) -> Any:
    """ctok with `family`'s vocabulary loaded (about a quarter of a second the first time)."""
    module = _ctok()
    _once(family, lambda: module.token_count("a", family))
    return module


def warm(family: str) -> None:
    """Load ctok and `family`'s vocabulary now (from a thread: the first count then finds them).
    Whatever fails here fails again, and is reported, where the count is asked for."""
    try:
        if _ctok() is not None:
            _with_family(family)
    except Exception:  # noqa: BLE001 - a thread's error would print into whatever cell runs
        pass


def available() -> bool:
    return _ctok() is not None


def version() -> str:
    """ctok's installed version ("" when it is not available)."""
    if not available():
        return ""
    try:
        return metadata.version("ctok")
    except metadata.PackageNotFoundError:
        return "unknown version"


@functools.cache
def _frame(family: str) -> int:
    """The frame around one user message in this tokenizer family (7 tokens for Claude 3 to 4.6)."""
    return sum(token == FRAME_TOKEN for token in _with_family(family).tokenize("a", family))


@functools.lru_cache(maxsize=MEMO_SIZE)
def text_tokens(text: str, family: str) -> int:
    """Tokens of `text` in a ctok family ("3.0", "4.7", "4.8"), the message frame left out.
    Call only where `available()`."""
    if not text:
        return 0
    if len(text) > EXACT_COUNT_CHARS:
        step = (len(text) - SAMPLE_WINDOW_CHARS) / (SAMPLE_WINDOWS - 1)
        windows = [text[round(i * step): round(i * step) + SAMPLE_WINDOW_CHARS] for i in range(SAMPLE_WINDOWS)]
        sampled = sum(text_tokens(w, family) for w in windows)
        return math.ceil(sampled * len(text) / (SAMPLE_WINDOWS * SAMPLE_WINDOW_CHARS))
    return max(1, _with_family(family).token_count(text, family) - _frame(family))
