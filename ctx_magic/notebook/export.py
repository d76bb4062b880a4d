"""`%ctx export`: the session as a notebook that runs again without ctx_magic (`session_notebook`),
or, with `--transcript`, the full transcript (everything, compacted or not) as a readable notebook."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from ctx_magic.context.invariants import INTERRUPTED_RESULT
from ctx_magic.errors import StorageError
from ctx_magic.messages import Message, result_text
from ctx_magic.notebook.agent_cells import (
    AGENT_CALL_KEY,
    AGENT_TAG,
    EDITED,
    EDITED_WHOLE,
    RAN_AGAIN,
    cell_code,
    error_output,
)
from ctx_magic.notebook.executor import NOT_RUN
from ctx_magic.notebook.markdown_text import code_fence, plain_as_markdown
from ctx_magic.notebook.runs.wording import STALLED
from ctx_magic.store.files import atomic_write_text, describe_os_error
from ctx_magic.ui.cards import count

CODE_TOOLS = ("python", "notebook_cell")


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


def _said(message: Message) -> str:
    """A message's text under who said it: the agent's reply is Markdown, the user's prompt was
    typed as plain text in a code cell and is shown as written."""
    if message.role == "user":
        return f"**You:**\n\n{plain_as_markdown(message.text)}"
    return f"**Agent:**\n\n{message.text}"


def _call_line(name: object, tool_input: Mapping[str, Any]) -> str:
    """`name`(its arguments), the arguments shown as written."""
    args = ", ".join(f"{k}={v!r}" for k, v in tool_input.items())
    return f"`{name}`({plain_as_markdown(args)})"


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
    return new_markdown_cell(f"**Tool** {_call_line(block.get('name'), tool_input)}\n\n{code_fence(output[:20_000])}")


def _message_cells(message: Message, results: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    if message.kind == "boundary":
        meta = message.meta
        return [new_markdown_cell(
            f"---\n**Compaction** ({meta.get('trigger')}): {meta.get('messages_summarized', '?')} messages, "
            f"{meta.get('tokens_before', 0):,} → {meta.get('tokens_after', 0):,} tokens")]
    if message.kind == "summary":
        return [new_markdown_cell(f"### Summary that replaced them\n\n{_quote(message.shown_text)}")]
    if message.kind in ("attachment", "meta"):
        added = plain_as_markdown(message.text[:5_000])  # ctx_magic's notes and the kernel's state: not Markdown
        return [new_markdown_cell(f"*Context added by ctx_magic:*\n\n{_quote(added)}")]
    cells = []
    if message.text.strip():
        cells.append(new_markdown_cell(_said(message)))
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


class ExportExists(StorageError):
    """The export would replace a file that is there already."""


@dataclass(frozen=True)
class Target:
    """Where an export goes. `private`: into the session's folder (0600, replaced at each export,
    as every file of a session); else the user's own file beside the notebook (the umask's
    permissions), never replaced unless `force`."""

    path: Path
    private: bool = False
    force: bool = False


def export_transcript(records: list[Mapping[str, Any]], session_id: str, target: Target) -> Path:
    return _write(lambda: transcript_notebook(records, session_id), target, "transcript")


def _write(make: Callable[[], nbformat.NotebookNode], target: Target, what: str) -> Path:
    """Write the notebook `make` builds to the target; a folder, a file there already (unless
    forced) or a failed write is one clear error."""
    path = target.path
    if path.is_dir():
        raise StorageError(f"{path} is a folder: give the path of the .ipynb file to write")
    text = nbformat.writes(make())
    text += "" if text.endswith("\n") else "\n"  # as nbformat.write leaves a file
    if target.private:
        atomic_write_text(path, text)
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # "x": the check and the creation are one step, so a file made meanwhile is not replaced either
        handle = open(path, "w" if target.force else "x", encoding="utf-8")  # noqa: SIM115 - closed below
    except FileExistsError as error:
        if error.filename != str(path):  # a file where a folder of the path should be
            raise StorageError(f"The {what} was not exported: {describe_os_error(error, path)}") from error
        raise ExportExists(f"{path} exists already: the {what} was not exported (--force replaces it)") from None
    except OSError as error:
        raise StorageError(f"The {what} was not exported: {describe_os_error(error, path)}") from error
    try:
        with handle:
            handle.write(text)
    except OSError as error:
        raise StorageError(f"The {what} was not exported: {describe_os_error(error, path)}") from error
    return path


# -- the session as a notebook to run again ---------------------------------------------------------

SUMMARIZED_TAG = "summarized"
"""The tag of a cell whose run the agent's context later summarized."""
SPAN_START = ("*From here to the next compaction note, the agent's context later kept only a summary "
              "(these cells are tagged `summarized`).*")
