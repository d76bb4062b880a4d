"""The house counter of attributes assigned outside their class: what it counts and what it leaves
to the library whose interface assignment is."""

from __future__ import annotations

from pathlib import Path

from benchmarks.house import foreign_writes

SOURCE = '''
import sys
import threading

import ipywidgets as widgets
from traitlets import Unicode
from traitlets.config import Configurable

from ctx_magic.notebook.outputs import CellRecord


class Owner:
    def __init__(self, record: CellRecord) -> None:
        self.count = 0
        self.record = record
        self.timer = threading.Timer(1.0, print)
        self.label = widgets.HTML()

    def act(self, other: CellRecord, made) -> None:
        self.count += 1
        self.timer.daemon = True
        self.label.value = "shown"
        sys.stdin = None
        self.record.error = "written from outside CellRecord"
        other.result = {}
        made.pending_id = "x"
        button = widgets.Button()
        button.layout.display = "none"


class Choices(Configurable):
    model = Unicode("a").tag(config=True)


class Switch:
    def __init__(self) -> None:
        self.choices = Choices()

    def to(self, model: str) -> None:
        self.choices.model = model


class Panel(widgets.VBox):
    def __init__(self) -> None:
        super().__init__()
        self.layout.width = "100%"


def free(record):
    record.execution_count = 3
'''


def test_counts_writes_to_the_package_objects_and_unknown_ones_only(tmp_path: Path) -> None:
    package = tmp_path / "ctx_magic"
    package.mkdir()
    (package / "mod.py").write_text(SOURCE, encoding="utf-8")
    found = foreign_writes([package / "mod.py"], tmp_path)
    assert [line.split(" ", 1)[1] for line in found] == [
        "self.record.error", "other.result", "made.pending_id", "record.execution_count"]
    assert found[0].startswith("ctx_magic/mod.py:24 ")
