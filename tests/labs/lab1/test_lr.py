"""Lab 1's trainers: Core learns and matches the NumPy reference, Keras learns, bad input is refused,
saved weights evaluate to the recorded accuracy."""

import numpy as np
import pytest

from labkit.learning import lr
from labkit.datasets.loaders import ImageData, load_mnist


@pytest.fixture(scope="module")
def mnist():
    return load_mnist(limit=10000, test_limit=2000)


@pytest.fixture(scope="module")
def small(mnist):
    return ImageData(mnist.x_train[:1525], mnist.y_train[:1525], mnist.x_test, mnist.y_test)


@pytest.mark.tensorflow
def test_core_reaches_85_percent_and_writes_tensorboard(mnist, tmp_path):
    run = lr.train_core(mnist, 5, tensorboard_dir=tmp_path / "runs", progress=False)
    h = run.history
    assert list(h["epoch"]) == [1, 2, 3, 4, 5] and set(h["version"]) == {"core"}
    assert run.summary()["test_accuracy"] >= 0.85, h
    assert h["train_loss"].iloc[-1] < h["train_loss"].iloc[0] < np.log(10)
    assert run.wall_s >= run.train_s > 0  # the wall time adds the evaluations
    assert run.summary()["samples_per_s"] == pytest.approx(5 * len(mnist.x_train) / run.train_s)  # every image, 5 times

    import tensorflow as tf

    events = list(run.logdir.glob("events.out.tfevents.*"))
    assert run.logdir.parent == tmp_path / "runs" and len(events) == 1
    steps = {}
    for event in tf.compat.v1.train.summary_iterator(str(events[0])):
        for v in event.summary.value:
            steps.setdefault(v.tag, []).append(event.step)
    assert steps["test_accuracy"] == steps["test_loss"] == [1, 2, 3, 4, 5]


