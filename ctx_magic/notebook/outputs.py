"""Cell outputs as tool results.

While a cell runs, what it prints, displays, returns and raises is recorded (capture.py, which
also records the agent's own `python` runs) into a `CellRecord`; after it, the record waits for
the next agent turn, where it enters the context as a `notebook_cell` tool_use / tool_result pair
so every layer treats it like any other tool output. Which cells are recorded or pinned is read
from their first line.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import uuid
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from ctx_magic.images import SUPPORTED_TYPES, ImageCheck, check_image
from ctx_magic.messages import Block, Message, decode_output, text_block, tool_result_block, tool_use_block
from ctx_magic.store.pending import PENDING_ID_KEY

SKIP_MARKER = "# ctx: skip"
PIN_MARKER = "# ctx: pin"
"""A cell whose first line is this is pinned when it runs (its source, kept after every summary)."""
OWN_MAGICS = re.compile(r"(?:%%?(?:agent|compact|memory|ctx|pin)|%(?:load|reload|unload)_ext\s+ctx_magic"
                        r"|%config\s+CtxMagic)(?!\w)")
"""A first line that runs one of ctx_magic's magics (`%pinfo`, another extension's `%agentx`, are not ours)."""
IMAGE_TYPES = SUPPORTED_TYPES
CELL_FIELDS = ("source", "execution_count", "cell_id", "kernel", "stdout", "stderr", "displays", "result", "error")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_DEFAULT_REPR = re.compile(r"^<[\w.]+ object(?: at 0x[0-9a-f]+)?>$")
OWN_DISPLAY = {"ctx_magic": {"own": True}}
"""Metadata on ctx_magic's own displays (status, progress): never recorded as the code's output."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
KERNEL_RUN = uuid.uuid4().hex[:12]
"""This kernel process (a module constant: `%reload_ext` keeps it, a restart makes a new one).
Execution counts start again at 1 after a restart, so a count alone names a cell only within
one kernel run (the panel's cell marks rely on it when the frontend sends no cell id)."""


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def printed(pieces: list[str]) -> str:
    """Stream text as a terminal leaves it: ANSI codes out, and each carriage return rewrites its
    line, so a progress bar is its last state, not thousands of them."""
    text = strip_ansi("".join(pieces))
    if "\r" not in text:
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)


