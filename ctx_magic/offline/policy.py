"""The offline stand-in's answering policy: fixed rules, not a model.

The local server has no model behind it. It answers with this deterministic policy, a pure
function of the request JSON, so that tests and benchmarks can drive the whole agent loop
(tool calls, results, compaction, memory extraction) without a network. The rules, first
match wins:

1. compaction: the last user message asks for <analysis> and <summary> with numbered
   sections -> an extractive summary (ctx_magic.offline.compaction);
2. memory: a memory-extraction request -> the responders registered in MEMORY_RULES, then a
   generic fallback (this is the extension point for session and long-term memory);
3. background runs: the last user text has lines `task read ID [OFFSET]`, `task stop ID` or
   `task answer ID TEXT` (outside fences) and a `task` tool is offered -> one tool call per
   step, fences and task lines in the order they are written (a fence opened with
   ```python background starts a background run);
4. python code: the last user text holds ```python fences, a `python` tool is offered and
   tool_choice allows it -> one `python` tool call per fence (```python background: with
   `background: true`);
5. the kernel's history: the last user text asks to go on from earlier work ("where I was",
   "where I left off", "what I did before", "my earlier cells"), and a `kernel_history` tool is
   offered and allowed -> one `kernel_history` call with no arguments;
6. tool results: the last user message is only tool results (and context the client added
   beside them) -> a short note of what came back;
7. anything else -> a short reply saying what the stand-in saw.

Lines the client tells the agent about its background runs (a `<background-runs>` block) are
context, not a request: the notes of rules 6 and 7 quote them, and nothing else reads them.

`tool_choice: {"type": "none"}` always wins: no answer then carries a tool call.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ctx_magic.messages import result_text
from ctx_magic.offline.compaction import compaction_answer, is_compaction_request
from ctx_magic.offline.conversation import (
    Block,
    Request,
    asked_text,
    content_blocks,
    first_line,
    is_error_result,
    last_line,
    latest_user,
    latest_user_text,
    message_text,
    messages,
    requested_headings,
)
from ctx_magic.offline.memory_rules import (
    consolidate_answer,
    gather_answer,
    is_consolidate_request,
    is_gather_request,
    is_longterm_request,
    longterm_answer,
)
from ctx_magic.offline.notes_rules import is_notes_request, notes_answer

RequestKind = Literal["normal", "compaction", "memory"]
QUOTE_CHARS = 200  # how much of the latest user text the fallback reply quotes
PYTHON_TOOL = "python"
HISTORY_TOOL = "kernel_history"
TASK_TOOL = "task"
STAND_IN = "Offline stand-in (a deterministic policy, not a model)"

_PYTHON_FENCE = re.compile(r"```(?:python|py)([ \t]+background)?[ \t]*\n(.*?)```", re.DOTALL)
_TASK_LINE = re.compile(r"^[ \t]*task[ \t]+(read|stop|answer)[ \t]+(t\d+)(?:[ \t]+(.*?))?[ \t]*$", re.MULTILINE)
_NEWS_BLOCK = re.compile(r"<background-runs>\n(.*?)\n</background-runs>", re.DOTALL)
_HISTORY_ASK = re.compile(r"\bwhere I (?:was|left off)\b|\bwhat I (?:did|ran) before\b|\bmy earlier cells\b", re.I)
_MEMORY_WORDS = re.compile(r"\b(session[ -]memory|long[- ]term memor|memories|memory file|notes file)", re.I)
_MEMORY_VERBS = re.compile(r"\b(extract|update|consolidat|record|remember|save)", re.I)


@dataclass(frozen=True)
class Answer:
    """What the stand-in says: content blocks (tool_use without ids yet) and why it stopped."""

    content: tuple[Block, ...]
    stop_reason: str = "end_turn"

    @classmethod
    def text(cls, text: str) -> Answer:
        return cls(({"type": "text", "text": text},))


@dataclass(frozen=True)
class Rule:
    """One rule of the policy: when it applies, how it answers, and how requests are counted."""

    name: str
    kind: RequestKind
    applies: Callable[[Request], bool]
    answer: Callable[[Request], Answer]


def tools_allowed(request: Request, name: str) -> bool:
    """Whether the request offers tool `name` and its tool_choice lets the answer call it."""
    offered = any(t.get("name") == name for t in request.get("tools") or [])
    choice = request.get("tool_choice") or {"type": "auto"}
    if choice.get("type") == "none":
        return False
    if choice.get("type") == "tool":
        return offered and choice.get("name") == name
    return offered


def _single_tool_call(request: Request) -> bool:
    return bool((request.get("tool_choice") or {}).get("disable_parallel_tool_use"))


def python_fences(request: Request) -> list[str]:
    return [code.strip("\n") for _background, code in _PYTHON_FENCE.findall(asked_text(request))]


def _python_input(match: re.Match[str]) -> dict[str, Any]:
    code = {"code": match.group(2).strip("\n")}
    return {**code, "background": True} if match.group(1) else code


def _wants_python(request: Request) -> bool:
    return bool(python_fences(request)) and tools_allowed(request, PYTHON_TOOL)


def _answer_python(request: Request) -> Answer:
    fences = list(_PYTHON_FENCE.finditer(asked_text(request)))[: 1 if _single_tool_call(request) else None]
    lead = f"{STAND_IN}: running the {len(fences)} python block(s) from your message."
    calls = [{"type": "tool_use", "name": PYTHON_TOOL, "input": _python_input(match)} for match in fences]
    return Answer(({"type": "text", "text": lead}, *calls), "tool_use")


def _wants_history(request: Request) -> bool:
    return bool(_HISTORY_ASK.search(asked_text(request))) and tools_allowed(request, HISTORY_TOOL)


def _answer_history(_request: Request) -> Answer:
    lead = f"{STAND_IN}: reading the kernel's history of cells run before this conversation."
    return Answer(({"type": "text", "text": lead}, {"type": "tool_use", "name": HISTORY_TOOL, "input": {}}), "tool_use")


def _task_input(match: re.Match[str]) -> dict[str, Any]:
    """`task read t1 [OFFSET]`, `task stop t1`, `task answer t1 TEXT` as the task tool's input."""
    action, run_id, rest = match.group(1), match.group(2), (match.group(3) or "").strip()
    tool_input: dict[str, Any] = {"id": run_id, "action": action}
    if action == "read" and rest.isdigit():
        tool_input["offset"] = int(rest)
    elif action == "answer":
        tool_input["text"] = rest
    return tool_input