RAISES_TAG = "raises-exception"  # nbclient's own tag: the error is expected, the run goes on
BACKGROUND_NOTE = "*The agent ran the next cell as a background run: what it printed went to the run's log.*"
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
OTHER_TOOL_CHARS = 2_000  # a file read or a search: enough to follow the conversation
_STARTED = re.compile(r"^Started background run (t\d+)\b")  # the python tool's result for a background run
RunState = Callable[[str], "str | None"]
"""A background run's last state ('finished', 'failed', 'stopped', ...) by its id; None if unknown."""


def _no_state(_run_id: str) -> str | None:
    return None


def _summarized(records: Iterable[Mapping[str, Any]]) -> set[str]:
    """The uuids of the messages a compaction replaced by its summary."""
    return {uuid for r in records if r.get("type") == "event" and r.get("event") == "compacted"
            for uuid in r.get("summarized_uuids") or ()}


def _not_run(block: Mapping[str, Any] | None) -> bool:
    """A python call whose code never ran: refused, declined, or interrupted (it may never end)."""
    if block is None:
        return True
    text = result_text(dict(block))
    return bool(block.get("is_error")) and (text.startswith(NOT_RUN) or text.startswith(INTERRUPTED_RESULT))


def _outputs(block: Mapping[str, Any] | None, lead: str = "") -> list[Any]:
    """A tool result as a cell's outputs: what it printed, its images, its error."""
    if block is None:
        return []
    text = result_text(dict(block)).removeprefix(lead).lstrip("\n")
    outputs = []
    printed_part, _, error = text.partition("[error]\n") if block.get("is_error") else (text, "", "")
    if printed_part.strip() and printed_part.strip() != "(no output)":
        outputs.append(new_output("stream", name="stdout", text=printed_part.rstrip("\n") + "\n"))
    content = block.get("content")
    for image in content if isinstance(content, list) else []:
        source = image.get("source") or {}
        if image.get("type") == "image" and source.get("type") == "base64":
            outputs.append(new_output("display_data", data={source.get("media_type", "image/png"): source.get("data")}))
    if block.get("is_error"):
        failure = error_output(error or text)
        outputs.append(new_output("error", ename=failure["ename"], evalue=failure["evalue"],
                                  traceback=failure["traceback"]))
    return outputs


def _code_cell(code: str, result: Mapping[str, Any] | None, meta: dict[str, Any], *, lead: str = "",
               tags: tuple[str, ...] = ()) -> Any:
    cell = new_code_cell(code, outputs=_outputs(result, lead))
    cell.metadata["ctx_magic"] = meta
    tags = (*tags, RAISES_TAG) if result is not None and result.get("is_error") else tags
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def _lead_of(call_input: Mapping[str, Any]) -> str:
    """The line an agent cell's run opens its result with (agent_cells.py), left out of the outputs."""
    if "ran_again" in call_input:
        return RAN_AGAIN.format(call=call_input["ran_again"])
    if "edited" in call_input:
        return (EDITED_WHOLE if "source" in call_input else EDITED).format(call=call_input["edited"])
    return ""


def _background_cells(code: str, result: Mapping[str, Any] | None, meta: dict[str, Any],
                      run_state: RunState) -> list[Any]:
    """A background run's code, by how the run ended (its state is in its json, not the transcript):
    failed, it is tagged like any code that raised; stopped or ended with the kernel, it did not end
    by itself and may never end, so it is shown like an interrupted call."""
    found = _STARTED.match(result_text(dict(result))) if result else None
    state = run_state(found.group(1)) if found else None
    if state in ("stopped", "ended"):
        how = "stopped" if state == "stopped" else "ended with the kernel"
        return [new_markdown_cell(f"*The agent's code, run in the background and {how} (a run that did not end "
                                  f"by itself is not a cell here):*\n\n{code_fence(code, 'python')}")]
    tags = (AGENT_TAG, RAISES_TAG) if state in ("failed", "stalled") else (AGENT_TAG,)
    return [new_markdown_cell(BACKGROUND_NOTE), _code_cell(code, None, meta, tags=tags)]


