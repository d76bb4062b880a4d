"""What a summary must keep of the span it replaces: the facts the coverage audit
(context/audit.py) looks for, read from the messages without a model.

- every message the user wrote, including those an earlier summary in the span answered for
  (carried in its message's meta);
- every file path the span named: tool inputs, code, the user's and the agent's words, the
  files outputs were saved to;
- every error line: an exception's type and message in a tool result, or the first line of a
  failed result that has none;
- every variable, function and class the span's code (the agent's and the user's cells) defined
  at the top level.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ctx_magic.messages import Message, result_text

MAX_ERROR_CHARS = 240  # one error line as shown; tracebacks are in the transcript
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_TOKEN = re.compile(r"(?<!<)[~\w./-]+")  # not after '<': a closing tag such as </format_example> is no path
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




def is_user_prompt(message: Message) -> bool:
    """A message the user wrote: not a tool result, summary, attachment, snip marker or note."""
    return (
        message.role == "user" and message.kind == "normal" and not message.tool_result_ids
        and bool(message.text.strip())
        and not any(message.meta.get(k) for k in ("snipped_count", "ptl_retry_marker", "synthetic",
                                                  "server_compaction"))
    )


def carried_user_messages(message: Message) -> list[UserMessage]:
    """The user's messages an earlier summary answered for (kept in its message's meta)."""
    raw = message.meta.get("user_messages") or []
    pairs = [item for item in raw if isinstance(item, (list, tuple)) and len(item) == 2]
    return [UserMessage(str(uuid), str(text)) for uuid, text in pairs]


def user_messages(span: Sequence[Message]) -> list[UserMessage]:
    seen: dict[str, UserMessage] = {}
    for message in span:
        found = carried_user_messages(message) if "user_messages" in message.meta else (
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
