"""The labs' audits: graded values stay off the feedback pages, the exercises' answers
stay out of the student kit, and the new hidden checks and measurements hold."""

import math
import re
import tomllib

import numpy as np
import pytest

from helpers import LABS, whole_rubric

NUMBER = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)")


def graded_values(check: dict) -> list[float]:
    """What a check compares a record with: a number on the right, that number or the factor
    times it, and the factor (and its inverse) itself."""
    values = []
    right, factor = check.get("right"), check.get("factor")
    if isinstance(right, (int, float)) and not isinstance(right, bool):
        values += [right, right * (factor or 1)]
    if isinstance(factor, (int, float)) and factor not in (0, 1):
        values += [factor, 1 / factor]
    return [v for v in values if v not in (0, 1)]


def rubric_checks():
    rubric = tomllib.loads(whole_rubric())
    return [(lab, check) for lab, section in rubric["labs"].items() for check in section.get("checks", [])]


def test_no_public_check_description_gives_a_graded_value():
    """Descriptions are shown on every feedback page: they say what is checked, never the answer, a
    reference run's outcome or the formula's result (a late submitter reads them)."""
    problems = []
    for lab, check in rubric_checks():
        text = check.get("description", "")
        numbers = [float(n.replace(",", "")) for n in NUMBER.findall(text)]
        for value in graded_values(check):
            if any(math.isclose(n, value, rel_tol=0.02) for n in numbers):
                problems.append(f"{lab} {check['name']!r}: {value:g} in {text!r}")
        if re.search(r"measured[:\s]+(about\s+)?[\d.]|\d\s*(x|%)\s+(measured|here)|\(log|about \d+x", text):
            problems.append(f"{lab} {check['name']!r}: a reference outcome in {text!r}")
    assert not problems, "\n".join(problems)


def test_the_description_test_catches_a_graded_value():
    check = {"name": "x", "right": 1080402496, "description": "4 x 2 x 4 x 33,762,578 = 1,080,402,496 bytes"}
    assert any(
        math.isclose(float(n.replace(",", "")), v, rel_tol=0.02)
        for n in NUMBER.findall(check["description"])
        for v in graded_values(check)
    )


def test_distinct_features_reference_matches_the_click_data():
    """The hidden check's reference, against the data it models: generate the rows, count."""
    from labkit.datasets import clickdata
    from labkit.labs.lab3.solution import reference_distinct_features

    spec = clickdata.ClickSpec(num_features=1_000_000, seed=0)
    rows = clickdata.generate(spec, 100 * 200).data
    counts = []
    for start in range(0, 100 * 200, 100):
        lo, hi = rows.indptr[start], rows.indptr[start + 100]
        counts.append(len(np.unique(rows.indices[lo:hi])))
    assert np.mean(counts) == pytest.approx(reference_distinct_features(spec, 100), rel=0.03)


def test_distinct_features_cases_are_not_the_notebooks():
    from labkit.labs.lab1 import checks as lab1_checks
    from labkit.labs.lab3 import checks as lab3_checks

    cases = lab3_checks.inputs_distinct_features(seed=13)
    assert len(cases) == 6 and all(c["spec"]["num_features"] != 1_000_000 for c in cases)
    assert all(c["spec"]["zipf_s"] != 1.0 for c in cases)
    assert 10 not in lab1_checks.inputs_initial_loss(seed=5)


def test_the_student_kit_ships_none_of_the_sparse_gradients_steps(tmp_path):
    from labkit.grading.kit.release import student_package

    kit = student_package(tmp_path)
    text = (kit / "learning" / "sparse.py").read_text()
    for name in ("def unique_features", "def gather_rows", "def logits_from_rows", "tf.unique("):
        assert name not in text
    assert list(kit.glob("labs/*/checks.py")) and not list(kit.glob("labs/*/solution.py"))


