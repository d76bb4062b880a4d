"""Secret detection for long-term memory (memories are never secrets).

`find_secret(text)` names the first kind of credential it sees ("an AWS access key id", "a
password in plain words"), never the credential itself, or returns None. Four nets, in order:

1. known formats: cloud and service keys by their prefixes, JWTs, PEM private keys,
   connection strings carrying `user:password@`;
2. a credential's name given a value in code or config (`DB_PASSWORD=...`, `api_key: ...`,
   `aws_secret_access_key = ...`), identifiers with any prefix included;
3. a credential said in words: "the database password is Tr0ub4dor&3", "my token was ...",
   "api key AbC123..."; the value decides, because "the password field is validated in
   forms.py" names a password without giving one;
4. long random-looking strings (Shannon entropy over a threshold with mixed character kinds).

What passes on purpose: hex strings and UUIDs on their own (git SHAs, content hashes and run ids
look exactly like hex keys, and a memory cites them often), so a hex key is caught only when it
is named as a credential (nets 2 and 3); file paths, identifiers and numbers. It errs toward
refusing: a memory wrongly refused costs a rephrase, a key in a markdown file beside the
notebook can end up in a commit.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

# 1. Shapes of well-known credentials, most specific first (sk-ant- before sk-).
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key block", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")),
    ("an Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{16,}")),
    ("an API key (sk-...)", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")),
    ("a Stripe key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA)[0-9A-Z]{16}\b")),
    ("an AWS secret access key",
     re.compile(r"(?i:aws|secret)[\w\s\"':=-]{0,40}?(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}")),
    ("a Slack webhook", re.compile(r"hooks\.slack\.com/services/[A-Za-z0-9]+/[A-Za-z0-9]+/[A-Za-z0-9]{8,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("an npm token", re.compile(r"\bnpm_[A-Za-z0-9]{30,}")),
    ("a PyPI token", re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{20,}")),
    ("a SendGrid key", re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("a bearer token", re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{16,}", re.IGNORECASE)),
)
# scheme://user:password@host, the password part captured to tell a real one from a template.
_URL_CREDENTIALS = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<value>[^\s/@]{3,})@", re.IGNORECASE)

# 2-3. Names of credentials. Any value given to a password-like name is one; a key-like name
# (token, key id) is also a counter or a column name, so its value must look like a credential.
_PASSWORD_NAMES = (r"password|passwd|pwd|passphrase|passcode|secret(?:[ _-]?(?:access[ _-]?)?key)?"
                   r"|client[ _-]?secret|private[ _-]?key|credentials?")
_KEY_NAMES = (r"(?:api|access|auth|refresh|session|bearer|signing|encryption|account|master)[ _-]?(?:token|key)"
              r"|token|key[ _-]?id|access[ _-]?key[ _-]?id")
_NAME = rf"(?P<name>{_PASSWORD_NAMES}|{_KEY_NAMES})"
# In code or config: an identifier ending in a credential name (any prefix: DB_, aws_, MY_), `=` or `:`.
_ASSIGNMENT = re.compile(
    rf"(?<![A-Za-z0-9])(?P<ident>(?:[A-Za-z0-9]+[_.-])*{_NAME})(?![A-Za-z0-9_])[\"']?\s*(?:=>|->|[=:])\s*"
    r"(?P<quote>[\"'`]?)(?P<value>[^\s\"'`,;)}\]]+)",
    re.IGNORECASE,
)
# In words: the name, a few words ("for the prod db"), then is / was / are / equals / set to.
_SAID = re.compile(
    rf"\b{_NAME}s?\b(?:\s+[\w.'-]+){{0,4}}?\s+(?:is|was|are|were|equals|=|:|set\s+to|->)\s+"
    r"(?P<quote>[\"'`]?)(?P<value>[^\s\"'`]+)",
    re.IGNORECASE,
)
# Right after the name, with nothing between: "api key AbC123...", "token 9f8e7d6c5b4a".
_NAMED = re.compile(rf"\b{_NAME}\s+(?P<value>[^\s\"'`,;]+)", re.IGNORECASE)

# Values that stand for a secret without being one.
_PLACEHOLDER = re.compile(
    r"^(?:none|null|nil|true|false|empty|xxx+|\*+|\.\.\.|…|<[^>]*>?|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%\(\w+\)s"
    r"|\{\{?\s*\w+\s*\}?\}|os\.\S*|getenv\S*|env\[\S*|environ\S*|your[_-]\S*|changeme|redacted|hidden|example"
    r"|password|secret|pass|pwd|placeholder|dummy|todo|tbd|required|optional|str|string|int|bool|bytes)$",
    re.IGNORECASE,
)
MIN_ASSIGNED_CHARS = 3  # "pw=1" is noise; "pw=abc" may already be someone's password
MIN_NUMERIC_PASSWORD = 4  # "the password is 12 characters long" is a length; "the pin is 4711" a secret
MIN_KEY_CHARS = 8  # a token or key id shorter than this is a count, a flag, a column name
_ENV_NAME = re.compile(r"^\$?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")  # DB_PASSWORD names where a secret is, not it
# settings.py, config/db.yaml, os.environ, /home/jane/project, ~/data: where something is, not it
_DOTTED = re.compile(r"^(?:(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)*/?|[A-Za-z_][\w-]*(?:[./][A-Za-z_][\w-]*)+/?)$")
# Words that follow "the password is" in prose about passwords, not in a password.
_ORDINARY = frozenset("""
a an the in at on to of by for from with into not now no never always still also only just too very
empty wrong correct set unset invalid valid weak strong long short secret same different new old blank
null none incorrect mandatory optional required private public temporary random unique sensitive insecure
secure fine ok okay good bad stale fresh active inactive present absent there here gone lost known unknown
needed used kept stored saved read hashed salted rotated reset checked shown hidden masked encrypted
""".split())
# English endings: "validated", "missing", "configurable", "expensive", "optional", "useless".
_ENGLISH_ENDING = re.compile(r"(?:ed|ing|able|ible|ive|al|ful|less|ly|ent|ant|ic|ous|ion|er|ry|ty|cy|ure|ise|ize)$")
_TRAILING = ".,;:!?)]}"

# 4. Long random-looking strings: at least this long, with upper, lower and digits mixed, and
# more bits per character than English or hex (hex tops out at 4.0: commit ids pass).
_TOKENISH = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
HIGH_ENTROPY_MIN_CHARS = 32
HIGH_ENTROPY_BITS_PER_CHAR = 4.3
# A folder path mixes cases and digits too (/Users/JaneDoe/ChurnAnalysis2024/data): segments of
# CamelCase or lowercase words are a path; random base64 has segments like "K7MDENG" or "bPxRf".
_PATH_SEGMENT = re.compile(r"[A-Za-z][a-z]*(?:[A-Z][a-z]+)*[0-9]*|[a-z0-9_.-]+")
MIN_PATH_SEGMENTS = 3


def shannon_bits(text: str) -> float:
    """Bits of entropy per character of `text`, from its own character frequencies."""
    if not text:
        return 0.0
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _is_path(token: str) -> bool:
    segments = [s for s in token.split("/") if s]
    return len(segments) >= MIN_PATH_SEGMENTS and all(_PATH_SEGMENT.fullmatch(s) for s in segments)


def _looks_random(token: str) -> bool:
    if len(token) < HIGH_ENTROPY_MIN_CHARS or _is_path(token):
        return False
    classes = (any(c.islower() for c in token), any(c.isupper() for c in token), any(c.isdigit() for c in token))
    return all(classes) and shannon_bits(token) >= HIGH_ENTROPY_BITS_PER_CHAR


def _is_password_name(name: str) -> bool:
    return re.fullmatch(_PASSWORD_NAMES, name, re.IGNORECASE) is not None


def _key_like(value: str) -> bool:
    """A token's or key id's value: long enough, letters and digits both, or random-looking."""
    if len(value) < MIN_KEY_CHARS or _ENV_NAME.match(value) or _DOTTED.match(value):
        return False
    return (any(c.isalpha() for c in value) and any(c.isdigit() for c in value)) or _looks_random(value)


def _reference(value: str) -> bool:
    """Values that name where a secret comes from instead of holding it: placeholders, variables
    (DB_PASSWORD), calls (getpass(), secrets.token_hex(8))."""
    return (len(value) < MIN_ASSIGNED_CHARS or bool(_PLACEHOLDER.match(value)) or bool(_ENV_NAME.match(value))
            or "(" in value)


def _assigned(name: str, value: str) -> bool:
    """A value given to a credential's name in code or config is the credential itself."""
    value = value.rstrip(_TRAILING)
    if _reference(value):
        return False
    return True if _is_password_name(name) else _key_like(value)


