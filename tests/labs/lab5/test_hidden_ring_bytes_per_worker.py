"""Lab 5's second prediction, a ring worker's bytes per step at the largest N, is graded as a formula:
the student's ring_bytes_per_worker(model_bytes, workers), which the notebook calls for the MLP at the
largest N, run by the probe on model sizes and worker counts the notebook never had (drawn from the
rubric's seed) and judged against the reference. Copying what the next cell measures earns nothing. Its
value is comm_terms' ring bytes, which lab5_comm_terms grades at 1, 2, 3, 5 and 8 workers: this check's
cases have other worker counts (one worker aside)."""

import pytest

from helpers import LABS, hidden_on_notebooks, hidden_verdict
from labkit.labs.lab5 import checks

NOTEBOOK = LABS / "lab5" / "05_ring_vs_ps.ipynb"


def ring_bytes_per_worker(model_bytes, workers):
    """A correct answer, written independently of labkit.labs.lab5.solution: the reduce-scatter's and the
    all-gather's rounds, one chunk of the model each."""
    chunk = model_bytes / workers
    rounds = 2 * (workers - 1)
    return rounds * chunk


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab5_ring_bytes_per_worker", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_cases_the_notebook_never_had(tmp_path):
    assert verdict(ring_bytes_per_worker, tmp_path, seed=23).ok
    cases = checks.inputs_model_workers(seed=23)
    assert not {c["workers"] for c in cases} & {2, 3, 5, 8} and any(c["workers"] == 1 for c in cases)


def test_comm_terms_gives_the_same_bytes():
    """Why this check draws other worker counts than lab5_comm_terms: the two agree."""
    from labkit.labs.lab5.solution import comm_terms

    for M, N in ((4.0, 1), (1e6, 2), (23_298_088.0, 3), (12_345_678.0, 8)):
        assert comm_terms("ring", M, N)[1] == pytest.approx(ring_bytes_per_worker(M, N), rel=1e-12)


@pytest.mark.parametrize(
    "wrong",
    [
        lambda m, n: 2 * (n - 1) * m,  # the whole model each round, not a chunk
        lambda m, n: (n - 1) / n * m,  # the reduce-scatter alone
        lambda m, n: 4 * (n - 1) / n * m,  # sent and received
        lambda m, n: 2 * m,  # the many-worker limit at every N
        lambda m, n: 4 / 3 * m,  # the notebook's N = 3 whatever the count
        lambda m, n: m * n / 2,  # the N = 2 figure scaled with N
        lambda m, n: 2 * (n - 1) / n * m if n > 1 else m,  # one worker still sends
    ],
)
def test_wrong_answers_fail_naming_the_case_not_the_answer(tmp_path, wrong):
    v = verdict(wrong, tmp_path, seed=23)
    assert not v.ok and "ring_bytes_per_worker(model_bytes=" in v.reason and "workers=" in v.reason, v.reason
    assert "not the grader's value" in v.reason and "expected" not in v.reason, v.reason


def test_an_answer_that_is_not_a_number_fails_saying_so(tmp_path):
    with pytest.raises(TypeError, match="must return one number"):
        verdict(lambda m, n: [m / n] * (2 * (n - 1)), tmp_path, seed=23)


def test_the_notebooks_function_is_what_the_probe_takes_and_the_released_one_fails(tmp_path):
    """The reference notebook's ring_bytes_per_worker passes when the probe takes it from the notebook;
    the student's copy has no formula in it, and its starting point fails."""
    student = hidden_on_notebooks("lab5_ring_bytes_per_worker", NOTEBOOK, tmp_path, seed=23)
    cell = next(c for c in student.cells if c.id == "lab5-predict-ring")
    assert "(workers - 1) / workers" not in cell.source
    assert "predicted_ring_bytes_per_worker = ring_bytes_per_worker(M_mlp, N_max)" in cell.source
