"""Fixtures the notebook tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kernel_rig import Kernel


@pytest.fixture
def kernels() -> Iterator[list[Kernel]]:
    """The real kernels a test starts (`kernel_rig.start` adds them); each is shut down after it."""
    started: list[Kernel] = []
    yield started
    for kernel in started:
        kernel.close()
