"""The repository's Markdown links resolve: every relative link names a tracked file, and every
`#anchor` names a heading of the file it points to, as GitHub makes anchors from headings. Sections
are renamed and shortened often; a link left pointing at an old heading fails here."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, `_` and `-`
    kept), each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets `-1`, `-2`, ... as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def tracked_markdown() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*.md"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name]


def broken_links(path: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z+.-]*:", target):  # https:, mailto: ...: not the repository's
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading")
    return broken


def test_the_slug_is_githubs() -> None:
    assert slug("4. `python -m benchmarks.replay`: what it costs") == "4-python--m-benchmarksreplay-what-it-costs"
    assert slug("Partial, manual and model compaction; hooks") == "partial-manual-and-model-compaction-hooks"
    assert anchors("# Notes\n\n## Notes\n```\n# not a heading\n```\n") == {"notes", "notes-1"}


def test_every_relative_link_and_anchor_in_the_markdown_resolves() -> None:
    files = tracked_markdown()
    assert ROOT / "docs" / "design.md" in files, "git ls-files listed no docs/design.md"
    broken = {str(path.relative_to(ROOT)): found for path in files if (found := broken_links(path))}
    assert broken == {}
