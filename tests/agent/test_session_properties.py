"""Property tests of whole sessions: random long conversations through the real loop, the real
request builder and the real SDK, answered in-process by the offline stand-in (as strict as the
API: tool results first and paired, no empty text, unique ids, thinking unchanged, at most four
cache breakpoints).

Each example plays a random script: turns whose code prints outputs from a line to far past the
tool-result budget, the user's images, notebook cells the user ran (some with plots) after idle
gaps of random length on an injected clock, pins, snips, clearing, summaries, a prompt-too-long
that forces a reactive compaction, and resuming from the transcript. After every step: every
request was accepted and fit the window, and the transcript still holds everything the user said;
after a resume the live context and the next request are the ones the live session had.
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from builders import ManualClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from image_samples import png

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import AnthropicModel
from ctx_magic.agent.session import Session, open_session
from ctx_magic.agent.tools import LocalExecutor, Tool
from ctx_magic.context.invariants import check_invariants
from ctx_magic.errors import CtxMagicError
from ctx_magic.messages import notebook_cell_id, user_text
from ctx_magic.notebook.cells import CELLS_INTRO
from ctx_magic.notebook.outputs import CellRecord, cell_messages
from ctx_magic.offline.app import OfflineAPI
from ctx_magic.offline.shapes import OfflineConfig
from ctx_magic.offline.transport import offline_client
from ctx_magic.settings import Settings

MODEL = "claude-sonnet-5-5"  # binds its thinking blocks to itself: a block sent back changed is refused
PNG = base64.b64encode(png(4, 4)).decode("ascii")
OUTPUT_SIZES = [0, 40, 900, 6_000, 30_000, 70_000]  # characters printed by one run


class NotebookExecutor(LocalExecutor):
    """`python` in a plain namespace, and the cells the user runs recorded as `notebook_cell`
    results the model cannot call (as the kernel's executor records them)."""

    def tools(self) -> list[Tool]:
        return [*super().tools(), Tool({"name": "notebook_cell"}, lambda call, _context: None, offered=False)]


@dataclass
class Play:
    api: OfflineAPI
    session: Session
    clock: ManualClock
    storage: Path
    config: Settings
    said: list[str]
    """Everything the user wrote (prompts, cells' sources, pins), to find in the transcript."""
    cell: int = 0
    checked: int = 0
    """Requests already checked."""

    def reopen(self) -> None:
        self.session.close()
        self.session, problems = open_session(self.model(), NotebookExecutor(), self.storage, self.config,
                                              session_id=self.session.session_id, resume=True, root=self.storage.parent,
                                              clock=self.clock, sleep=self.clock.advance)
        assert problems == []

    def model(self) -> AnthropicModel:
        return AnthropicModel(offline_client(self.api, max_retries=0), name=MODEL)


@contextlib.contextmanager
def play(tmp_path: Path, config: Settings, window: int) -> Iterator[Play]:
    clock = ManualClock()
    api = OfflineAPI(OfflineConfig(window=window, max_output=8_192), clock=clock)
    storage = tmp_path / ".ctx_magic"
    model = AnthropicModel(offline_client(api, max_retries=0), name=MODEL)
    session, _ = open_session(model, NotebookExecutor(), storage, config, session_id="s", root=tmp_path, clock=clock,
                              sleep=clock.advance)
    p = Play(api, session, clock, storage, config, [])
    try:
        yield p
    finally:
        p.session.close()


def code_printing(size: int, seed: int) -> str:
    """Code whose output is about `size` characters of distinct lines."""
    if size == 0:
        return f"x{seed} = {seed}"
    rows = max(1, size // 24)
    return f"print('\\n'.join(f'row {{i}} of run {seed}: {{i * {seed + 7} % 9973}}' for i in range({rows})))"


def run(p: Play, sizes: list[int], image: bool, n: int) -> None:
    fences = "".join(f"```python\n{code_printing(size, n * 10 + k)}\n```\n" for k, size in enumerate(sizes))
    text = f"Step {n}: look at the data.\n{fences}"
    p.said.append(text)
    blocks = [{"type": "text", "text": text}]
    if image:
        blocks.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}})
    run_turn(p.session, blocks)


