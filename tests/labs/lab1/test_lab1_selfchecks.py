"""Lab 1's self-checks fail the answers students get wrong, pass the reference, and say which property
failed without a value; ``make check`` reports each failed self-check, and says what it does not check.

The property checks run on a synthetic test set (NumPy only); the sgd_step check needs TensorFlow,
and the end-to-end ``make check`` of a wrong Lab 1 runs the notebook at the test size."""

from __future__ import annotations

import math
import re

import nbformat
import numpy as np
import pytest

import labkit.labs.lab1.selfcheck as lr_checks
from _check_report import _executed, _report, make_check_report
from labkit.learning import lr
from labkit.notebook import checking
from labkit.notebook import verdicts as selfchecks
from labkit.labs.lab1 import solution as lab1

REPO = __import__("pathlib").Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "labkit" / "labs" / "lab1" / "01_single_node_lr.ipynb"


@pytest.fixture(scope="module")
def readings_data():
    """Weights and a test set they get about 88% right, as a Core run's final weights do."""
    rng = np.random.default_rng(3)
    x = rng.random((3000, lr.NUM_FEATURES)).astype(np.float32)
    W = rng.normal(0, 0.05, (lr.NUM_FEATURES, lr.NUM_CLASSES)).astype(np.float32)
    b = np.zeros(lr.NUM_CLASSES, np.float32)
    predicted = (x @ W + b).argmax(axis=1)
    y = np.where(rng.random(len(x)) < 0.88, predicted, (predicted + 1) % lr.NUM_CLASSES).astype(np.int32)
    return W, b, x, y


def _one_reading_int(q, n, batch_size=50, level=0.97):
    """The wrong Lab 1's: one reading's chance, its count cut with int instead of ceil."""
    need = int(level * batch_size)
    return sum(math.comb(batch_size, k) * q**k * (1 - q) ** (batch_size - k) for k in range(need, batch_size + 1))


def _best_of_n_int(q, n, batch_size=50, level=0.97):
    return 1 - (1 - _one_reading_int(q, 1, batch_size, level)) ** n


def _one_reading(q, n, batch_size=50, level=0.97):
    return lab1.chance_best_reading(q, 1, batch_size, level)


def _every_reading(q, n, batch_size=50, level=0.97):
    return lab1.chance_best_reading(q, 1, batch_size, level) ** n  # all n readings at the level, not the best


def _misses(q, n, batch_size=50, level=0.97):
    return 1 - lab1.chance_best_reading(q, n, batch_size, level)  # the chance that the best misses the level


def _mean_of_readings(q, n, batch_size=50, level=0.97):
    return float(q >= level)  # one reading's expected accuracy against the level: no chance at all


def _no_value(text: str, *values) -> None:
    """A message names properties, never a number a function gave or should give."""
    assert not re.search(r"\d\.\d{2,}", text), text
    for v in values:
        assert f"{v:.3g}" not in text and f"{v:.4f}" not in text, (v, text)


def test_the_reference_chance_best_reading_passes_its_self_check(readings_data):
    v = lr_checks.chance_best_reading(lab1.chance_best_reading, *readings_data)
    assert v.passed, v.failed
    assert len(v.checked) == 7 and "ok: chance_best_reading passes its self-check" in selfchecks.bundle(v)["text/plain"]


@pytest.mark.parametrize(
    "wrong, properties",
    [
        (_one_reading_int, ["binomial tail", "grows with n", "simulation"]),  # the wrong Lab 1's
        (_best_of_n_int, ["binomial tail", "simulation"]),  # int instead of ceil
        (_one_reading, ["grows with n", "simulation"]),  # one reading instead of the best of n
        (_every_reading, ["grows with n", "simulation"]),
        (_misses, ["binomial tail", "grows with n", "grows with q"]),
        (_mean_of_readings, ["binomial tail"]),
    ],
)
def test_chance_best_reading_self_check_fails_a_wrong_model(readings_data, wrong, properties):
    v = lr_checks.chance_best_reading(wrong, *readings_data)
    assert not v.passed
    for p in properties:
        assert any(p in f for f in v.failed), (p, v.failed)
    text = selfchecks.bundle(v)["text/plain"]
    assert text.startswith("SELF-CHECK FAILED: chance_best_reading fails its self-check on: "), text
    q = lr.evaluate(*readings_data)[0]
    _no_value(text, wrong(q, 1, 50, 0.965), lab1.chance_best_reading(q, 1, 50, 0.965))


