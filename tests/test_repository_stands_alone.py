"""The repository stands alone: its text cites nothing a reader of it cannot open.

No behaviour-spec document or its ids (a letter and a number naming a rule), no design-notes
folder, no tracker numbers, no Claude Code source-file names, no machine paths: each mechanism is named in words
(docs/design.md defines the terms). The patterns are built from parts so that this file does not
match itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCOPE = ("ctx_magic", "tests", "benchmarks", "README.md", "DEVELOPERS.md", "docs", "examples")

_IDS = {"M": range(1, 6), "T": range(1, 6), "L": range(1, 7), "C": range(1, 11), "S": range(1, 4),
        "X": range(1, 5), "N": range(1, 6), "U": range(1, 4)}
_ID_NAMES = sorted((f"{letter}{n}" for letter, numbers in _IDS.items() for n in numbers), key=len, reverse=True)
_ID = "(?:" + "|".join(_ID_NAMES) + ")(?:a|b)?"
_CC_FILES = ("query", "compact", "auto" + "Compact", "micro" + "Compact", "tool" + "Limits",
             "toolResult" + "Storage", "session" + "MemoryCompact", "session" + "Memory")

PATTERNS = {
    "the spec document": re.compile(r"\b" + "SP" + "EC" + r"\b"),
    "the design-notes folder": re.compile(r"\b" + "se" + "eds" + r"\b", re.IGNORECASE),
    "a tracker number": re.compile(r"\b" + "iss" + r"ues?\s+#?\d+", re.IGNORECASE),
    "a spec id": re.compile(r"(?<![\w#])" + _ID + r"(?![\w])"),
    "a spec id in a test name": re.compile(r"def test_(?:" + "|".join(n.lower() for n in _ID_NAMES) + ")[ab]?_"),
    "a Claude Code source file": re.compile(r"\b(?:" + "|".join(_CC_FILES) + r")\.t" + r"s\b"
                                            + "|timeBased" + "MCConfig"),
    # The corpus and the checkout are reached relative to the repository, never by a machine's path.
    "a machine path": re.compile(r"(?<![\w.])/(?:" + "wo" + "rk|" + "che" + r"ck)/\w"),
}
# JPEG segment markers (0xFF 0xC4 and 0xFF 0xC8), not ids.
ALLOWED = {("ctx_magic/images.py", "a spec id"): {"C" + "4", "C" + "8"}}


def tracked_text_files() -> list[tuple[str, str]]:
    listed = subprocess.run(["git", "ls-files", "-z", "--", *SCOPE], cwd=ROOT, capture_output=True, check=True)
    files = []
    for name in listed.stdout.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            files.append((name, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return files


def test_no_tracked_text_cites_a_document_the_reader_cannot_open() -> None:
    files = tracked_text_files()
    assert any(name == "README.md" for name, _ in files), "git ls-files listed no README.md"
    found = []
    for name, text in files:
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in PATTERNS.items():
                for match in pattern.finditer(line):
                    if match.group(0) not in ALLOWED.get((name, what), set()):
                        found.append(f"{name}:{number}: {what}: {match.group(0)!r}")
    assert found == []
