"""Lab 5's first prediction, the ps's bytes per step, is graded as a formula: the student's
ps_bytes_per_step(model_bytes, workers), which the notebook calls for the MLP at N = 2, run by the
probe on model sizes and worker counts the notebook never had (drawn from the rubric's seed) and
judged against the reference. Copying what section 2 measures earns nothing. With one ps its value is
comm_terms' bytes, which lab5_comm_terms grades at 1, 2, 3, 5 and 8 workers: this check's cases have
other worker counts (one worker aside)."""

import pytest

from helpers import LABS, hidden_on_notebooks, hidden_verdict
from labkit.labs.lab5 import checks

NOTEBOOK = LABS / "lab5" / "05_ring_vs_ps.ipynb"
M_MLP = 23_298_088


def ps_bytes_per_step(model_bytes, workers):
    """A correct answer, written independently of labkit.labs.lab5.solution: every worker's pull and push
    through the ps, the ps's sent and received together."""
    sent = workers * model_bytes  # the pulls
    received = workers * model_bytes  # the pushes
    return sent + received


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab5_ps_bytes_per_step", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_cases_the_notebook_never_had(tmp_path):
    assert verdict(ps_bytes_per_step, tmp_path, seed=17).ok
    cases = checks.inputs_model_workers(seed=17)
    assert cases == checks.inputs_model_workers(seed=17) != checks.inputs_model_workers(seed=18)
    assert not any(c["model_bytes"] in (M_MLP, 246_824) for c in cases)  # not the MLP's M, not LeNet's
    assert [c["workers"] for c in cases].count(1) == 1 and any(c["workers"] > 8 for c in cases)
    assert not {c["workers"] for c in cases} & {2, 3, 5, 8}  # comm_terms' own counts
    sizes = [c["model_bytes"] for c in cases]
    assert min(sizes) < 1e3 and max(sizes) > 1e8 and all(s % 4 == 0 for s in sizes)


def test_comm_terms_gives_the_same_bytes_with_one_ps():
    """Why this check draws other worker counts than lab5_comm_terms: with one ps the two agree."""
    from labkit.labs.lab5.solution import comm_terms

    for M, N in ((4.0, 1), (1e6, 2), (M_MLP, 3), (12_345_678.0, 8)):
        assert comm_terms("ps", M, N)[1] == ps_bytes_per_step(M, N)


@pytest.mark.parametrize(
    "wrong",
    [
        lambda m, n: n * m,  # one direction only
        lambda m, n: 2 * m,  # a worker's bytes, not the ps's
        lambda m, n: 2 * 2 * m,  # the notebook's N = 2 whatever the count
        lambda m, n: 2 * (n - 1) * m,  # a worker's own closure left out
        lambda m, n: 4 * n * m,  # each byte counted on both ends
        lambda m, n: 2 * n * m / 4,  # weights, not bytes
    ],
)
def test_wrong_answers_fail_naming_the_case_not_the_answer(tmp_path, wrong):
    v = verdict(wrong, tmp_path, seed=17)
    assert not v.ok and "ps_bytes_per_step(model_bytes=" in v.reason and "workers=" in v.reason, v.reason
    assert "not the grader's value" in v.reason and "expected" not in v.reason, v.reason


def test_an_answer_that_is_not_a_number_fails_saying_so(tmp_path):
    with pytest.raises(TypeError, match="must return one number"):
        verdict(lambda m, n: (n * m, n * m), tmp_path, seed=17)


def test_the_notebooks_function_is_what_the_probe_takes_and_the_released_one_fails(tmp_path):
    """The reference notebook's ps_bytes_per_step passes when the probe takes it from the notebook; the
    student's copy has neither the formula nor the MLP's M, and its starting point fails."""
    student = hidden_on_notebooks("lab5_ps_bytes_per_step", NOTEBOOK, tmp_path, seed=17)
    cell = next(c for c in student.cells if c.id == "lab5-predict")
    assert "workers * model_bytes" not in cell.source and "M_mlp = 4" not in cell.source
    assert "predicted_ps_bytes_per_step = ps_bytes_per_step(M_mlp, 2)" in cell.source