def _call_cells(block: Mapping[str, Any], message: Message, result: Mapping[str, Any] | None,
                session_id: str, run_state: RunState) -> list[Any]:
    """The cells of one tool call: code for code that ran, Markdown for the rest."""
    name, call_input = block.get("name"), block.get("input") or {}
    if name == "python":
        code = str(call_input.get("code") or "")
        if _not_run(result):
            why = result_text(dict(result)).split("\n")[0] if result else "no result was recorded"
            return [new_markdown_cell(f"*The agent's code, not run ({plain_as_markdown(why)}):*\n\n"
                                      f"{code_fence(code, 'python')}")]
        meta = {"agent": {"session": session_id, "tool_use_id": block.get("id")}}
        if call_input.get("background") is True:  # its output went to its log: the cell shows none
            return _background_cells(code, result, meta, run_state)
        # Code that waited for an answer stops at input() where nobody types (nbclient has no stdin).
        waited = result is not None and STALLED in result_text(dict(result))
        return [_code_cell(code, result, meta, tags=(AGENT_TAG, RAISES_TAG) if waited else (AGENT_TAG,))]
    if name == "notebook_cell":
        meta: dict[str, Any] = {"cell": call_input.get("execution_count")}
        if message.meta.get(AGENT_CALL_KEY):
            meta["agent_call"] = message.meta[AGENT_CALL_KEY]
        return [_code_cell(cell_code(call_input, message.meta), result, meta, lead=_lead_of(call_input))]
    output = result_text(dict(result)) if result else "(no result recorded)"
    cut = output[:OTHER_TOOL_CHARS] + ("\n…" if len(output) > OTHER_TOOL_CHARS else "")
    return [new_markdown_cell(f"*The agent called {_call_line(name, call_input)}:*\n\n{code_fence(cut)}")]


def _conversation_cells(message: Message, results: Mapping[str, Mapping[str, Any]], session_id: str,
                        run_state: RunState) -> list[Any]:
    if message.kind == "boundary":
        meta = message.meta
        return [new_markdown_cell(
            f"---\n**The agent's context was compacted here** ({meta.get('trigger')}): the cells and messages "
            f"marked *summarized* above were replaced by the summary below ({meta.get('tokens_before', 0):,} → "
            f"{meta.get('tokens_after', 0):,} tokens).")]
    if message.kind == "summary":
        return [new_markdown_cell(f"**The summary the agent kept:**\n\n{_quote(message.shown_text)}")]
    if message.kind != "normal" or message.meta.get("synthetic"):
        return []  # what ctx_magic attached (notes, the kernel's state, pins): not the conversation
    cells = []
    if message.text.strip():
        cells.append(new_markdown_cell(_said(message)))
    for block in message.blocks("tool_use"):
        cells.extend(_call_cells(block, message, results.get(block["id"]), session_id, run_state))
    return cells


def session_notebook(records: list[Mapping[str, Any]], session_id: str, run_state: RunState = _no_state) -> Any:
    """The session as a notebook to read and run again: the user's cells and the agent's code as
    code cells with their outputs, the conversation as Markdown between them, the cells a
    compaction summarized tagged `summarized`. Nothing in it needs ctx_magic. `run_state` gives a
    background run's last state by its id."""
    notebook = new_notebook()
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    notebook.metadata["language_info"] = {"name": "python"}
    notebook.metadata["ctx_magic"] = {"session_id": session_id}
    notebook.cells.append(new_markdown_cell(
        f"# ctx_magic session `{session_id}`\n\nYour cells and the agent's code as they ran, the conversation "
        "between them. It runs top to bottom without ctx_magic; cells run before the session are not in it."))
    results, summarized = _results(records), _summarized(records)
    in_span = False
    for record in records:
        if record.get("type") != "message":
            continue
        message = Message.from_json(record)
        cells = _conversation_cells(message, results, session_id, run_state)
        if cells and (message.uuid in summarized) != in_span:
            in_span = not in_span
            if in_span:  # visible in any viewer; the tags say it cell by cell
                notebook.cells.append(new_markdown_cell(SPAN_START))
        for cell in cells:
            if in_span:
                cell.metadata.setdefault("ctx_magic", {})["summarized"] = True
                cell.metadata["tags"] = [*cell.metadata.get("tags", []), SUMMARIZED_TAG]
            notebook.cells.append(cell)
    return notebook


def export_notebook(records: list[Mapping[str, Any]], session_id: str, target: Target,
                    run_state: RunState = _no_state) -> Path:
    return _write(lambda: session_notebook(records, session_id, run_state), target, "session")
