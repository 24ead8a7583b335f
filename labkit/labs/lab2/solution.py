"""Lab 2's exercises: the synchronous round of SGD on a parameter server, built from the ps's queues
(``sync_round``), section 3's prediction of the ps's global step (``global_step``), section 5's reading of the killed
worker's run (``others_per_step``), and section 14's model of worker 0's share of the async steps on
emulated links (``worker0_share``)."""

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


def global_step(mode: str, workers: int, local_steps: int) -> int:
    """Lab 2 section 3's prediction: the ps's global step at the end of a ``mode`` run ('sync' or
    'async') in which each of ``workers`` workers makes exactly ``local_steps`` steps of its own. A
    synchronous round takes one step of every worker and applies one update; an asynchronous worker
    applies its own update at every step."""
    return local_steps if mode == "sync" else workers * local_steps


def worker0_share(step_bytes: float, rate_bits: float, step_s: float, workers: int, beside_ps: int = 1) -> float:
    """Lab 2 section 14's exercise: the share of an async run's global steps that worker 0 makes
    when the ``beside_ps`` workers on the ps's node (worker 0 among them) make a step every
    ``step_s`` seconds (their pulls and pushes cross only the node's loopback) and each of the
    other ``workers - beside_ps`` makes one every ``step_s`` plus the time its link needs to move
    ``step_bytes`` (the pull, then the push) at ``rate_bits`` bits per second. Every worker steps
    back to back without waiting for the others, so the share is worker 0's steps per second over
    all the workers' together."""
    local = 1 / step_s
    remote = 1 / (step_s + 8 * step_bytes / rate_bits)
    return local / (beside_ps * local + (workers - beside_ps) * remote)


def others_per_step(rows, start: int, end: int) -> float:
    """Lab 2 section 5's exercise: the other workers' updates per step of this worker between global
    steps ``start`` and ``end``, from its ``train`` series (``rows``, in order, each with the
    ``local_step`` and ``global_step`` it logged after a step of its own): from the first row at or
    after ``start`` to the last at or before ``end``, the global steps that were not its own, over
    its own. In async, how many updates landed between this worker's reading the weights and its
    applying a gradient: its gradients' staleness."""
    inside = [r for r in rows if start <= r["global_step"] <= end]
    if len(inside) < 2:
        raise ValueError(f"fewer than two rows between global steps {start} and {end}")
    own = inside[-1]["local_step"] - inside[0]["local_step"]
    return (inside[-1]["global_step"] - inside[0]["global_step"] - own) / own
