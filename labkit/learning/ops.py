"""TensorFlow pieces that the kit's models (``lr``, ``sparse``) and the exercises' reference answers
(each lab's ``solution``) share: the losses and the batch arithmetic around them. Below every module
that names a reference, so a reference builds on them without a dependency cycle.

TensorFlow is imported when this module is."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

LABEL_CONVENTIONS = ("01", "pm1")


def cross_entropy(logits, labels):
    """The reports' loss, -sum_k y_k log softmax(logits)_k with one-hot y, averaged over the batch."""
    y = tf.one_hot(labels, tf.shape(logits)[-1], dtype=logits.dtype)
    return tf.reduce_mean(-tf.reduce_sum(y * tf.nn.log_softmax(logits), axis=1))


def labels01(y, labels: str = "01") -> tf.Tensor:
    """Labels as floats in {0, 1}, from the ``labels`` convention ("01" or "pm1")."""
    if labels not in LABEL_CONVENTIONS:
        raise ValueError(f"labels must be '01' (y in {{0,1}}) or 'pm1' (y in {{-1,+1}}), got {labels!r}")
    y = tf.convert_to_tensor(y)
    if tf.executing_eagerly():
        allowed = (0.0, 1.0) if labels == "01" else (-1.0, 1.0)
        bad = np.setdiff1d(np.unique(y.numpy()), allowed)
        if bad.size:
            raise ValueError(
                f"labels={labels!r} expects y in {allowed}, but y holds {bad[:5].tolist()}; "
                f"pass labels={'pm1' if labels == '01' else '01'!r} or convert y"
            )
    y = tf.cast(y, tf.float32)
    return y if labels == "01" else (y + 1.0) / 2.0


def batch_rows(x: tf.SparseTensor, dtype) -> tuple[tf.Tensor, tf.Tensor]:
    """The batch's row count, as an int64 tensor and as ``dtype``."""
    b = x.dense_shape[0]
    return b, tf.cast(b, dtype)


def mean_logloss(z: tf.Tensor, y01: tf.Tensor) -> tf.Tensor:
    """The mean log-loss of logits ``z`` for labels in {0, 1}: ``mean(softplus(z) - y z)``."""
    return tf.reduce_mean(tf.nn.softplus(z) - y01 * z)


def static_shape(w) -> tf.Tensor:
    """w's shape, static when known: ``tf.shape`` of a variable would read (and, after a
    sparse update, copy) the whole vector, an O(num_features) step."""
    shape = tf.TensorShape(np.shape(w) if isinstance(w, np.ndarray) else w.shape)
    if shape.is_fully_defined():
        return tf.constant(shape.as_list(), tf.int64)
    return tf.shape(w, out_type=tf.int64)
