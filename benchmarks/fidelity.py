"""What survives a compaction, measured after every compaction of real sessions.

Workloads (benchmarks/fidelity_corpus.py): mini-swe-agent trajectories and the Claude Code
session replayed through the real loop (`run_turn` on a `Session`, the real anthropic SDK over
the in-process offline stand-in, which writes the summaries; recorded actions replayed by a
policy rule, recorded outputs by a scripted executor; session notes kept as the notebook keeps
them), and a long notebook session: `tools_pandas.ipynb` worked through in a real IPython shell
with ctx_magic loaded (cells really run; `%%agent` turns, a `%pin`, a `# ctx: pin` cell, one
`%compact`, one `--up-to` and one `--from`, one prompt-too-long answered by a reactive compaction).

After each compaction (a PostCompact hook), over the context the model gets next:

- user messages: every message the user wrote so far, found word for word in the context
  before the audit's text is added, after it, or one search away (a `search_transcript` for its
  first line lists it, and its ref reads it whole);
- persisted outputs: their files hold the exact bytes first output; and the outputs are one
  search away;
- the span's file paths, error lines and defined names (context/audit.py's reading of the
  summarized messages as first written) in the context before and after the audit;
- the last 5 tool outputs before the compaction: still whole in the context, or one search away;
- pins in the context, word for word;
- tokens: what the audit appended, the kernel inventory (notebook only), the context after.

    python benchmarks/fidelity.py [--windows 20000,32000] [--swe N] [--notebook-turns 100] [--each]
                                  [--no-claude-code] [--corpus DIR] [--storage DIR]

Two runs in the same --storage folder give the same tables, to a token or two (one cell shows an
object's memory address); the folder's path is in the context, so another folder can move a compaction.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import secrets
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fidelity_corpus as corpus
from clock import T0, ManualClock  # a sibling module: these scripts run as files (python benchmarks/...)
from shells import let_go, new_shell

import ctx_magic.agent.loop as loop_module
import ctx_magic.agent.session as session_module
from benchmarks.corpus_location import readable  # the repository root is on the path (fidelity_corpus)
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import AnthropicModel
from ctx_magic.agent.notes import NotesKeeper
from ctx_magic.agent.session import Session, open_session
from ctx_magic.agent.tools import Executor, Tool, ToolCall, ToolOutput
from ctx_magic.context import recall
from ctx_magic.context.audit import has_name, has_path
from ctx_magic.context.span_facts import is_user_prompt, span_facts
from ctx_magic.context.tokens import count_text
from ctx_magic.events import Compacted
from ctx_magic.messages import Message, result_text
from ctx_magic.notebook.inventory import HEADER as INVENTORY_HEADER
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.compaction import is_compaction_request
from ctx_magic.offline.policy import Answer, Policy, Rule
from ctx_magic.offline.transport import offline_client
from ctx_magic.settings import DEFAULTS, Settings
from ctx_magic.store.session import new_session_id

CALL_SECONDS = 5.0  # one model call, streamed
LAST_OUTPUTS = 5
# A recorded reply longer than this is cut: at a 20,000-token window the reply cap is 5,000 tokens,
# and a longer answer would stop at max_tokens before its tool call (as the API's would).
MAX_ACTION_CHARS = 8_000
SEARCH_CHARS = 80  # what a model would type into a search: a line it remembers, at most this long
NOTES_WAIT_SECONDS = 120.0  # a background notes extraction is waited for at each turn end (determinism)
REPLAY_PIN = "Keep every change minimal, and say which file and line it touches."
NOTEBOOK_PIN = "Always give a DataFrame's shape when you describe it."
PINNED_CELL = "# ctx: pin\nREPORT_COLUMNS = ['height', 'weight']  # the columns every summary table shows"
PARTIAL_AT = {45: "--up-to", 60: "--from"}  # notebook turns at which the user compacts part of the context
DUMP_CELL = "dump = np.random.RandomState(0).rand(3000, 4)\nprint(pd.DataFrame(dump).to_csv())"




# -- figures -----------------------------------------------------------------------------------


@dataclass
class Share:
    hit: int = 0
    total: int = 0

    def add(self, ok: bool) -> None:
        self.hit += ok
        self.total += 1

    def __str__(self) -> str:
        return f"{100 * self.hit / self.total:.1f}% ({self.hit}/{self.total})" if self.total else "–"


@dataclass
class Figures:
    """One workload at one window: each share over all (compaction, item) pairs."""

    workload: str
    window: int
    compactions: Counter[str] = field(default_factory=Counter)
    users_before: Share = field(default_factory=Share)
    users_after: Share = field(default_factory=Share)
    users_recoverable: Share = field(default_factory=Share)
    users_head_only: int = 0
    """(compaction, message) pairs where a message is in the context as its first lines and ref only
    (a long one, or an old one past the audit's budget)."""
    persisted_bytes: Share = field(default_factory=Share)
    persisted_search: Share = field(default_factory=Share)
    paths_before: Share = field(default_factory=Share)
    paths_after: Share = field(default_factory=Share)
    errors_before: Share = field(default_factory=Share)
    errors_after: Share = field(default_factory=Share)
    names_before: Share = field(default_factory=Share)
    names_after: Share = field(default_factory=Share)
    last_in_context: Share = field(default_factory=Share)
    last_search: Share = field(default_factory=Share)
    pins: Share = field(default_factory=Share)
    audit_tokens: list[int] = field(default_factory=list)
    inventory_tokens: list[int] = field(default_factory=list)
    context_tokens: list[int] = field(default_factory=list)
    seconds: float = 0.0
    turns: int = 0


def _normal(text: str) -> str:
    return " ".join(text.split())


def context_text(messages: Sequence[Message]) -> str:
    """Everything the model reads of the live context, as text."""
    parts = []
    for message in messages:
        if not message.sent:
            continue
        for block in message.content:
            kind = block.get("type")
            if kind == "text":
                parts.append(block.get("text", ""))
            elif kind == "tool_use":
                parts.append(str(block.get("input")))
            elif kind == "tool_result":
                parts.append(result_text(block))
            elif kind == "compaction":  # the API's summary on demand: the model reads its content
                parts.append(str(block.get("content") or ""))
    return "\n".join(parts)


def inventory_text(messages: Sequence[Message]) -> str:
    for message in messages:
        at = message.text.find(INVENTORY_HEADER) if message.kind == "attachment" else -1
        if at >= 0:
            return message.text[at:].split("\n\n")[0].split("\n</context-refresh>")[0]
    return ""


def _refs(listing: str) -> list[str]:
    return re.findall(r"ref (\S+?)(?: ·|:)", listing)


def one_search_away(entries: Sequence[recall.Entry], text: str) -> bool:
    """A search for the text's first line, or for its longest line, lists a message whose ref
    reads the text whole (page by page)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    by_ref = {e.ref: e for e in entries}
    for query in dict.fromkeys([lines[0][:SEARCH_CHARS], max(lines, key=len)[:SEARCH_CHARS]]):
        try:
            listing = recall.search(entries, query)
        except ValueError:
            continue
        if any(ref in by_ref and text in by_ref[ref].text for ref in _refs(listing)):
            return True
    return False


class Measurer:
    """A PostCompact hook: the figures of each compaction, added to a `Figures`."""

    def __init__(self, session: Session, figures: Figures) -> None:
        self.session = session
        self.figures = figures

    def __call__(self, event: Compacted) -> None:
        session, f = self.session, self.figures
        f.compactions[event.trigger] += 1
        records = session.store.load_transcript().records
        written = {m.uuid: m for m in session.store.load_transcript().messages()}
        folder = session.store.tool_results_dir
        saved = {str(folder / n): (folder / n).read_text(encoding="utf-8")
                 for n in recall.unrecorded_files(records, sorted(p.name for p in folder.glob("*.txt")))}
        entries = recall.entries(records, saved)
        live = list(session.live.messages)
        after = context_text(live)
        audit = event.audit.text if event.audit is not None else ""
        before = after.replace(audit, "", 1) if audit else after
        flat_after, flat_before = _normal(after), _normal(before)
        live_ids = {m.uuid for m in live}
        for message in (m for m in written.values() if is_user_prompt(m)):
            in_before = message.uuid in live_ids or _normal(message.text) in flat_before
            in_after = message.uuid in live_ids or _normal(message.text) in flat_after
            f.users_before.add(in_before)
            f.users_after.add(in_after)
            f.users_recoverable.add(in_after or one_search_away(entries, message.text))
            first = next((line.strip() for line in message.text.splitlines() if line.strip()), "")[:100]
            f.users_head_only += not in_after and first in after
        self._persisted(records, written, entries)
        span = [written[u] for u in event.summarized_uuids if u in written]
        facts = span_facts(span)
        for path in facts.paths:
            f.paths_before.add(has_path(before, path))
            f.paths_after.add(has_path(after, path))
        for error in facts.errors:
            f.errors_before.add(_normal(error.rstrip("…")) in flat_before)
            f.errors_after.add(_normal(error.rstrip("…")) in flat_after)
        for name in facts.names:
            f.names_before.add(has_name(before, name))
            f.names_after.add(has_name(after, name))
        self._last_outputs(written, live, entries)
        for pin in session.pin_board.pins:
            f.pins.add(pin.text in after)
        f.audit_tokens.append(event.audit.tokens if event.audit is not None else 0)
        f.inventory_tokens.append(count_text(inventory_text(live)) if inventory_text(live) else 0)
        f.context_tokens.append(event.tokens_after)

    def _persisted(self, records: Sequence[dict[str, Any]], written: dict[str, Message],
                   entries: Sequence[recall.Entry]) -> None:
        outputs = {b["tool_use_id"]: result_text(b) for m in written.values() for b in m.blocks("tool_result")}
        for record in records:
            if record.get("event") != "persisted":
                continue
            original = outputs.get(record["tool_use_id"], "")
            try:
                same = Path(record["path"]).read_bytes() == original.encode("utf-8")
            except OSError:
                same = False
            self.figures.persisted_bytes.add(same)
            self.figures.persisted_search.add(one_search_away(entries, original))

    def _last_outputs(self, written: dict[str, Message], live: Sequence[Message],
                      entries: Sequence[recall.Entry]) -> None:
        names = {b["id"]: b.get("name") for m in written.values() for b in m.blocks("tool_use")}
        outputs = [(b["tool_use_id"], result_text(b)) for m in written.values() for b in m.blocks("tool_result")
                   if names.get(b["tool_use_id"]) != recall.SEARCH_TOOL]
        live_results = {b["tool_use_id"]: result_text(b) for m in live if m.sent for b in m.blocks("tool_result")}
        for tool_use_id, text in outputs[-LAST_OUTPUTS:]:
            self.figures.last_in_context.add(live_results.get(tool_use_id) == text)
            self.figures.last_search.add(one_search_away(entries, text))


# -- replays through the loop -----------------------------------------------------------------


class ReplayRule:
    """The policy rule that answers the main loop with the recorded actions of the current turn."""

    def __init__(self) -> None:
        self.actions: list[corpus.Action] = []

    def applies(self, request: dict[str, Any]) -> bool:
        side_call = (request.get("tool_choice") or {}).get("type") == "none"
        return bool(self.actions) and not side_call and not is_compaction_request(request)

    def answer(self, _request: dict[str, Any]) -> Answer:
        action = self.actions.pop(0)
        calls = [{"type": "tool_use", "name": c.name, "input": c.input} for c in action.calls]
        said = action.text if len(action.text) <= MAX_ACTION_CHARS else action.text[:MAX_ACTION_CHARS] + " […]"
        text = [{"type": "text", "text": said}] if said.strip() else []
        return Answer((*text, *calls) or ({"type": "text", "text": corpus.CLOSING},),
                      "tool_use" if calls else "end_turn")


class ReplayExecutor(Executor):
    """Answers each tool call with the recorded output, in order; a call that differs is a desync."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.calls: list[corpus.Call] = []

    def tools(self) -> list[Tool]:
        schema = {"type": "object", "properties": {}, "additionalProperties": True}
        return [Tool({"name": n, "description": f"The recorded {n} tool.", "input_schema": schema}, self.run)
                for n in self.names]

    def run(self, call: ToolCall, _context: Any) -> ToolOutput:
        expected = self.calls.pop(0)
        if (expected.name, dict(expected.input)) != (call.name, dict(call.input)):
            raise RuntimeError(f"replay desync: {call.name} {call.input} but {expected.name} was recorded")
        return ToolOutput(expected.output or "(no output)", is_error=expected.is_error)


def run_replay(replay: corpus.Replay, window: int, storage: Path) -> Figures:
    figures = Figures(replay.name, window)
    clock = ManualClock()
    api = OfflineAPI(OfflineConfig(window=window), clock=clock)
    rule = ReplayRule()
    api.policy = Policy().with_rule(Rule("replay", "normal", rule.applies, rule.answer))
    executor = ReplayExecutor(replay.tools)
    model = AnthropicModel(offline_client(api, max_retries=0), name=DEFAULTS.model)
    session, _ = open_session(model, executor, storage / ".ctx_magic", Settings(context_window=window),
                              session_id="bench-fidelity", root=storage, clock=clock)
    notes = NotesKeeper(session)
    session.hooks.post_compact.append(Measurer(session, figures))
    started = time.perf_counter()
    for n, turn in enumerate(replay.turns):
        rule.actions = list(turn.actions)
        executor.calls = [c for a in turn.actions for c in a.calls]
        clock.advance(CALL_SECONDS)
        result = run_turn(session, turn.prompt)
        if result.error or rule.actions or executor.calls:
            raise RuntimeError(f"{replay.name} turn {n}: {result.error or 'actions left over'}")
        notes.wait(NOTES_WAIT_SECONDS)
        if n == 0:
            session.pin_board.pin(REPLAY_PIN)
    figures.seconds = time.perf_counter() - started
    figures.turns = len(replay.turns)
    session.close()
    return figures


# -- the notebook session -----------------------------------------------------------------------


@contextlib.contextmanager
def notebook_shell(storage: Path, window: int) -> Iterator[Any]:
    from ctx_magic.notebook.extension import controller_of

    shell = new_shell()
    shell.run_line_magic("load_ext", "ctx_magic")
    for line in ("permission = 'auto'", "idle_timer = False", f"storage_dir = '{storage / '.ctx_magic'}'",
                 f"user_memory_dir = '{storage / 'user'}'", f"context_window = {window}"):
        shell.run_line_magic("config", f"CtxMagic.{line}")
    controller_of(shell).clock = ManualClock()
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "ctx_magic")
        let_go(shell)


