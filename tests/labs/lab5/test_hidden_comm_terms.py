"""Lab 5's hidden check: the student's comm_terms, run by the probe on model sizes, worker and ps
counts and shard splits the notebook never had, and judged against the reference (no cluster, no
sandbox: the two halves called directly, as the grader's processes call them)."""

import pytest

from helpers import hidden_verdict
from labkit.labs.lab5 import checks


def comm_terms(arch, M, N, n_ps=1, shards=None):
    """A correct answer, written independently of labkit.labs.lab5.solution."""
    if arch == "ring":
        return 2 * (N - 1), 2 * (N - 1) * M / N
    busiest_ps = 2 * N * (max(shards) if shards else M / n_ps)
    return 2, max(busiest_ps, 2 * M)


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab5_comm_terms", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_cases_the_run_never_had(tmp_path):
    assert verdict(comm_terms, tmp_path).ok
    cases = checks.inputs_comm_terms(seed=3)
    assert cases == checks.inputs_comm_terms(seed=3) != checks.inputs_comm_terms(seed=4)  # the rubric's seed decides
    assert any(c["arch"] == "ps" and c["n_ps"] > c["N"] for c in cases)  # more ps than workers
    assert any(c["shards"] for c in cases)  # uneven splits


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (
            lambda arch, M, N, n_ps=1, shards=None: (
                (comm_terms(arch, M, N, n_ps, shards)[0], 2 * comm_terms(arch, M, N)[1])
                if arch == "ring"
                else comm_terms(arch, M, N, n_ps, shards)
            ),
            "'ring'",
        ),  # both of the ring's directions
        (lambda arch, M, N, n_ps=1, shards=None: comm_terms(arch, M, N, n_ps, None), "shards="),  # ignores the split
        (
            lambda arch, M, N, n_ps=1, shards=None: (2, 2 * N * M / n_ps) if arch == "ps" else comm_terms(arch, M, N),
            "N=1, n_ps=2",
        ),  # forgets the workers' own links
        (lambda arch, M, N, n_ps=1, shards=None: (N, comm_terms(arch, M, N, n_ps, shards)[1]), "is (1,"),  # messages
        (lambda arch, M, N, n_ps=1, shards=None: 42, "must return (messages, bytes)"),
    ],
)
def test_wrong_answers_fail_with_a_reason(tmp_path, wrong, reason):
    try:
        v = verdict(wrong, tmp_path)
    except TypeError as e:  # the probe refuses a result that is not a pair; the grader reports it
        assert reason in str(e)
        return
    assert not v.ok and reason in v.reason, v.reason
