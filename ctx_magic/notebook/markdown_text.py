"""Plain text inside Markdown cells: text nobody wrote as Markdown (the user's prompt typed in a
code cell, what a tool printed, a line of ours quoting them) shown as it was written.

Markdown joins the lines of a paragraph and reads `*`, `_`, `#`, `$` and friends as formatting;
`plain_as_markdown` escapes them and keeps every line break. Code fences the user typed are left as
they are: they read as code, as they were meant. The agent's replies are Markdown and stay as they
are.
"""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~&$])")
"""Characters Markdown (with JupyterLab's `$` for mathematics) may read as formatting anywhere."""
_BLOCK_START = re.compile(r"^([-+=]|\d+(?=[.)]))")
"""What opens a list, a setext heading or a numbered list at the start of a line."""
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HARD_BREAK = "\\"  # CommonMark's visible hard line break (trailing spaces are lost too easily)
TAB = "    "


def plain_line(line: str) -> str:
    """One line of plain text as Markdown that shows it as it is, its indent kept."""
    body = line.lstrip(" \t")
    indent = line[: len(line) - len(body)].replace("\t", TAB)
    body = _SPECIAL.sub(r"\\\1", body)
    body = _BLOCK_START.sub(lambda m: m.group(0) + "\\" if m.group(0)[0].isdigit() else "\\" + m.group(0), body)
    return "&nbsp;" * len(indent) + body


def plain_as_markdown(text: str) -> str:
    """`text` as Markdown that renders it as written: every line break kept, nothing read as
    formatting, except code fences, which stay fences."""
    out: list[str] = []
    fence = ""
    for line in text.strip("\n").split("\n"):
        if fence:
            out.append(line)
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = ""
            continue
        opened = _FENCE.match(line)
        if opened and not (opened.group(1)[0] == "`" and "`" in line[opened.end():]):
            fence = opened.group(1)
            out.append(line)
            continue
        if out and out[-1].strip() and line.strip() and not _FENCE.match(out[-1]):  # not after a fence
            out[-1] += HARD_BREAK
        out.append(plain_line(line) if line.strip() else "")
    return "\n".join(out)


def code_fence(text: str, language: str = "") -> str:
    """`text` in a code fence longer than any run of backticks inside it, so nothing in it can
    close the fence early."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{language}\n{text}\n{fence}"
