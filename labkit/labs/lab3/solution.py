"""Lab 3's exercise: the sparse logistic-regression gradient, O(nnz) whatever the number of features,
and its steps (the batch's unique features, their rows of w, the logits from those rows), kept here with
it so that the student kit ships none of them; and the references of its hidden checks (the expected
distinct features, the dense gradient, the ps's link shares), which need NumPy only: TensorFlow loads
inside the functions that use it, so a judge of a formula does not pay for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf


def unique_features(x: tf.SparseTensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``uniq`` (the batch's distinct feature ids) and ``local`` (each non-zero's slot in uniq)."""
    import tensorflow as tf

    return tf.unique(x.indices[:, 1], out_idx=tf.int64)


def gather_rows(w, uniq: tf.Tensor) -> tf.Tensor:
    """The weights ``w[uniq]``. On a ps-hosted variable only these rows cross the network."""
    import tensorflow as tf

    return tf.gather(w, uniq)


def logits_from_rows(w_u: tf.Tensor, x: tf.SparseTensor, local: tf.Tensor) -> tf.Tensor:
    """``z = X w`` for a batch, from the gathered rows ``w_u`` only: O(nnz)."""
    import tensorflow as tf

    from labkit.learning.ops import batch_rows

    vals = tf.cast(x.values, w_u.dtype)
    b, _ = batch_rows(x, w_u.dtype)
    return tf.math.unsorted_segment_sum(vals * tf.gather(w_u, local), x.indices[:, 0], b)


def sparse_gradient(w, x: tf.SparseTensor, y, labels: str = "01") -> tuple[tf.Tensor, tf.IndexedSlices]:
    """Mean log-loss and its gradient as ``tf.IndexedSlices`` over the batch's unique features.

    Cost and memory are O(nnz of the batch), whatever ``w``'s length: ``w`` is read with
    one gather of the unique rows, and the gradient holds one value per unique feature.
    """
    import tensorflow as tf

    from labkit.learning.ops import labels01, mean_logloss, static_shape

    uniq, local = unique_features(x)
    w_u = gather_rows(w, uniq)
    z = logits_from_rows(w_u, x, local)
    y01 = tf.cast(labels01(y, labels), w_u.dtype)
    b = x.dense_shape[0]
    err = tf.sigmoid(z) - y01  # dloss_i/dz_i, times B
    contrib = tf.cast(x.values, w_u.dtype) * tf.gather(err, x.indices[:, 0])
    g_u = tf.math.unsorted_segment_sum(contrib, local, tf.size(uniq, out_type=tf.int64)) / tf.cast(b, w_u.dtype)
    return mean_logloss(z, y01), tf.IndexedSlices(g_u, uniq, static_shape(w))


def reference_distinct_features(spec, rows: int) -> float:
    """Expected distinct (field, value) pairs among ``rows`` rows of ``spec``'s click data: each
    field's values are bounded-Zipf draws, P(id <= k) = (1 - (k+2)^(1-s)) / (1 - (V+1)^(1-s)); the
    last ``optional_fields`` fields are present with probability 1/2; a value turns up in none of
    the rows with probability (1 - p)^rows."""
    a = 1.0 - spec.zipf_s
    optional = np.arange(spec.num_fields) >= spec.num_fields - spec.optional_fields
    total = 0.0
    for present, vocab in zip(np.where(optional, 0.5, 1.0), spec.vocab_sizes):
        k = np.arange(vocab, dtype=np.float64)
        p = present * ((k + 1) ** a - (k + 2) ** a) / (1.0 - (vocab + 1.0) ** a)
        total += float(np.sum(1.0 - (1.0 - p) ** rows))
    return total


def reference_sparse_gradient(case: dict) -> tuple[float, np.ndarray]:
    """Mean log-loss and its dense gradient X^T (sigmoid(Xw) - y) / B, in float64."""
    b, f = (int(v) for v in case["shape"])
    X = np.zeros((b, f))
    np.add.at(X, (case["indices"][:, 0], case["indices"][:, 1]), case["values"].astype(np.float64))
    w, y = case["w"].astype(np.float64), case["y"].astype(np.float64)
    z = X @ w
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    return loss, X.T @ (1 / (1 + np.exp(-z)) - y) / b


def reference_ps_link_shares(
    num_features: int, local_steps, window_s: float, rate_bits: float, beside_ps: int = 1
) -> tuple[float, float]:
    """Lab 3 section 9's exercise: ``(in_share, out_share)``, the shares of a window of ``window_s``
    seconds that the ps's link needs, at ``rate_bits`` bits per second each way, to carry report 001's
    dense steps that cross it: into the ps's node each step's push, ``num_features`` (int64 index,
    float32 value) pairs, 12 bytes per feature; out of it each step's pull, all of w, 4 bytes per
    feature. ``local_steps[i]`` is worker i's steps in the window; workers 0 .. ``beside_ps`` - 1
    share the ps's node, so their steps cross only its loopback."""
    crossing = sum(local_steps[beside_ps:])
    capacity = rate_bits / 8 * window_s  # bytes the link carries each way in the window
    return 12 * num_features * crossing / capacity, 4 * num_features * crossing / capacity