def run_notebook(window: int, storage: Path, turns: int, corpus_dir: Path) -> Figures:
    from IPython.utils.capture import capture_output

    from ctx_magic.notebook.extension import controller_of

    figures = Figures(f"notebook/{corpus.notebook_path(corpus_dir).stem}", window)  # made where there is one
    plan = list(corpus.notebook_turns(corpus_dir))[:turns]
    started = time.perf_counter()
    cwd = Path.cwd()
    os.chdir(storage)  # the notebook writes my_df.csv and friends
    try:
        with notebook_shell(storage, window) as shell, capture_output(display=True):
            controller = controller_of(shell)

            def cell(source: str) -> None:
                controller.clock.advance(CALL_SECONDS)
                shell.run_cell(source, store_history=True)

            for n, step in enumerate(plan):
                for source in step.cells:
                    cell(source)
                if n == 8:
                    cell(PINNED_CELL)
                if n == 12:
                    cell(DUMP_CELL)
                if n == 30:
                    controller.host.backend.stand_in.inject("ptl")  # the API says too long: reactive compaction
                cell(f"%%agent\n{step.prompt}")
                controller.memory.notes.wait(NOTES_WAIT_SECONDS)  # before the next cell: ids drawn in one order
                session = controller.host.session
                if n == 0:
                    session.hooks.post_compact.append(Measurer(session, figures))
                if n == 2:
                    cell(f"%pin {NOTEBOOK_PIN}")
                if n == 20:
                    cell("%compact keep the DataFrames, their columns and what was computed from them")
                if n in PARTIAL_AT:  # partial compactions: the older half, then the newer half
                    cell(f"%compact {PARTIAL_AT[n]} {len(session.live.messages) // 2}")
                controller.memory.notes.wait(NOTES_WAIT_SECONDS)
    finally:
        os.chdir(cwd)
    figures.seconds = time.perf_counter() - started
    figures.turns = len(plan)
    return figures