def test_chance_best_reading_self_check_names_an_error_not_a_traceback(readings_data):
    v = lr_checks.chance_best_reading(lambda q, n, batch_size, level: q / (1 - level) / 0, *readings_data)
    assert v.failed == ["a number for every case tried, without an error (it raised ZeroDivisionError)"]
    v = lr_checks.chance_best_reading(lambda q, n, batch_size, level: 1.5, *readings_data)
    assert v.failed == ["a probability: a number from 0 to 1"]


def _start(seed: int = 0):
    """The test loss of lr.train_core's seeded start on a synthetic test set, as a run measures it."""
    rng = np.random.default_rng(seed)
    x = rng.random((2000, lr.NUM_FEATURES)).astype(np.float32)
    y = rng.integers(0, lr.NUM_CLASSES, len(x)).astype(np.int32)
    W, b = lr.init_weights(np.random.default_rng(seed))
    return lr.evaluate(W, b, x, y)[1], x


def test_initial_test_loss_self_check_passes_the_reference_and_fails_wrong_formulas():
    measured, x = _start()
    assert lr_checks.initial_test_loss(lambda k: math.log(k), measured, x).passed
    wrong = {
        "one over K (the wrong Lab 1's)": lambda k: 1 / k,
        "a sum over the test images, not a mean": lambda k: len(x) * math.log(k),
        "log base 2": math.log2,
        "an accuracy, not a loss": lambda k: 1 - 1 / k,
        "the loss of a confident wrong guess": lambda k: math.log(k) + 2,
    }
    for name, fn in wrong.items():
        v = lr_checks.initial_test_loss(fn, measured, x)
        assert not v.passed and any("mean cross-entropy of weights drawn near zero" in f for f in v.failed), name
        text = selfchecks.bundle(v)["text/plain"]
        assert text.startswith("SELF-CHECK FAILED: initial_test_loss fails its self-check on: "), text
        _no_value(text, fn(10), measured, math.log(10))
    assert "a loss that grows with the number of classes" in lr_checks.initial_test_loss(lambda k: 1 / k).failed
    # right at every count but 10, where the run measured otherwise: only the run's own case fails
    v = lr_checks.initial_test_loss(lambda k: math.log(k), 1.5 * measured, x)
    assert v.failed == ["at 10 classes, the test loss your Core run measured before its first step (within 5%)"]


@pytest.mark.parametrize("size, passed", [(31, True), (50, False), (62, False), (100, False), (30, False), (0, False)])
def test_reading_size_self_check_wants_the_smallest_size_that_prints_both(size, passed):
    v = lr_checks.reading_size(size)
    assert v.passed is passed, v.failed
    if size == 50:  # the reports' batch: no count of 50 prints as 97%
        assert v.failed[0] == "a size on which one reading prints as 94% and another as 97%"
    if size == 62:  # prints both, but 31 does too
        assert v.failed == ["the smallest size that prints both"]
    for wrong in ("31", 31.0, None):
        assert lr_checks.reading_size(wrong).failed == ["a whole number of images, at least 1"]


def test_the_audits_q_self_check_wants_the_runs_own_final_accuracy(readings_data):
    q = lr.evaluate(*readings_data)[0]
    assert lr_checks.audit_accuracy(q, *readings_data).passed
    for wrong in (100 * q, q + 0.01, 1 - q, "q", None):  # a percent, another epoch's, the error rate
        v = lr_checks.audit_accuracy(wrong, *readings_data)
        assert v.failed == ["your final Core weights' accuracy on the full test set, as a share from 0 to 1"], wrong


