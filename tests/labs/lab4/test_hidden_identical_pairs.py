"""Lab 4's prediction of the configurations that compute the same SGD is graded as a formula: the
student's identical_pairs(workers, batch_sizes), which the notebook calls for its own grid, run by the
probe on grids the notebook never had (drawn from the rubric's seed) and judged against the reference.
Copying the count section 5 prints earns nothing."""

import itertools

import pytest

from helpers import LABS, hidden_on_notebooks, hidden_verdict
from labkit.labs.lab4 import checks

NOTEBOOK = LABS / "lab4" / "04_lenet_batch_sweep.ipynb"


def identical_pairs(workers, batch_sizes):
    """A correct answer, written independently of labkit.labs.lab4.solution: every pair of the grid's
    configurations, counted when their global batches agree."""
    grid = [(w, b) for w in workers for b in batch_sizes]
    return sum(a[0] * a[1] == b[0] * b[1] for a, b in itertools.combinations(grid, 2))


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab4_identical_pairs", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_grids_the_notebook_never_had(tmp_path):
    assert verdict(identical_pairs, tmp_path, seed=21).ok
    cases = checks.inputs_identical_pairs(seed=21)
    assert cases == checks.inputs_identical_pairs(seed=21) != checks.inputs_identical_pairs(seed=22)
    grids = [(sorted(c["workers"]), sorted(c["batch_sizes"])) for c in cases]
    assert ([1, 2, 3], [50, 100, 200]) not in grids and ([1, 2, 3], [32, 64, 128, 256]) not in grids
    assert any(len(c["workers"]) == 1 for c in cases) and any(len(c["batch_sizes"]) == 1 for c in cases)
    counts = [identical_pairs(**c) for c in cases]
    assert 0 in counts and max(counts) >= 5 and len(set(counts)) >= 4
    # three or more configurations to one global batch: pairs, not configurations or groups
    assert any(max(_groups(c["workers"], c["batch_sizes"])) >= 3 for c in cases)


def _groups(workers, batch_sizes):
    from collections import Counter

    return Counter(w * b for w in workers for b in batch_sizes).values()


@pytest.mark.parametrize(
    "wrong",
    [
        # configurations that share a global batch with another, not pairs
        lambda w, b: sum(k for k in _groups(w, b) if k > 1),
        # global batches shared by several configurations, not pairs
        lambda w, b: sum(k > 1 for k in _groups(w, b)),
        # ordered pairs: each pair counted twice
        lambda w, b: sum(k * (k - 1) for k in _groups(w, b)),
        # the same per-worker batch, not the same global batch
        lambda w, b: len(b) * len(w) * (len(w) - 1) // 2,
        # the notebook's own grid whatever the arguments
        lambda w, b: 1,
    ],
)
def test_wrong_answers_fail_naming_the_grid_not_the_answer(tmp_path, wrong):
    v = verdict(wrong, tmp_path, seed=21)
    assert not v.ok and "identical_pairs(workers=[" in v.reason and "batch_sizes=[" in v.reason, v.reason
    assert "not the grader's count" in v.reason and "expected" not in v.reason, v.reason


def test_an_answer_that_is_not_a_number_fails_saying_so(tmp_path):
    with pytest.raises(TypeError, match="must return one number"):
        verdict(lambda w, b: [(1, 100), (2, 50)], tmp_path, seed=21)


def test_the_notebooks_function_is_what_the_probe_takes_and_the_released_one_fails(tmp_path):
    """The reference notebook's identical_pairs (with the Counter its imports cell brings) passes when
    the probe takes it from the notebook; the student's copy has no formula in it, and fails."""
    student = hidden_on_notebooks("lab4_identical_pairs", NOTEBOOK, tmp_path, seed=21)
    cell = next(c for c in student.cells if c.id == "lab4-predict")
    assert "Counter(" not in cell.source and "k * (k - 1)" not in cell.source
    assert "predicted_identical_pairs = identical_pairs(workers, batch_sizes)" in cell.source