@pytest.mark.tensorflow
def test_core_is_the_numpy_reference_step_for_step(small):
    # Same seed: same start, same shuffles; the last batch is short (1525 = 30 x 50 + 25).
    core, ref = (
        lr.CoreTrainer(small.x_train, small.y_train, seed=3),
        lr.NumpyTrainer(small.x_train, small.y_train, seed=3),
    )
    for _ in range(2):
        assert core.run_epoch() == pytest.approx(ref.run_epoch(), rel=1e-5)
    for a, b in zip(core.weights(), ref.weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert core.steps_per_epoch == 31


@pytest.mark.tensorflow
def test_cross_entropy_is_the_sparse_softmax_formula():
    import tensorflow as tf

    from labkit.learning import ops

    rng = np.random.default_rng(0)
    logits = tf.constant(rng.standard_normal((7, 10)) * 3, tf.float32)
    labels = tf.constant(rng.integers(0, 10, 7))
    want = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    assert float(ops.cross_entropy(logits, labels)) == pytest.approx(float(want), rel=1e-6)


@pytest.mark.tensorflow
def test_keras_learns_from_the_same_start(small):
    keras_run = lr.train_keras(small, 3, progress=False)
    numpy_run = lr.train("numpy", small, 3, progress=False)
    k, n = keras_run.summary(), numpy_run.summary()
    assert k["test_accuracy"] > 0.7  # chance is 0.1
    assert keras_run.history["train_loss"].is_monotonic_decreasing
    assert abs(k["test_accuracy"] - n["test_accuracy"]) < 0.04  # same math, different shuffles
    table = lr.compare(numpy_run, keras_run)
    assert list(table.index) == ["numpy", "keras"] and table.loc["numpy", "speed_vs_numpy"] == 1


@pytest.mark.tensorflow
def test_check_step_tells_a_right_step_from_a_wrong_one():
    assert lr.check_step(lr.sgd_step) < 1e-6

    def ascent(W, b, x, y, learning_rate):  # the classic sign error
        return lr.sgd_step(W, b, x, y, -learning_rate)

    assert lr.check_step(ascent) > 1e-4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"batch_size": -50}, "batch_size must be a positive integer"),
        ({"batch_size": 2.5}, "batch_size must be a positive integer"),
        ({"batch_size": 5000}, "larger than the 1525 training images"),
        ({"learning_rate": 0}, "learning_rate must be a positive finite number"),
        ({"learning_rate": float("nan")}, "learning_rate must be a positive finite number"),
        ({"epochs": 0}, "epochs must be a positive integer"),
        ({"version": "tf1"}, "unknown version 'tf1'"),
    ],
)
def test_bad_settings_are_refused(small, kwargs, match):
    args = {"version": "numpy", "epochs": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        lr.train(args.pop("version"), small, args.pop("epochs"), progress=False, **args)


@pytest.mark.tensorflow
def test_bad_data_is_refused(small):
    with pytest.raises(ValueError, match="expected .n, 28, 28. or .n, 784."):
        lr.NumpyTrainer(small.x_train[:, :20], small.y_train)
    with pytest.raises(ValueError, match="class ids 0..9"):
        lr.NumpyTrainer(small.x_train, small.y_train + 1)
    with pytest.raises(ValueError, match="y_train has shape"):
        lr.NumpyTrainer(small.x_train, small.y_train[:-1])
    with pytest.raises(ValueError, match="must have x_train, y_train, x_test, y_test"):
        lr.train("numpy", (small.x_train, small.y_train), 1)
    with pytest.raises(ValueError, match="step must be a function"):
        lr.CoreTrainer(small.x_train, small.y_train, step="sgd")


def test_saved_weights_evaluate_to_the_recorded_accuracy(small, tmp_path):
    run = lr.train("numpy", small, 1, progress=False)
    path = run.save_weights(tmp_path / "artifacts" / "w.npz")
    assert lr.evaluate_weights(path, small) == run.summary()["test_accuracy"]
    # The grader's way: the test subset rebuilt from the notebook's parameters.
    settings = lr.evaluation_settings({"test_limit": 2000, "seed": 0, "epochs": 1})
    assert settings == {"test_limit": 2000, "seed": 0}
    assert lr.evaluate_weights(path, **settings) == run.summary()["test_accuracy"]

    with pytest.raises(FileNotFoundError, match="save_weights"):
        lr.evaluate_weights(tmp_path / "missing.npz", small)
    np.savez(tmp_path / "no_b.npz", W=run.W)
    with pytest.raises(ValueError, match=r"lacks \['b'\]"):
        lr.evaluate_weights(tmp_path / "no_b.npz", small)
    np.savez(tmp_path / "shape.npz", W=run.W.T, b=run.b)
    with pytest.raises(ValueError, match="expected \\(784, 10\\)"):
        lr.evaluate_weights(tmp_path / "shape.npz", small)


def test_the_seeded_start_is_evaluated_before_the_first_step(small):
    # W ~ N(0, 0.01^2), b = 0: logits near 0, a near-uniform softmax: the loss is about log(10)
    run = lr.train("numpy", small, 1, progress=False)
    assert run.summary()["initial_test_loss"] == pytest.approx(np.log(10), rel=0.02)
    assert run.history["test_loss"].iloc[0] < run.summary()["initial_test_loss"]


def test_batch_readings_reread_the_weights_on_random_batches_as_binomial_draws(small):
    from labkit.labs.lab1.solution import chance_best_reading

    run = lr.train("numpy", small, 1, progress=False)
    q = run.summary()["test_accuracy"]
    readings = lr.batch_readings(
        run.W, run.b, small.x_test, small.y_test, readings=20, batch_size=25, trials=3000, seed=1
    )
    assert readings.shape == (3000, 20) and set(np.round(readings.ravel() * 25, 6)) <= set(range(26))
    assert readings.mean() == pytest.approx(q, abs=0.005)  # each image drawn at random: unbiased
    assert readings.std() == pytest.approx(np.sqrt(q * (1 - q) / 25), rel=0.05)  # binomial spread
    # the best of 20 readings, against the binomial model at q (4 standard errors of 3000 trials)
    level = next((k - 0.5) / 25 for k in range(25, 0, -1) if chance_best_reading(q, 20, 25, (k - 0.5) / 25) > 0.1)
    measured = (readings.max(axis=1) >= level).mean()
    model = chance_best_reading(q, 20, 25, level)
    assert 0.1 < model < 0.9 and abs(measured - model) < 4 * np.sqrt(model * (1 - model) / 3000), (measured, model)
    again = lr.batch_readings(run.W, run.b, small.x_test, small.y_test, readings=20, batch_size=25, trials=3000, seed=1)
    assert np.array_equal(readings, again)  # seeded
    with pytest.raises(ValueError, match="readings must be a positive integer"):
        lr.batch_readings(run.W, run.b, small.x_test, small.y_test, readings=0)


def test_best_readings_plots_one_reading_and_the_best_of_each_trial():
    from labkit.measure import plots

    readings = (np.random.default_rng(0).random((300, 20, 50)) < 0.9).mean(axis=2)
    fig = plots.best_readings(readings, levels=(0.94, 0.97))
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes]
    assert legends[1][1] == f">= 97%: {(readings.max(axis=1) >= 0.97).mean():.1%}"  # the best of each trial
    assert legends[0][0] == f">= 94%: {(readings >= 0.94).mean():.1%}"  # every single reading
    # a report's rounded percents: the lines sit at the least reading printed so, and say where
    rounded = plots.best_readings(readings, levels=(0.935, 0.965))
    labels = [t.get_text() for t in rounded.axes[1].get_legend().get_texts()]
    assert labels[1] == f">= 96.5%: {(readings.max(axis=1) >= 0.965).mean():.1%}"
    with pytest.raises(ValueError, match="a .trials, readings. array"):
        plots.best_readings(readings[0])


