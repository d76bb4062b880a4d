"""The coverage audit (issue 12): what a summary must keep, checked without a model.

The compaction prompt asks the model to keep every user message, file, error and the code that
matters; nothing made sure it did. After every summary (a model's or the session notes; auto,
manual, reactive, partial) this module reads the span the summary replaces and looks in the
summary's text for:

- every message the user wrote (word for word, whitespace aside), including those an earlier
  summary in the span was responsible for (carried in its message's meta);
- every file path the span named (tool inputs, code, the user's and the agent's words, saved
  outputs);
- every error line (exception type and message, or the first line of a failed tool result);
- every variable, function and class the span's code defined at the top level.

What is missing is appended after the summary: the user's messages verbatim (a long one as its
first lines and where to read the rest), the rest in one short "Not in the summary above" list.
Pure: messages and text in, text and a report out.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ctx_magic.context.tokens import count_text
from ctx_magic.events import AuditReport
from ctx_magic.messages import Message, result_text

SEARCH_TOOL = "search_transcript"
"""The recovery tool's name (agent/context_tools.py declares it; prompts and pointers name it)."""

# A message this long is pasted material more than an instruction; its head shows what it was,
# and the whole is one search away. Below it, a message is always appended whole.
LONG_MESSAGE_CHARS = 2_000
HEAD_LINES = 12
HEAD_CHARS = 1_000
MAX_ERROR_CHARS = 240  # one error line as shown; tracebacks are in the transcript
# Lists past these lengths end with a count and the search tool: a span that defined hundreds
# of names is rare, and the list must stay short beside the summary.
MAX_PATHS = 100
MAX_ERRORS = 40
MAX_NAMES = 200
REF_CHARS = 8  # a message's ref: the start of its uuid (unique within a session in practice)
STUB_CHARS = 120  # a message over the budget: its first line, cut to this
# The user's messages appended after a summary stay under this share of the compaction threshold:
# a session of hundreds of long messages must not make a summary that compacts again at once
# (past it the oldest are stubs with their ref, one search away).
MESSAGES_SHARE_OF_THRESHOLD = 0.25

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_TOKEN = re.compile(r"[~\w./-]+")
_EXTENSION = re.compile(r"\.([A-Za-z][A-Za-z0-9]{0,5})$")
# Bare file names are recognised by the extensions of data, code and documents; a name with a
# folder in it needs only some extension (or an explicit /, ~/, ./ start).
KNOWN_EXTENSIONS = frozenset("""
    csv tsv json jsonl ndjson parquet feather arrow orc avro xlsx xls ods txt md rst tex log py ipynb
    pyi r rs go js ts java c h cpp hpp sh yaml yml toml ini cfg conf xml html htm sql db sqlite h5 hdf5
    nc pkl pickle joblib npy npz pt pth onnx ckpt png jpg jpeg gif svg pdf zip gz bz2 xz tar tgz whl
""".split())
_SAVED_AT = re.compile(r"The full (?:output|text) is saved at: (\S+)")
_EXCEPTION_LINE = re.compile(
    r"^[ \t]*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Iteration))(?::[ \t]?(.*))?[ \t]*$",
    re.MULTILINE,
)
_MAGIC_LINE = re.compile(r"^\s*[%!]")


@dataclass(frozen=True)
class UserMessage:
    uuid: str
    text: str


@dataclass(frozen=True)
class SpanFacts:
    """What a summary of the span must keep."""

    user_messages: tuple[UserMessage, ...] = ()
    paths: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Audit:
    """The audit of one summary: the text to append after it, its report, and the user's
    messages the new summary now answers for (carried to the next compaction)."""

    text: str
    report: AuditReport
    carried: tuple[UserMessage, ...]


# -- what the span holds ------------------------------------------------------------------------


def is_user_prompt(message: Message) -> bool:
    """A message the user wrote: not a tool result, summary, attachment, snip marker or note."""
    return (
        message.role == "user" and message.kind == "normal" and not message.tool_result_ids
        and bool(message.text.strip())
        and not any(message.meta.get(k) for k in ("snipped_count", "ptl_retry_marker", "synthetic"))
    )


def carried_user_messages(message: Message) -> list[UserMessage]:
    """The user's messages an earlier summary answered for (kept in its message's meta)."""
    raw = message.meta.get("user_messages") or []
    pairs = [item for item in raw if isinstance(item, (list, tuple)) and len(item) == 2]
    return [UserMessage(str(uuid), str(text)) for uuid, text in pairs]


def user_messages(span: Sequence[Message]) -> list[UserMessage]:
    seen: dict[str, UserMessage] = {}
    for message in span:
        found = carried_user_messages(message) if message.kind == "summary" else (
            [UserMessage(message.uuid, message.text)] if is_user_prompt(message) else [])
        for item in found:
            seen.setdefault(item.uuid, item)
    return list(seen.values())