def test_a_failed_self_check_raises_only_where_someone_reads_it(monkeypatch, capsys):
    """Live (JupyterLab) it stops Run All at the function to fix; headless (make check, the grader)
    it shows its verdict and the run goes on, as the grader's run does."""
    monkeypatch.setenv("LABKIT_LIVE", "0")
    assert not lr_checks.reading_size(50).passed
    assert "SELF-CHECK FAILED: reading_size fails its self-check on: " in capsys.readouterr().out
    monkeypatch.setenv("LABKIT_LIVE", "1")
    with pytest.raises(selfchecks.SelfCheckFailed, match="^reading_size fails its self-check on: a size on which"):
        lr_checks.reading_size(50)
    assert lr_checks.reading_size(31).passed


# ---------------------------------------------------------------------------------------------
# make check's report


@pytest.fixture(scope="module")
def lab1_public():
    from _check_report import public_lab

    return public_lab("lab1")


def _half_right():
    """Weights that get exactly half of a test set right."""
    x = np.eye(lr.NUM_FEATURES, dtype=np.float32)[:20]
    W = np.zeros((lr.NUM_FEATURES, lr.NUM_CLASSES), np.float32)
    W[np.arange(20), 0] = 1
    return W, np.zeros(lr.NUM_CLASSES, np.float32), x, np.asarray([0, 1] * 10, np.int32)


def test_make_check_names_each_failed_self_check_by_function_and_property(lab1_public, readings_data, tmp_path):
    """The wrong Lab 1 (one reading with int, reading_size = 50, initial_test_loss = 1/K): every
    self-check that fails is named with its properties, and no value; the run itself went on."""
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    measured, x = _start()
    verdicts = {
        "lab1-08": [selfchecks.Verdict("sgd_step", ["one step of plain gradient descent"])],
        "lab1-predict-check": [lr_checks.initial_test_loss(lambda k: 1 / k, measured, x)],
        "lab1-audit-selfcheck": [lr_checks.chance_best_reading(_one_reading_int, *readings_data)],
        "lab1-audit-apply": [lr_checks.reading_size(50)],
    }
    run, (exercises, checks) = _report(lab1_public, nb, _executed(nb, verdicts), tmp_path)
    assert run.status == "ok" and exercises.status == "ok"
    assert checks.status == "FAIL" and checks.text.startswith("1 of 4 passed: "), checks.text
    cell = {c.id: i + 1 for i, c in enumerate(nb.cells)}
    for name, where, prop in (
        ("initial_test_loss", "lab1-predict-check", "a loss that grows with the number of classes"),
        ("chance_best_reading", "lab1-audit-selfcheck", "at n = 1, one reading's chance"),
        ("reading_size", "lab1-audit-apply", "the smallest size that prints both"),
    ):
        assert f"{name} fails its self-check (cell {cell[where]}) on: " in checks.text, name
        assert prop in checks.text, prop
        assert f"fix {name}" in " ".join(checks.todo) and f"cell {cell[where]}" in " ".join(checks.todo)
    assert "sgd_step fails" not in checks.text
    _no_value(checks.text, measured, 1 / 10)
    steps = checking.next_steps([exercises, checks], run)
    assert steps[0].startswith("fix initial_test_loss until its self-check, cell ")


