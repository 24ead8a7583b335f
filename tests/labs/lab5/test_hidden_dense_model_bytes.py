"""Lab 5's MLP size M is graded as a formula: the student's dense_model_bytes(units), which the
notebook calls for the MLP (784-2048-2048-10) to predict the ps's bytes, run by the probe on
architectures the notebook never had (drawn from the rubric's seed) and judged against the
reference. Typing the MLP's M as a number earns nothing."""

import pytest

from helpers import LABS, hidden_on_notebooks, hidden_verdict
from labkit.labs.lab5 import checks

NOTEBOOK = LABS / "lab5" / "05_ring_vs_ps.ipynb"
M_MLP = 23_298_088


def dense_model_bytes(units):
    """A correct answer, written independently of labkit.labs.lab5.solution: layer by layer, the weight
    matrix and then the bias, each value a float32."""
    total = 0
    for i in range(1, len(units)):
        total += units[i - 1] * units[i]  # the weights
        total += units[i]  # the bias
    return total * 4


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab5_dense_model_bytes", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_architectures_the_notebook_never_had(tmp_path):
    assert dense_model_bytes([784, 2048, 2048, 10]) == M_MLP  # the notebook's M
    assert verdict(dense_model_bytes, tmp_path, seed=19).ok
    cases = checks.inputs_dense_models(seed=19)
    assert cases == checks.inputs_dense_models(seed=19) != checks.inputs_dense_models(seed=20)
    assert [784, 2048, 2048, 10] not in [c["units"] for c in cases] and {"units": [1, 1]} in cases
    assert {len(c["units"]) for c in cases} >= {2, 4, 7}  # one layer to six


@pytest.mark.parametrize(
    "wrong",
    [
        lambda u: 4 * sum(a * b for a, b in zip(u, u[1:])),  # no biases
        lambda u: sum(a * b + b for a, b in zip(u, u[1:])),  # values, not bytes
        lambda u: 4 * sum(a * b + a for a, b in zip(u, u[1:])),  # a bias per input
        lambda u: 4 * (sum(a * b + b for a, b in zip(u, u[1:])) - u[-1]),  # the output layer's bias left out
        lambda u: 8 * sum(a * b + b for a, b in zip(u, u[1:])),  # float64
        lambda u: M_MLP,  # the notebook's MLP whatever the architecture
    ],
)
def test_wrong_answers_fail_naming_the_case_not_the_answer(tmp_path, wrong):
    v = verdict(wrong, tmp_path, seed=19)
    assert not v.ok and "dense_model_bytes(units=[" in v.reason and "not the grader's value" in v.reason, v.reason


def test_an_answer_that_changes_its_argument_is_still_judged_on_the_grader_s_case(tmp_path):
    def pops(units):
        out = dense_model_bytes(units)
        units.clear()  # the probe passes each call a list of its own
        return out

    assert verdict(pops, tmp_path, seed=19).ok


def test_the_notebooks_function_is_what_the_probe_takes_and_the_released_one_fails(tmp_path):
    """The reference notebook's dense_model_bytes passes when the probe takes it from the notebook; the
    student's copy has neither the formula nor the MLP's M as a number, and its starting point fails."""
    student = hidden_on_notebooks("lab5_dense_model_bytes", NOTEBOOK, tmp_path, seed=19)
    cell = next(c for c in student.cells if c.id == "lab5-predict")
    assert "n_in * n_out" not in cell.source and "23,298,088" not in cell.source and "M_mlp = 4" not in cell.source
    assert "M_mlp = dense_model_bytes([784, 2048, 2048, 10])" in cell.source
