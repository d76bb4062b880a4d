"""The magics: `%%agent`, `%compact`, `%memory`, `%ctx`, and `%pin`.

Options go through IPython's magic_arguments, so `%%agent?` shows real help and a bad option
is a UsageError of one line; each magic's arguments are parsed here and nowhere else (what `%compact`,
`%memory` and `%ctx` then do is in compact_command.py, memory_command.py and ctx_command.py). Every
other failure ends in one clear line in the cell and a session that still works.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import MagicHelpFormatter, argument, kwds, magic_arguments
from IPython.utils.process import arg_split

from ctx_magic.agent.status import ContextReport
from ctx_magic.errors import CtxMagicError
from ctx_magic.notebook.compact_command import CompactCommand
from ctx_magic.notebook.controller import Controller
from ctx_magic.notebook.ctx_command import CtxCommand
from ctx_magic.notebook.display import notice, plain_or_rich
from ctx_magic.notebook.memory_command import MemoryCommand
from ctx_magic.notebook.wording import error_line

AGENT_USAGE = """%%agent [--new | --resume [ID]] [--model MODEL] [--permission ask|auto|off]
  (your message, on the lines below)
  %%agent --new | --resume [ID]    (switch sessions, no message)"""
"""`%%agent?` shows the cell magic first: a turn is a cell whose body is the message."""
MESSAGE_IN_LINE = ("%agent takes options only: put your message in a %%agent cell (%%agent on the first line, "
                   "your message below it).")


class HelpFormatter(MagicHelpFormatter):
    """IPython's help layout, with option values shown as written (`--resume [ID]`, not `<[ID]>`)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        return argparse.RawDescriptionHelpFormatter._format_action_invocation(self, action)


def words(line: str) -> list[str]:
    """A magic's line split as IPython splits it, except that a quote left open (`%compact keep 'the
    plots`, `%memory add the 'sales table...`) stays in the last word as typed instead of raising."""
    return arg_split(line, strict=False)


def parse(magic: Callable[..., Any], line: str) -> argparse.Namespace:
    """A magic's arguments (a bad option is a one-line UsageError from magic_arguments' parser)."""
    return magic.parser.parse_args(words(line))  # type: ignore[attr-defined]


def parse_intermixed(magic: Callable[..., Any], line: str) -> argparse.Namespace:
    """A magic's arguments with its options anywhere among the positionals (`%ctx export --transcript
    PATH` as well as `%ctx export PATH --transcript`), which argparse's default parse refuses."""
    return magic.parser.parse_intermixed_args(words(line))  # type: ignore[attr-defined]


def agent_line_with_question(lines: list[str]) -> list[str]:
    """An input transformer: `%agent some words?` is a message for %%agent, not a request for
    help on the word before the `?` (which IPython would answer with "Object `words` not
    found."): the trailing `?` goes, and %agent says where a message belongs."""
    if lines and re.match(r"^\s*%agent\s+[^-\s?][^\n]*\?+\s*$", lines[0]):
        lines = [lines[0].rstrip().rstrip("?") + "\n", *lines[1:]]
    return lines


