"""Lab 3's exercise: the sparse logistic-regression gradient, O(nnz) whatever the number of features."""
from __future__ import annotations

import tensorflow as tf

from labkit.learning.sparse import gather_rows, labels01, logits_from_rows, mean_logloss, static_shape, unique_features


def sparse_gradient(w, x: tf.SparseTensor, y, labels: str = "01") -> tuple[tf.Tensor, tf.IndexedSlices]:
    """Mean log-loss and its gradient as ``tf.IndexedSlices`` over the batch's unique features.

    Cost and memory are O(nnz of the batch), whatever ``w``'s length: ``w`` is read with
    one gather of the unique rows, and the gradient holds one value per unique feature.
    """
    uniq, local = unique_features(x)
    w_u = gather_rows(w, uniq)
    z = logits_from_rows(w_u, x, local)
    y01 = tf.cast(labels01(y, labels), w_u.dtype)
    b = x.dense_shape[0]
    err = tf.sigmoid(z) - y01                                   # dloss_i/dz_i, times B
    contrib = tf.cast(x.values, w_u.dtype) * tf.gather(err, x.indices[:, 0])
    g_u = tf.math.unsorted_segment_sum(contrib, local, tf.size(uniq, out_type=tf.int64)) / tf.cast(b, w_u.dtype)
    return mean_logloss(z, y01), tf.IndexedSlices(g_u, uniq, static_shape(w))
