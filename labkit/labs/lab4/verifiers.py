"""Lab 4's verifier: the resumed run's accuracy re-checked on its last checkpoint."""

from __future__ import annotations

import glob
from pathlib import Path

from labkit.labs.declare import claimed_number, Unverifiable, Verdict, verifier


@verifier("lab4_checkpoint")
def lab4_checkpoint(
    ctx,
    checkpoints: str = "runs/lab4/*/checkpoints",
    model: str = "lenet5",
    test_limit: int = 1000,
    seed: int = 0,
    tolerance: float = 0.005,
) -> Verdict:
    """Lab 4: the recorded accuracy of the resumed run is what the last checkpoint it saved gives
    on the rubric's validation set (``test_limit`` MNIST test images drawn with ``seed``): the
    chief's (or worker 0's) checkpoint of the highest epoch under ``checkpoints``, a glob in the
    run's folder, restored into a fresh ``labkit.learning.models`` ``model``."""
    import numpy as np

    root = ctx.workdir.resolve()
    found = []
    for index in glob.glob(str(root / checkpoints / "*" / "ckpt-*.index")):
        rel = Path(index).relative_to(root)
        task, name = rel.parent.name, rel.name[: -len(".index")]
        if task in ("chief-0", "worker-0") and name.split("-")[-1].isdigit():
            ctx.path(rel.as_posix(), "checkpoint")  # refuses links out of the run's folder
            found.append((int(name.split("-")[-1]), task == "chief-0", root / rel.parent / name))
    if not found:
        raise Unverifiable(
            f"no checkpoint of the chief or worker 0 under {checkpoints} (the fault-tolerance run writes them)"
        )
    epoch, _, prefix = max(found)
    claimed = claimed_number(ctx)
    import tensorflow as tf

    from labkit.learning import models
    from labkit.datasets.loaders import load_mnist

    net = models.build(model, seed=seed)
    tf.train.Checkpoint(model=net).read(str(prefix)).expect_partial()
    data = load_mnist(limit=1, test_limit=test_limit, seed=seed)
    logits = np.concatenate(
        [net(data.x_test[i : i + 500], training=False).numpy() for i in range(0, len(data.x_test), 500)]
    )
    acc = float(np.mean(logits.argmax(axis=1) == data.y_test))
    if abs(acc - claimed) <= tolerance:
        return Verdict(True, value=acc)
    return Verdict(
        False, f"recorded {claimed:.4f} but the epoch-{epoch} checkpoint gives {acc:.4f} on the validation set", acc
    )
