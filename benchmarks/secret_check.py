"""How often does the secret check refuse what is not a secret, and catch what is?

False alarms: every line of real prose and agent work in the shared corpus (Claude Code sessions'
assistant text, SWE-agent trajectories' messages and tool outputs, notebooks' markdown) goes
through `find_secret`; a flagged line is a refused memory that held no credential (the corpus
holds none: its authors redacted them). The table counts flagged lines by kind.

Catches: made-up keys in the shapes of real ones (seeded, never real), each written the ways a
memory holds them: alone, glued to the word before it, after `=` or `:`, in a URL's query, in
words. The table counts the ones found by shape and writing.

    python benchmarks/secret_check.py [--corpus DIR] [--seed N] [--keys N]

(Not named secrets.py: a benchmark that puts this folder on sys.path would hide the standard
library's `secrets` module.)

It uses only `find_secret`, which every version has: to measure another version's check, run
this file with that version's package first on the path (PYTHONPATH=OTHER_CHECKOUT).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from ctx_magic.memory.secrets import find_secret

DEFAULT_CORPUS = Path(os.environ.get("CTX_MAGIC_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
LINES_PER_MESSAGE = 400  # a tool output's first lines: the rest repeats the same shapes
ALNUM = string.ascii_letters + string.digits


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def corpus_lines(root: Path) -> Iterator[tuple[str, str]]:
    """(source, line) for every non-empty line of prose and agent work in the corpus."""
    for path in sorted((root / "claude-api-real").rglob("*.jsonl")):
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("type") == "assistant":
                for line in _text_of((record.get("message") or {}).get("content")).splitlines():
                    yield "Claude Code assistant text", line
    for path in sorted((root / "mini-swe-agent-gemini3").rglob("*.traj.json")):
        for message in json.loads(path.read_text(encoding="utf-8")).get("messages", []):
            for line in _text_of(message.get("content")).splitlines()[:LINES_PER_MESSAGE]:
                yield "SWE-agent messages and outputs", line
    for path in sorted((root / "handson-ml3").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
            if cell.get("cell_type") == "markdown":
                for line in "".join(cell.get("source", [])).splitlines():
                    yield "notebook markdown", line


def false_alarms(root: Path) -> None:
    seen: set[str] = set()
    scanned: Counter[str] = Counter()
    flagged: Counter[tuple[str, str]] = Counter()
    for source, line in corpus_lines(root):
        if not line.strip() or line in seen:
            continue
        seen.add(line)
        scanned[source] += 1
        kind = find_secret(line)
        if kind is not None:
            flagged[(source, kind)] += 1
    print("### False alarms on the corpus (distinct non-empty lines)\n")
    print("| source | lines | flagged | share |")
    print("| --- | ---: | ---: | ---: |")
    for source, count in scanned.items():
        hits = sum(n for (s, _), n in flagged.items() if s == source)
        print(f"| {source} | {count:,} | {hits} | {hits / count:.3%} |")
    print("\n| source | kind | lines |")
    print("| --- | --- | ---: |")
    for (source, kind), count in sorted(flagged.items()):
        print(f"| {source} | {kind} | {count} |")


def _random(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


SHAPES: dict[str, Callable[[random.Random], str]] = {
    "AWS access key id": lambda r: "AKIA" + _random(r, 16, string.ascii_uppercase + "234567"),
    "GitHub token": lambda r: "ghp_" + _random(r, 36),
    "Anthropic key": lambda r: "sk-ant-api03-" + _random(r, 40, ALNUM + "_-"),
    "Hugging Face token": lambda r: "hf_" + _random(r, 34),
    "Slack token": lambda r: "xoxb-" + _random(r, 12, string.digits) + "-" + _random(r, 24),
    "generic 32-char key": lambda r: _random(r, 32),
}
WRITINGS: dict[str, Callable[[str], str]] = {
    "alone": lambda key: f"Use {key} for the nightly export.",
    "glued to a word": lambda key: f"prod_key{key} for the nightly export",
    "after = or :": lambda key: f"EXPORT_KEY={key} and region: eu-west-1",
    "in a URL's query": lambda key: f"https://api.example.com/v2/export?key={key}&format=csv",
    "in words": lambda key: f"the api key for the export is {key}",
}


def catches(seed: int, keys: int) -> None:
    rng = random.Random(seed)
    print(f"\n### Catches: {keys} made-up keys per shape and writing (seed {seed})\n")
    print("| shape | " + " | ".join(WRITINGS) + " |")
    print("| --- |" + " ---: |" * len(WRITINGS))
    for shape, make in SHAPES.items():
        cells = []
        for write in WRITINGS.values():
            found = sum(find_secret(write(make(rng))) is not None for _ in range(keys))
            cells.append(f"{found}/{keys}")
        print(f"| {shape} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keys", type=int, default=200)
    args = parser.parse_args()
    if args.corpus.is_dir():
        false_alarms(args.corpus)
    else:
        print(f"No corpus at {args.corpus}: the false-alarm table is skipped (--corpus DIR, or CTX_MAGIC_CORPUS).")
    catches(args.seed, args.keys)


if __name__ == "__main__":
    main()
