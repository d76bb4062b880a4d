"""The offline stand-in's answer to a compaction request: an extractive summary, not a model's.

A compaction request is recognised by its last user message asking for an `<analysis>` block
and a `<summary>` block with numbered sections (ctx_magic.context.prompts.compact_prompt). The
answer walks the conversation in `<analysis>` (one line per user message, tool call and error),
then writes each section the prompt lists, in its order, as `## N. Title`, filled from the
conversation itself: the user's messages verbatim, the files tool calls touched, the errors
results reported, the latest request. Earlier summaries' verbatim user messages are carried
forward, so repeated compaction never loses one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_magic.context.tokens import count_text
from ctx_magic.offline.conversation import (
    Request,
    Step,
    brief,
    content_blocks,
    events,
    is_background,
    last_line,
    latest_user_text,
    message_text,
    messages,
)
from ctx_magic.offline.counting import truncate_text

QUOTE_LIMIT = 1_500  # characters of one quoted item: keeps a summary compact, never drops one
MAX_ANALYSIS_HEAD = 20  # a very long walk keeps its start...
MAX_ANALYSIS_TAIL = 180  # ...and its most recent steps, so the summary still fits the reply
MAX_CODE_LINES = 10  # most recent code runs listed under the files section
CODE_JOIN = "; "  # code on one line: statements joined as Python would read them

_HEADING = re.compile(r"^\s*(\d+)\.\s+([^:\n]+?)\s*:", re.MULTILINE)
_USER_ITEM = re.compile(r'<user-message n="\d+">\n(.*?)\n</user-message>', re.DOTALL)
_STRING_LITERAL = re.compile(r"""(['"])([^'"\n]{1,200})\1""")
_PATH_LIKE = re.compile(
    r"^/?(?:[\w.~-]+/)*[\w~-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,5}$"  # a file name with an extension
    r"|^/?(?:[\w.~-]+/)+[\w.-]*$"  # or a path with a folder in it
)
_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.MULTILINE)
_SECTION_START = re.compile(r"^## \d+\. ", re.MULTILINE)
CARRIED_SECTIONS = ("file", "error")  # lists an earlier summary holds that the history no longer shows
MIN_SECTIONS = 3  # a compaction prompt lists many sections; a stray numbered list does not count


def requested_sections(prompt: str) -> list[tuple[int, str]]:
    """The numbered section headings a prompt lists after its mention of <summary>."""
    after = prompt[prompt.find("<summary>") :]
    seen: dict[int, str] = {}
    for match in _HEADING.finditer(after):
        seen.setdefault(int(match.group(1)), match.group(2).strip())
    return sorted(seen.items())


def is_compaction_request(request: Request) -> bool:
    """The latest user text asks for <analysis> and <summary> with numbered sections."""
    text = latest_user_text(request)
    if "<analysis>" not in text or "<summary>" not in text:
        return False
    return len(requested_sections(text)) >= MIN_SECTIONS


def quote(text: str) -> str:
    """A message verbatim, or its first QUOTE_LIMIT characters with a note of what was cut."""
    if len(text) <= QUOTE_LIMIT:
        return text
    return f"{text[:QUOTE_LIMIT]}… [{len(text) - QUOTE_LIMIT} more characters in the transcript]"


@dataclass(frozen=True)
class Conversation:
    """What the summary is built from: the history before the compaction prompt, digested."""

    history: tuple[Mapping[str, Any], ...]
    user_items: tuple[str, ...]  # quoted user messages, earlier summaries' items expanded
    steps: tuple[Step, ...]
    carried: tuple[tuple[str, str], ...] = ()  # (section keyword, bullet) from earlier summaries

    @classmethod
    def of(cls, request: Request) -> Conversation:
        history = _history_before_prompt(request)
        earlier = [t for t in _user_texts(history) if _USER_ITEM.search(t)]
        carried = tuple(line for text in earlier for line in _carried_lines(text))
        return cls(tuple(history), tuple(_user_items(history)), tuple(events(history)), carried)

    def carried_from(self, section: str) -> list[str]:
        """What earlier summaries listed under the section whose title has this keyword."""
        return [line for keyword, line in self.carried if keyword == section]

    def calls(self) -> list[Step]:
        return [e for e in self.steps if e.kind == "tool_call"]

    def errors(self) -> list[Step]:
        return [e for e in self.steps if e.kind == "error"]

    @property
    def last_request(self) -> str:
        return self.user_items[-1] if self.user_items else ""