# -- repeatable runs ---------------------------------------------------------------------------


@contextlib.contextmanager
def repeatable(seed: str) -> Iterator[None]:
    """Ids drawn from a generator seeded with `seed`, and the session folder named at the clock's
    start: two runs of a job in the same storage folder count the same tokens. Left alone they
    differ by a few (message ids are random and the audit quotes them as refs; the folder's time and
    random hex are in the paths of the outputs saved there), and so do the compactions that follow."""
    rng = random.Random(seed)
    saved = uuid.uuid4, secrets.token_hex, session_module.new_session_id
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    secrets.token_hex = lambda nbytes=None: rng.randbytes(32 if nbytes is None else nbytes).hex()
    session_module.new_session_id = lambda now=None: new_session_id(T0)
    try:
        yield
    finally:
        uuid.uuid4, secrets.token_hex, session_module.new_session_id = saved


# -- the table ---------------------------------------------------------------------------------


def _mean(values: Sequence[int]) -> str:
    return f"{sum(values) / len(values):,.0f}" if values else "–"


def _share(f: Figures) -> str:
    """All that the audit and the inventory added over all the contexts after, and the largest
    share after one compaction."""
    if not f.context_tokens:
        return "–"
    added = sum(f.audit_tokens) + sum(f.inventory_tokens)
    worst = max((a + i) / c for a, i, c in zip(f.audit_tokens, f.inventory_tokens, f.context_tokens))
    return f"{100 * added / sum(f.context_tokens):.1f}% (max {100 * worst:.0f}%)"


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def _name(f: Figures) -> list[str]:
    triggers = ", ".join(f"{k} {v}" for k, v in sorted(f.compactions.items())) or "none"
    return [f.workload, f"{f.window:,}", str(f.turns), triggers]


