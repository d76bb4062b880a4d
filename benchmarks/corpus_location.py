"""Where the shared corpus of real recorded material is: one place for benchmarks and tests.

`CTX_MAGIC_CORPUS` when set, else `../shared/corpus` beside the repository. The corpus is
never copied into the repository; a benchmark given no `--corpus` reads it from here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ENVIRONMENT_VARIABLE = "CTX_MAGIC_CORPUS"
REPOSITORY = Path(__file__).resolve().parents[1]
BESIDE_REPOSITORY = REPOSITORY.parent / "shared" / "corpus"


def corpus_path() -> Path:
    """The corpus folder to read (it may be missing: see `corpus_missing`)."""
    configured = os.environ.get(ENVIRONMENT_VARIABLE)
    return Path(configured) if configured else BESIDE_REPOSITORY


def corpus_missing(*parts: str) -> str | None:
    """Why the corpus (or the part of it named by `parts`) cannot be read, None when it can."""
    where = corpus_path().joinpath(*parts)
    if where.exists():
        return None
    return f"the shared corpus is not at {where} (set {ENVIRONMENT_VARIABLE} or place it at ../shared/corpus)"


def readable(load: Callable[[Path], T], path: Path) -> T | None:
    """What `load` reads of `path`, or None when the file is not of its kind (another corpus's, cut
    short or of another shape): said in one line on stderr, so the rest of the corpus still runs."""
    try:
        return load(path)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        why = " ".join(str(error).split())  # one line, whatever the parser's message
        print(f"left out {path}: not a file this benchmark reads ({type(error).__name__}: {why})", file=sys.stderr)
        return None