def _history_before_prompt(request: Request) -> list[Mapping[str, Any]]:
    """Every message but the compaction prompt (its text blocks leave the last message)."""
    history = messages(request)
    if not history:
        return []
    last = history[-1]
    kept = [b for b in content_blocks(last) if not (b.get("type") == "text" and "<summary>" in b.get("text", ""))]
    return [*history[:-1], {**last, "content": kept}] if kept else history[:-1]


def _user_texts(history: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    for message in history:
        text = message_text(message) if message.get("role") == "user" else ""
        if text.strip():
            yield text


def _carried_lines(summary: str) -> Iterator[tuple[str, str]]:
    """(keyword, bullet) for each bullet an earlier summary listed under files or errors."""
    for chunk in _SECTION_START.split(summary)[1:]:
        title, _, body = chunk.partition("\n")
        keyword = next((k for k in CARRIED_SECTIONS if k in title.lower()), None)
        if keyword is None:
            continue
        for line in body.splitlines():
            if line.startswith("- ") and not line.startswith("- `"):
                yield keyword, line


def _user_items(history: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """Each user text block quoted; a turn can merge a summary, a kept prompt and attachments,
    so blocks are read one by one."""
    for message in history:
        if message.get("role") != "user":
            continue
        for block in content_blocks(message):
            text = block.get("text", "") if block.get("type") == "text" else ""
            carried = _USER_ITEM.findall(text)
            if carried:
                yield from carried  # already quoted by an earlier summary: kept exactly as it was
            elif text.strip() and not is_background(text):
                yield quote(text)


def _analysis(conversation: Conversation, keep: int = MAX_ANALYSIS_HEAD + MAX_ANALYSIS_TAIL) -> str:
    labels = {"user": "User said", "tool_call": "Called {name}", "error": "{name} failed"}
    lines = []
    for step in conversation.steps:
        if step.kind in labels:
            separator = CODE_JOIN if step.kind == "tool_call" else " "
            line = last_line(step.text) if step.kind == "error" else brief(step.text, separator=separator)
            lines.append(f"{labels[step.kind].format(name=step.name)}: {line}")
    if len(lines) > keep:
        head = min(MAX_ANALYSIS_HEAD, keep // 2)
        tail = keep - head
        omitted = len(lines) - head - tail
        lines = [*lines[:head], f"… {omitted} steps omitted …", *(lines[-tail:] if tail else [])]
    walk = "\n".join(f"{n}. {line}" for n, line in enumerate(lines, 1))
    return walk or "The conversation holds no user messages or tool calls yet."


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def mentioned_paths(tool_input: Any) -> list[str]:
    """File paths in a tool's input: whole path-like values, and path-like string literals in code."""
    found: list[str] = []
    for text in _strings(tool_input):
        candidates = [text.strip()] + [m.group(2) for m in _STRING_LITERAL.finditer(text)]
        found += [c for c in candidates if _PATH_LIKE.match(c) and c not in found]
    return found


def _files(conversation: Conversation) -> str:
    touched: dict[str, list[str]] = {}
    for message in conversation.history:
        for block in content_blocks(message):
            if block.get("type") == "tool_use":
                for path in mentioned_paths(block.get("input", {})):
                    tools = touched.setdefault(path, [])
                    if block.get("name") not in tools:
                        tools.append(str(block.get("name")))
    lines = [f"- {path} (via {', '.join(tools)})" for path, tools in touched.items()]
    lines = list(dict.fromkeys([*conversation.carried_from("file"), *lines]))
    code = [f"- `{brief(c.text, separator=CODE_JOIN)}`" for c in conversation.calls() if c.name == "python"]
    if code:
        lines += ["Code run, most recent last:", *code[-MAX_CODE_LINES:]]
    return "\n".join(lines) or "No files or code were touched."


def _errors(conversation: Conversation) -> str:
    lines = []
    steps = list(conversation.steps)
    for i, step in enumerate(steps):
        if step.kind != "error":
            continue
        fixed = any(s.kind == "tool_result" and s.name == step.name for s in steps[i + 1 :])
        outcome = "a later call of the same tool succeeded" if fixed else "not fixed yet"
        lines.append(f"- {step.name}: {last_line(step.text)} ({outcome})")
    lines = list(dict.fromkeys([*conversation.carried_from("error"), *lines]))
    return "\n".join(lines) or "No errors."


def _user_messages(conversation: Conversation) -> str:
    items = [f'<user-message n="{n}">\n{text}\n</user-message>' for n, text in enumerate(conversation.user_items, 1)]
    return "\n".join(items) or "The user has written no messages."


def _primary(conversation: Conversation) -> str:
    requests = [f"- {brief(text, 200)}" for text in conversation.user_items]
    return "The user's requests, in order:\n" + "\n".join(requests) if requests else "No request yet."


def _concepts(conversation: Conversation) -> str:
    tools: dict[str, int] = {}
    modules: list[str] = []
    for call in conversation.calls():
        tools[call.name] = tools.get(call.name, 0) + 1
        for match in _IMPORT.finditer(call.text if call.name == "python" else ""):
            module = (match.group(1) or match.group(2)).split(".")[0]
            if module not in modules:
                modules.append(module)
    lines = [f"- tool {name}: {count} call(s)" for name, count in tools.items()]
    lines += [f"- module {module}" for module in modules]
    return "\n".join(lines) or "No tools or modules used."


def _problem_solving(conversation: Conversation) -> str:
    results = [s for s in conversation.steps if s.kind in ("tool_result", "error")]
    summary = f"{len(conversation.calls())} tool call(s), {len(conversation.errors())} returned an error."
    if results:
        last = results[-1]
        summary += f" The last result ({last.name}): " + (
            last_line(last.text) if last.kind == "error" else brief(last.text, separator=CODE_JOIN)
        )
    return summary


def _completed(conversation: Conversation) -> str:
    done = [f"- {s.name}: {brief(s.text, separator=CODE_JOIN)}" for s in conversation.steps if s.kind == "tool_result"]
    return "\n".join(done[-MAX_CODE_LINES:]) or "Nothing was completed with tools."


def _pending(conversation: Conversation) -> str:
    if not conversation.last_request:
        return "Nothing pending."
    quoted = "\n".join(f"> {line}" for line in conversation.last_request.splitlines())
    return f"The latest request, which may still be open:\n{quoted}"


def _current_work(conversation: Conversation) -> str:
    lines = [f"The latest user request: {brief(conversation.last_request, 300)}"]
    calls = conversation.calls()
    if calls:
        lines.append(f"The last tool call ({calls[-1].name}): {brief(calls[-1].text, separator=CODE_JOIN)}")
    replies = [s for s in conversation.steps if s.kind == "assistant"]
    if replies:
        lines.append(f"The last reply began: {brief(replies[-1].text, 300)}")
    return "\n".join(lines)


def _next_step(conversation: Conversation) -> str:
    if not conversation.last_request:
        return "Wait for the user's next request."
    return f'Carry on with the latest request, quoted verbatim:\n"{conversation.last_request}"'


SECTION_BUILDERS: tuple[tuple[str, Callable[[Conversation], str]], ...] = (
    ("user messages", _user_messages),
    ("file", _files),
    ("error", _errors),
    ("pending", _pending),
    ("current work", _current_work),
    ("next step", _next_step),
    ("continuing", _next_step),
    ("primary request", _primary),
    ("concept", _concepts),
    ("problem", _problem_solving),
    ("completed", _completed),
)
"""Which builder fills a section, by a keyword of its title (first match wins)."""


def section_body(title: str, conversation: Conversation) -> str:
    lowered = title.lower()
    for keyword, build in SECTION_BUILDERS:
        if keyword in lowered:
            return build(conversation)
    return "The offline stand-in has nothing to extract for this section."


# How to shrink an answer that would not fit max_tokens, gentlest first: (analysis lines kept,
# lines kept per section other than the user's messages, which are never cut).
FIT_STEPS: tuple[tuple[int, int | None], ...] = (
    (MAX_ANALYSIS_HEAD + MAX_ANALYSIS_TAIL, None), (40, None), (12, 30), (4, 12), (0, 4), (0, 1),
)


def _trim(body: str, lines: int | None) -> str:
    kept = body.splitlines()
    if lines is None or len(kept) <= lines:
        return body
    return "\n".join([*kept[:lines], f"… {len(kept) - lines} more lines left out to fit the reply"])


def _render(conversation: Conversation, sections: list[tuple[int, str]], analysis: int | None,
            lines: int | None) -> str:
    """The summary's sections, after an <analysis> walk of `analysis` lines (None: no walk asked)."""
    parts = []
    for n, title in sections:
        body = section_body(title, conversation)
        parts.append(f"## {n}. {title}\n{body if 'user message' in title.lower() else _trim(body, lines)}")
    body = "\n\n".join(parts)
    if analysis is None:
        return f"<summary>\n{body}\n</summary>"
    return f"<analysis>\n{_analysis(conversation, analysis)}\n</analysis>\n\n<summary>\n{body}\n</summary>"


def compaction_answer(request: Request) -> str:
    """`<analysis>` walk, then `<summary>` with every requested section in order, shrunk (the
    walk first, then the sections but the user's messages) until it fits the reply's max_tokens."""
    return _fitted(Conversation.of(request), requested_sections(latest_user_text(request)),
                   int(request.get("max_tokens") or 0))


def _fitted(conversation: Conversation, sections: list[tuple[int, str]], budget: int, walk: bool = True) -> str:
    for analysis, lines in FIT_STEPS:
        text = _render(conversation, sections, analysis if walk else None, lines)
        if not budget or count_text(text) <= budget:
            break
    return text


SERVER_SECTIONS = ((1, "Primary Request and Intent"), (6, "All User Messages"), (8, "Current Work"))
"""What the stand-in's server-side compaction (compact_20260112) writes: no prompt asks for sections."""


def _with_blocks(history: Sequence[Mapping[str, Any]]) -> Conversation:
    """The conversation, with the user messages and section lines an earlier compaction block
    (or summary message) quoted carried forward."""
    blocks = [str(b.get("content") or "") for m in history for b in content_blocks(m) if b.get("type") == "compaction"]
    earlier = [*blocks, *(t for t in _user_texts(history) if _USER_ITEM.search(t))]
    carried = tuple(line for text in earlier for line in _carried_lines(text))
    prior = tuple(item for text in blocks for item in _USER_ITEM.findall(text))
    return Conversation(tuple(history), (*prior, *_user_items(history)), tuple(events(history)), carried)


def server_summary(history: Sequence[Mapping[str, Any]]) -> str:
    """An extractive summary of a whole conversation, for the API's own compaction block."""
    conversation = _with_blocks(history)
    return "\n\n".join(f"## {n}. {title}\n{section_body(title, conversation)}" for n, title in SERVER_SECTIONS)


def on_demand_summary(history: Sequence[Mapping[str, Any]], instructions: str | None, max_tokens: int) -> str:
    """The summary of an on-demand compaction. Its `instructions` replace the API's own prompt: when
    they ask for numbered <summary> sections (as ctx_magic's prompt does) the answer is the one the
    stand-in gives that prompt in a message, fitted to `max_tokens`, its <analysis> walk only when
    they ask for one; other instructions, or none, get the server's own summary."""
    sections = requested_sections(instructions or "")
    if "<summary>" not in (instructions or "") or len(sections) < MIN_SECTIONS:
        summary = server_summary(history)
    else:
        summary = _fitted(_with_blocks(history), sections, max_tokens, walk="<analysis>" in (instructions or ""))
    # The user's messages are never shortened to fit, so they alone can outgrow the reply; the
    # model still stops writing at max_tokens, as in every answer.
    return truncate_text(summary, max_tokens) if max_tokens else summary
