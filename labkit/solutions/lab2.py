"""Lab 2's exercise: the synchronous round of SGD on a parameter server, built from the ps's queues."""

from __future__ import annotations


def sync_round(tf, grads_and_vars, global_step, learning_rate: float, num_workers: int, shared):
    """``(worker_op, chief_op)``: every worker pushes its gradients into the ps's accumulators and
    waits for a token in its own queue; the chief's runner waits for all ``num_workers`` gradients
    of each variable, applies their mean once, adds one to the global step and releases the
    workers, one token into each worker's queue.

    A worker's gradients are tagged with the global step it computed them at; the accumulators
    drop gradients of rounds already taken (stale), and no worker can start a round before the
    previous one was applied, so none is."""
    pushes = [
        acc.apply_grad(grad, local_step=global_step) for acc, (grad, _) in zip(shared.accumulators, grads_and_vars)
    ]
    with tf.control_dependencies(pushes):
        worker_op = shared.tokens[shared.worker].dequeue()
    means = [acc.take_grad(num_workers) for acc in shared.accumulators]
    updates = [var.assign_sub(learning_rate * mean) for mean, (_, var) in zip(means, grads_and_vars)]
    with tf.control_dependencies(updates):
        step = global_step.assign_add(1)
    chief_op = tf.group(*[queue.enqueue(step) for queue in shared.tokens])
    return worker_op, chief_op
