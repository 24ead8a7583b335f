"""Lab 3's section on emulated links is graded on a model: the student's ps_link_shares, run by the
probe on feature counts, steps per worker, windows, link rates and placements the notebook never had
(drawn from the rubric's seed), judged against the reference; and the trace the notebook compares it
with is the kit's own recording, with its provenance."""

import json

import pytest

from helpers import hidden_verdict
from labkit.experiments import traces
from labkit.labs.lab3 import checks
from labkit.infra import netem


def ps_link_shares(num_features, local_steps, window_s, rate_bits, beside_ps=1):
    """A correct answer, written independently of labkit.labs.lab3.solution: bytes each way, over the
    bytes the link carries each way in the window."""
    remote = [s for i, s in enumerate(local_steps) if i >= beside_ps]
    per_direction = rate_bits * window_s / 8
    return sum(remote) * num_features * (8 + 4) / per_direction, sum(remote) * num_features * 4 / per_direction


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab3_ps_link_shares", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_cases_the_notebook_never_had(tmp_path):
    assert verdict(ps_link_shares, tmp_path, seed=17).ok
    cases = checks.inputs_ps_link_shares(seed=17)
    assert cases == checks.inputs_ps_link_shares(seed=17) != checks.inputs_ps_link_shares(seed=18)
    assert not any(c["num_features"] == 1_000_000 for c in cases)
    assert {c["beside_ps"] for c in cases} >= {0, 1} and any(c["beside_ps"] > 1 for c in cases)
    assert any(len(set(c["local_steps"])) > 1 for c in cases)  # async-like: each worker its own steps


@pytest.mark.parametrize(
    "wrong",
    [
        # every worker's steps cross the link, worker 0's too
        lambda f, s, w, r, k=1: ps_link_shares(f, s, w, r, 0),
        # report 001's 4 bytes per feature each way: the gradient's values alone, no indices
        lambda f, s, w, r, k=1: (ps_link_shares(f, s, w, r, k)[1],) * 2,
        # the directions swapped: the pull counted into the ps
        lambda f, s, w, r, k=1: ps_link_shares(f, s, w, r, k)[::-1],
        # the rate in bits read as bytes per second
        lambda f, s, w, r, k=1: ps_link_shares(f, s, w, 8 * r, k),
    ],
)
def test_wrong_answers_fail_naming_the_case_not_the_answer(tmp_path, wrong):
    v = verdict(wrong, tmp_path, seed=17)
    assert (
        not v.ok
        and "not the grader's" in v.reason
        and "expected" not in v.reason
        and "ps_link_shares(num_features=" in v.reason
    ), v.reason


def test_an_answer_that_is_not_two_numbers_fails_saying_so(tmp_path):
    with pytest.raises(TypeError, match="must return two numbers"):
        verdict(lambda f, s, w, r, k=1: sum(ps_link_shares(f, s, w, r, k)), tmp_path, seed=17)


def test_the_shipped_trace_is_a_recording_with_its_provenance_and_the_model_reads_it():
    frame, prov = traces.frame("lab3_emulated_dense")
    assert prov["recorded_by"].startswith(
        ("labkit.experiments.sparse_lr.emulated_dense(", "labkit.labs.lab3.experiment.emulated_dense(")
    )
    assert "'num_features': 1000000" in prov["recorded_by"]  # the F the notebook's comparison uses
    assert len(prov["labkit_commit"]) == 40 and prov["tensorflow"] and prov["cores"] >= 1
    assert "/tmp/" not in json.dumps(traces.load("lab3_emulated_dense"))
    # the notebook's comparison: each run's window from its time per global step, both directions
    for _, row in frame.iterrows():
        steps = [int(s) for s in row.local_steps.split(",")]
        global_steps = max(steps) if row.run.startswith("sync") else sum(steps)
        window = row.s_per_1k_iterations / 1e3 * global_steps
        into, out = ps_link_shares(1_000_000, steps, window, netem.parse_link(row.link).rate_bits)
        assert into == pytest.approx(row.ps_link_in, rel=0.1) and out == pytest.approx(row.ps_link_out, rel=0.1), row