@pytest.mark.tensorflow
def test_a_step_that_calls_back_into_python_is_seen():
    import tensorflow as tf

    from labkit.labs.lab1.checks import python_ops

    def numpy_step(x):
        return tf.numpy_function(lambda a: a * 2, [x], tf.float32)

    def graph_step(x):
        return x * 2

    x = tf.constant([1.0])
    assert python_ops(tf.function(numpy_step).get_concrete_function(x).graph.as_graph_def()) == 1
    assert python_ops(tf.function(graph_step).get_concrete_function(x).graph.as_graph_def()) == 0


@pytest.mark.tensorflow
def test_the_lr_step_probe_traces_a_step_once_and_the_judge_passes_the_kits(tmp_path):
    """The probe runs a step eagerly and traced on each of the grader's batches, as the epoch loop
    runs it: one tf.function, traced once for batches of one shape (its ops read from that trace)."""
    from labkit.grading.judge import hidden, probe
    from labkit.labs.lab1 import checks as lab1_checks
    from labkit.learning import lr

    seen = []

    def sgd_step(W, b, x, y, learning_rate):
        seen.append(1)  # Python: once per eager call and once per trace
        return lr.sgd_step(W, b, x, y, learning_rate)

    arrays = probe.outputs(hidden.HIDDEN["lab1_sgd_step"], {"sgd_step": sgd_step}, {"seed": 3}, tmp_path)
    cases = len(lab1_checks.inputs_lr_step(seed=3))
    assert len(seen) == cases + 1, seen  # the eager calls, and one trace for every traced call and the ops
    assert (
        lab1_checks.python_ops(lab1_checks.graph_def_file(tmp_path / lab1_checks.GRAPH_FILE)) == 0
    )  # the judge's count, of the file
    assert hidden.decide("lab1_sgd_step", {"seed": 3}, arrays, tmp_path).ok


def _hand_step(W, b, x, y, learning_rate):
    """Right numbers with no tape: the hand-derived gradient, as lr's NumPy trainer writes it."""
    import tensorflow as tf

    z = tf.matmul(x, W) + b
    g = (tf.nn.softmax(z) - tf.one_hot(y, 10)) / tf.cast(tf.shape(x)[0], z.dtype)
    W.assign_sub(learning_rate * tf.matmul(x, g, transpose_a=True))
    b.assign_sub(learning_rate * tf.reduce_sum(g, axis=0))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, z))


@pytest.mark.tensorflow
def test_a_step_without_the_tape_is_told_by_the_self_check_and_seen_by_the_probe():
    import tensorflow as tf

    from labkit.learning import lr

    with pytest.raises(
        ValueError, match="takes no gradient from TensorFlow: compute the loss inside a tf.GradientTape"
    ):
        lr.check_step(_hand_step)
    assert lr.check_step(lr.sgd_step) < 1e-6  # the reference takes the tape's

    def graph(step):
        W, b = tf.Variable(tf.zeros([784, 10])), tf.Variable(tf.zeros([10]))
        x, y = tf.zeros([5, 784]), tf.zeros([5], tf.int32)
        return tf.function(step).get_concrete_function(W, b, x, y, 0.1).graph.as_graph_def()

    assert lr.autodiff_ops(graph(_hand_step)) == 0 and lr.autodiff_ops(graph(lr.sgd_step)) > 0

    def tf_gradients_step(W, b, x, y, learning_rate):  # tf.gradients is TensorFlow's autodiff too
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(x, W) + b))
        dW, db = tf.gradients(loss, [W, b])
        W.assign_sub(learning_rate * dW)
        b.assign_sub(learning_rate * db)
        return loss

    assert lr.autodiff_ops(graph(tf_gradients_step)) > 0


def test_epoch_readings_read_each_epochs_weights_on_consecutive_batches():
    from labkit.learning import lr

    class Run:  # two epochs' weights: the first gets every image wrong, the second every image right
        extra = {"epoch_weights": []}

    x = np.eye(784, dtype=np.float32)[:600]
    y = np.zeros(600, np.int64)
    right = np.zeros((784, 10), np.float32)
    right[:, 0] = 1
    Run.extra["epoch_weights"] = [(-right, np.zeros(10, np.float32)), (right, np.zeros(10, np.float32))]
    curves = lr.epoch_readings(Run, x, y, batch_size=100)
    assert curves.shape == (6, 2)
    assert (curves[:, 0] == 0).all() and (curves[:, 1] == 1).all()
    with pytest.raises(ValueError, match="no batch of 1000"):
        lr.epoch_readings(Run, x, y, batch_size=1000)