def test_softmax_gradient_is_the_finite_difference_of_the_loss():
    rng = np.random.default_rng(0)
    x, y = rng.random((6, 784)), rng.integers(0, 10, 6)
    W, b = rng.normal(size=(784, 10)) * 0.1, rng.normal(size=10)
    dW, db, loss = lr.softmax_gradient(W, b, x, y)
    assert loss == pytest.approx(lr._loss64(W, b, x, y))
    h = 1e-6
    for i, j in ((0, 0), (100, 3), (783, 9)):
        Wp, Wm = W.copy(), W.copy()
        Wp[i, j] += h
        Wm[i, j] -= h
        assert dW[i, j] == pytest.approx((lr._loss64(Wp, b, x, y) - lr._loss64(Wm, b, x, y)) / (2 * h), rel=1e-5)
    bp = b.copy()
    bp[4] += h
    assert db[4] == pytest.approx((lr._loss64(W, bp, x, y) - loss) / h, rel=1e-4)


@pytest.mark.tensorflow
def test_train_to_target_stops_at_the_first_evaluation_at_or_below_the_target(small):
    row = lr.train_to_target(small, 50, learning_rate=0.5, target_loss=0.6, eval_every=10)
    assert row["reached"] and row["test_loss"] <= 0.6 and row["iterations"] % 10 == 0
    assert row["wall_s"] > row["train_s"] > 0
    # the same seed makes the same steps: stopped one evaluation earlier, it was still above the target
    earlier = lr.train_to_target(
        small, 50, learning_rate=0.5, target_loss=0.6, eval_every=10, max_steps=row["iterations"] - 10
    )
    assert not earlier["reached"] and earlier["test_loss"] > 0.6 and earlier["iterations"] == row["iterations"] - 10
    with pytest.raises(ValueError, match="target_loss must be positive"):
        lr.train_to_target(small, 50, target_loss=0)


@pytest.mark.tensorflow
def test_target_sweep_has_one_row_per_batch_size_with_the_process_resources(small):
    table = lr.target_sweep(small, (10, 100), learning_rate=0.5, target_loss=0.6, eval_every=10, progress=False)
    assert list(table.index) == [10, 100] and table["reached"].all()
    assert (table["proc_cpu_pct"] > 0).all() and (table["proc_rss_peak_bytes"] > 100e6).all()
    with pytest.raises(ValueError, match="batch size must be a positive integer"):
        lr.target_sweep(small, (0,), progress=False)
