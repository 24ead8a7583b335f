"""Lab 3's verifier: the recorded accuracy re-checked on the sparse weights the chief saved."""

from __future__ import annotations

import json

from labkit.labs.declare import claimed_number, Unverifiable, Verdict, verifier
from labkit.notebook.record import Missing, lookup


@verifier("lab3_weights")
def lab3_weights(
    ctx,
    weights: str = "artifacts.sync_weights",
    tolerance: float = 0.002,
    data: str = "click",
    num_features: int = 1_000_000,
    test_rows: int = 10_000,
    click_seed: int = 0,
) -> Verdict:
    """Lab 3: the recorded test accuracy is what the chief's saved sparse LR weights give on the
    rubric's test set (``data``, ``num_features``, ``test_rows``, ``click_seed``). ``weights`` is
    the record holding the file's path (relative to the working directory). A file saved for
    another test set is a mismatch: the test set is the grader's, never the file's."""
    try:
        rel = str(lookup(ctx.records, weights))
    except Missing as e:
        raise Unverifiable(f"no record {weights!r} names the saved weights (the records cell writes it): {e}") from e
    path = ctx.path(rel, "weights file")
    import numpy as np

    from labkit.tasks.ps_sparse_lr import evaluate_arrays, load_rows

    claimed = claimed_number(ctx)
    with np.load(path, allow_pickle=False) as f:
        saved = json.loads(str(f["settings"]))
        idx, values = np.asarray(f["indices"]), np.asarray(f["values"], np.float32)
    want = {"data": data, "num_features": num_features, "test_rows": test_rows, "click_seed": click_seed}
    differ = {k: saved.get(k) for k in want if saved.get(k) != want[k]}
    if differ:
        return Verdict(False, f"the weights were saved for another test set ({differ}); the grader's is {want}")
    if idx.shape != values.shape or idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= num_features)):
        raise Unverifiable(f"{rel} holds indices outside 0..{num_features - 1} or not one value per index")
    w = np.zeros(num_features, np.float32)
    w[idx] = values
    test = load_rows(data, "test", num_features=num_features, rows=test_rows, click_seed=click_seed)
    acc = evaluate_arrays(w, test)["accuracy"]
    if abs(acc - claimed) <= tolerance:
        return Verdict(True, value=acc)
    return Verdict(False, f"recorded {claimed:.4f} but the saved weights give {acc:.4f} on the test set", acc)