def test_the_new_judges_pass_the_reference_and_fail_a_wrong_formula_without_naming_the_value(tmp_path):
    from labkit.datasets import clickdata
    from labkit.grading.judge import hidden
    from labkit.labs.lab1 import checks as lab1_checks
    from labkit.labs.lab3 import checks as lab3_checks
    from labkit.labs.lab1 import solution as lab1_solution
    from labkit.labs.lab3 import solution as lab3_solution
    from labkit.grading.judge.verify import Unverifiable

    counts = lab1_checks.inputs_initial_loss(seed=5)
    assert hidden.decide("lab1_initial_loss", {"seed": 5}, {"losses": np.log(counts)}, tmp_path).ok
    wrong = hidden.decide("lab1_initial_loss", {"seed": 5}, {"losses": np.full(len(counts), math.log(10))}, tmp_path)
    assert not wrong.ok and f"{math.log(counts[0]):.4f}" not in wrong.reason

    cases = lab3_checks.inputs_distinct_features(seed=13)
    right = [lab3_solution.reference_distinct_features(clickdata.ClickSpec(**c["spec"]), c["rows"]) for c in cases]
    assert hidden.decide("lab3_distinct_features", {"seed": 13}, {"expected": np.asarray(right)}, tmp_path).ok
    off = hidden.decide("lab3_distinct_features", {"seed": 13}, {"expected": np.asarray(right) * 1.01}, tmp_path)
    assert not off.ok and f"{right[0]:.6g}" not in off.reason

    lr_case = lab1_checks.inputs_lr_step(seed=1)
    arrays = {}
    for t, c in enumerate(lr_case):
        W, b, loss = lab1_solution.reference_lr_step(c["x"], c["y"], c["W"], c["b"], c["learning_rate"])
        for mode in ("eager", "graph"):
            arrays.update({f"{t}_{mode}_W": W, f"{t}_{mode}_b": b, f"{t}_{mode}_loss": np.asarray(loss)})
    graph = lab1_checks.node_schema()()  # right numbers, computed by NumPy behind tf.numpy_function
    graph.library.function.add().node_def.add(name="PyFunc", op="PyFunc")
    (tmp_path / lab1_checks.GRAPH_FILE).write_bytes(graph.SerializeToString())
    verdict = hidden.decide("lab1_sgd_step", {"seed": 1}, arrays, tmp_path)
    assert not verdict.ok and "calls back into Python" in verdict.reason
    (tmp_path / lab1_checks.GRAPH_FILE).write_bytes(b"")  # right numbers by TensorFlow ops: tape or hand, they pass
    assert hidden.decide("lab1_sgd_step", {"seed": 1}, arrays, tmp_path).ok
    (tmp_path / lab1_checks.GRAPH_FILE).write_bytes(b"\xff\xff")  # not a GraphDef: the TA looks
    with pytest.raises(Unverifiable, match="is not a GraphDef"):
        hidden.decide("lab1_sgd_step", {"seed": 1}, arrays, tmp_path)


@pytest.mark.parametrize("path", sorted(LABS.glob("*/0*.ipynb")), ids=lambda p: p.name)
def test_a_lab_is_3500_words_or_fewer_for_a_student(path):
    """The Markdown a student reads in the released lab, answer cells left out (a bound
    that keeps a lab within 4 hours); a lab that grows past it says where."""
    import nbformat

    from labkit.grading.kit.release import ANSWER_STUB, release_notebook

    student, _ = release_notebook(nbformat.read(path, as_version=4), path.name)
    words = {
        c.id: len(c.source.split()) for c in student.cells if c.cell_type == "markdown" and ANSWER_STUB not in c.source
    }
    longest = sorted(words.items(), key=lambda kv: -kv[1])[:3]
    assert sum(words.values()) <= 3500, f"{path.name}: {sum(words.values())} words; the longest cells: {longest}"
