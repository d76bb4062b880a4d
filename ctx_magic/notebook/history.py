"""`kernel_history`: what the kernel ran before the conversation could see it.

Cells run before `%load_ext ctx_magic`, or before this session started (`%agent --new`), never
entered the context; old cells folded to their first line after an idle gap left it. IPython
keeps them: every cell's source (`In`), the value of its last line (`Out`), and from IPython 9 on
also what it printed and raised (its history manager's `outputs` and `exceptions`; what a cell
displayed too in a plain IPython shell, never in ipykernel, which keeps no displays there).
The tool reads that history, leaves out the cells the live context already holds and ctx_magic's
own, and returns a page at a time, so "continue from where I was" works in a notebook that
already has work in it.

Not recoverable here: anything from before a kernel restart (the history is the process's), the
printed output of cells under IPython 8 (only `Out` is kept; the `notebook` tool reads the saved
notebook's outputs), and images (named, not sent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ctx_magic.agent.tools import Tool, ToolCall, ToolContext, ToolOutput
from ctx_magic.messages import Message
from ctx_magic.notebook.outputs import KERNEL_RUN, as_text, display_text, is_own_or_skipped, printed
from ctx_magic.ui.cards import count

HISTORY_TOOL = {
    "name": "kernel_history",
    "description": (
        "The cells run in this kernel that the conversation does not hold in full: those run before ctx_magic "
        "was loaded or before this session started, and old cells folded to their first line. Each cell's "
        "source (In[n]) with what the kernel kept of its output. Optional start/end (execution counts) or a "
        "search string; a long history comes a page at a time."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "start": {"type": "integer", "minimum": 1},
            "end": {"type": "integer", "minimum": 1},
            "search": {"type": "string"},
        },
    },
}
PAGE_CHARS = 6_000  # about 2,000 tokens of code a page as the API counts them: far inside the tool-result budget
SOURCE_CHARS = 2_000  # one cell's source, cut past this (its start says what it is)
OUTPUT_CHARS = 1_000  # one cell's output: enough to see what it produced


def cells_held(messages: Iterable[Message]) -> set[int]:
    """Execution counts, in this kernel run, of the notebook cells the live context holds."""
    return {m.meta["cell"] for m in messages
            if m.meta.get("kernel") == KERNEL_RUN and isinstance(m.meta.get("cell"), int)}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[… {len(text) - limit:,} more characters]"


def _kept_output(history: Any, count: int, out: Mapping[int, Any]) -> str:
    """What the kernel kept of cell `count`'s output, as text."""
    outputs = getattr(history, "outputs", None)
    exceptions = getattr(history, "exceptions", None) or {}
    parts: list[str] = []
    if outputs is None:  # IPython 8: the Out value alone
        if count in out:
            parts.append(f"[Out[{count}]]\n{_plain(out[count])}")
        return "\n".join(parts)
    for output in outputs.get(count, []):
        kind, bundle = getattr(output, "output_type", ""), getattr(output, "bundle", {}) or {}
        if kind in ("out_stream", "err_stream"):
            text = printed([str(piece) for piece in bundle.get("stream", [])]).rstrip("\n")
            parts.append(text if kind == "out_stream" else f"[stderr]\n{text}")
        elif kind == "execute_result":
            parts.append(f"[Out[{count}]]\n{as_text(bundle.get('text/plain', ''))}")
        elif kind == "display_data":
            shown = display_text(bundle)
            images = [mime for mime in bundle if mime.startswith("image/")]
            parts.append(f"[displayed {shown[0]}]\n{shown[1]}" if shown and not images
                         else f"[an image was displayed ({', '.join(images) or 'rich output'}); not kept here]")
    error = exceptions.get(count)
    if isinstance(error, Mapping):
        parts.append(f"[error]\n{error.get('ename')}: {error.get('evalue')}")
    return "\n".join(p for p in parts if p)


def _plain(value: Any) -> str:
    try:
        return repr(value)
    except Exception as error:  # noqa: BLE001 - a broken repr must not break the tool
        return f"<{type(value).__name__}: its repr raised {type(error).__name__}>"


class KernelHistory:
    """The `kernel_history` tool over this kernel's IPython history."""

    def __init__(self, shell: Any, held: Callable[[], set[int]]) -> None:
        self.shell = shell
        self._held = held
        """Execution counts of the cells the live context holds (left out: the agent has them)."""

    def tool(self) -> Tool:
        return Tool(HISTORY_TOOL, self._run)

    def _run(self, call: ToolCall, _context: ToolContext) -> ToolOutput:
        history = getattr(self.shell, "history_manager", None)
        sources = list(getattr(history, "input_hist_raw", None) or self.shell.user_ns.get("In") or [""])
        out = getattr(history, "output_hist", None) or self.shell.user_ns.get("Out") or {}
        start = int(call.input.get("start") or 1)
        end = int(call.input.get("end") or len(sources) - 1)
        search = str(call.input.get("search") or "")
        held = self._held()
        cells = [(n, str(sources[n])) for n in range(max(1, start), min(end, len(sources) - 1) + 1)
                 if n not in held and not is_own_or_skipped(str(sources[n])) and search in str(sources[n])]
        # ipykernel's display publisher keeps displays out of the history unless told otherwise
        displays = getattr(self.shell.display_pub, "store_display_history", True)
        kept = (f"what they printed, {'displayed, ' if displays else ''}returned and raised"
                if getattr(history, "outputs", None) is not None
                else "only each cell's Out value (this IPython keeps no printed output: the notebook tool "
                     "reads the saved notebook's outputs)")
        if not cells:
            return ToolOutput(f"No cell of this kernel's history (In[1] to In[{len(sources) - 1}]) matches that "
                              "outside the conversation.")
        lines = [f"{count(len(cells), 'cell')} of this kernel's history the conversation does not hold, "
                 f"with {kept}:"]
        used = len(lines[0])
        for shown, (number, source) in enumerate(cells):
            entry = f"--- In[{number}] ---\n{_cut(source.strip(chr(10)), SOURCE_CHARS)}"
            output = _kept_output(history, number, out)
            if output:
                entry += f"\n[output]\n{_cut(output, OUTPUT_CHARS)}"
            if shown and used + len(entry) > PAGE_CHARS:
                lines.append(f"[{count(len(cells) - shown, 'more cell')}: call again with start={number}]")
                break
            lines.append(entry)
            used += len(entry)
        return ToolOutput("\n".join(lines))
