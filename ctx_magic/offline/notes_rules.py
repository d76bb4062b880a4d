"""The offline stand-in's answer to a session-notes request (ctx_magic/memory/session_notes.py).

A deterministic, extractive update of the ten-section notes, built from the conversation in
the request and the current notes it carries, answered as the prompt asks: only the sections
that change (rewritten, or lines appended). No model is involved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctx_magic.offline.conversation import Request, brief, events, is_background, latest_user_text, messages

MAX_ITEMS = 25  # the most recent items a list section keeps: the notes stay a few thousand tokens
_CURRENT = re.compile(r"<current-notes>\s*(.*?)\s*</current-notes>", re.DOTALL)
_HEADING = re.compile(r"^# (.+?)\s*$", re.MULTILINE)
_CORRECTION = re.compile(r"\b(no|actually|instead|i meant|don't|do not|never|always|decided|let's go with)\b",
                         re.IGNORECASE)


def is_notes_request(request: Request) -> bool:
    text = latest_user_text(request)
    return "<current-notes>" in text and "<notes-update>" in text


def _current_sections(prompt: str) -> list[tuple[str, str]]:
    """(title, body) of the current notes, in order (the template when empty)."""
    match = _CURRENT.search(prompt)
    notes = match.group(1) if match else ""
    heads = list(_HEADING.finditer(notes))
    out = []
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(notes)
        out.append((head.group(1), notes[head.end():end].strip("\n")))
    return out


def _bullets(body: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith("- ")]


def _history(request: Request) -> list[Mapping[str, Any]]:
    return list(messages(request))[:-1]


def notes_answer(request: Request) -> str:
    history = _history(request)
    steps = [e for e in events(history) if not (e.kind == "user" and is_background(e.text))]
    users = [e.text for e in steps if e.kind == "user"]
    built = {
        "Session Title": [brief(users[0], 60)] if users else [],
        "Current State": [f"- Latest request: {brief(users[-1], 300)}"] if users else [],
        "Task Specification": [f"- {brief(text, 300)}" for text in users],
        "Files and Functions": [f"- {brief(e.text, 200)}" for e in steps
                                if e.kind == "tool_call" and e.name in ("read_file", "list_files", "grep")],
        "Workflow": [f"- {e.name}: {brief(e.text, 160, '; ')}" for e in steps if e.kind == "tool_call"][-10:],
        "Errors & Corrections": [f"- {e.name} failed: {brief(e.text, 200)}" for e in steps if e.kind == "error"]
        + [f"- The user said: {brief(text, 300)}" for text in users if _CORRECTION.search(text)],
        "Key Results": [f"- {e.name}: {brief(e.text, 200)}" for e in steps if e.kind == "tool_result"][-5:],
        "Worklog": [f"- {e.name}: {brief(e.text, 120, '; ')}" for e in steps if e.kind == "tool_call"],
    }
    changes = []
    for title, body in _current_sections(latest_user_text(request)):
        description = next((line for line in body.splitlines() if re.fullmatch(r"_.*_", line.strip())), "")
        new = built.get(title, [])
        if title in ("Session Title", "Current State", "Key Results"):
            items = new or _bullets(body) or [line for line in body.splitlines() if line and line != description][:1]
            if "\n".join([description, *items]).strip() != body.strip():
                changes.append(f'<section title="{title}">\n' + "\n".join([description, *items]) + "\n</section>")
        else:
            added = [item for item in new if item not in _bullets(body)][-MAX_ITEMS:]
            if added:
                changes.append(f'<append title="{title}">\n' + "\n".join(added) + "\n</append>")
    return "<notes-update>\n" + "\n".join(changes) + "\n</notes-update>"
