"""How generated a string looks: the entropy net of secret detection (net 4 in `secrets`), and
the tests the other nets use to tell a generated key from words, identifiers and paths.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator

_LETTER_RUN = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
# Net 4, long random-looking strings: at least this long, with upper, lower and digits mixed, and
# more bits per character than English or hex (hex tops out at 4.0: commit ids pass). A random
# 32-character base62 key has 4.5 on average; 4.2 lets 98.6 % of them be caught (4.3: 95 %)
# with no more false alarms on the corpus (python benchmarks/secret_check.py).
_TOKENISH = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
HIGH_ENTROPY_MIN_CHARS = 32
HIGH_ENTROPY_BITS_PER_CHAR = 4.2
# A folder path mixes cases and digits too (/Users/JaneDoe/ChurnAnalysis2024/data): segments of
# CamelCase or lowercase words are a path; random base64 has segments like "K7MDENG" or "bPxRf".
_PATH_SEGMENT = re.compile(r"[A-Za-z][a-z]*(?:[A-Z][a-z]+)*[0-9]*|[a-z0-9_.-]+")
MIN_PATH_SEGMENTS = 3
# An identifier reads as words: its runs of letters (Token, Count, For, Model, Limit) average 4.6
# characters; random base62 breaks into runs of 1-2 (Xk29fLq0Zm3Nw8Yt: 1.8). Of 20,000 random
# strings of 16-40 characters, 41 (1 in 500) average 4 or more.
WORDS_MEAN_RUN = 4.0
MIN_LETTER_KEY_CHARS = 16  # a named value of letters alone is a key from this length, if not words

def shannon_bits(text: str) -> float:
    """Bits of entropy per character of `text`, from its own character frequencies."""
    if not text:
        return 0.0
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def is_path(token: str) -> bool:
    segments = [s for s in token.split("/") if s]
    return len(segments) >= MIN_PATH_SEGMENTS and all(_PATH_SEGMENT.fullmatch(s) for s in segments)


def reads_as_words(token: str) -> bool:
    """An identifier or a name made of words (CamelCase, snake_case), not random characters."""
    runs = _LETTER_RUN.findall(token)
    return bool(runs) and sum(map(len, runs)) / len(runs) >= WORDS_MEAN_RUN


def mixed_kinds(token: str) -> bool:
    """Upper case, lower case and digits all present: how generated keys look."""
    return any(c.islower() for c in token) and any(c.isupper() for c in token) and any(c.isdigit() for c in token)


def random_glued(value: str) -> bool:
    """A value glued to a word or a name: a key only if it looks generated, not like more words."""
    return mixed_kinds(value) and not reads_as_words(value)


def random_letters(value: str) -> bool:
    """A value named as a key that has no digit (1 random 32-character base62 key in 280 has none):
    long, both cases, and not words run together (RefreshAccessTokenHandler)."""
    return (len(value) >= MIN_LETTER_KEY_CHARS and any(c.islower() for c in value)
            and any(c.isupper() for c in value) and value.isalpha() and not reads_as_words(value))


def looks_random(token: str) -> bool:
    if len(token) < HIGH_ENTROPY_MIN_CHARS or is_path(token) or reads_as_words(token):
        return False
    return mixed_kinds(token) and shannon_bits(token) >= HIGH_ENTROPY_BITS_PER_CHAR


def random_tokens(text: str) -> Iterator[str]:
    """The long runs of key characters in `text` that look random, in order."""
    for token in _TOKENISH.findall(text):
        if looks_random(token):
            yield token
