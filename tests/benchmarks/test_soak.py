"""The soak (benchmarks/soak.py), short and in real kernels: the same plan, faults and figures as
`python -m benchmarks.soak`, which runs 160 steps at two windows through the notebook layer in
process. Every figure the soak sets a target for is held to it."""

from __future__ import annotations

import pytest

from benchmarks.soak import STEP_WEIGHTS, plan, soak

SEED = 13  # its first 14 steps hold every kind: turns with and without code, cells, both compactions, a kill
STEPS = 14
FAULT_RATE = 0.3  # a short run makes few calls: a higher rate, so that faults do land on some


def test_the_short_plan_holds_every_kind_of_step():
    assert {step.kind for step in plan(SEED, STEPS)} == set(STEP_WEIGHTS)


@pytest.mark.slow
def test_a_short_soak_in_real_kernels_meets_every_target(tmp_path):
    report = soak(12_000, seed=SEED, steps=STEPS, rate=FAULT_RATE, kernel=True, folder=tmp_path)
    assert report.restarts == 1 and report.faults >= 1
    assert (report.violations, report.over_unrecovered, report.dead_ends, report.tracebacks) == (0, 0, 0, 0), report
    assert report.prompts[0] == report.prompts[1] > 0 and report.outputs[0] == report.outputs[1] > 0, report
    assert report.final_ok


def test_a_short_soak_meets_every_target_when_the_server_counts_30_percent_more(tmp_path):
    """The stand-in counts 30 % more than the client estimates (a tokenizer the client does not
    know): the client learns the server's unit from the usage and recovers from any
    prompt-too-long on the way, with no dead end and no broken rule."""
    report = soak(12_000, seed=SEED, steps=40, rate=FAULT_RATE, folder=tmp_path, unit="x1.3")
    assert report.unit == "x1.3" and report.faults >= 1
    assert (report.violations, report.over_unrecovered, report.dead_ends, report.tracebacks) == (0, 0, 0, 0), report
    assert report.prompts[0] == report.prompts[1] > 0 and report.outputs[0] == report.outputs[1] > 0, report
    assert report.final_ok
