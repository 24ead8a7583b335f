"""Lab 2's section on emulated links is graded on a model: the student's worker0_share, run by the
probe on step bytes, link rates, step times and worker counts the notebook never had (drawn from the
rubric's seed), judged against the reference; and the trace the notebook compares it with is the kit's
own recording, with its provenance."""

import json

import pytest

from helpers import hidden_verdict
from labkit.experiments import traces
from labkit.labs.lab2 import experiment as sync_async
from labkit.labs.lab2 import checks
from labkit.infra import netem


def worker0_share(step_bytes, rate_bits, step_s, workers, beside_ps=1):
    """A correct answer, written independently of labkit.labs.lab2.solution: seconds per step, then rates."""
    remote_s = step_s + step_bytes * 8 / rate_bits
    total = beside_ps / step_s + (workers - beside_ps) / remote_s
    return (1 / step_s) / total


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab2_worker0_share", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_cases_the_notebook_never_had(tmp_path):
    assert verdict(worker0_share, tmp_path, seed=7).ok
    cases = checks.inputs_worker0_share(seed=7)
    assert cases == checks.inputs_worker0_share(seed=7) != checks.inputs_worker0_share(seed=8)
    assert any(c["beside_ps"] > 1 for c in cases) and len({c["workers"] for c in cases}) > 3
    assert not any(c["step_bytes"] == 2 * sync_async.MODEL_BYTES for c in cases)
    link_over_step = [8 * c["step_bytes"] / c["rate_bits"] / c["step_s"] for c in cases]
    assert min(link_over_step) < 0.1 and max(link_over_step) > 10  # the link negligible, and most of a step


@pytest.mark.parametrize(
    "wrong",
    [
        # the link's time in bytes per bit: a rate in bits read as bytes per second
        lambda b, r, s, n, k=1: worker0_share(b / 8, r, s, n, k),
        # every worker but worker 0 remote, whoever shares the ps's node
        lambda b, r, s, n, k=1: worker0_share(b, r, s, n, 1),
        # a remote step costs the link alone, not its compute as well
        lambda b, r, s, n, k=1: (1 / s) / (k / s + (n - k) * r / (8 * b)),
        # worker 0's steps over the remote workers', not over everyone's
        lambda b, r, s, n, k=1: (1 / s) / max((n - k) / (s + 8 * b / r), 1e-300),
    ],
)
def test_wrong_answers_fail_naming_the_case_not_the_answer(tmp_path, wrong):
    v = verdict(wrong, tmp_path, seed=7)
    assert (
        not v.ok
        and "not the grader's" in v.reason
        and "expected" not in v.reason
        and "worker0_share(step_bytes=" in v.reason
    ), v.reason


def test_an_answer_that_is_not_a_number_fails_saying_so(tmp_path):
    with pytest.raises(TypeError, match="must return one number"):
        verdict(lambda b, r, s, n, k=1: {"worker:0": 0.5}, tmp_path, seed=7)


def test_the_shipped_trace_is_a_recording_with_its_provenance_and_the_model_reads_it():
    frame, prov = traces.frame("lab2_emulated_shares")
    assert prov["recorded_by"].startswith(
        ("labkit.experiments.sync_async.emulated_shares(", "labkit.labs.lab2.experiment.emulated_shares(")
    )
    assert len(prov["labkit_commit"]) == 40 and prov["tensorflow"] and prov["cores"] >= 1
    assert "/tmp/" not in json.dumps(traces.load("lab2_emulated_shares"))
    # the notebook's comparison: worker 0's own step time, the rest from the link (section 14)
    for link, run in frame.groupby("link"):
        w0 = run[run["worker"] == "worker:0"].iloc[0]
        beside = int((run["node"] == w0["node"]).sum())
        assert beside == 1 and len(run) == 3
        rate = netem.parse_link(link).rate_bits
        predicted = worker0_share(2 * sync_async.MODEL_BYTES, rate, 1 / w0["steps_per_s"], len(run), beside)
        assert predicted == pytest.approx(w0["share"], abs=0.05), (link, predicted, w0["share"])
