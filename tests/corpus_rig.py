"""The shared corpus in tests: its path, or a skip that says why (a failure under CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.corpus_location import corpus_missing, corpus_path


def require_corpus(*parts: str) -> Path:
    """The corpus folder (or the part named by `parts`); skips saying why when it is absent,
    and fails instead under CI=true, where the corpus is always laid out beside the clone."""
    reason = corpus_missing(*parts)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return corpus_path().joinpath(*parts)
