"""`%ctx export`: the full transcript (everything, compacted or not) as a readable notebook."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from ctx_magic.errors import StorageError
from ctx_magic.messages import Message, result_text
from ctx_magic.notebook.wording import count
from ctx_magic.store.files import describe_os_error

CODE_TOOLS = ("python", "notebook_cell")


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


def _results(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("type") != "message":
            continue
        for block in record.get("content", []):
            if block.get("type") == "tool_result":
                found[block["tool_use_id"]] = block
    return found


def _tool_cell(block: Mapping[str, Any], result: Mapping[str, Any] | None) -> Any:
    tool_input = block.get("input") or {}
    output = result_text(dict(result)) if result else "(no result recorded)"
    if block.get("name") in CODE_TOOLS:
        source = str(tool_input.get("code") or tool_input.get("source") or "")
        cell = new_code_cell(source)
        name = "stderr" if result and result.get("is_error") else "stdout"
        cell.outputs = [new_output("stream", name=name, text=output)]
        cell.metadata["ctx_magic"] = {"tool": block.get("name"), "tool_use_id": block.get("id")}
        return cell
    args = ", ".join(f"{k}={v!r}" for k, v in tool_input.items())
    return new_markdown_cell(f"**Tool `{block.get('name')}`**({args})\n\n```\n{output[:20_000]}\n```")


def _message_cells(message: Message, results: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    if message.kind == "boundary":
        meta = message.meta
        return [new_markdown_cell(
            f"---\n**Compaction** ({meta.get('trigger')}): {meta.get('messages_summarized', '?')} messages, "
            f"{meta.get('tokens_before', 0):,} → {meta.get('tokens_after', 0):,} tokens")]
    if message.kind == "summary":
        return [new_markdown_cell(f"### Summary that replaced them\n\n{_quote(message.text)}")]
    if message.kind in ("attachment", "meta"):
        return [new_markdown_cell(f"*Context added by ctx_magic:*\n\n{_quote(message.text[:5_000])}")]
    cells = []
    if message.text.strip():
        who = "You" if message.role == "user" else "Agent"
        cells.append(new_markdown_cell(f"**{who}:**\n\n{message.text}"))
    for block in message.blocks("tool_use"):
        cells.append(_tool_cell(block, results.get(block["id"])))
    return cells


def transcript_notebook(records: list[Mapping[str, Any]], session_id: str) -> Any:
    notebook = new_notebook()
    notebook.cells.append(new_markdown_cell(
        f"# ctx_magic transcript — session `{session_id}`\n\nEvery message as it was first written, "
        "including everything later compacted, cleared or snipped from the live context."))
    results = _results(records)
    for record in records:
        if record.get("type") == "message":
            notebook.cells.extend(_message_cells(Message.from_json(record), results))
        elif record.get("event") == "cleared":
            cleared = count(len(record.get("replacements") or {}), "old tool result")
            notebook.cells.append(new_markdown_cell(
                f"*{cleared} cleared from the live context ({record.get('trigger')}).*"))
        elif record.get("event") == "snipped":
            notebook.cells.append(new_markdown_cell(
                f"*{record.get('count')} messages snipped from the live context.*"))
    notebook.metadata["ctx_magic"] = {"session_id": session_id}
    return notebook


def export_transcript(records: list[Mapping[str, Any]], session_id: str, path: Path) -> Path:
    if path.is_dir():
        raise StorageError(f"{path} is a folder: give the path of the .ipynb file to write")
    notebook = transcript_notebook(records, session_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, str(path))
    except OSError as error:
        raise StorageError(f"The transcript was not exported: {describe_os_error(error, path)}") from error
    return path