def paths_in_text(text: str) -> list[str]:
    """File paths named in free text or code: a name with a known extension, or a path with a folder."""
    found: list[str] = []
    for token in _TOKEN.findall(_URL.sub(" ", text)):
        token = token.rstrip(".")  # a sentence's full stop
        if not token or token.replace(".", "").replace("/", "").isdigit():
            continue
        extension = _EXTENSION.search(token)
        if "/" in token:
            explicit = token.startswith(("/", "~/", "./", "../")) and len(token.strip("/.~")) > 1
            if not (explicit or extension):
                continue
        elif not (extension and extension.group(1).lower() in KNOWN_EXTENSIONS and token != extension.group(0)):
            continue
        if token not in found:
            found.append(token)
    return found


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _tool_results(message: Message) -> Iterator[tuple[str, bool]]:
    for block in message.blocks("tool_result"):
        yield result_text(block), bool(block.get("is_error"))


def paths(span: Sequence[Message]) -> list[str]:
    found: dict[str, None] = {}
    for message in span:
        if not message.sent or message.kind != "normal":
            continue  # summaries, re-read files and notes are audited where they were first said
        texts = [message.text]
        for block in message.blocks("tool_use"):
            texts += list(_strings(block.get("input")))
        for text in texts:
            found.update(dict.fromkeys(paths_in_text(text)))
        for text, _ in _tool_results(message):
            found.update(dict.fromkeys(_SAVED_AT.findall(text)))
    return list(found)


def _short(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 1] + "…"


def errors(span: Sequence[Message]) -> list[str]:
    """Exception lines in tool results (type and message), and the first line of a failed
    result that has none."""
    found: dict[str, None] = {}
    for message in span:
        if not message.sent:
            continue
        for text, is_error in _tool_results(message):
            lines = [_short(m.group(0)) for m in _EXCEPTION_LINE.finditer(text)]
            if not lines and is_error:
                first = next((line for line in text.splitlines() if line.strip()), "")
                lines = [_short(first)] if first else []
            found.update(dict.fromkeys(lines))
    return list(found)


def _code_blocks(span: Sequence[Message]) -> Iterator[str]:
    for message in span:
        if not message.sent:
            continue
        for block in message.blocks("tool_use"):
            tool_input = block.get("input") or {}
            for key in ("code", "source"):
                if isinstance(tool_input, dict) and isinstance(tool_input.get(key), str):
                    yield tool_input[key]


def _python_only(code: str) -> str:
    """The code without IPython's magics and shell escapes (a cell magic's cell is not Python)."""
    if code.lstrip().startswith("%%"):
        return ""
    return "\n".join("" if _MAGIC_LINE.match(line) else line for line in code.splitlines())


def _targets(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from _targets(element)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)


def _defined(body: Iterable[ast.stmt]) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield from _targets(target)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            yield from _targets(node.target)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            # a definition under an if or a try still lands in the namespace; a loop variable is noise
            for part in ("body", "orelse", "finalbody"):
                yield from _defined(getattr(node, part, []))
            for handler in getattr(node, "handlers", []):
                yield from _defined(handler.body)


def defined_names(code: str) -> list[str]:
    """Top-level names the code assigns or defines (private `_x` names left out)."""
    try:
        tree = ast.parse(_python_only(code))
    except (SyntaxError, ValueError):
        return []
    return [name for name in dict.fromkeys(_defined(tree.body)) if not name.startswith("_")]


def names(span: Sequence[Message]) -> list[str]:
    found: dict[str, None] = {}
    for code in _code_blocks(span):
        found.update(dict.fromkeys(defined_names(code)))
    return list(found)


def span_facts(span: Sequence[Message]) -> SpanFacts:
    return SpanFacts(tuple(user_messages(span)), tuple(paths(span)), tuple(errors(span)), tuple(names(span)))


# -- what the summary kept ----------------------------------------------------------------------


def _normal(text: str) -> str:
    return " ".join(text.split())


def has_text(haystack: str, needle: str) -> bool:
    """`needle` in `haystack`, whitespace runs counted as one space (summaries re-wrap lines)."""
    return _normal(needle) in _normal(haystack)


def has_path(text: str, path: str) -> bool:
    return path in text or (path.startswith("./") and path[2:] in text)


def has_name(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?!\w)", text) is not None


def missing(facts: SpanFacts, summary: str) -> SpanFacts:
    """The facts the summary does not hold. Paths, errors and names are looked for in the
    summary and in the user's messages appended after it (each is said once)."""
    left_out = tuple(m for m in facts.user_messages if _normal(m.text) not in _normal(summary))
    text = "\n".join([summary, *(head(m.text) if is_long(m.text) else m.text for m in left_out)])
    flat = _normal(text)
    return SpanFacts(
        left_out,
        tuple(p for p in facts.paths if not has_path(text, p)),
        tuple(e for e in facts.errors if _normal(e.rstrip("…")) not in flat),
        tuple(n for n in facts.names if not has_name(text, n)),
    )