def one_line_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """ctx_magic's errors, and any bug of ours, end as one line in the cell, never a traceback."""

    @functools.wraps(method)
    def wrapper(self: AgentMagics, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except UsageError:
            raise
        except CtxMagicError as error:
            notice(error_line(error), "error")
        except KeyboardInterrupt:
            notice("Interrupted.", "warning")
        except Exception as error:  # noqa: BLE001 - a bug of ours: one line here, details on disk
            self.controller.report_internal_error(error)
        return None

    return wrapper


@magics_class
class AgentMagics(Magics):
    def __init__(self, shell: Any, controller: Controller) -> None:
        super().__init__(shell)
        self.controller = controller
        self.commands = controller.commands
        self.memory_command = MemoryCommand(controller)
        self.ctx_command = CtxCommand(controller)
        self.compact_command = CompactCommand(controller.commands)

    @magic_arguments()
    @kwds(usage=AGENT_USAGE, formatter_class=HelpFormatter)
    @argument("--new", action="store_true", help="Start a new session (the current one stays on disk).")
    @argument("--resume", nargs="?", const="latest", default=None, metavar="ID",
              help="Resume a stored session: the latest one, or the one with this id.")
    @argument("--model", default=None, help="Model id for this session (sets CtxMagic.model).")
    @argument("--permission", choices=["ask", "auto", "off"], default=None,
              help="How the agent may run code (sets CtxMagic.permission).")
    @line_cell_magic
    @one_line_errors
    def agent(self, line: str, cell: str | None = None) -> None:
        """Talk to the agent: the cell body is your message.

        The agent can run code in this kernel, read files under the notebook's folder and see
        the cells you run between turns. Its context is kept inside the model's window
        automatically; see %ctx status and %compact.
        """
        if cell is None and line.strip() and not line.lstrip().startswith("-"):
            raise UsageError(MESSAGE_IN_LINE)
        args = parse(self.agent, line)
        self.commands.refuse_inside_turn("%%agent")
        if args.new and args.resume is not None:
            raise UsageError("Use either --new or --resume, not both.")
        text = (cell or "").strip()
        if not text and not (args.new or args.resume is not None):
            raise UsageError("%%agent needs your message in the cell body (or --new / --resume).")
        # The permission only once the line is accepted: a refused one changes nothing.
        session, notes = self.controller.ensure_session(new=args.new, resume=args.resume, model=args.model,
                                                        permission=args.permission)
        for line_ in notes:
            notice(line_)
        if args.new and not text:
            notice(f"New session {session.session_id}.")
        if text:
            result = self.commands.run(text)
            if result.error:
                return None

    @magic_arguments()
    @kwds(formatter_class=HelpFormatter)
    @argument("--up-to", type=int, dest="up_to", metavar="N",
              help="Summarize the live messages before N, keep N and after.")
    @argument("--from", type=int, dest="from_", metavar="N",
              help="Keep the live messages before N, summarize the rest.")
    @argument("--snip", nargs="?", const=20, type=int, metavar="KEEP",
              help="No summary: snip the middle, keeping the opening and about KEEP recent messages.")
    @argument("--not-now", action="store_true", dest="not_now",
              help="Let the next turn through without the automatic compaction its Done line announced "
                   "(one turn, and never past the blocking limit).")
    @argument("--undo", action="store_true",
              help="Bring back what the last compaction, snip or clearing replaced, while it fits the window "
                   "(again: the one before).")
    @argument("instructions", nargs="*", help="What the summary must keep, in your words.")
    @line_magic
    @one_line_errors
    def compact(self, line: str) -> None:
        """Compact the agent's context now (optionally with instructions for the summary), put off
        the automatic compaction by one turn (--not-now), or take back the last one (--undo)."""
        args = parse(self.compact, line)
        self.commands.refuse_inside_turn("%compact")
        self.compact_command.run(args)

    @magic_arguments()
    @kwds(formatter_class=HelpFormatter)
    @argument("command", nargs="?", default="show",
              choices=["show", "add", "forget", "extract", "dream", "pending", "keep", "edit", "discard", "review",
                       "accept", "reject"],
              help="What to do with long-term memory; pending, keep, edit and discard: every memory extraction found "
                   "that waits for you (CtxMagic.memory_review = 'ask'); review, accept and reject: those proposed "
                   "for the team (CtxMagic.team_review).")
    @argument("--no-decay", action="store_true", dest="no_decay",
              help="With add: the memory keeps its full relevance forever.")
    @argument("--team", action="store_true",
              help="With add: a fact about the shared data or code for the whole team (CtxMagic.team). "
                   "With forget: the team's memory with this id.")
    @argument("rest", nargs=argparse.REMAINDER, help="With add: the text to remember. With forget: the id. "
                                                     "With keep, discard, accept and reject: ids, or all. With "
                                                     "edit: the id, then the text to keep instead.")
    @line_magic
    @one_line_errors
    def memory(self, line: str) -> None:
        """Long-term memory across sessions: show, add [--no-decay] [--team] TEXT, forget [--team] ID,
        extract, dream, pending, keep ID|all, edit ID TEXT, discard ID|all, review, accept ID|all,
        reject ID|all."""
        args = parse(self.memory, line)
        # What follows the command is its text, taken as typed; the flags may sit anywhere in it.
        no_decay = args.no_decay or "--no-decay" in args.rest
        team = args.team or "--team" in args.rest
        words = [word for word in args.rest if word not in ("--no-decay", "--team")]
        self.memory_command.run(args.command, words, no_decay=no_decay, team=team)
        self.controller.panel.refresh()

    @magic_arguments()
    @kwds(formatter_class=HelpFormatter)
    @argument("--cell", type=int, metavar="N", help="Pin the source of cell In[N] (its execution count).")
    @argument("--list", action="store_true", help="List the pins, their ids and the tokens they take.")
    @argument("--remove", metavar="ID", help="Remove the pin with this id (it is not put back after later summaries).")
    @argument("text", nargs="*", help="The instruction to pin, kept exactly as typed after %%pin.")
    @line_magic
    @one_line_errors
    def pin(self, line: str) -> None:
        """Pin an instruction or a cell: it is put back word for word after every summary of the
        agent's context, and kept with the session across restarts. A cell whose first line is
        `# ctx: pin` is pinned when it runs. Pins share a token budget (CtxMagic.pin_budget_tokens).
        """
        self.commands.refuse_inside_turn("%pin")
        if self.controller.host.session is None:  # a pin can come before the first message
            for line_ in self.controller.ensure_session()[1]:
                notice(line_)
        stripped = line.strip()
        options = stripped.startswith("-")  # else the whole line is the text, as typed: no shell-style unquoting
        args = parse(self.pin, line if options else "")
        chosen = [name for name in ("cell", "remove") if getattr(args, name) is not None] + (["list"] if args.list
                                                                                              else [])
        if stripped and not chosen and (args.text or not options):  # text that only starts like an option: `- a rule`
            pin = self.commands.pin(stripped)
            notice(f"Pinned {pin.id}: it stays in the agent's context after every summary.")
            return
        if len(chosen) > 1 or (chosen and args.text):
            raise UsageError("Use one of TEXT, --cell N, --list and --remove ID.")
        if args.cell is not None:
            pin = self.commands.pin(cell=args.cell)
            notice(f"Pinned cell {args.cell} as {pin.id}: its source stays in the agent's context after every "
                   "summary.")
        elif args.remove is not None:
            removed = self.commands.unpin(args.remove)
            notice(f"Removed {args.remove}." if removed else f"No pin {args.remove!r} (see %pin --list).")
        else:
            plain_or_rich({"text/plain": self.commands.pins_listing()})

    @magic_arguments()
    @kwds(formatter_class=HelpFormatter)
    @argument("command", nargs="?", default="status",
              choices=["status", "config", "export", "sidebar", "count", "cell", "tasks", "answer", "stop"],
              help=("status (--json), config, export [PATH] (--transcript, --force), sidebar, count, cell [ID], tasks, "
                    "answer ID [TEXT], stop ID."))
    @argument("rest", nargs="*", help=(
        "With export: where to write the .ipynb. With cell: the id of the agent's python call. With answer: a "
        "background run's id and the line to send (none: asked at the input prompt, hidden for a password). "
        "With stop: a background run's id."))
    @argument("--json", action="store_true", help="With status: one JSON object.")
    @argument("--transcript", action="store_true",
              help="With export: every message as it was first written, not a notebook to run again.")
    @argument("--force", action="store_true", help="With export PATH: replace the file if there is one.")
    @argument("--inline", action="store_true", help="With sidebar: show the panel in the cell, not the sidebar.")
    @line_magic
    @one_line_errors
    def ctx(self, line: str) -> ContextReport | None:
        """The agent's context: status, settings, an export as a notebook, the panel, the agent's code
        as a cell, and the agent's background runs (list, answer, stop).

        `%ctx export` writes a notebook that runs top to bottom without ctx_magic: the agent's code and
        your cells as code cells with their outputs, the conversation as Markdown between them
        (`--transcript`: every message as first written instead). `%ctx cell ID` turns the cell that
        runs it into the code of the agent's call ID (without an ID: the next block of the last turn
        not placed yet, else the latest), for frontends without ctx_magic's JupyterLab extension.
        """
        args = parse_intermixed(self.ctx, line)
        if args.command == "config":
            return self.ctx_command.config()
        session = self.controller.host.require()
        if args.command in ("tasks", "answer", "stop"):
            self.ctx_command.runs(args.command, args.rest)
            return
        if args.command == "status":
            return self.ctx_command.status(session, as_json=args.json)
        elif args.command == "export":
            self.ctx_command.export(session.session_id, session.store, args.rest, transcript=args.transcript,
                                    force=args.force)
        elif args.command == "cell":
            self.ctx_command.cell(session.store, args.rest)
        elif args.command == "count":
            notice(self.commands.count_line())
        elif args.command == "sidebar":
            self.controller.show_sidebar(inline=args.inline)
