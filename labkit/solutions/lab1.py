"""Lab 1's exercise: one plain SGD step of softmax regression in TF Core."""
from __future__ import annotations


def sgd_step(W, b, x, y, learning_rate: float):
    """One plain gradient-descent step on ``tf.Variable`` W and b; returns the batch loss."""
    import tensorflow as tf

    from labkit.lr import cross_entropy

    with tf.GradientTape() as tape:
        loss = cross_entropy(tf.matmul(x, W) + b, y)
    dW, db = tape.gradient(loss, [W, b])
    W.assign_sub(learning_rate * dW)
    b.assign_sub(learning_rate * db)
    return loss
