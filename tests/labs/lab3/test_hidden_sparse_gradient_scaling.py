"""Lab 3's sparse gradient is graded on its cost too: the hidden check lab3_sparse_gradient runs the
student's sparse_lr_gradient on one small batch with w of 10^4 and of 10^8 features, and a step that
grows with F (a dense gradient, a read of all of w) fails, with the measured ratio of CPU times; one
that runs out of memory or time there fails saying so, even when the probe's process dies. A few
minutes (each size and mode is a child process that imports TensorFlow)."""

import json

import pytest

from helpers import LABS, hidden_on_notebooks, hidden_verdict
from labkit.grading.judge import hidden, probe
from labkit.labs.lab3 import checks
from labkit.grading.judge.verify import Unverifiable

NOTEBOOK = LABS / "lab3" / "03_sparse_lr.ipynb"
ARGS = {"seed": 11}  # the rubric's
SMALL_LARGE = {"seed": 11, "large_features": 1_000_000}  # where only the outcome matters, not the ratio


def independent(w, x, y):
    """A correct answer written apart from labkit.labs.lab3.solution: each non-zero's weight gathered
    directly, the per-non-zero gradient summed per distinct feature."""
    import tensorflow as tf

    rows, cols = x.indices[:, 0], x.indices[:, 1]
    n = x.dense_shape[0]
    z = tf.math.unsorted_segment_sum(x.values * tf.gather(w, cols), rows, n)
    per_nonzero = x.values * tf.gather(tf.sigmoid(z) - y, rows) / tf.cast(n, tf.float32)
    ids, slot = tf.unique(cols)
    g = tf.math.unsorted_segment_sum(per_nonzero, slot, tf.shape(ids)[0])
    loss = tf.reduce_mean(tf.math.softplus(z) - y * z)
    return loss, tf.IndexedSlices(g, ids, tf.constant([w.shape[0]], tf.int64))


def dense_then_unique(w, x, y):
    """The reviewer's answer: right values, but a dense [F] gradient each step, then tf.unique and tf.gather."""
    import tensorflow as tf

    z = tf.reshape(tf.sparse.sparse_dense_matmul(x, tf.reshape(w, [-1, 1])), [-1])
    err = tf.reshape(tf.sigmoid(z) - y, [-1, 1])
    g = tf.reshape(tf.sparse.sparse_dense_matmul(x, err, adjoint_a=True), [-1]) / tf.cast(x.dense_shape[0], tf.float32)
    uniq, _ = tf.unique(x.indices[:, 1])
    loss = tf.reduce_mean(tf.nn.softplus(z) - y * z)
    return loss, tf.IndexedSlices(tf.gather(g, uniq), uniq, tf.constant([w.shape[0]], tf.int64))


def oom_when_large(w, x, y):
    import tensorflow as tf

    if w.shape[0] > 10**5:  # as a [B, F] matrix would
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[16,1000000]")
    return independent(w, x, y)


def slow_when_large(w, x, y):
    import time

    if w.shape[0] > 10**5:
        for _ in range(100):  # a Python loop over the features, say
            time.sleep(0.5)
    return independent(w, x, y)


def fails_when_large(w, x, y):
    if w.shape[0] > 10**5:
        raise ValueError("feature ids past 100,000 not supported")
    return independent(w, x, y)


def shape_of_w(w, x, y):
    """The correct step with the dense shape the notebook warns against: tf.shape(w) of the variable
    reads all of w (eagerly, a copy of F values each step)."""
    import tensorflow as tf

    loss, g = independent(w, x, y)
    return loss, tf.IndexedSlices(g.values, g.indices, tf.cast(tf.shape(w), tf.int64))


@pytest.mark.tensorflow
def test_a_correct_answer_passes_and_its_cost_does_not_grow(tmp_path):
    arrays = probe.outputs(hidden.HIDDEN["lab3_sparse_gradient"], {"sparse_lr_gradient": independent}, ARGS, tmp_path)
    v = hidden.decide("lab3_sparse_gradient", ARGS, arrays, tmp_path)
    assert v.ok, v.reason
    for mode in ("eager", "graph"):
        assert str(arrays[f"scale_{mode}_outcome"]) == "ok"
        for size in ("small", "large"):
            assert arrays[f"scale_{mode}_{size}_calls"] >= checks.settings_sparse_scaling()["min_calls"]
            assert 0 < arrays[f"scale_{mode}_{size}_cpu_s"] < 1
        assert (
            checks.growth(arrays[f"scale_{mode}_small_cpu_s"], arrays[f"scale_{mode}_large_cpu_s"]) < checks.MAX_GROWTH
        )
    assert not (tmp_path / checks.SPARSE_RUNNING).exists()


