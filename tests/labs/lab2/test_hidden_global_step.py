"""Lab 2's prediction of the ps's global step is graded as a formula: the student's global_step(mode,
workers, local_steps), which the notebook calls for its own cluster, run by the probe on worker and step
counts the notebook never had (drawn from the rubric's seed) and judged against the reference. Copying
the count the next cells print earns nothing."""

import pytest

from helpers import LABS, hidden_on_notebooks, hidden_verdict
from labkit.labs.lab2 import checks

NOTEBOOK = LABS / "lab2" / "02_sync_vs_async_sgd.ipynb"


def global_step(mode, workers, local_steps):
    """A correct answer, written independently of labkit.labs.lab2.solution: updates per worker step."""
    updates_per_worker_step = {"async": 1, "sync": 1 / workers}[mode]
    return round(workers * local_steps * updates_per_worker_step)


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab2_global_step", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_cases_the_notebook_never_had(tmp_path):
    assert verdict(global_step, tmp_path, seed=13).ok
    cases = checks.inputs_global_step(seed=13)
    assert (
        cases == checks.inputs_global_step(seed=13) != checks.inputs_global_step(seed=14)
    )  # the rubric's seed decides
    assert {c["mode"] for c in cases} == {"sync", "async"}
    for mode in ("sync", "async"):  # one worker, and one step, in each mode
        assert any(c["mode"] == mode and c["workers"] == 1 for c in cases)
        assert any(c["mode"] == mode and c["local_steps"] == 1 and c["workers"] > 1 for c in cases)
    assert not any((c["workers"], c["local_steps"]) == (3, 100) for c in cases)  # not the notebook's cluster2, K
    assert len({c["workers"] for c in cases}) > 10


@pytest.mark.parametrize(
    "wrong",
    [
        # the modes swapped
        lambda mode, n, k: global_step("async" if mode == "sync" else "sync", n, k),
        # one update per worker step in both modes
        lambda mode, n, k: n * k,
        # the sync round counted per worker, not per round
        lambda mode, n, k: k // n if mode == "sync" else n * k,
        # the chief's steps left out of the async count
        lambda mode, n, k: k if mode == "sync" else (n - 1) * k,
        # the notebook's own cluster whatever the arguments (cluster2: 3 workers, 100 steps each)
        lambda mode, n, k: 100 if mode == "sync" else 300,
    ],
)
def test_wrong_answers_fail_naming_the_case_not_the_answer(tmp_path, wrong):
    v = verdict(wrong, tmp_path, seed=13)
    assert not v.ok and "global_step('" in v.reason and "workers=" in v.reason, v.reason
    assert "not the grader's value" in v.reason and "expected" not in v.reason, v.reason


def test_an_answer_that_is_not_a_number_fails_saying_so(tmp_path):
    with pytest.raises(TypeError, match="must return one number"):
        verdict(lambda mode, n, k: {"sync": k, "async": n * k}, tmp_path, seed=13)


def test_the_notebooks_function_is_what_the_probe_takes_and_the_released_one_fails(tmp_path):
    """The reference notebook's global_step passes when the probe takes it from the notebook; the
    student's copy has no formula in it, and its starting point fails the check."""
    student = hidden_on_notebooks("lab2_global_step", NOTEBOOK, tmp_path, seed=13)
    cell = next(c for c in student.cells if c.id == "lab2-predict-k")
    assert "workers * local_steps" not in cell.source and "predicted_global_step = {mode: global_step(" in cell.source
