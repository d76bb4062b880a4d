"""The notices a turn shows in its cell: a line for every change to the context (compactions with
their summary, clearings, saved outputs, snips, the API's own edits) and for the loop's `Notice`s.

Each is a MIME bundle (HTML and plain text) worded from the event alone; `display.py` shows it.
"""

from __future__ import annotations

import html

from ctx_magic.events import (
    Cleared,
    Compacted,
    Event,
    Notice,
    Persisted,
    ServerCompacted,
    ServerEdited,
    Snipped,
    ThinkingCleared,
)
from ctx_magic.notebook.wording import with_remedy
from ctx_magic.ui.cards import count

# Readable on a light and on a dark theme alike: quiet lines keep the theme's own text colour,
# dimmed; warnings and errors use mid-tone colours that stand out on white and on black.
NOTICE_STYLES = {"info": "opacity:0.75", "warning": "color:#d97706", "error": "color:#e53935"}
INFO_STYLE = NOTICE_STYLES["info"]
CLEARED_WHY = {"idle": "after an idle gap", "pressure": "to make room", "model": "at the agent's request",
               "user": "at your request"}


def rich(html_text: str, plain: str) -> dict[str, str]:
    return {"text/html": html_text, "text/plain": plain}


def notice_line(line: str, style: str = INFO_STYLE) -> dict[str, str]:
    """One line in the cell, dimmed unless `style` says otherwise."""
    return rich(f'<div class="ctx-magic-notice" style="{style}">{html.escape(line)}</div>', line)


def summary_block(line: str, summary: str) -> dict[str, str]:
    """A compaction's line with its summary folded beneath it."""
    return rich(f'<details class="ctx-magic-compaction"><summary>{html.escape(line)}</summary>'
                f'<pre style="white-space:pre-wrap">{html.escape(summary)}</pre></details>', line)


def compaction_line(event: Compacted) -> str:
    return (f"Compacted {count(event.messages_summarized, 'message')}: {event.tokens_before:,} → "
            f"{event.tokens_after:,} tokens ({event.trigger})")


def server_compaction_line(event: ServerCompacted) -> str:
    return (f"The API compacted {count(event.messages_summarized, 'message')}: {event.tokens_before:,} -> "
            f"{event.tokens_after:,} tokens (server)")


def server_edit_line(event: ServerEdited) -> str:
    parts = []
    for edit in event.applied_edits:
        if edit.get("type") == "clear_thinking_20251015":
            parts.append(f"{edit.get('cleared_thinking_turns', 0)} thinking turn(s)")
        else:
            parts.append(f"{edit.get('cleared_tool_uses', 0)} tool result(s)")
    return f"The API cleared {' and '.join(parts)} from this request: {event.tokens_cleared:,} tokens"


def cleared_line(event: Cleared) -> str:
    why = CLEARED_WHY.get(event.trigger, event.trigger)
    return (f"Cleared {count(len(event.replacements), 'old tool result')} {why}: about {event.tokens_freed:,} "
            "tokens freed (the transcript keeps them)")


THINKING_CLEARED_WHY = {
    "idle": "after an idle gap",
    "model-switch": "that the new model cannot take",
    "edit": "that followed an edit of the conversation (the model checks what came before each one)",
    "tools": "written before the tools or the system prompt changed (the model checks what came before each one)",
    "compaction": "that the compaction left without what came before them (the model checks it)",
    "images": "written before older images were left out of each request (at most 100 are sent; the model "
              "checks what came before each block)",
}


def thinking_cleared_line(event: ThinkingCleared) -> str:
    if event.trigger == "prefix-check":
        return (f"Removed {count(event.blocks, 'thinking block')} the API refused because the conversation before "
                "them had changed since they were written; the turn goes on (the transcript keeps them)")
    why = THINKING_CLEARED_WHY.get(event.trigger, event.trigger)
    return (f"Cleared {count(event.blocks, 'thinking block')} {why}: about {event.tokens_freed:,} tokens of "
            "thinking left the context (the transcript keeps them)")


def folded_notice(cells: int) -> dict[str, str]:
    return notice_line(f"Folded {cells:,} old notebook cells to a line each after an idle gap (the transcript "
                       "keeps them)")


def notice_for(event: Event) -> dict[str, str] | None:
    """What the cell shows for `event`, or None when it shows nothing (a failed compaction among
    them: the loop's Notice says it in one line)."""
    if isinstance(event, Compacted):
        return summary_block(compaction_line(event), event.summary)
    if isinstance(event, ServerCompacted):
        return summary_block(server_compaction_line(event), event.summary)
    if isinstance(event, Notice):
        return notice_line(with_remedy(event.text, event.remedy),
                           NOTICE_STYLES.get(event.level, INFO_STYLE))
    if isinstance(event, Cleared):
        return notice_line(cleared_line(event))
    if isinstance(event, Persisted):
        return notice_line(f"Saved a {event.original_chars:,}-character output to {event.path} "
                           "(a preview stays in context)")
    if isinstance(event, Snipped) and event.cells:
        return folded_notice(event.cells)
    if isinstance(event, Snipped):
        return notice_line(f"Snipped {event.count:,} messages from the middle of the conversation "
                           "(the transcript keeps them)")
    if isinstance(event, ThinkingCleared):
        return notice_line(thinking_cleared_line(event))
    if isinstance(event, ServerEdited):
        return notice_line(server_edit_line(event))
    return None
