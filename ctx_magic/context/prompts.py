"""The prompts of compaction (summary, continuation, partial), in ctx_magic's own words.

The rules behind them come from Claude Code: a text-only instruction at both ends (models
sometimes reach for a tool anyway), an <analysis> scratchpad before the <summary>, nine
sections with the user's messages verbatim, and a continuation message that tells the model
where the full transcript is.
"""

from __future__ import annotations

import re

from ctx_magic.context.audit import SEARCH_TOOL

SUMMARY_SECTIONS: tuple[tuple[str, str], ...] = (
    ("Primary Request and Intent", "every explicit request and intent of the user, in detail"),
    ("Key Technical Concepts", "libraries, data, methods and decisions that matter"),
    ("Files and Code Sections",
     "each file or notebook cell examined, changed or created, with the code that matters and why"),
    ("Errors and Fixes", "each error met and how it was fixed, including what the user said about it"),
    ("Problem Solving", "problems solved and any investigation still under way"),
    ("All User Messages", "every message the user wrote (not tool results), verbatim, in order"),
    ("Pending Tasks", "what the user asked for that is not done yet"),
    ("Current Work", "exactly what was being worked on just before this summary, with names and code"),
    ("Optional Next Step",
     "the next step in line with the latest request, quoting the conversation verbatim to show where the work stopped"),
)

# Partial compaction "up to": newer messages follow the summary, so it sets context rather than resuming.
UP_TO_SECTIONS: tuple[tuple[str, str], ...] = (
    *SUMMARY_SECTIONS[:7],
    ("Work Completed", "what was finished in the summarized part"),
    ("Context for Continuing Work", "what the messages after this summary need to be understood"),
)

NO_TOOLS_PREAMBLE = (
    "IMPORTANT: answer with plain text only. Do not call any tool (not python, read_file, grep "
    "or any other): a tool call here is refused and wastes the only turn you have. Your whole "
    "answer is one <analysis> block followed by one <summary> block."
)

NO_TOOLS_REMINDER = (
    "REMINDER: plain text only, no tool calls. Answer with an <analysis> block, then a <summary> "
    "block with the sections above."
)

_INTRO = {
    "full": (
        "Write a detailed summary of the conversation so far. It will replace the conversation, "
        "so everything needed to carry on the work without losing the thread must be in it: the "
        "user's requests, the data and code, what was tried, what failed and what is next."
    ),
    "from": (
        "Write a detailed summary of the RECENT part of the conversation: the messages after the "
        "earlier ones that are kept as they are. Earlier retained messages are NOT re-summarized; "
        "summarize only what comes after them."
    ),
    "up_to": (
        "Write a detailed summary of the EARLIER part of the conversation. The newer messages "
        "will follow your summary unchanged, so the summary must set up the context they need "
        "rather than continue the work itself."
    ),
}

_REINJECTED = (
    "Blocks that begin with <recent-file>, <context-refresh> or <pinned> were re-injected by the tooling and "
    "will be re-injected again after this summary: do not summarize them."
)

_ANALYSIS = (
    "First, inside <analysis> tags, walk through the conversation in order: for each part note "
    "what the user asked, what you did, the decisions, the file names, code and outputs that "
    "matter, and every error with its fix and any correction the user made. Check that nothing "
    "the user asked for is missing. The analysis is a scratchpad and will be thrown away."
)


_THINK_FIRST = (
    "Before you write, think the conversation through in order: for each part, what the user "
    "asked, what you did, the decisions, the file names, code and outputs that matter, and every "
    "error with its fix and any correction the user made. Check that nothing the user asked for "
    "is missing. Your answer is kept word for word in place of the conversation: write no "
    "analysis in it."
)


def for_thinking_model(prompt: str) -> str:
    """A compaction prompt for a call that thinks before it answers and whose answer is kept whole
    (the API's summary on demand): the walk through the conversation moves into the thinking, the
    answer is the <summary> alone, so no scratchpad is carried in every later request."""
    return (prompt.replace(_ANALYSIS, _THINK_FIRST)
            .replace("Your whole answer is one <analysis> block followed by one <summary> block.",
                     "Your whole answer is one <summary> block.")
            .replace("Answer with an <analysis> block, then a <summary> block", "Answer with one <summary> block")
            .replace("Then, inside <summary> tags", "Inside <summary> tags"))


def compact_prompt(direction: str = "full", instructions: str | None = None) -> str:
    """The compaction request appended as the last user message (whole or partial)."""
    sections = UP_TO_SECTIONS if direction == "up_to" else SUMMARY_SECTIONS
    listing = "\n".join(f"{n}. {title}: {what}." for n, (title, what) in enumerate(sections, 1))
    parts = [
        NO_TOOLS_PREAMBLE,
        _INTRO[direction],
        _REINJECTED,
        _ANALYSIS,
        "Then, inside <summary> tags, write these sections, each under its own numbered heading:\n"
        + listing,
    ]
    if instructions and instructions.strip():
        parts.append("Additional instructions for this summary:\n" + instructions.strip())
    parts.append(NO_TOOLS_REMINDER)
    return "\n\n".join(parts)


_ANALYSIS_BLOCK = re.compile(r"<analysis>.*?</analysis>", re.DOTALL | re.IGNORECASE)
_SUMMARY_BLOCK = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.DOTALL | re.IGNORECASE)


def extract_summary(reply: str) -> str | None:
    """The <summary> content with the <analysis> scratchpad dropped, or None if absent."""
    without_analysis = _ANALYSIS_BLOCK.sub("", reply)
    match = _SUMMARY_BLOCK.search(without_analysis)
    if not match or not match.group(1).strip():
        return None
    return match.group(1).strip()


def summary_message_text(summary: str, transcript_path: str, *, auto: bool, partial: str = "full",
                         audit: str = "") -> str:
    """The user message that carries a summary into the new context, with what the coverage
    audit appended after it (context/audit.py) and a pointer to the search tool."""
    lead = (
        "This session is being continued from an earlier conversation that ran out of context. "
        if partial != "up_to"
        else "The earlier part of this conversation was summarized to save context. "
    )
    return _after_summary(f"{lead}The summary below covers it. {_transcript(transcript_path)}\n\nSummary:\n{summary}",
                          auto=auto, audit=audit)


def summary_note_text(transcript_path: str, *, auto: bool, audit: str = "") -> str:
    """The user message after a summary the API wrote (a compaction block, which holds the
    summary alone): what ctx_magic's own summary message says around its summary."""
    return _after_summary("This session is being continued from an earlier conversation that ran out of context. "
                          f"The summary above covers it. {_transcript(transcript_path)}", auto=auto, audit=audit)


def _transcript(transcript_path: str) -> str:
    return (f"The full transcript, every message word for word, is kept at: {transcript_path}. The {SEARCH_TOOL} "
            "tool searches it (text or regex, by turn or notebook cell) with the outputs saved beside it: use it "
            "to recover anything the summary left out before redoing work.")


def _after_summary(text: str, *, auto: bool, audit: str) -> str:
    if audit:
        text += f"\n\n{audit}"
    if auto:
        text += (
            "\n\nContinue the work from where it stopped without asking the user anything further. "
            "Do not acknowledge this summary and do not recap it; pick up the last task as if "
            "the break never happened."
        )
    return text


PTL_RETRY_MARKER = "[earlier conversation truncated for compaction retry]"
# A partial compaction `--from N` can start at an assistant message; the API's first message is a user one.
FROM_MARKER = "[the earlier conversation stays as it is; what follows is the part to summarize]"