def test_make_check_passes_the_reference_and_says_what_it_checked_and_what_not(lab1_public, readings_data, tmp_path):
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    measured, x = _start()
    verdicts = {
        "lab1-predict-check": [lr_checks.initial_test_loss(math.log, measured, x)],
        "lab1-audit-selfcheck": [lr_checks.chance_best_reading(lab1.chance_best_reading, *readings_data)],
        "lab1-audit-apply": [lr_checks.reading_size(31), lr_checks.audit_accuracy(0.5, *_half_right())],
    }
    run, lines = _report(lab1_public, nb, _executed(nb, verdicts), tmp_path)
    assert [ln.status for ln in lines] == ["ok", "ok"], [str(ln) for ln in lines]
    assert lines[1].text == "4 of 4 passed (sgd_step, initial_test_loss, chance_best_reading, reading_size, q)"
    hidden = checking.hidden_line(lab1_public)
    assert "not checked here: your functions on the grader's own cases, and your predictions" in hidden.text
    said = checking.checked([checking.file_line(lab1_public, NOTEBOOK), *lines])
    assert said.startswith("the file's name; exercises 4 of 4 written; self-checks 4 of 4 passed (sgd_step,"), said
    assert checking.not_checked(lab1_public).startswith(f"the grader's {lab1_public.hidden_checks} hidden checks (")


def test_a_self_check_cell_that_stops_the_run_is_still_reported(lab1_public, tmp_path):
    """A self-check cell that raised (the student's function threw, or a live-style failure): the
    report says where, as before."""
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    run, (_, checks) = _report(lab1_public, nb, _executed(nb, {}, failed_cell="lab1-audit-selfcheck"), tmp_path)
    assert run.status == "error" and checks.status == "FAIL"
    assert "chance_best_reading's self-check (cell" in checks.text


@pytest.mark.tensorflow
def test_sgd_step_self_check_fails_a_summed_loss_and_passes_the_reference():
    import tensorflow as tf

    def summed(W, b, x, y, learning_rate):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(x, W) + b))
        dW, db = tape.gradient(loss, [W, b])
        W.assign_sub(learning_rate * dW)
        b.assign_sub(learning_rate * db)
        return loss

    assert lr_checks.sgd_step(lab1.sgd_step).passed
    v = lr_checks.sgd_step(summed)
    assert v.failed == [
        "one step of plain gradient descent: the loss averaged over the batch (a mean, not a sum), "
        "and W and b moved by -learning_rate x its gradient"
    ]


WRONG_LAB1 = {  # the wrong answers a student handed in, by cell id: (the reference's line, the student's)
    "lab1-predict": ("    return math.log(num_classes)", "    return 1 / num_classes"),
    "lab1-audit": (
        "    need = math.ceil(round(level * batch_size, 9))",
        "    need = int(level * batch_size)",
    ),
    "lab1-audit-apply": ("reading_size = 31", "reading_size = 50"),
}


@pytest.mark.notebook
def test_make_check_fails_the_wrong_lab1_where_the_grader_would(tmp_path):
    """The wrong Lab 1 (one reading with int, reading_size = 50, initial_test_loss = 1/K), run by
    make check at the test size: the run goes on to the end, and the report names each function
    and property its self-check failed, with no value."""
    from labkit.grading.kit import release

    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    nb.cells = [c for c in nb.cells if release.SOLUTION_ONLY not in c.get("metadata", {}).get("tags", [])]
    for c in nb.cells:
        if c.id in WRONG_LAB1:
            old, new = WRONG_LAB1[c.id]
            assert old in c.source, c.id
            c.source = c.source.replace(old, new)
            if c.id == "lab1-audit":  # one reading's chance, not the best of n
                c.source = re.sub(r"return 1 - \(1 - one\) \*\* n.*", "return one", c.source)
                assert "return one" in c.source
    text, report = make_check_report(nb, NOTEBOOK, "1", tmp_path)
    assert report.startswith("self-checks 1 of 4 passed: "), report
    for name, prop in (
        ("initial_test_loss", "a loss that grows with the number of classes"),
        ("chance_best_reading", "(the binomial tail)"),
        ("chance_best_reading", "a chance that grows with n"),
        ("reading_size", "a size on which one reading prints as 94% and another as 97%"),
    ):
        assert f"{name} fails its self-check (cell" in report and prop in report, (name, prop, report)
    assert "sgd_step fails" not in report
    assert not re.search(r"\d\.\d{2,}", report), report  # no value: no number with decimals
    assert "Not ready to submit" in text and "fix chance_best_reading until its self-check" in text