def _task_lines(request: Request) -> list[re.Match[str]]:
    """The task lines of the latest user text, outside its python fences."""
    text = asked_text(request)
    fenced = [match.span() for match in _PYTHON_FENCE.finditer(text)]
    return [m for m in _TASK_LINE.finditer(text) if not any(a <= m.start() < b for a, b in fenced)]


def _wants_task(request: Request) -> bool:
    return bool(_task_lines(request)) and tools_allowed(request, TASK_TOOL)


def _answer_task(request: Request) -> Answer:
    """Every step of the message in order: its python fences and its task lines."""
    text = asked_text(request)
    steps = [(m.start(), {"type": "tool_use", "name": TASK_TOOL, "input": _task_input(m)})
             for m in _task_lines(request)]
    if tools_allowed(request, PYTHON_TOOL):
        steps += [(m.start(), {"type": "tool_use", "name": PYTHON_TOOL, "input": _python_input(m)})
                  for m in _PYTHON_FENCE.finditer(text)]
    calls = [call for _at, call in sorted(steps, key=lambda step: step[0])][: 1 if _single_tool_call(request) else None]
    lead = f"{STAND_IN}: taking the {len(calls)} step(s) of your message in order."
    return Answer(({"type": "text", "text": lead}, *calls), "tool_use")


def heard_news(request: Request) -> list[str]:
    """The lines the client told the agent about its background runs in the latest user message."""
    message = latest_user(request)
    texts = [b.get("text", "") for b in content_blocks(message or {}) if b.get("type") == "text"]
    return [line for text in texts for block in _NEWS_BLOCK.findall(text) for line in block.splitlines() if line]


def _with_news(answer: Answer, request: Request) -> Answer:
    news = heard_news(request)
    if not news:
        return answer
    text = answer.content[0]["text"] + "\n" + "\n".join(f"Heard: {line}" for line in news)
    return dataclasses.replace(answer, content=({"type": "text", "text": text}, *answer.content[1:]))


def _wants_result_note(request: Request) -> bool:
    message = latest_user(request)
    if message is None:
        return False
    blocks = content_blocks(message)
    results = [b for b in blocks if b.get("type") == "tool_result"]
    return bool(results) and all(b.get("type") == "tool_result" or (
        b.get("type") == "text" and _NEWS_BLOCK.match(b.get("text", ""))) for b in blocks)


