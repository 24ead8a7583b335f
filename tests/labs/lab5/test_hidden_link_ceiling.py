"""Lab 5's section on emulated links is graded on a model: the student's link_ceiling, run by the
probe on batches, model sizes, worker counts and link rates the notebook never had (drawn from the
rubric's seed), judged against the reference; and the trace the notebook compares it with is the
kit's own recording, with its provenance."""

import json
import math

import pytest

from helpers import hidden_verdict
from labkit.experiments import traces
from labkit.labs.lab5 import checks
from labkit.infra import netem


def link_ceiling(arch, batch, model_bytes, workers, rate_bits):
    """A correct answer, written independently of labkit.labs.lab5.solution: seconds per step on the
    busiest link, then the step's images over them."""
    if arch == "ring":
        if workers == 1:
            return math.inf
        seconds = 2 * (workers - 1) * model_bytes * 8 / (workers * rate_bits)
    else:
        seconds = 2 * workers * model_bytes * 8 / rate_bits
    return batch * workers / seconds


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab5_link_ceiling", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_cases_the_notebook_never_had(tmp_path):
    assert verdict(link_ceiling, tmp_path, seed=19).ok
    cases = checks.inputs_link_ceiling(seed=19)
    assert cases == checks.inputs_link_ceiling(seed=19) != checks.inputs_link_ceiling(seed=20)
    assert {c["arch"] for c in cases} == {"ps", "ring"} and len({c["workers"] for c in cases}) > 3
    assert any(c["arch"] == "ring" and c["workers"] == 1 for c in cases)
    assert not any(c["model_bytes"] in (6_860_968, 23_298_088) for c in cases)


@pytest.mark.parametrize(
    "wrong",
    [
        # one worker's batch per step, not the global batch of N
        lambda a, b, m, n, r: link_ceiling(a, b, m, n, r) / n,
        # the PS's pull and push overlapping, as the ring's directions do
        lambda a, b, m, n, r: link_ceiling(a, b, m, n, r) * (2 if a == "ps" else 1),
        # the ring's 2(N-1) chunks as whole models
        lambda a, b, m, n, r: link_ceiling(a, b, m * (n if a == "ring" else 1), n, r),
        # the rate in bits read as bytes per second
        lambda a, b, m, n, r: link_ceiling(a, b, m, n, 8 * r),
        # the ring at N = 1 given a number: no byte on the path is no ceiling
        lambda a, b, m, n, r: 0.0 if (a, n) == ("ring", 1) else link_ceiling(a, b, m, n, r),
    ],
)
def test_wrong_answers_fail_naming_the_case_not_the_answer(tmp_path, wrong):
    v = verdict(wrong, tmp_path, seed=19)
    assert not v.ok and "not the grader's" in v.reason and "expected" not in v.reason and "link_ceiling(" in v.reason, (
        v.reason
    )


def test_an_answer_that_is_not_a_number_fails_saying_so(tmp_path):
    with pytest.raises(TypeError, match="must return one number"):
        verdict(lambda a, b, m, n, r: (a, link_ceiling(a, b, m, n, r)), tmp_path, seed=19)


def test_the_shipped_trace_is_a_recording_with_its_provenance_and_the_model_reads_it():
    data = traces.load("lab5_emulated")
    prov = data["provenance"]
    assert prov["recorded_by"].startswith(
        ("labkit.experiments.ring_vs_ps.emulated(", "labkit.labs.lab5.experiment.emulated(")
    )
    assert len(prov["labkit_commit"]) == 40 and prov["tensorflow"] and prov["cores"] >= 1
    assert "/tmp/" not in json.dumps(data)
    # the notebook's comparison: the PS at its link's ceiling from N = 2 on, the ring well below its own
    rate = netem.parse_link(data["link_name"]).rate_bits
    for row in data["frames"]["table"]:
        ceiling = link_ceiling(row["arch"], row["batch"], row["model_bytes"], row["workers"], rate)
        if row["arch"] == "ps" and row["workers"] > 1:
            assert 0.9 < row["images_per_s"] / ceiling <= 1.0, row
        elif row["arch"] == "ring" and row["workers"] > 1:
            assert row["images_per_s"] / ceiling < 0.8, row