def cells(p: Play, sizes: list[int], plot: bool) -> None:
    """Cells the user ran, entering the context before the next turn (as the notebook adds them)."""
    session = p.session
    if not any(m.sent for m in session.live.messages):
        session.append(user_text(CELLS_INTRO, timestamp=p.clock(), synthetic=True))
    for k, size in enumerate(sizes):
        p.cell += 1
        source = f"df{p.cell} = load({p.cell})\n" + code_printing(size, p.cell)
        p.said.append(source)
        output = "".join(f"cell {p.cell} line {i}\n" for i in range(size // 16))
        record = CellRecord(source, p.cell, stdout=[output] if output else [],
                            displays=[{"image/png": PNG, "text/plain": "<Figure>"}] if plot and k == 0 else [])
        for message in cell_messages(record, notebook_cell_id(p.cell, f"{p.cell:012d}"), 5_000_000, p.clock()):
            session.append(message)
        p.clock.advance(5)


def check_requests(p: Play) -> None:
    """Every request since the last check was accepted (or refused only by an injected fault) and fit."""
    records = [r for r in p.api.requests if r.path in ("/v1/messages", "/v1/messages/count_tokens")]
    for record in records[p.checked:]:
        assert record.status == 200 or record.fault is not None, (record.status, record.kind, record.input_tokens)
        if record.path == "/v1/messages" and record.status == 200 and record.input_tokens is not None:
            assert record.input_tokens <= p.api.config.window
    p.checked = len(records)


def check_transcript(p: Play) -> None:
    loaded = p.session.store.load_transcript()
    assert loaded.problems == []
    written = json.dumps([m.to_json() for m in loaded.messages()], ensure_ascii=False)
    # A message too large for the conversation is kept whole in a file the transcript names.
    written += "".join(json.dumps(f.read_text(encoding="utf-8"), ensure_ascii=False)
                       for f in p.session.store.tool_results_dir.glob("prompt-*"))
    for text in p.said:
        assert json.dumps(text, ensure_ascii=False)[1:-1] in written, f"lost from the transcript: {text[:80]!r}"


def check_resume(p: Play) -> None:
    """A resume rebuilds the context the live session had, and the same next request."""
    live = p.session.live.messages
    setup = p.session.setup()
    before = p.session.request(setup).params(MODEL)
    p.reopen()
    assert p.session.live.messages == live
    after = p.session.request(p.session.setup()).params(MODEL)
    assert after == before


TURN = st.tuples(st.just("turn"), st.lists(st.sampled_from(OUTPUT_SIZES), min_size=1, max_size=3), st.booleans())
STEPS = st.one_of(
    TURN, TURN, TURN,
    st.tuples(st.just("say"), st.integers(1, 60)),
    st.tuples(st.just("cells"), st.lists(st.sampled_from(OUTPUT_SIZES[:4]), min_size=1, max_size=6), st.booleans()),
    st.tuples(st.just("cells"), st.lists(st.sampled_from(OUTPUT_SIZES[:4]), min_size=1, max_size=6), st.booleans()),
    st.tuples(st.just("idle"), st.sampled_from([20.0, 400.0, 4_000.0])),
    st.tuples(st.just("idle"), st.sampled_from([400.0, 4_000.0])),
    st.tuples(st.just("pin"), st.integers(0, 99)),
    st.tuples(st.just("snip"), st.integers(1, 8)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("compact")),
    st.tuples(st.just("compact_part"), st.sampled_from(["from", "up_to"]), st.floats(0, 1)),
    st.tuples(st.just("interrupt"), st.sampled_from(OUTPUT_SIZES)),
    st.tuples(st.just("unpin")),
    st.tuples(st.just("ptl")),
    st.tuples(st.just("resume")),
)

def take(p: Play, n: int, step: tuple, resume: bool = True) -> None:
    """Play one step of a script."""
    kind = step[0]
    if kind == "turn":
        run(p, step[1], step[2], n)
    elif kind == "say":
        text = f"Note {n}: " + " ".join(f"the {k}th figure looks off" for k in range(step[1] * 10))
        p.said.append(text)
        run_turn(p.session, text)
    elif kind == "cells":
        cells(p, step[1], step[2])
    elif kind == "idle":
        p.clock.advance(step[1])
    elif kind == "pin":
        text = f"Always report figures for region {step[1]} in euros."
        p.said.append(text)
        with contextlib.suppress(CtxMagicError):  # past the pin budget: refused in one line
            p.session.pin_board.pin(text)
    elif kind == "snip":
        p.session.live.snip(step[1], p.clock(), p.session.setup())
    elif kind == "clear":
        results = [i for m in p.session.live.messages for i in m.tool_result_ids]
        p.session.live.clear_results(results, "model", p.session.setup())
    elif kind == "compact":
        with contextlib.suppress(CtxMagicError):  # nothing to compact yet: one clear line
            manual_compact(p.session)
    elif kind == "compact_part":
        index = int(step[2] * len(p.session.live.messages))
        with contextlib.suppress(CtxMagicError):  # no safe place to cut there: one clear line
            manual_compact(p.session, "keep the figures", direction=step[1], index=index)
    elif kind == "interrupt":  # the user interrupts the kernel while the agent's code runs
        text = f"Step {n}: run it.\n```python\n{code_printing(step[1], n)}\nraise KeyboardInterrupt\n```\n"
        p.said.append(text)
        run_turn(p.session, text)
    elif kind == "unpin":
        for pin in p.session.pin_board.pins[:1]:
            p.session.pin_board.unpin(pin.id)
    elif kind == "ptl":
        p.api.inject("ptl")
        run(p, [900], False, n)
    elif kind == "resume" and resume:
        check_resume(p)


PROPERTY = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])