def _answer_results(request: Request) -> Answer:
    names = {
        str(b.get("id")): str(b.get("name"))
        for m in messages(request)
        for b in content_blocks(m)
        if b.get("type") == "tool_use"
    }
    lines = []
    for block in content_blocks(latest_user(request) or {}):
        if block.get("type") != "tool_result":
            continue
        name = names.get(str(block.get("tool_use_id")), "tool")
        text = result_text(block)
        stalled = next((line for line in text.splitlines() if line.startswith("stalled: ")), "")
        if is_error_result(block):
            lines.append(f"- {name} reported an error: {last_line(text) or 'no details'}")
        elif stalled:
            lines.append(f"- {name} {first_line(stalled, 200)}")
        else:
            lines.append(f"- {name} returned: {first_line(text) or '(no output)'}")
    return _with_news(Answer.text(f"{STAND_IN}: the tool results came back.\n" + "\n".join(lines)), request)


def _answer_compaction(request: Request) -> Answer:
    return Answer.text(compaction_answer(request))


def looks_like_memory_request(request: Request) -> bool:
    """Generic detector: the last user text asks to extract, update or save memories or notes
    (not a compaction summary or the notes' place around a main call, which name both)."""
    text = asked_text(request)
    return bool(_MEMORY_WORDS.search(text) and _MEMORY_VERBS.search(text))


def answer_memory_generic(request: Request) -> Answer:
    """Generic fallback: repeat the headings the request lists, each with the latest request.

    Session-memory and long-term-memory responders that know their own prompts go in
    MEMORY_RULES, ahead of this one.
    """
    latest = first_line(_latest_non_prompt_text(request), QUOTE_CHARS) or "nothing recorded yet"
    headings = requested_headings(latest_user_text(request))
    if not headings:
        return Answer.text(f"{STAND_IN}: no new memories. Latest request: {latest}")
    return Answer.text("\n\n".join(f"{heading}\n{latest}" for heading in headings))


def _latest_non_prompt_text(request: Request) -> str:
    """The latest user text before the request's own last message (the conversation's last ask)."""
    for message in reversed(messages(request)[:-1]):
        if message.get("role") == "user" and message_text(message).strip():
            return message_text(message)
    return ""


def _answer_default(request: Request) -> Answer:
    count = len(messages(request))
    text = latest_user_text(request).strip()
    seen = f'Your latest message begins: "{text[:QUOTE_CHARS]}"' if text else "Your latest message has no text."
    return _with_news(Answer.text(f"{STAND_IN}. I saw {count} message(s). {seen}"), request)


MEMORY_RULES: tuple[Rule, ...] = (
    Rule("session-notes", "memory", is_notes_request, lambda r: Answer.text(notes_answer(r))),
    Rule("memory-longterm", "memory", is_longterm_request, lambda r: Answer.text(longterm_answer(r))),
    Rule("memory-dream-gather", "memory", is_gather_request, lambda r: Answer.text(gather_answer(r))),
    Rule("memory-dream-consolidate", "memory", is_consolidate_request, lambda r: Answer.text(consolidate_answer(r))),
    Rule("memory-generic", "memory", looks_like_memory_request, answer_memory_generic),
)
"""Memory-extraction responders, most specific first; later features add theirs here."""

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("compaction", "compaction", is_compaction_request, _answer_compaction),
    *MEMORY_RULES,
    Rule("task", "normal", _wants_task, _answer_task),
    Rule("python-code", "normal", _wants_python, _answer_python),
    Rule("kernel-history", "normal", _wants_history, _answer_history),
    Rule("tool-results", "normal", _wants_result_note, _answer_results),
    Rule("fallback", "normal", lambda _request: True, _answer_default),
)


def _without_tool_calls(answer: Answer) -> Answer:
    content = tuple(b for b in answer.content if b.get("type") != "tool_use")
    content = content or ({"type": "text", "text": f"{STAND_IN}: no tool calls allowed here."},)
    stop = "end_turn" if answer.stop_reason == "tool_use" else answer.stop_reason
    return Answer(content, stop)


@dataclass(frozen=True)
class Policy:
    """An ordered set of rules; the first that applies answers."""

    rules: tuple[Rule, ...] = DEFAULT_RULES

    def rule_for(self, request: Request) -> Rule:
        return next((rule for rule in self.rules if rule.applies(request)), DEFAULT_RULES[-1])

    def kind(self, request: Request) -> RequestKind:
        return self.rule_for(request).kind

    def answer(self, request: Request) -> Answer:
        answer = self.rule_for(request).answer(request)
        choice: Mapping[str, Any] = request.get("tool_choice") or {}
        return _without_tool_calls(answer) if choice.get("type") == "none" else answer

    def with_rule(self, rule: Rule, *, first: bool = True) -> Policy:
        """A policy with one more rule, ahead of the others (or just before the fallback)."""
        rules = (rule, *self.rules) if first else (*self.rules[:-1], rule, self.rules[-1])
        return dataclasses.replace(self, rules=rules)