def tables(rows: Sequence[Figures]) -> str:
    """Two tables: what the context holds before and after the audit; recovery, pins and cost."""
    coverage = _markdown(
        ["workload", "window", "turns", "compactions", "user msgs: before audit", "after audit",
         "first lines + ref", "recoverable (+ search)", "paths: before", "after", "errors: before", "after",
         "names: before", "after"],
        [[*_name(f), str(f.users_before), str(f.users_after), str(f.users_head_only), str(f.users_recoverable),
          str(f.paths_before), str(f.paths_after), str(f.errors_before), str(f.errors_after), str(f.names_before),
          str(f.names_after)] for f in rows])
    recovery = _markdown(
        ["workload", "window", "turns", "compactions", "persisted: same bytes", "by search",
         "last 5 outputs: in context", "by search", "pins", "audit tok (mean)", "inventory tok (mean)",
         "context after (mean)", "audit + inventory share", "seconds"],
        [[*_name(f), str(f.persisted_bytes), str(f.persisted_search), str(f.last_in_context), str(f.last_search),
          str(f.pins), _mean(f.audit_tokens), _mean(f.inventory_tokens), _mean(f.context_tokens), _share(f),
          f"{f.seconds:.0f}"] for f in rows])
    return f"{coverage}\n\n{recovery}"