class _HTMLText(HTMLParser):
    """Just the text of an HTML display: rows on lines, cells apart, scripts and styles out."""

    BREAKS = frozenset({"br", "p", "div", "tr", "li", "h1", "h2", "h3", "h4", "table", "thead", "tbody"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("script", "style"):
            self.skip += 1
        elif tag in self.BREAKS:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append("\t")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self.skip:
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_text(markup: str) -> str:
    parser = _HTMLText()
    try:
        parser.feed(markup)
        parser.close()
    except Exception:  # noqa: BLE001 - broken markup: the raw text is still better than nothing
        return markup
    lines = ("".join(parser.parts)).splitlines()
    return "\n".join(line.strip("\t ") for line in lines if line.strip())


def display_text(data: dict[str, Any]) -> tuple[str, str] | None:
    """(mime type, text) the model gets for one display: markdown or plain text, or, when the plain
    text is only an object's default repr (an HTML-, JSON- or LaTeX-only display), the text of the
    HTML, the JSON or the LaTeX source."""
    plain = _widget_now(data) or as_text(data.get("text/plain", ""))
    if "text/markdown" in data:
        return "text/markdown", as_text(data["text/markdown"])
    if not plain or _DEFAULT_REPR.match(plain.strip()):
        if "text/html" in data:
            return "text/html", html_text(as_text(data["text/html"]))
        if "application/json" in data:
            return "application/json", json.dumps(data["application/json"], indent=1, ensure_ascii=False, default=str)
        if "text/latex" in data:
            return "text/latex", as_text(data["text/latex"])
    return ("text/plain", plain) if "text/plain" in data else None


def _widget_now(data: dict[str, Any]) -> str | None:
    """A widget's text as it is now, when it is still alive in this kernel: its text/plain was
    written when it was displayed, and a progress bar (tqdm.auto's, a library's) then moves in the
    widget's state alone, so the display says 0% of a loop that ended."""
    view = data.get(WIDGET_VIEW)
    widgets = sys.modules.get("ipywidgets.widgets.widget")
    if not isinstance(view, dict) or widgets is None:
        return None
    widget = getattr(widgets, "_instances", {}).get(view.get("model_id"))
    if widget is None:
        return None
    try:
        return repr(widget)
    except Exception:  # noqa: BLE001 - a widget's own repr failing leaves the text it was shown with
        return None


def pinned_source(source: str) -> str | None:
    """The source of a cell marked `# ctx: pin` on its first line, without the marker; else None."""
    lines = source.strip().splitlines()
    if not lines or not lines[0].strip().lower().startswith(PIN_MARKER):
        return None
    return "\n".join(lines[1:]).strip("\n")


def is_own_or_skipped(source: str) -> bool:
    """Cells running ctx_magic's own magics, and cells marked `# ctx: skip`, are not recorded."""
    lines = [line.strip() for line in source.strip().splitlines() if line.strip()]
    if not lines:
        return True
    if lines[0].lower().startswith(SKIP_MARKER):
        return True
    return OWN_MAGICS.match(lines[0]) is not None


@dataclass
class CellRecord:
    """What one cell did."""

    source: str
    execution_count: int | None = None
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    displays: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: str | None = None
    cell_id: str | None = None
    """The frontend's id of the cell (nbformat 4.5), when it sends one (JupyterLab, Notebook 7)."""
    kernel: str = KERNEL_RUN
    """The kernel process that ran it: a cell a dead kernel left in pending-cells.jsonl keeps its own."""
    pending_id: str | None = field(default=None, compare=False)
    """Its id in a session's pending-cells.jsonl, once written there (store/pending.py)."""
    pending_file: Path | None = field(default=None, compare=False, repr=False)

    def returned(self, result: dict[str, Any]) -> None:
        """The value of its last expression, as formatted for display."""
        self.result = result

    def failed(self, error: str | None) -> None:
        """The traceback it ended in (None: left out, as for a run interrupted on purpose)."""
        self.error = error

    def ran_as(self, execution_count: int | None) -> None:
        """The kernel's execution count for it (In[n])."""
        self.execution_count = execution_count

    def kept_in(self, pending_id: str, pending_file: Path) -> None:
        """Written to a session's pending-cells.jsonl (store/pending.py) under `pending_id`."""
        self.pending_id, self.pending_file = pending_id, pending_file

    def text(self) -> str:
        """What printed comes first as it is; every other part is labelled in brackets."""
        parts = []
        if self.stdout:
            parts.append(printed(self.stdout).rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + printed(self.stderr).rstrip("\n"))
        for data in self.displays:
            shown = display_text(data)
            if shown:
                parts.append(f"[displayed {shown[0]}]\n{shown[1]}")
        if self.result is not None:
            label = f"Out[{self.execution_count}]" if self.execution_count else "result"
            parts.append(f"[{label}]\n{as_text(self.result.get('text/plain', ''))}")
        if self.error:
            parts.append("[error]\n" + strip_ansi(self.error).rstrip("\n"))
        return decode_output("\n\n".join(parts)) if parts else "(no output)"

    def image_checks(self, image_max_bytes: int) -> list[ImageCheck]:
        """Each image the run showed, checked from its bytes (images.py): sent, with its media
        type corrected when need be, or left out with the reason."""
        checks = []
        for data in [*self.displays, *([self.result] if self.result else [])]:
            for mime in IMAGE_TYPES:
                if mime in data:
                    raw = data[mime]
                    checks.append(check_image(raw if isinstance(raw, (str, bytes)) else str(raw), mime,
                                              max_chars=image_max_bytes))
        return checks

    def content(self, image_max_bytes: int) -> str | list[Block]:
        """The tool_result content: text, plus the images the API accepts; a text stand-in for
        each image left out."""
        checks = self.image_checks(image_max_bytes)
        images = [c.block for c in checks if c.sent]
        notes = [c.block["text"] for c in checks if not c.sent]
        text = self.text() + ("\n" + "\n".join(notes) if notes else "")
        return [text_block(text), *images] if images else text

    def to_json(self) -> dict[str, Any]:
        """What a pending-cells line keeps (images as base64 text, as a display bundle has them)."""
        return {name: _jsonable(getattr(self, name)) for name in CELL_FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellRecord:
        fields = {name: data[name] for name in CELL_FIELDS if name in data}
        return cls(**{"kernel": "", **fields})  # a line without its kernel: not this one


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def left_out_line(checks: list[ImageCheck]) -> str | None:
    """One line for the cell naming the images the agent will not get, or None."""
    reasons = [c.block["text"].removeprefix("[image omitted: ").removesuffix("]") for c in checks if not c.sent]
    if not reasons:
        return None
    what = "1 image" if len(reasons) == 1 else f"{len(reasons)} images"
    return f"ctx_magic: {what} of this output will not be sent to the agent: {'; '.join(reasons)}."


def as_text(value: Any) -> str:
    """A mime bundle's value as one string (nbformat keeps multi-line text as a list of lines)."""
    return "".join(value) if isinstance(value, list) else str(value)


def cell_messages(record: CellRecord, tool_use_id: str, image_max_bytes: int, now: float, *,
                  pending_id: str | None = None) -> list[Message]:
    """The notebook_cell tool_use / tool_result pair for one recorded cell; `pending_id` (the
    cell's id in pending-cells.jsonl) goes in the tool_use's meta, so a resume never takes it twice."""
    call = tool_use_block(tool_use_id, "notebook_cell",
                          {"execution_count": record.execution_count, "source": record.source})
    meta: dict[str, Any] = {"cell": record.execution_count, "cell_id": record.cell_id, "kernel": record.kernel}
    if pending_id is not None:
        meta[PENDING_ID_KEY] = pending_id
    use = Message("assistant", (call,), timestamp=now, meta=meta)
    result = Message("user", (tool_result_block(tool_use_id, record.content(image_max_bytes),
                                                is_error=record.error is not None),), timestamp=now)
    return [use, result]


def formatted(shell: Any, value: Any) -> dict[str, Any]:
    """A value's display bundle, as the shell formats an Out[]; a broken repr is named with its error."""
    try:
        data, _ = shell.display_formatter.format(value)
    except Exception:  # noqa: BLE001 - a broken repr must not break the capture
        data = {}
    if "text/plain" not in data:  # IPython swallowed the repr's error: say it, as a cell would
        try:
            data = {**data, "text/plain": repr(value)}
        except Exception as error:  # noqa: BLE001
            data = {**data, "text/plain": f"<{type(value).__name__} object: its repr raised "
                                          f"{type(error).__name__}: {error}>"}
    return data
