"""Lab 1's exercises: one plain SGD step of softmax regression in TF Core, and the audit's model of
the best of n small-batch accuracy readings; and the float64 step its hidden check compares with."""

from __future__ import annotations

import numpy as np


def sgd_step(W, b, x, y, learning_rate: float):
    """One plain gradient-descent step on ``tf.Variable`` W and b; returns the batch loss."""
    import tensorflow as tf

    from labkit.learning.ops import cross_entropy

    with tf.GradientTape() as tape:
        loss = cross_entropy(tf.matmul(x, W) + b, y)
    dW, db = tape.gradient(loss, [W, b])
    W.assign_sub(learning_rate * dW)
    b.assign_sub(learning_rate * db)
    return loss


def chance_best_reading(q: float, n: int, batch_size: int = 50, level: float = 0.97) -> float:
    """The chance that the best of ``n`` accuracy readings, each on ``batch_size`` images that
    the model gets right independently with probability ``q``, is at least ``level``: one reading
    reaches it with p = P(Binomial(batch_size, q) >= level x batch_size), and the best of n
    independent readings misses it only when all n do, (1 - p)^n."""
    import math

    need = math.ceil(round(level * batch_size, 9))  # images right, out of batch_size
    p = sum(math.comb(batch_size, k) * q**k * (1 - q) ** (batch_size - k) for k in range(need, batch_size + 1))
    return 1 - (1 - p) ** n


def reference_lr_step(x, y, W, b, learning_rate):
    """One SGD step of softmax regression on the mean cross-entropy, computed in float64."""
    x, W, b = x.astype(np.float64), W.astype(np.float64), b.astype(np.float64)
    z = x @ W + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = float(np.mean(-np.log(p[np.arange(len(y)), y])))
    g = p.copy()
    g[np.arange(len(y)), y] -= 1
    g /= len(y)
    return W - learning_rate * (x.T @ g), b - learning_rate * g.sum(axis=0), loss
