"""A notebook cell's stored outputs as ctx_magic's cell capture records and renders them (the
replay's one tie to `ctx_magic.notebook.outputs`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctx_magic.notebook.outputs import CellRecord
from ctx_magic.settings import DEFAULTS


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _mime_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """nbformat's mime bundle as IPython hands it over (base64 images on one line)."""
    return {mime: _text(v).replace("\n", "") if mime.startswith("image/") else _text(v) for mime, v in data.items()}


def cell_record(source: str, execution_count: int, outputs: Sequence[Mapping[str, Any]]) -> CellRecord:
    """A cell's stored outputs as ctx_magic's capture records a cell run."""
    record = CellRecord(source, execution_count)
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            (record.stderr if output.get("name") == "stderr" else record.stdout).append(_text(output.get("text", "")))
        elif kind == "display_data":
            record.displays.append(_mime_data(output.get("data") or {}))
        elif kind == "execute_result":
            record.result = _mime_data(output.get("data") or {})
        elif kind == "error":
            record.error = "\n".join(output.get("traceback") or [f"{output.get('ename')}: {output.get('evalue')}"])
    return record


def render_cell(source: str, execution_count: int, outputs: Sequence[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    """The tool_result content ctx_magic sends for a cell (text, then images within the cap)."""
    return cell_record(source, execution_count, outputs).content(DEFAULTS.image_max_bytes)
