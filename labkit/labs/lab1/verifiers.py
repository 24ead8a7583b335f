"""Lab 1's verifier: the recorded accuracy re-checked on the weights the run saved."""

from __future__ import annotations

from labkit.labs.declare import claimed_number, Verdict, verifier


@verifier("lab1_weights")
def lab1_weights(
    ctx,
    artifact: str = "artifacts/lab1_core_weights.npz",
    tolerance: float = 0.005,
    test_limit: int | None = None,
    seed: int = 0,
) -> Verdict:
    """Lab 1: the recorded test accuracy is what the saved weights W, b give on the rubric's
    test set (``test_limit`` images of MNIST's test set, all by default, drawn with ``seed``)."""
    path = ctx.path(artifact, "weights file")
    from labkit.learning import lr

    claimed = claimed_number(ctx)
    acc = lr.evaluate_weights(path, test_limit=test_limit, seed=seed)
    if abs(acc - claimed) <= tolerance:
        return Verdict(True, value=acc)
    return Verdict(False, f"recorded {claimed:.4f} but the saved weights give {acc:.4f} on the test set", acc)
