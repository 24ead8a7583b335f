"""The training loop in one process (default strategy): it learns, checkpoints, resumes, refuses bad input.

Multi-worker runs (MWMS, kill and resume) need task processes: see tests/test_lenet*.py.
"""

import json

import numpy as np
import pytest

from labkit.datasets.loaders import load_mnist
from labkit.learning.train_loop import train


@pytest.fixture(scope="module")
def mnist():
    return load_mnist(limit=1500, test_limit=500)


def quiet(**kw):
    return dict(batch_size=50, lr=0.05, log=None, **kw)


@pytest.mark.tensorflow
def test_loop_reduces_loss_and_reports(mnist, tmp_path):
    r = train("lenet5", mnist, epochs=2, tensorboard_dir=tmp_path / "tb", **quiet())
    h = r["history"]
    assert [e["epoch"] for e in h] == [1, 2]
    assert h[1]["train_loss"] < h[0]["train_loss"] < np.log(10)  # below chance after one epoch
    assert r["val_loss"] < 1.5 and r["val_accuracy"] > 0.5
    assert r["steps_per_epoch"] == 1500 // 50 and r["global_batch"] == 50 and r["workers"] == 1
    # throughput leaves the first step out (it traces the step function): 59 steps of 50 images in what is left
    assert 0 < r["first_step_s"] < r["train_seconds"] == pytest.approx(sum(e["train_seconds"] for e in h))
    assert r["step_time_s"] * (2 * 30 - 1) == pytest.approx(r["train_seconds"] - r["first_step_s"])
    assert r["images_per_s"] * r["step_time_s"] == pytest.approx(50)
    assert all(e["steps"] == 30 and e["images"] == 30 * 50 for e in h)
    assert r["params"] == 61_706 and r["model_bytes"] == 61_706 * 4
    json.dumps(r)  # plain types only: ready for a result file
    assert list((tmp_path / "tb").iterdir()), "the chief writes TensorBoard scalars"


@pytest.mark.tensorflow
def test_resume_continues_at_next_epoch_with_checkpointed_weights(mnist, tmp_path):
    first = train("lenet5", mnist, epochs=1, checkpoint_dir=tmp_path, **quiet())
    assert not first["resumed"]
    resumed = train("lenet5", mnist, epochs=2, checkpoint_dir=tmp_path, **quiet())
    assert resumed["start_epoch"] == 1 and resumed["trained_epochs"] == 1
    assert resumed["restored_weights_sha256"] == first["weights_sha256"]
    assert [e["epoch"] for e in resumed["history"]] == [1, 2]
    assert resumed["history"][0] == first["history"][0]  # the pre-resume epoch comes from the checkpoint dir
    # Epoch 2 sees the same batches as in an uninterrupted run, so it ends in the same place.
    straight = train("lenet5", mnist, epochs=2, **quiet())
    assert resumed["val_loss"] == pytest.approx(straight["val_loss"], rel=1e-4)
    # Nothing left to do: a finished run restores and trains nothing.
    done = train("lenet5", mnist, epochs=2, checkpoint_dir=tmp_path, **quiet())
    assert done["start_epoch"] == 2 and done["trained_epochs"] == 0
    assert done["weights_sha256"] == resumed["weights_sha256"]
    with pytest.raises(ValueError, match="past epochs=1"):
        train("lenet5", mnist, epochs=1, checkpoint_dir=tmp_path, **quiet())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=0), "batch_size must be a positive integer"),
        (dict(batch_size=2.5), "batch_size must be a positive integer"),
        (dict(batch_size=True), "batch_size must be a positive integer"),
        (dict(epochs=0), "epochs must be a positive integer"),
        (dict(lr=0.0), "lr must be a positive finite number"),
        (dict(lr=float("nan")), "lr must be a positive finite number"),
        (dict(momentum=1.0), "momentum must be in"),
        (dict(steps_per_epoch=0), "steps_per_epoch must be"),
        # past the checks of the arguments: these build the model (TensorFlow)
        pytest.param(dict(batch_size=5000), "fewer than one global batch", marks=pytest.mark.tensorflow),
        pytest.param(dict(model="resnet"), "unknown model 'resnet'", marks=pytest.mark.tensorflow),
        pytest.param(dict(model=lambda: "not a model"), "not a keras.Model", marks=pytest.mark.tensorflow),
        (dict(data=object()), "data must have x_train"),
    ],
)
def test_bad_input_is_refused_clearly(mnist, kwargs, match):
    args = dict(model="lenet5", data=mnist, batch_size=50, epochs=1, log=None)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        train(args.pop("model"), args.pop("data"), **args)


def test_mismatched_arrays_are_refused(mnist):
    from dataclasses import replace

    bad = replace(mnist, y_train=mnist.y_train[:-1])
    with pytest.raises(ValueError, match="x_train has 1500 rows but y_train has 1499"):
        train("lenet5", bad, batch_size=50, epochs=1, log=None)