@PROPERTY
@given(steps=st.lists(STEPS, min_size=4, max_size=14), thinking=st.sampled_from(["auto", "off", "enabled"]),
       window=st.sampled_from([8_000, 20_000, 60_000]), snip_max=st.sampled_from([12, 40, 200]),
       keep_recent=st.integers(1, 6))
def test_random_sessions_send_only_valid_requests_that_fit_and_resume_the_same(tmp_path_factory, steps, thinking,
                                                                               window, snip_max, keep_recent):
    config = Settings(model=MODEL, thinking=thinking, thinking_budget=1_024, snip_max_messages=snip_max,
                      keep_recent=keep_recent)
    with play(tmp_path_factory.mktemp("play"), config, window) as p:
        for n, step in enumerate(steps):
            take(p, n, step)
            check_invariants(p.session.live.messages, pending_ok=True)
            check_requests(p)
            check_transcript(p)
        run(p, [40], False, len(steps))  # the session still answers
        check_requests(p)
        check_resume(p)


@pytest.mark.parametrize("thinking", ["off", "enabled"])
def test_cells_folded_after_an_idle_gap_resume_to_the_same_request(tmp_path, thinking):
    config = Settings(model=MODEL, thinking=thinking, thinking_budget=1_024)
    with play(tmp_path, config, 60_000) as p:
        run(p, [40], False, 0)
        cells(p, [40, 40, 40, 40], False)
        run(p, [40], False, 1)
        p.clock.advance(4_000)
        run(p, [40], False, 2)
        check_requests(p)
        check_resume(p)
        run(p, [40], False, 3)
        check_requests(p)


def sent(p: Play) -> list[str]:
    """The requests a play sent."""
    return [json.dumps(r.body, sort_keys=True) for r in p.api.requests if r.path.startswith("/v1/messages")]


@contextlib.contextmanager
def seeded_uuids() -> Iterator[None]:
    """Message uuids from a seeded generator: quoted by ref in summaries, they must be the same in
    two runs of one script (a random ref's token count differs, and with it what fits)."""
    rng = random.Random(0)
    with mock.patch("uuid.uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4)):
        yield


def twins(tmp_path: Path, steps: list[tuple], config: Settings, window: int) -> list[tuple[list[str], Play]]:
    """One script played twice in the same folder: resuming at each `resume` step, then without."""
    plays = []
    for resume in (True, False):  # one after the other: the same paths in the requests
        with seeded_uuids(), play(tmp_path, config, window) as p:
            for n, step in enumerate(steps):
                if step[0] == "resume" and resume:
                    p.reopen()
                else:
                    take(p, n, step, resume=False)
            run(p, [40], False, len(steps))
            plays.append((sent(p), p))
        tmp_path.rename(tmp_path.with_name(f"{tmp_path.name}-{resume}"))
    return plays


@PROPERTY
@given(steps=st.lists(STEPS, min_size=4, max_size=14), thinking=st.sampled_from(["auto", "off", "enabled", "adaptive"]),
       window=st.sampled_from([8_000, 20_000, 60_000]), keep_recent=st.integers(1, 6))
def test_resuming_anywhere_sends_the_requests_an_uninterrupted_session_sends(tmp_path_factory, steps, thinking,
                                                                            window, keep_recent):
    config = Settings(model=MODEL, thinking=thinking, thinking_budget=1_024, snip_max_messages=12,
                      keep_recent=keep_recent)
    resumed, uninterrupted = twins(tmp_path_factory.mktemp("twin"), steps, config, window)
    assert resumed[0] == uninterrupted[0]


def test_the_first_call_after_a_resume_with_new_tools_teaches_the_estimate_nothing(tmp_path):
    """A clearing brought the context tools in after the last call: the next call's prompt grew by
    their definitions, which the estimate of new messages must not learn from, resumed or not."""
    steps = [("turn", [900], False), ("turn", [900], False), ("clear",), ("resume",), ("say", 25)]
    resumed, uninterrupted = twins(tmp_path, steps, Settings(model=MODEL), 20_000)
    assert resumed[1].session.live.state.correction == uninterrupted[1].session.live.state.correction


def test_a_resumed_session_weighs_a_clearing_on_the_growth_it_had_seen(tmp_path):
    """Whether a clearing under pressure pays for itself depends on how fast the calls have been
    growing the context: a resume keeps that, and decides as the session would have."""
    steps = [("snip", 3), ("ptl",), ("idle", 400.0), ("pin", 22), ("idle", 4_000.0), ("ptl",), ("clear",),
             ("turn", [6_000, 40], True), ("resume",)]
    config = Settings(model=MODEL, thinking="adaptive", thinking_budget=1_024, keep_recent=1, snip_max_messages=12)
    resumed, uninterrupted = twins(tmp_path, steps, config, 8_000)
    assert resumed[0] == uninterrupted[0]
