"""Secret detection for long-term memory (memories are never secrets).

`find_secret(text)` names the first kind of credential it sees ("an AWS access key id", "a
password in plain words"), never the credential itself, or returns None. Four nets, in order:

1. known formats: cloud and service keys by their prefixes, JWTs, PEM private keys,
   connection strings carrying `user:password@`;
2. a credential's name given a value in code or config (`DB_PASSWORD=...`, `api_key: ...`,
   `aws_secret_access_key = ...`), identifiers with any prefix included;
3. a credential said in words: "the database password is Tr0ub4dor&3", "my token was ...",
   "api key AbC123...", a passphrase of plain words ("the wifi passphrase is correct horse battery
   staple"), a login given as its user and password ("the db login is admin / Winter2024!"); the
   value decides, because "the password field is validated in forms.py" names a password without
   giving one;
4. long random-looking strings (Shannon entropy over a threshold with mixed character kinds,
   in `randomness`, with the tests the other nets use to tell generated keys from words).

What passes on purpose: hex strings and UUIDs on their own (git SHAs, content hashes and run ids
look exactly like hex keys, and a memory cites them often), so a hex key is caught only when it
is named as a credential (nets 2 and 3); file paths, identifiers and numbers. It errs toward
refusing: a memory wrongly refused costs a rephrase, a key in a markdown file beside the
notebook can end up in a commit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from ctx_magic.memory.randomness import (
    is_path,
    looks_random,
    mixed_kinds,
    random_glued,
    random_letters,
    random_tokens,
    reads_as_words,
)

# 1. Shapes of well-known credentials, most specific first (sk-ant- before sk-). No leading `\b`:
# a key glued to a word ("aws_key_idAKIA...") is still a key; `_format_found` decides when the
# character before the match is a letter or digit (then the key must look random, so a word that
# merely ends in "sk" before "-force-2024" is not one).
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key block", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")),
    ("an Anthropic API key", re.compile(r"sk-ant-[A-Za-z0-9_-]{16,}")),
    ("an API key (sk-...)", re.compile(r"sk-[A-Za-z0-9_-]{16,}")),
    ("a Stripe key", re.compile(r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("an AWS access key id", re.compile(r"(?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA)[0-9A-Z]{16}(?![0-9A-Z])")),
    ("an AWS secret access key",
     re.compile(r"(?i:aws|secret)[\w\s\"':=-]{0,40}?(?P<value>(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])")),
    ("an AWS secret access key",  # the name glued to the key: aws_secret_access_keywJalr...
     re.compile(r"(?i:secret[_-]?access[_-]?key|aws[_-]?secret)(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])")),
    ("a GitHub token", re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("a GitLab token", re.compile(r"glpat-[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"xox[abposre]-[A-Za-z0-9-]{10,}")),
    ("a Slack webhook", re.compile(r"hooks\.slack\.com/services/[A-Za-z0-9]+/[A-Za-z0-9]+/[A-Za-z0-9]{8,}")),
    ("a Google API key", re.compile(r"AIza[0-9A-Za-z_-]{30,}")),
    ("a Hugging Face token", re.compile(r"hf_[A-Za-z0-9]{30,}")),
    ("an npm token", re.compile(r"npm_[A-Za-z0-9]{30,}")),
    ("a PyPI token", re.compile(r"pypi-AgE[A-Za-z0-9_-]{20,}")),
    ("a SendGrid key", re.compile(r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")),
    ("a JSON web token", re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    # kaggle.json, {"username": ..., "key": "<32 hex>"}: the bare name "key" (a cache's md5 key passes)
    ("a Kaggle API key",
     re.compile(r"[\"']username[\"']\s*:\s*[\"'][^\"']*[\"']\s*,\s*[\"']key[\"']\s*:\s*[\"'](?P<value>[0-9a-f]{32})[\"']")),
    ("a Mapbox token", re.compile(r"(?<![A-Za-z0-9])[ps]k\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{16,}")),
    ("a bearer token", re.compile(r"(?<![A-Za-z0-9_])Bearer\s+(?P<value>[A-Za-z0-9._~+/=-]{16,})", re.IGNORECASE)),
)
_HEX_40 = re.compile(r"[0-9a-f]{40}")  # a git commit id: "the AWS fix is commit 3f2a...", not a secret key
# scheme://user:password@host, the password part captured to tell a real one from a template.
_URL_CREDENTIALS = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<value>[^\s/@]{3,})@", re.IGNORECASE)

# A password given on a command line: `mysql -pS3cret` (glued to -p: a bare -p asks for it), `curl -u name:S3cret`.
_COMMAND_LINE = (
    re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n]*?\s-p(?P<value>[^\s'\"`]+)"),
    re.compile(r"\bcurl\b[^\n]*?\s(?:-u|--user)(?:\s+|=)['\"]?[^\s:'\"]+:(?P<value>[^\s'\"`]+)"),
)

# 2-3. Names of credentials. Any value given to a password-like name is one; a key-like name
# (token, key id) is also a counter or a column name, so its value must look like a credential.
_PASSWORD_NAMES = (r"password|passwd|pwd|passphrase|passcode|secret(?:[ _-]?(?:access[ _-]?)?key)?"
                   r"|client[ _-]?secret|private[ _-]?key|credentials?")
_KEY_NAMES = (r"(?:api|access|auth|refresh|session|bearer|signing|encryption|account|master)[ _-]?(?:token|key)"
              r"|token|key[ _-]?id|access[ _-]?key[ _-]?id")
_NAME = rf"(?P<name>{_PASSWORD_NAMES}|{_KEY_NAMES})"
# A service's key in an environment variable (KAGGLE_KEY, OPENWEATHER_KEY): capitals only, so that
# sort_key or key= in code stays a column's or a function's.
_ENV_KEY = r"(?-i:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_KEY)"
# In code or config: an identifier ending in a credential name (any prefix: DB_, aws_, MY_), `=` or `:`;
# or a mapping's entry (os.environ['DB_PASSWORD'] = ...), given a literal: df['password'] = ... is a column.
_ASSIGNMENT = re.compile(
    rf"(?<![A-Za-z0-9])(?P<ident>(?:[A-Za-z0-9]+[_.-])*{_NAME}|{_ENV_KEY})(?![A-Za-z0-9_])[\"']?(?P<bracket>\]?)\s*(?:=>|->|[=:])\s*"
    r"(?P<quote>[\"'`]?)(?P<value>[^\s\"'`,;)}\]]+)",
    re.IGNORECASE,
)
# In words: the name, a few words ("for the prod db"), then is / was / are / equals / set to.
_SAID = re.compile(
    rf"\b{_NAME}s?\b(?P<between>(?:\s+[\w.'-]+){{0,4}}?)\s+(?:is|was|are|were|equals|=|:|set\s+to|->)\s+"
    r"(?P<quote>[\"'`]?)(?P<value>[^\s\"'`]+)",
    re.IGNORECASE,
)
# "the password manager is 1Password", "the token limit is 4096": the name is a word of a compound
# whose head says what the sentence is about, and what follows is that, not the credential.
_COMPOUND_HEADS = frozenset("""
manager managers vault policy policies rule rules length lengths limit limits count counts budget reset resets
field fields column columns hash hashes prompt prompts requirement requirements strength complexity expiry
rotation change changes format type generator
""".split())
# A passphrase is plain words: "the wifi passphrase is correct horse battery staple". Prose about a
# password has a small word among its first three ("is stored in the vault", "is sent by email"); a
# passphrase (diceware, the four-word kind) has none.
MIN_PASSPHRASE_WORDS = 3
_PHRASE = re.compile(r"[^.;,!?()\n]*")  # the value's clause: up to the next punctuation
_SMALL_WORDS = frozenset("""
a an the this that these those it its my our your their his her we you they i he she me us them
in at on to of by for from with into onto over under about after before between through without within
and or but nor so yet if then than as because while when where which who whom whose what how why
is are was were be been being am has have had do does did can could shall should will would may might must
not no never always still also only just too very now already soon often sometimes usually here there
somewhere anywhere everywhere nowhere all any each every some most more less few many much such same
one two three four five six seven eight nine ten twelve first second last next
""".split())
# A login given as its user and password: "the staging db login is admin / Winter2024!",
# "sign-in: analyst:Tr0ub4dor". The user alone is no secret; the second half is checked as a password.
_LOGIN = re.compile(
    r"\b(?P<name>log[io]n|sign[ -]?in|account|user(?:[ _-]?name)?)s?\b(?P<between>(?:\s+[\w.'-]+){0,4}?)"
    r"(?:\s+(?:is|was|are|were|equals|set\s+to)\s+|\s*(?:[=:]|->)\s*)"
    r"(?P<user>[\w.@+-]+)\s*[/:]\s*(?P<value>[^\s\"'`/]+)",
    re.IGNORECASE,
)
# "the login page is auth / callback": a word of a compound whose head is a place or a piece of code.
_LOGIN_HEADS = _COMPOUND_HEADS | frozenset("""
page pages endpoint endpoints url urls route routes screen screens form forms flow flows button handler service
method methods path paths id ids name names table tables
""".split())
# Right after the name, with nothing between: "api key AbC123...", "token 9f8e7d6c5b4a".
_NAMED = re.compile(rf"\b{_NAME}\s+(?P<value>[^\s\"'`,;]+)", re.IGNORECASE)
# Glued to the name, nothing between: "apikeyXk29fLq0Zm3Nw8Yt". Code glues names to words all the
# time (tokenCount, keyIdFor2024), so such a value must look random (`random_glued`).
_GLUED = re.compile(rf"(?<![A-Za-z0-9])(?i:{_NAME})(?P<value>[A-Z0-9][A-Za-z0-9+/]{{15,}})")
# A URL's query: ?api_key=..., &sig=..., ;token=...; the parameter's name split into its words.
_URL_PARAM = re.compile(r"[?&;](?P<name>[A-Za-z][A-Za-z0-9_.-]*)=(?P<value>[^&#;\s\"'<>)]+)")
_URL_SECRET_WORDS = frozenset({"password", "passwd", "pwd", "pass", "passphrase", "secret"})
_URL_KEY_WORDS = frozenset({"key", "apikey", "token", "sig", "signature", "auth", "credential", "credentials",
                            "accesskey", "secretkey", "code"})
_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")

# Values that stand for a secret without being one.
_PLACEHOLDER = re.compile(
    r"^(?:none|null|nil|true|false|empty|xxx+|\*+|\.\.\.|…|<[^>]*>?|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%\(\w+\)s"
    r"|\{\{?\s*\w+\s*\}?\}|os\.\S*|getenv\S*|env\[\S*|environ\S*|your[_-]\S*|changeme|redacted|hidden|example"
    r"|password|secret|pass|pwd|placeholder|dummy|todo|tbd|required|optional|str|string|int|bool|bytes)$",
    re.IGNORECASE,
)
MIN_ASSIGNED_CHARS = 3  # "pw=1" is noise; "pw=abc" may already be someone's password
MIN_NUMERIC_PASSWORD = 4  # "the password is 12 characters long" is a length; "the pin is 4711" a secret
# A figure in words: a share (3.2%), a decimal (0.032), a count with thousands separators (4,512).
_FIGURE = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d*\.\d+|\d+(?:\.\d+)?)%?$")
MIN_KEY_CHARS = 8  # a token or key id shorter than this is a count, a flag, a column name
MIN_ENV_KEY_CHARS = 20  # a service's generated key (Kaggle's: 32); SORT_KEY = 'model_v2' is a constant
_SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")
_URL_START = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_CALL = re.compile(r"^[A-Za-z_][\w.]*\(")  # getpass(), secrets.token_hex(8), os.getenv(...): where it comes from
_ENV_NAME = re.compile(r"^\$?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")  # DB_PASSWORD names where a secret is, not it
_PATH = re.compile(r"^(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)+/?$")  # pwd: /home/jane/project names a folder
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

MASK_STARS = 12  # a masked value shows its first characters and at most this many stars


def _is_password_name(name: str) -> bool:
    return re.fullmatch(_PASSWORD_NAMES, name, re.IGNORECASE) is not None


def _key_like(value: str) -> bool:
    """A token's or key id's value: long enough, letters and digits both, random-looking, or
    random letters of both cases."""
    if (len(value) < MIN_KEY_CHARS or _ENV_NAME.match(value) or _DOTTED.match(value) or _URL_START.match(value)
            or value.startswith("arn:")):
        return False  # a URL after "token" is where tokens come from (one carrying a credential is caught as a
        # URL); an AWS resource name (arn:aws:kms:...:key/...) says which key, not the key
    if _SNAKE_CASE.match(value) and reads_as_words(value):
        return False  # session_20241127, customer_id2: a snake_case identifier made of words
    if any(c.isalpha() for c in value) and any(c.isdigit() for c in value):
        return True
    return looks_random(value) or random_letters(value)


def _reference(value: str, *, quoted: bool = False) -> bool:
    """Values that name where a secret comes from instead of holding it: placeholders, variables
    (DB_PASSWORD), calls (getpass(), secrets.token_hex(8)). A quoted value is a literal, never a
    call: generated keys hold "(" too (Django's draw from !@#$%^&*(-_=+)."""
    return (len(value) < MIN_ASSIGNED_CHARS or bool(_PLACEHOLDER.match(value)) or bool(_ENV_NAME.match(value))
            or (not quoted and bool(_CALL.match(value))))


def _assigned(name: str, value: str, quoted: bool) -> bool:
    """A value given to a credential's name in code or config is the credential itself."""
    value = value.rstrip(_TRAILING)
    if _reference(value, quoted=quoted) or _PATH.match(value):
        return False
    return True if _is_password_name(name) else _key_like(value)


def _said(name: str, value: str, quoted: bool) -> bool:
    """A value after "the password is": a credential unless it reads as ordinary English."""
    value = value.rstrip(_TRAILING)
    if _reference(value, quoted=quoted):
        return False
    if not _is_password_name(name):
        return _key_like(value)
    if quoted:
        return True
    if value.isdigit():
        return len(value) >= MIN_NUMERIC_PASSWORD
    if _FIGURE.match(value):
        return False  # "the password reset rate is 3.2%", "password resets were 4,512": a measurement
    if _DOTTED.match(value):
        return False
    if any(c.isdigit() for c in value) or any(not (c.isalnum() or c in "-'") for c in value):
        return True  # Tr0ub4dor&3, hunter2, p@ss
    if any(c.isupper() for c in value[1:]):
        return True  # SwordFish, hUNTER
    word = value.lower()
    return word not in _ORDINARY and not _ENGLISH_ENDING.search(word)


def _passphrase(name: str, phrase: str) -> bool:
    """Plain words after "the passphrase is": a passphrase when there are enough of them and not one
    small word (an article, a preposition, a pronoun, a number) that a sentence about it would have."""
    words = phrase.split()
    return (_is_password_name(name) and len(words) >= MIN_PASSPHRASE_WORDS
            and all(w.isalpha() and w.islower() and w not in _SMALL_WORDS for w in words))


def _login_password(value: str) -> bool:
    """The second half of `user / password`: a password only if it has what a word does not (a digit,
    a sign, a capital inside), so "the users are alice / bob" or a path's segments pass."""
    value = value.rstrip(_TRAILING)
    if _reference(value) or _FIGURE.match(value) or _DOTTED.match(value) or not any(c.isalpha() for c in value):
        return False
    return (any(c.isdigit() for c in value) or any(not (c.isalnum() or c in "-'") for c in value)
            or any(c.isupper() for c in value[1:]))


def _label(name: str) -> str:
    return re.sub(r"[ _-]+", " ", name.lower())


def _article(words: str) -> str:
    return f"an {words}" if words[0] in "aeiou" else f"a {words}"


@dataclass(frozen=True)
class SecretFinding:
    """What looked like a secret: its kind ("an AWS access key id") and the value itself, which
    is only ever shown masked."""

    kind: str
    value: str

    @property
    def masked(self) -> str:
        """The value's first characters, the rest as stars: enough to recognise it, never to use it."""
        value = self.value.strip()
        keep = 4 if len(value) >= 20 else 2 if len(value) >= 12 else 1
        hidden = len(value) - keep
        return value[:keep] + "*" * min(hidden, MASK_STARS) + ("…" if hidden > MASK_STARS else "")

    @property
    def described(self) -> str:
        """"an AWS access key id (AKIA************…)": the kind and the masked value, for one line."""
        return f"{self.kind} ({self.masked})"


def _format_found(match: re.Match[str], text: str) -> bool:
    """A known format at a word's start is a key; glued to a letter or digit before it (as in
    "aws_key_idAKIA..."), only if it looks generated: all capitals and digits (AKIA...), or
    capitals, lower case and digits mixed, not a word like "task-force-2024"."""
    start = match.start("value") if "value" in match.re.groupindex else match.start()
    if start == 0 or not text[start - 1].isalnum():
        return True
    found = match.group(0)
    return found.upper() == found or mixed_kinds(found)  # upper case (AKIA + 16): no word is spelt that way


def _format_value(kind: str, match: re.Match[str]) -> str | None:
    value = match.group("value") if "value" in match.re.groupindex else match.group(0)
    if kind == "an AWS secret access key" and (_HEX_40.fullmatch(value) or not mixed_kinds(value)):
        return None  # a commit id or a path after the word "secret", not a generated key
    return value


def _url_param(name: str, value: str) -> bool:
    """A URL's query parameter that carries a credential: ?password=..., ?api_key=..., &sig=..."""
    words = {w.lower() for w in _NAME_WORD.findall(name)} | {name.lower().replace("_", "").replace("-", "")}
    value = unquote(value).rstrip(_TRAILING)
    if _reference(value):
        return False
    if words & _URL_SECRET_WORDS:
        return True
    return bool(words & _URL_KEY_WORDS) and _key_like(value)


def detect_secret(text: str) -> SecretFinding | None:
    """The first thing in `text` that looks like a secret, with its kind, or None if it looks clean."""
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            value = _format_value(kind, match)
            if value is not None and _format_found(match, text):
                return SecretFinding(kind, value)
    for match in _URL_CREDENTIALS.finditer(text):
        if not _PLACEHOLDER.match(match.group("value")):
            return SecretFinding("credentials in a URL", match.group("value"))
    for pattern in _COMMAND_LINE:
        for match in pattern.finditer(text):
            if not _reference(match.group("value").rstrip(_TRAILING)):
                return SecretFinding("a password on a command line", match.group("value"))
    for match in _URL_PARAM.finditer(text):
        if _url_param(match.group("name"), match.group("value")):
            return SecretFinding(f"a credential in a URL ({match.group('name')}=)", match.group("value"))
    for match in _ASSIGNMENT.finditer(text):
        if match.group("bracket") and not match.group("quote"):
            continue
        if match.group("name") is None:  # an environment variable's key: a key's value, not a path
            value = match.group("value").rstrip(_TRAILING)
            if (len(value) >= MIN_ENV_KEY_CHARS and not _SNAKE_CASE.match(value) and not is_path(value)
                    and _key_like(value) and not _reference(value, quoted=bool(match.group("quote")))):
                return SecretFinding(f"a value assigned to {match.group('ident').lower()}", match.group("value"))
            continue
        if _assigned(match.group("name"), match.group("value"), bool(match.group("quote"))):
            return SecretFinding(f"a value assigned to {match.group('ident').lower()}", match.group("value"))
    start = 0
    while (match := _SAID.search(text, start)) is not None:
        start = match.end("name")  # "the password manager password is ...": the second name is looked at too
        between = match.group("between").split()
        if between and between[0].lower() in _COMPOUND_HEADS:
            continue
        if _said(match.group("name"), match.group("value"), bool(match.group("quote"))):
            return SecretFinding(f"{_article(_label(match.group('name')))} in plain words", match.group("value"))
        phrase = _PHRASE.match(text, match.start("value"))
        if not match.group("quote") and phrase is not None and _passphrase(match.group("name"), phrase.group(0)):
            return SecretFinding(f"{_article(_label(match.group('name')))} in plain words", phrase.group(0).strip())
    for match in _LOGIN.finditer(text):
        between = match.group("between").split()
        if not (between and between[0].lower() in _LOGIN_HEADS) and _login_password(match.group("value")):
            return SecretFinding("a login (user and password) in plain words", match.group("value"))
    for match in _NAMED.finditer(text):
        value = match.group("value").rstrip(_TRAILING)
        if not _reference(value) and _key_like(value):
            return SecretFinding(f"{_article(_label(match.group('name')))} in plain words", value)
    for match in _GLUED.finditer(text):
        if random_glued(match.group("value")):
            return SecretFinding(f"a credential glued to the word {match.group('name')}", match.group("value"))
    for token in random_tokens(text):
        return SecretFinding("a long random-looking string (a key or token?)", token)
    return None


def find_secret(text: str) -> str | None:
    """The kind of secret `text` holds ("an AWS access key id", ...), or None if it looks clean."""
    found = detect_secret(text)
    return found.kind if found is not None else None


def refusal_line(kinds: Sequence[str], what: str = "memory") -> str | None:
    """One line for the memories refused as secrets (their kinds, never their text), or None."""
    if not kinds:
        return None
    count = f"1 {what} was" if len(kinds) == 1 else f"{len(kinds)} {what}s were"
    named = ", ".join(dict.fromkeys(kinds))
    return (f"{count} not stored: it looked like it contained {named}. Memories are never secrets."
            if len(kinds) == 1 else f"{count} not stored: they looked like they contained {named}. Memories are "
                                    "never secrets.")