@pytest.mark.tensorflow
def test_a_dense_gradient_then_unique_fails_on_growth_with_f(tmp_path):
    v = hidden_verdict("lab3_sparse_gradient", dense_then_unique, tmp_path, **ARGS)
    assert not v.ok and "CPU time per step grows with the number of features F" in v.reason, v.reason
    ratio = max(float(part.split("x (")[0].split()[-1]) for part in v.reason.split("; ") if "x (" in part)
    assert ratio > checks.MAX_GROWTH and "100,000,000 features over that with 10,000" in v.reason, v.reason
    assert "expected" not in v.reason and "tf.unique" not in v.reason and "gather" not in v.reason, v.reason


@pytest.mark.tensorflow
def test_a_step_that_reads_all_of_w_through_tf_shape_fails(tmp_path):
    v = hidden_verdict("lab3_sparse_gradient", shape_of_w, tmp_path, **ARGS)
    assert not v.ok and "CPU time per step grows with the number of features F" in v.reason, v.reason
    eager = float(v.reason.split("eagerly ")[1].split("x (")[0])
    assert eager > checks.MAX_GROWTH, v.reason


@pytest.mark.tensorflow
def test_out_of_memory_at_the_large_size_says_the_memory_grows_with_f_and_another_error_is_the_functions(tmp_path):
    v = hidden_verdict("lab3_sparse_gradient", oom_when_large, tmp_path, **SMALL_LARGE)
    assert not v.ok and "ran out of memory with w of 1,000,000 features (called eagerly" in v.reason, v.reason
    assert (
        "memory or work grows with the number of features F" in v.reason
        and "though it ran with w of 10,000" in v.reason
    )


@pytest.mark.tensorflow
def test_past_the_time_limit_at_the_large_size_says_the_work_grows_with_f(tmp_path):
    args = {**SMALL_LARGE, "time_limit_s": 40.0}  # a child's whole life: TensorFlow's import included
    v = hidden_verdict("lab3_sparse_gradient", slow_when_large, tmp_path, **args)
    assert not v.ok and "did not finish in 40 s with w of 1,000,000 features" in v.reason, v.reason
    assert "work grows with the number of features F" in v.reason
    with pytest.raises(RuntimeError, match=r"with w of 1,000,000 features \(called eagerly\): ValueError: feature ids"):
        probe.outputs(
            hidden.HIDDEN["lab3_sparse_gradient"], {"sparse_lr_gradient": fails_when_large}, SMALL_LARGE, tmp_path
        )
    assert not (tmp_path / checks.SPARSE_RUNNING).exists()


def test_a_process_that_died_at_the_large_size_is_a_failure_that_names_the_case(tmp_path):
    """The probe's process ended (the memory limit's OOM kill, a crash) with the scaling case under
    way: status.json has no row for the check, and the marker the probe left names the case."""
    (tmp_path / "status.json").write_text(json.dumps({"lab3_distinct_features": {"ok": True}}))
    with pytest.raises(Unverifiable):  # nothing says where it died
        hidden.judge("lab3_sparse_gradient", ARGS, tmp_path)
    marker = tmp_path / checks.SPARSE_RUNNING
    marker.write_text(json.dumps({"mode": "graph", "features": 10_000}))
    with pytest.raises(Unverifiable):  # at the small size: not growth with F
        hidden.judge("lab3_sparse_gradient", ARGS, tmp_path)
    marker.write_text(json.dumps({"mode": "graph", "features": 100_000_000}))
    v = hidden.judge("lab3_sparse_gradient", ARGS, tmp_path)
    assert not v.ok and "ended the process running it (out of memory or time)" in v.reason, v.reason
    assert (
        "w of 100,000,000 features (traced by tf.function" in v.reason
        and "grows with the number of features" in v.reason
    )


def test_the_check_whose_probe_may_end_the_process_runs_last(tmp_path, monkeypatch):
    from labkit.labs import declare

    for name, last in (("early", False), ("heavy", True)):
        check = declare.Check(name, ("f",), dict, probe=lambda fns, args, out: {}, judge=lambda *a: None, last=last)
        monkeypatch.setitem(declare.discover(), name, check)
    specs = [{"check": n, "functions": ["f"], "args": {}} for n in ("heavy", "early")]
    spec = {"notebook": str(tmp_path / "nb.ipynb"), "out": str(tmp_path), "memory_bytes": 0, "checks": specs}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    ran = []
    monkeypatch.setattr(probe, "_limit", lambda memory_bytes: None)
    monkeypatch.setattr(probe, "isolated", lambda spec_path, out, names: ran.extend(names))  # each in a process
    assert probe.main([str(tmp_path / "spec.json")]) == 0
    assert ran == ["early", "heavy"] and hidden.HIDDEN["lab3_sparse_gradient"].last


@pytest.mark.tensorflow
def test_the_notebooks_function_passes_and_the_released_one_fails(tmp_path):
    """The reference notebook's sparse_lr_gradient passes, its cost included, when the probe takes it
    from the notebook; the student's copy raises NotImplementedError, and its Markdown says the grader
    times the step at two sizes of w."""
    student = hidden_on_notebooks("lab3_sparse_gradient", NOTEBOOK, tmp_path, **ARGS)
    text = next(c for c in student.cells if c.get("id") == "lab3-05").source
    assert "a step\nmust take about as long with either" in text