def total(rows: Sequence[Figures], name: str) -> Figures:
    out = Figures(name, 0)
    for f in rows:
        out.compactions.update(f.compactions)
        for key, value in vars(f).items():
            if isinstance(value, Share):
                mine = getattr(out, key)
                mine.hit += value.hit
                mine.total += value.total
            elif isinstance(value, list):
                getattr(out, key).extend(value)
        out.seconds += f.seconds
        out.turns += f.turns
        out.users_head_only += f.users_head_only
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", default="20000,32000")
    parser.add_argument("--swe", type=int, default=100, help="mini-swe-agent trajectories (spread over the list; "
                        "all of them by default)")
    parser.add_argument("--notebook-turns", type=int, default=100, help="at most (the notebook makes 74)")
    parser.add_argument("--no-claude-code", action="store_true")
    parser.add_argument("--each", action="store_true", help="a row for each trajectory, not only their total")
    parser.add_argument("--corpus", type=Path, default=corpus.DEFAULT_CORPUS)
    parser.add_argument("--storage", type=Path, default=None, help="keep the sessions here (default: a temp folder)")
    args = parser.parse_args(argv)
    os.environ.pop("ANTHROPIC_API_KEY", None)  # the notebook session uses the offline stand-in
    os.environ.pop("ANTHROPIC_BASE_URL", None)
    loop_module.MAX_MODEL_CALLS_PER_TURN = 100_000  # a recorded trajectory is one long turn
    windows = [int(w) for w in args.windows.split(",")]
    root = Path(tempfile.mkdtemp(prefix="fidelity-")) if args.storage is None else args.storage
    jobs: list[tuple[str, Callable[[Path, int], Figures]]] = []
    notebook = corpus.notebook_path(args.corpus)
    if args.notebook_turns and notebook is not None and readable(lambda _: corpus.notebook_cells(args.corpus),
                                                                 notebook) is not None:
        jobs.append(("notebook", lambda where, w: run_notebook(w, where, args.notebook_turns, args.corpus)))
    replays = [readable(corpus.claude_code, p) for p in ([] if args.no_claude_code
                                                         else corpus.claude_code_sessions(args.corpus))]
    replays += [readable(corpus.mini_swe, p) for p in (corpus.swe_paths(args.corpus, args.swe) if args.swe
                                                       else [])]
    for replay in filter(None, replays):  # files of another kind were said and left out
        jobs.append((replay.name, lambda where, w, r=replay: run_replay(r, w, where)))
    if not jobs:
        sys.exit(f"Nothing to replay under {args.corpus} (a notebook, Claude Code sessions, mini-swe-agent "
                 "trajectories).")
    rows: list[Figures] = []
    try:
        for window in windows:
            done: list[Figures] = []
            for n, (name, job) in enumerate(jobs):
                where = root / f"{window}-{n}"
                where.mkdir(parents=True, exist_ok=True)
                print(f"running {name} at {window:,}", file=sys.stderr, flush=True)
                with repeatable(f"{name}/{window}"):
                    done.append(job(where, window))
            swe = [f for f in done if f.workload.startswith("swe/")]
            rows += [f for f in done if args.each or f not in swe]
            if swe:
                rows.append(total(swe, f"mini-swe-agent ({len(swe)} trajectories)"))
                rows[-1].window = window
            if len(done) > 1:
                rows.append(total(done, "**all workloads**"))
                rows[-1].window = window
    finally:
        if args.storage is None:
            shutil.rmtree(root, ignore_errors=True)
    print(tables(rows))


if __name__ == "__main__":
    main()
