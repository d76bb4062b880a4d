"""Secret detection for long-term memory (SPEC X1: memories are never secrets).

`find_secret(text)` names the first kind of credential it sees, or returns None. It errs on
the side of refusing: a memory wrongly refused costs a rephrase, a key written to a markdown
file beside the notebook can end up in a commit.
"""

from __future__ import annotations

import math
import re
from collections import Counter

# Shapes of well-known credentials, most specific first (sk-ant- before sk-).
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key block", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")),
    ("an Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{16,}")),
    ("an API key (sk-...)", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")),
    ("a Stripe key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("a bearer token", re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{16,}", re.IGNORECASE)),
    ("credentials in a URL", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:[^\s/@]{3,}@", re.IGNORECASE)),
)

# `password=...`, `passwd: ...`, `token = "..."`: a credential-like name assigned a value.
_ASSIGNMENT = re.compile(
    r"\b(?P<name>password|passwd|pwd|passphrase|secret|client[_-]?secret|token|access[_-]?token|auth[_-]?token"
    r"|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key)\b\s*[=:]\s*[\"']?(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)
# Values that stand for a secret without being one.
_PLACEHOLDER = re.compile(
    r"^(?:none|null|nil|true|false|empty|xxx+|\*+|\.\.\.|<[^>]*>?|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|os\.\S*|getenv\S*"
    r"|env\[\S*|your[_-]\S*|changeme|redacted|hidden)$",
    re.IGNORECASE,
)
MIN_ASSIGNED_CHARS = 3  # "pw=1" is noise; "pw=abc" may already be someone's password

# Long random-looking strings: at least this long, with upper, lower and digits mixed, and
# more bits per character than English or hex (hex tops out at 4.0: commit ids pass).
_TOKENISH = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
HIGH_ENTROPY_MIN_CHARS = 32
HIGH_ENTROPY_BITS_PER_CHAR = 4.3


def shannon_bits(text: str) -> float:
    """Bits of entropy per character of `text`, from its own character frequencies."""
    if not text:
        return 0.0
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _looks_random(token: str) -> bool:
    if len(token) < HIGH_ENTROPY_MIN_CHARS:
        return False
    classes = (any(c.islower() for c in token), any(c.isupper() for c in token), any(c.isdigit() for c in token))
    return all(classes) and shannon_bits(token) >= HIGH_ENTROPY_BITS_PER_CHAR


def find_secret(text: str) -> str | None:
    """The kind of secret `text` holds ("an AWS access key id", ...), or None if it looks clean."""
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    for match in _ASSIGNMENT.finditer(text):
        value = match.group("value")
        if len(value) >= MIN_ASSIGNED_CHARS and not _PLACEHOLDER.match(value):
            return f"a value assigned to {match.group('name').lower()}"
    for token in _TOKENISH.findall(text):
        if _looks_random(token):
            return "a long random-looking string (a key or token?)"
    return None
