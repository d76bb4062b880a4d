"""What a turn looks like in the cell: the reply streams as Markdown updated in
place, tool calls and their outputs sit in collapsible blocks, a status line says what the
agent is doing, and every change to the context gets a one-line notice (worded in
`notices.py`).

The display only renders events; it computes nothing about the context itself.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping
from typing import Any

from ctx_magic.events import (
    ApprovalAsked,
    Compacted,
    Event,
    Notice,
    ReplyRestarted,
    ReplyWithdrawn,
    ServerCompacted,
    Snipped,
    Status,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolOutputDelta,
    ToolStarted,
)
from ctx_magic.images import human_size
from ctx_magic.notebook.markdown_text import code_fence
from ctx_magic.notebook.notices import NOTICE_STYLES, folded_notice, notice_for, notice_line, rich
from ctx_magic.notebook.outputs import IMAGE_TYPES, OWN_DISPLAY, CellRecord, printed, strip_ansi
from ctx_magic.store.external import EXTERNAL_MIN_CHARS

STREAM_INTERVAL = 0.1  # seconds between in-place updates of streaming text: ten a second at most
STATUS_TEXT = {
    "thinking": "Thinking…",
    "running": "Running {detail}…",
    "compacting": "Compacting the conversation ({detail})…",
    "idle": "",
}
STATUS_STYLE = "opacity:0.7;font-size:90%"
# The status line's class: a line with two dollar figures is no TeX span for JupyterLab's MathJax.
STATUS_CLASS = "ctx-magic-status mathjax_ignore"
TOOL_INPUT_CHARS = 2_000
PROGRESS_CHARS = 160  # the latest printed line shown beside the status while code runs
# What a tool's output may show in the cell (and so in the .ipynb). Over this, the output has a
# file of its own (the transcript stores it there), so the cell can point to it.
SHOWN_MAX_CHARS = EXTERNAL_MIN_CHARS
SHOWN_HEAD_CHARS = 20_000  # the start of a longer output, where its headers and first rows are
SHOWN_TAIL_CHARS = 5_000  # and its end, where the error or the final figures usually are
# Inline styles, so a frontend without ctx_magic's labextension shows the parts apart too; the
# colours are grey with some transparency, readable on light and dark themes alike.
TOOL_PART_NAMES = {"python": ("Code", "Output"), "": ("Input", "Result")}
TOOL_PART_STYLE = "font-size:85%;opacity:0.7;margin:6px 0 2px"
TOOL_INPUT_STYLE = "border-left:3px solid rgba(128,128,128,0.5);padding-left:8px;margin:0"
TOOL_OUTPUT_STYLE = "border-top:1px solid rgba(128,128,128,0.4);margin-top:6px"
SAVED_WHERE = "the session's tool-results folder"  # when the display is not told the file's path
CodeOffer = Callable[[str, str, CellRecord | None, bool], tuple[Mapping[str, Any], str]]
"""(tool_use_id, code, its run's record, whether it ran) -> what a block of the agent's code adds
to its display: MIME entries, and a line for frontends without ctx_magic's labextension."""


def no_offer(_call_id: str, _code: str, _record: CellRecord | None, _ran: bool) -> tuple[Mapping[str, Any], str]:
    return {}, ""


def shown_text(text: str, where: str | None = None) -> str:
    """An output as the cell shows it: whole up to SHOWN_MAX_CHARS, else its first and last parts
    (cut at line ends) around one line saying how much is not shown and where all of it is."""
    if len(text) <= SHOWN_MAX_CHARS:
        return text
    head = text[:SHOWN_HEAD_CHARS]
    head = head[: head.rfind("\n") + 1] or head
    tail = text[-SHOWN_TAIL_CHARS:]
    tail = tail[tail.find("\n") + 1:] or tail
    hidden = len(text) - len(head) - len(tail)
    return (f"{head}\n[… {human_size(hidden)} more not shown; the full output is at {where or SAVED_WHERE} …]\n"
            f"{tail}")


def latest_line(text: str) -> str:
    """The line a terminal would show last: a progress bar's current state (after its last
    carriage return), else the last complete line (a line still being printed may be half)."""
    text = strip_ansi(text)
    *done, current = text.split("\n")
    if "\r" in current:
        return current.rstrip("\r").rsplit("\r", 1)[-1].strip()
    for line in reversed(done):
        if line.strip():
            return line.rsplit("\r", 1)[-1].strip()
    return current.strip()


class Output:
    """A handle on one display in the cell that can be updated in place."""

    def __init__(self, data: dict[str, str]) -> None:
        from IPython.display import display

        self.handle = display(data, raw=True, display_id=True, metadata=OWN_DISPLAY)

    def update(self, data: dict[str, str]) -> None:
        if self.handle is not None:
            self.handle.update(data, raw=True, metadata=OWN_DISPLAY)


def show(data: dict[str, str]) -> None:
    from IPython.display import display

    display(data, raw=True, metadata=OWN_DISPLAY)


def thinking_html(text: str) -> dict[str, str]:
    """A collapsed block with the thinking so far (closed unless the user opens it)."""
    return rich(f'<details class="ctx-magic-thinking"><summary>Thinking</summary>'
                f'<pre style="white-space:pre-wrap;color:#666">{html.escape(text)}</pre></details>',
                f"[thinking]\n{text}")


def approval_request(code: str) -> dict[str, str]:
    """The code the agent wants to run, highlighted by the frontend, shown before the question."""
    return {"text/markdown": f"**The agent wants to run this code:**\n\n{code_fence(code, 'python')}",
            "text/plain": f"The agent wants to run this code:\n{code}"}


def record_html(record: CellRecord, where: str | None = None) -> str:
    """A python run's outputs as HTML: text, tracebacks, HTML tables and images, each text part
    capped by `shown_text` (`where` is the path of the full output)."""
    parts = []
    if record.stdout:
        parts.append(f"<pre>{html.escape(shown_text(printed(record.stdout), where))}</pre>")
    if record.stderr:
        stderr = shown_text(printed(record.stderr), where)
        parts.append(f'<pre style="{NOTICE_STYLES["warning"]}">{html.escape(stderr)}</pre>')
    for data in [*record.displays, *([record.result] if record.result else [])]:
        image = next((m for m in IMAGE_TYPES if m in data), None)
        if image:
            payload = data[image] if isinstance(data[image], str) else ""
            parts.append(f'<img src="data:{image};base64,{payload}"/>')
        elif "text/html" in data and len(str(data["text/html"])) <= SHOWN_MAX_CHARS:
            parts.append(str(data["text/html"]))
        elif "text/markdown" in data or "text/plain" in data:
            text = data.get("text/markdown") or data.get("text/plain")
            parts.append(f"<pre>{html.escape(shown_text(str(text), where))}</pre>")
    if record.error:
        parts.append(f'<pre style="{NOTICE_STYLES["error"]}">{html.escape(shown_text(record.error, where))}</pre>')
    return "".join(parts) or "<pre>(no output)</pre>"


def tool_parts(tool: str, tool_input: str, output_html: str) -> str:
    """A tool call's input above its output, each under a small label and the output below a rule,
    so that code and what it printed, both monospace, never read as one block."""
    names = TOOL_PART_NAMES.get(tool, TOOL_PART_NAMES[""])
    return (f'<div class="ctx-magic-tool-part" style="{TOOL_PART_STYLE}">{names[0]}</div>'
            f'<pre class="ctx-magic-tool-input" style="{TOOL_INPUT_STYLE}">'
            f"{html.escape(tool_input[:TOOL_INPUT_CHARS])}</pre>"
            f'<div class="ctx-magic-tool-output" style="{TOOL_OUTPUT_STYLE}">'
            f'<div class="ctx-magic-tool-part" style="{TOOL_PART_STYLE}">{names[1]}</div>{output_html}</div>')


class TurnDisplay:
    """Renders one turn's events in the current cell."""

    def __init__(self, *, show_tools: bool = True, clock: Callable[[], float] = time.monotonic,
                 record_for: Callable[[str], CellRecord | None] = lambda tool_use_id: None,
                 output_path: Callable[[str], str | None] = lambda tool_use_id: None,
                 offer: CodeOffer = no_offer) -> None:
        self.show_tools = show_tools
        self.clock = clock
        self.record_for = record_for
        self.output_path = output_path
        """Where a tool_use_id's full output is kept (the session's tool-results file), for the
        line that says what a long output's display leaves out."""
        self.offer = offer
        """Each block of the agent's code offered as a notebook cell (notebook/agent_cells.py)."""
        self.status: Output | None = None
        self.text_output: Output | None = None
        self.text = ""
        self.thinking_output: Output | None = None
        self.thinking = ""
        self.last_thinking_update = 0.0
        self.last_update = 0.0
        self.pending_tools: dict[str, ToolStarted] = {}
        self.status_line = ""
        self.folded = 0
        self.folded_output: Output | None = None
        self.printed_tail = ""
        self.last_progress = float("-inf")  # the first line shows at once

    def __call__(self, event: Event) -> None:
        handler = getattr(self, f"_on_{event.name}", None)
        if handler is not None:
            handler(event)
        elif (shown := notice_for(event)) is not None:  # a change to the context, a Notice (notices.py)
            if isinstance(event, (Compacted, ServerCompacted)):
                self._close_text()  # the reply so far stays above the summary; what follows goes below
            show(shown)

    # -- text ---------------------------------------------------------------------------------

    def _on_thinking(self, event: ThinkingDelta) -> None:
        """The model's thinking streams into a collapsed "Thinking" block of its own."""
        self.thinking += event.text
        if self.thinking_output is None:
            self.thinking_output = Output(thinking_html(self.thinking))
            self.last_thinking_update = self.clock()
        elif self.clock() - self.last_thinking_update >= STREAM_INTERVAL:
            self._flush_thinking()

    def _flush_thinking(self) -> None:
        if self.thinking_output is not None:
            self.thinking_output.update(thinking_html(self.thinking))
            self.last_thinking_update = self.clock()

    def _close_thinking(self) -> None:
        self._flush_thinking()
        self.thinking_output, self.thinking = None, ""

    def _on_text(self, event: TextDelta) -> None:
        self._close_thinking()
        self.text += event.text
        if self.text_output is None:
            self.text_output = Output({"text/markdown": self.text, "text/plain": self.text})
            self.last_update = self.clock()
        elif self.clock() - self.last_update >= STREAM_INTERVAL:
            self.flush()

    def flush(self) -> None:
        if self.text_output is not None:
            self.text_output.update({"text/markdown": self.text, "text/plain": self.text})
            self.last_update = self.clock()

    def _on_reply_restarted(self, event: ReplyRestarted) -> None:
        """What the broken stream showed is withdrawn; the new attempt streams in its place."""
        self._withdraw()
        line = f"{event.reason.rstrip('.')}; asking again (attempt {event.attempt} of {event.attempts})."
        show(notice_line(line, NOTICE_STYLES["warning"]))

    def _on_reply_withdrawn(self, event: ReplyWithdrawn) -> None:
        """The last attempt broke too: nothing of it stays in the cell (the error line says why)."""
        self._withdraw()

    def _withdraw(self) -> None:
        self.text = self.thinking = ""
        if self.text_output is not None:
            self.text_output.update({"text/markdown": "", "text/plain": ""})
        if self.thinking_output is not None:
            self.thinking_output.update(thinking_html(""))

    def _close_text(self) -> None:
        self._close_thinking()
        self.flush()
        self.text_output, self.text = None, ""

    # -- status -------------------------------------------------------------------------------

    def _on_snipped(self, event: Snipped) -> None:
        """A snip has its notice; old cells folded at one idle break (a fold per run of cells)
        share one line that counts them all."""
        if not event.cells:
            show(notice_for(event))
            return
        self.folded += event.cells
        line = folded_notice(self.folded)
        if self.folded_output is None:
            self.folded_output = Output(line)
        else:
            self.folded_output.update(line)

    def _on_status(self, event: Status) -> None:
        self.printed_tail = ""
        template = STATUS_TEXT.get(event.state, event.state)
        self.status_line = template.format(detail=event.detail or "code") if template else ""
        if event.state == "idle":
            self._close_text()
        self._show_status(self.status_line)

    def _on_approval_asked(self, event: ApprovalAsked) -> None:
        """`ask` mode: the status says the turn waits for the person, not that code runs; the code
        is shown, and the question follows at the input prompt."""
        self.status_line = "Waiting for your answer below…"
        self._show_status(self.status_line)
        asking = [s for s in self.pending_tools.values() if s.tool == "python" and s.input.get("code") == event.code]
        extra, hint = self.offer(asking[-1].tool_use_id, event.code, None, False) if asking else ({}, "")
        request = approval_request(event.code)
        if hint:
            request = {**request, "text/markdown": f"{request['text/markdown']}\n\n*{hint}*"}
        show({**request, **extra})

    def _show_status(self, line: str) -> None:
        data = rich(f'<div class="{STATUS_CLASS}" style="{STATUS_STYLE}">{html.escape(line)}</div>',
                    line)
        if self.status is None:
            if line:
                self.status = Output(data)
        else:
            self.status.update(data)

    def _on_tool_output_delta(self, event: ToolOutputDelta) -> None:
        """Progress while the agent's code runs: its latest printed line after the status."""
        self.printed_tail = (self.printed_tail + event.text)[-4 * PROGRESS_CHARS:]  # print() writes in pieces
        if self.clock() - self.last_progress < STREAM_INTERVAL:
            return  # cheap when code prints a lot: most pieces are not even looked at
        tail = latest_line(self.printed_tail)
        if not tail:
            return
        self.last_progress = self.clock()
        tail = tail if len(tail) <= PROGRESS_CHARS else tail[: PROGRESS_CHARS - 1] + "…"
        self._show_status(f"{self.status_line} {tail}".strip())

    def finish(self, summary_line: str) -> None:
        """The closing status line of the turn."""
        self._close_text()
        data = rich(f'<div class="{STATUS_CLASS}" style="{STATUS_STYLE}">{html.escape(summary_line)}'
                    "</div>", summary_line)
        if self.status is None:
            show(data)
        else:
            self.status.update(data)

    # -- tools --------------------------------------------------------------------------------

    def _on_tool_started(self, event: ToolStarted) -> None:
        self._close_text()
        self.pending_tools[event.tool_use_id] = event

    def _on_tool_finished(self, event: ToolFinished) -> None:
        started = self.pending_tools.pop(event.tool_use_id, None)
        if not self.show_tools:
            return
        tool_input = dict(started.input) if started else {}
        record = self.record_for(event.tool_use_id) if event.tool == "python" else None
        where = self.output_path(event.tool_use_id) if len(event.output) > SHOWN_MAX_CHARS else None
        output = shown_text(event.output, where)  # the whole text went to the agent; the cell shows this
        if event.tool == "python":
            head = str(tool_input.get("code", ""))
            body = record_html(record, where) if record else f"<pre>{html.escape(output)}</pre>"
        else:
            head = ", ".join(f"{k}={v!r}" for k, v in tool_input.items())
            body = f"<pre>{html.escape(output)}</pre>"
        opened = " open" if event.tool == "python" else ""
        summary = f"{event.tool}" + (" (error)" if event.is_error else "")
        plain = f"[{event.tool}{' error' if event.is_error else ''}]\n{output}"
        offer = self.offer if event.tool == "python" else no_offer  # only code can become a cell
        extra, hint = offer(event.tool_use_id, str(tool_input.get("code", "")), record, record is not None)
        shown = (f'<details class="ctx-magic-tool"{opened}><summary>{html.escape(summary)}</summary>'
                 f"{tool_parts(event.tool, head, body)}</details>")
        if hint:
            shown += f'<div class="ctx-magic-cell-hint" style="{STATUS_STYLE}">{html.escape(hint)}</div>'
            plain += f"\n{hint}"
        show({**rich(shown, plain), **extra})


def notice(text: str, level: str = "info", remedy: str = "") -> None:
    TurnDisplay()(Notice(level, text, remedy))


def plain_or_rich(value: Any) -> None:
    show(value if isinstance(value, dict) else {"text/plain": str(value)})
