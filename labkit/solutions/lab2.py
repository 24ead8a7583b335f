"""Lab 2's exercise: the optimizer for synchronous and asynchronous SGD on a parameter server."""
from __future__ import annotations


def make_optimizer(tf, mode: str, learning_rate: float, num_workers: int):
    """The optimizer for ``mode``: async, plain SGD that each trainer applies itself; sync,
    the same SGD wrapped so that the gradients of all ``num_workers`` trainers are averaged
    into one update per global step."""
    sgd = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
    if mode == "async":
        return sgd
    return tf.compat.v1.train.SyncReplicasOptimizer(sgd, replicas_to_aggregate=num_workers,
                                                    total_num_replicas=num_workers)