def _said(name: str, value: str, quoted: bool) -> bool:
    """A value after "the password is": a credential unless it reads as ordinary English."""
    value = value.rstrip(_TRAILING)
    if _reference(value):
        return False
    if not _is_password_name(name):
        return _key_like(value)
    if quoted:
        return True
    if value.isdigit():
        return len(value) >= MIN_NUMERIC_PASSWORD
    if _DOTTED.match(value):
        return False
    if any(c.isdigit() for c in value) or any(not (c.isalnum() or c in "-'") for c in value):
        return True  # Tr0ub4dor&3, hunter2, p@ss
    if any(c.isupper() for c in value[1:]):
        return True  # SwordFish, hUNTER
    word = value.lower()
    return word not in _ORDINARY and not _ENGLISH_ENDING.search(word)


def _label(name: str) -> str:
    return re.sub(r"[ _-]+", " ", name.lower())


def _article(words: str) -> str:
    return f"an {words}" if words[0] in "aeiou" else f"a {words}"


def find_secret(text: str) -> str | None:
    """The kind of secret `text` holds ("an AWS access key id", ...), or None if it looks clean."""
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    for match in _URL_CREDENTIALS.finditer(text):
        if not _PLACEHOLDER.match(match.group("value")):
            return "credentials in a URL"
    for match in _ASSIGNMENT.finditer(text):
        if _assigned(match.group("name"), match.group("value")):
            return f"a value assigned to {match.group('ident').lower()}"
    for match in _SAID.finditer(text):
        if _said(match.group("name"), match.group("value"), bool(match.group("quote"))):
            return f"{_article(_label(match.group('name')))} in plain words"
    for match in _NAMED.finditer(text):
        value = match.group("value").rstrip(_TRAILING)
        if not _reference(value) and _key_like(value):
            return f"{_article(_label(match.group('name')))} in plain words"
    for token in _TOKENISH.findall(text):
        if _looks_random(token):
            return "a long random-looking string (a key or token?)"
    return None


def refusal_line(kinds: Sequence[str], what: str = "memory") -> str | None:
    """One line for the memories refused as secrets (their kinds, never their text), or None."""
    if not kinds:
        return None
    count = f"1 {what} was" if len(kinds) == 1 else f"{len(kinds)} {what}s were"
    named = ", ".join(dict.fromkeys(kinds))
    return (f"{count} not stored: it looked like it contained {named}. Memories are never secrets."
            if len(kinds) == 1 else f"{count} not stored: they looked like they contained {named}. Memories are "
                                    "never secrets.")