# -- what is appended ---------------------------------------------------------------------------


def is_long(text: str) -> bool:
    return len(text) > LONG_MESSAGE_CHARS


def head(text: str) -> str:
    lines = text.splitlines()[:HEAD_LINES]
    shown = "\n".join(lines)
    return shown if len(shown) <= HEAD_CHARS else shown[:HEAD_CHARS]


def ref(uuid: str) -> str:
    return uuid[:REF_CHARS]


def _stub(message: UserMessage) -> str:
    first = next((line.strip() for line in message.text.splitlines() if line.strip()), "")
    shown = first if len(first) <= STUB_CHARS else first[: STUB_CHARS - 1] + "…"
    return (f'<user-message ref="{ref(message.uuid)}" cut="true">\n{shown}\n</user-message> '
            f'[{SEARCH_TOOL} with ref "{ref(message.uuid)}" reads it whole]')


def _message_block(message: UserMessage, transcript_path: str) -> str:
    if not is_long(message.text):
        return f'<user-message ref="{ref(message.uuid)}">\n{message.text}\n</user-message>'
    shown = head(message.text)
    rest = len(message.text) - len(shown)
    return (
        f'<user-message ref="{ref(message.uuid)}" cut="true">\n{shown}\n</user-message>\n'
        f'[{rest:,} more characters: {SEARCH_TOOL} with ref "{ref(message.uuid)}" reads the whole message; '
        f"it is also in {transcript_path}]"
    )


def _listing(label: str, items: Sequence[str], limit: int, *, one_per_line: bool = False) -> list[str]:
    if not items:
        return []
    shown = list(items[:limit])
    more = f" (and {len(items) - limit:,} more; {SEARCH_TOOL} finds them)" if len(items) > limit else ""
    if one_per_line:
        return [f"- {label}:", *(f"  - {item}" for item in shown)] + ([f"  {more.strip()}"] if more else [])
    return [f"- {label}: {', '.join(shown)}{more}"]


def message_blocks(messages: Sequence[UserMessage], transcript_path: str,
                   budget: int | None = None) -> tuple[list[str], set[str]]:
    """Each message verbatim (a long one as its head); past `budget` tokens, the oldest become a
    one-line stub with its ref until the rest fits. Also the uuids of the messages shown cut."""
    blocks = [_message_block(m, transcript_path) for m in messages]
    cut = {m.uuid for m in messages if is_long(m.text)}
    for index, message in enumerate(messages):
        if budget is None or count_text("\n".join(blocks)) <= budget:
            break
        blocks[index] = _stub(message)
        cut.add(message.uuid)
    return blocks, cut


def addendum(gaps: SpanFacts, transcript_path: str, message_budget: int | None = None) -> tuple[str, set[str]]:
    """The text appended after a summary for what it left out ('' when nothing is missing), and
    the uuids of the user's messages it shows cut."""
    parts: list[str] = []
    blocks, cut = message_blocks(gaps.user_messages, transcript_path, message_budget)
    if blocks:
        parts.append("The user's messages the summary above left out, word for word and in order:\n"
                     + "\n".join(blocks))
    lines = [
        *_listing("files", gaps.paths, MAX_PATHS),
        *_listing("errors", gaps.errors, MAX_ERRORS, one_per_line=True),
        *_listing("names the code defined", gaps.names, MAX_NAMES),
    ]
    if lines:
        parts.append("Not in the summary above, but in the conversation it replaces:\n" + "\n".join(lines))
    return "\n\n".join(parts), cut


def audit_summary(span: Sequence[Message], summary: str, *, transcript_path: str,
                  message_budget: int | None = None) -> Audit:
    """Check `summary` against the span it replaces; what to append and what was found.
    `message_budget` caps the tokens of the user's messages appended (see `message_blocks`)."""
    facts = span_facts(span)
    gaps = missing(facts, summary)
    text, cut = addendum(gaps, transcript_path, message_budget)
    report = AuditReport(
        user_messages=tuple(m.uuid for m in gaps.user_messages),
        cut_messages=tuple(m.uuid for m in gaps.user_messages if m.uuid in cut),
        paths=gaps.paths, errors=gaps.errors, names=gaps.names,
        user_messages_checked=len(facts.user_messages), paths_checked=len(facts.paths),
        errors_checked=len(facts.errors), names_checked=len(facts.names),
        tokens=count_text(text) if text else 0, text=text,
    )
    return Audit(text, report, facts.user_messages)
