"""What `%compact` does, once its line is parsed: the checks that its options go together, then
the one change they ask for (undo, put off, snip, or a summary of all or part of the context)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from ctx_magic.notebook.display import notice

if TYPE_CHECKING:
    from ctx_magic.notebook.commands import Commands

RANGES = ("up_to", "from_", "snip")
"""The options that say which part of the context a compaction takes (one at most)."""


class CompactCommand:
    def __init__(self, commands: Commands) -> None:
        self.commands = commands

    def run(self, args: argparse.Namespace) -> None:
        """One `%compact`, its options as parsed; a combination that makes no sense is a UsageError."""
        chosen = [name for name in RANGES if getattr(args, name) is not None]
        if args.undo:
            if chosen or args.instructions or args.not_now:
                raise UsageError("--undo takes no other option or instructions.")
            notice(self.commands.undo())
            return
        if args.not_now:
            if chosen or args.instructions:
                raise UsageError("--not-now takes no other option or instructions.")
            notice(self.commands.defer_compaction())
            return
        if len(chosen) > 1:
            raise UsageError("Use only one of --up-to, --from and --snip.")
        for name in RANGES:
            value = getattr(args, name)
            if value is not None and value < 0:
                raise UsageError(f"--{name.rstrip('_').replace('_', '-')} needs a number of 0 or more.")
        instructions = " ".join(args.instructions).strip() or None
        if args.snip is not None:
            count, dropped = self.commands.snip(args.snip)
            # One line: the snip and the thinking it took with it (how many blocks, how many tokens).
            notice(" ".join([f"Snipped {count} messages.", *dropped]) if count else "Nothing to snip yet.")
            return
        direction, index = ("up_to", args.up_to) if args.up_to is not None else (
            ("from", args.from_) if args.from_ is not None else ("full", None))
        self.commands.compact(instructions, direction=direction, index=index)
