"""Report 001's dense gradient step, in the form Lab 3's cluster tasks train with.

The tasks take the notebook's ``sparse_lr_gradient(w, x, y) -> (loss, IndexedSlices)`` as source
(``sparse_lr.gradient_source``) and define it in their own process. This module's function is
the same step made dense: the gradient is as long as ``w`` (``labkit.learning.sparse.dense_gradient``),
so a worker reads all of ``w`` from the ps and pushes ``num_features`` (index, value) pairs to
its accumulator. It exists to measure report 001's traffic on emulated links (Lab 3, section 9);
it is not Lab 3's exercise (that one returns one row per *distinct* feature of the batch).
"""

from __future__ import annotations

import tensorflow as tf

from labkit.learning import sparse


def sparse_lr_gradient(w, x, y):
    """Mean log-loss and report 001's dense gradient, as IndexedSlices over every feature."""
    loss, g = sparse.dense_gradient(w, x, y)
    n = tf.size(g, out_type=tf.int64)
    return loss, tf.IndexedSlices(g, tf.range(n), tf.reshape(n, [1]))
