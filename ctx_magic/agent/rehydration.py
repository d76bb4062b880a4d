"""What a compaction puts back after its summary: the files the work is about, re-read fresh
within a budget that scales with the window, a note of the tools and the session's files, and
what the executor says of its state; and the messages the transcript first wrote, where a
layer has changed them since, for the coverage audit to read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ctx_magic.agent.files import FileTools
from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.request import CallSetup
from ctx_magic.agent.tools import Executor, ToolError
from ctx_magic.context.tokens import count_text
from ctx_magic.messages import Message, user_text
from ctx_magic.store.session import SessionDir

POST_COMPACT_MAX_FILES = 5
POST_COMPACT_MAX_TOKENS_PER_FILE = 5_000
POST_COMPACT_TOKEN_BUDGET = 50_000
MIN_TOKENS_PER_FILE = 200  # the re-read budgets shrink with the window, never below a file's first lines


class Rehydrator:
    """Builds the attachments after a compaction from the session's file reads and folder."""

    def __init__(self, files: FileTools, store: SessionDir, executor: Executor, live: LiveContext,
                 clock: Callable[[], float]) -> None:
        self._files = files
        self._store = store
        self._executor = executor
        self._live = live
        self._clock = clock

    def attachments(self, setup: CallSetup, kept: Sequence[Message]) -> list[Message]:
        """Attachments after a compaction: recent files re-read fresh, within budget, and a note of
        the tools and the session's files."""
        calls = [b["input"] for m in kept for b in m.blocks("tool_use")
                 if b.get("name") == "read_file" and isinstance(b.get("input"), dict)]
        visible = {path for path in (self._resolved(call) for call in calls) if path is not None}
        attachments: list[Message] = []
        # 50,000 tokens of files would overflow a small window at once: they scale with it.
        scale = setup.context.thresholds.scale
        budget = round(POST_COMPACT_TOKEN_BUDGET * scale)
        per_file = max(MIN_TOKENS_PER_FILE, round(POST_COMPACT_MAX_TOKENS_PER_FILE * scale))
        now = self._clock()
        own = self._store.root.resolve()  # the session's notes and saved outputs are not work files
        restored = 0
        for read in self._files.recent_reads(len(self._files.reads)):
            if restored == POST_COMPACT_MAX_FILES or budget <= 0:
                break
            if read.path in visible or Path(read.path).is_relative_to(own):
                continue
            text = _read_within(Path(read.path), min(per_file, budget))
            if text is None:
                continue
            restored += 1
            budget -= count_text(text)
            body = f'<recent-file path="{read.path}">\n{text}\n</recent-file>'
            attachments.append(user_text(body, kind="attachment", timestamp=now, rehydrated=read.path))
        notes = list(self._executor.context_attachments())
        if self._store.notes_path.exists():
            notes.append(f"Session notes are kept at {self._store.notes_path} (read_file to see them).")
        tools = ", ".join(setup.tool_names_after_cut())  # the context tools come in with this cut
        notes.append(f"Tools available: {tools}.")
        body = "\n\n".join(notes)
        attachments.append(user_text(f"<context-refresh>\n{body}\n</context-refresh>", kind="attachment",
                                     timestamp=now))
        return attachments

    def _resolved(self, tool_input: dict) -> str | None:
        """Where a read_file call's path leads (None: outside the session's folders)."""
        try:
            return str(self._files.resolve(tool_input.get("path", ""), must_exist=False))
        except ToolError:
            return None

    def first_written(self, span: Sequence[Message]) -> list[Message]:
        """The span's messages as the transcript first wrote them, where a layer changed them since
        (a cleared or persisted result): what the coverage audit must also read."""
        state = self._live.state
        changed = {m.uuid for m in span if m.tool_result_ids and any(
            i in state.cleared or i in state.persisted for i in m.tool_result_ids)}
        if not changed:
            return []
        try:
            return [m for m in self._store.load_transcript().messages() if m.uuid in changed]
        except (OSError, ValueError):  # an unreadable transcript: the audit reads the live span alone
            return []



def _read_within(path: Path, max_tokens: int) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if count_text(text) <= max_tokens:
        return text
    cut = max_tokens * 4
    while cut > 0 and count_text(text[:cut]) > max_tokens:
        cut = int(cut * 0.8)
    return text[:cut] + f"\n[truncated to about {max_tokens:,} tokens; read_file shows the rest]"
