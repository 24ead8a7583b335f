"""The synchronous round of a parameter server, as the kit sends it to the tasks and checks it.

Lab 2's student writes ``sync_round`` (``labkit.tasks.ps_sgd`` builds the sync graph with it); Lab 3
trains with the same round again. ``round_source`` is the function's source for the tasks'
``--round-source``; ``check_sync_round`` runs the round in one process, as a cluster runs it, and
says what to fix (``RoundError``); ``selfcheck`` is the notebooks' self-check built on it.
"""

from __future__ import annotations

import time

from labkit.experiments import function_source
from labkit.notebook.verdicts import Verdict, verdict


def round_source(fn) -> str:
    """The source of a ``sync_round(tf, grads_and_vars, global_step, learning_rate, num_workers,
    shared)`` function, to send to the tasks (``--round-source``); they define it and build their
    sync graph with it."""
    from labkit.tasks.ps_sgd import ROUND_SIGNATURE, load_round

    source = function_source(fn, "sync_round", ROUND_SIGNATURE, "sync_round")
    load_round(source)  # what the tasks will do with it: define sync_round, nothing else
    return source


class RoundError(ValueError):
    """A synchronous round that does not do what a round must; the message says what to fix."""


def check_sync_round(
    fn,
    workers: int = 3,
    rounds: int = 3,
    batch_size: int = 8,
    learning_rate: float = 0.5,
    seed: int = 0,
    timeout: float = 20.0,
) -> dict:
    """Run ``fn``'s round in one process, as the cluster will: ``workers`` threads each push
    ``rounds`` gradients of batches of their own and wait, a chief thread runs the round's
    chief op ``rounds`` times; then check, against NumPy (no reference round needed), that the
    global step is ``rounds``, that each worker's step returned only after its round was
    applied, and that the weights are plain SGD on the mean of the workers' gradients, round
    after round. Returns what it checked; raises ``RoundError`` that says what to fix (a
    blocked op gives up after ``timeout`` seconds)."""
    import numpy as np
    import tensorflow as tf

    from labkit.learning.lr import softmax_gradient
    from labkit.tasks import ps_sgd

    round_source(fn)
    rng = np.random.default_rng(seed)
    X = rng.random((workers, rounds, batch_size, ps_sgd.NUM_FEATURES), dtype=np.float32)
    Y = rng.integers(0, ps_sgd.NUM_CLASSES, (workers, rounds, batch_size))
    W0, b0 = ps_sgd.init_weights(seed)
    graph = tf.Graph()
    with graph.as_default():
        W = tf.compat.v1.get_variable("weights", initializer=tf.constant(W0))
        b = tf.compat.v1.get_variable("bias", initializer=tf.constant(b0))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        harness = _RoundHarness(tf, workers, rounds, timeout, X, Y)
        for i in range(workers):  # each worker builds its graph, as on the cluster; the queues are shared by name
            x = tf.compat.v1.placeholder(tf.float32, [None, ps_sgd.NUM_FEATURES])
            y = tf.compat.v1.placeholder(tf.int64, [None])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.matmul(x, W) + b))
            worker_op, chief_op = ps_sgd.build_round(tf, fn, loss, [W, b], global_step, learning_rate, workers, i)
            with tf.control_dependencies([worker_op]):
                harness.add_worker(x, y, tf.identity(global_step.read_value()), chief_op)
        queues = ps_sgd.SyncQueues.build(tf, [W, b], global_step, workers, 0)  # the same, by name: to look inside
        harness.state = [global_step.read_value(), *(acc.num_accumulated() for acc in queues.accumulators)]
        init = tf.compat.v1.global_variables_initializer()
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=workers + 2, intra_op_parallelism_threads=1)
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        harness.run(sess)
        g, W1, b1 = sess.run([global_step, W, b])
    if g != rounds:
        raise RoundError(f"after {rounds} rounds the global step is {g}: chief_op must add 1 to it once per round")
    late = [(i, t, harness.seen[i, t]) for i in range(workers) for t in range(rounds) if harness.seen[i, t] != t + 1]
    if late:
        i, t, at = late[0]
        raise RoundError(
            f"worker {i}'s step {t + 1} returned at global step {at}, not {t + 1}: a worker must be "
            f"released only after its round's update was applied (the tokens go in after it)"
        )
    Wr, br = W0.astype(np.float64), b0.astype(np.float64)
    for t in range(rounds):
        grads = [softmax_gradient(Wr, br, X[i, t], Y[i, t])[:2] for i in range(workers)]
        Wr = Wr - learning_rate * np.mean([gw for gw, _ in grads], axis=0)
        br = br - learning_rate * np.mean([gb for _, gb in grads], axis=0)
    scale = max(np.abs(Wr - W0).max(), np.abs(br - b0).max())
    error = max(np.abs(W1 - Wr).max(), np.abs(b1 - br).max()) / scale
    if not error < 1e-3:
        raise RoundError(
            f"after {rounds} rounds the weights are off from SGD on the mean of the {workers} "
            f"workers' gradients by {error:.3g} x the size of the whole update: does chief_op apply "
            f"the mean (not the sum) of all {workers} gradients, once per round, at learning_rate?"
        )
    return {"workers": workers, "rounds": rounds, "global_step": int(g), "largest_error": float(error)}


class _RoundHarness:
    """``check_sync_round``'s threads: one per worker, feeding its batches and recording the global
    step each of its steps returned at (``seen``), and the chief's. A failure, or an op blocked
    for ``timeout`` seconds, closes the session (which cancels what still waits in a queue) and is
    raised as a ``RoundError`` that says, from the round's state, what is wrong."""

    def __init__(self, tf, workers: int, rounds: int, timeout: float, X, Y):
        import numpy as np

        self.tf, self.workers, self.rounds, self.timeout, self.X, self.Y = tf, workers, rounds, timeout, X, Y
        self.feeds, self.steps, self.chief_op, self.state = [], [], None, []
        self.seen = np.full((workers, rounds), -1)
        self.failures: list[str] = []
        self.blocked: list[str] = []  # who gave up waiting: "worker" or "chief"
        self.options = tf.compat.v1.RunOptions(timeout_in_ms=int(timeout * 1000))

    def add_worker(self, x, y, step, chief_op) -> None:
        self.feeds.append((x, y))
        self.steps.append(step)
        self.chief_op = self.chief_op if self.chief_op is not None else chief_op  # worker 0's: the chief's

    def _loop(self, who: str, run, count: int) -> None:
        for t in range(count):
            try:
                run(t)
            except self.tf.errors.DeadlineExceededError:
                self.blocked.append(who)
                return self.failures.append("")
            except self.tf.errors.CancelledError:
                return
            except Exception as e:  # the student's op failed: say which and how
                return self.failures.append(f"{who}'s step {t + 1} failed: {type(e).__name__}: {e}")

    def run(self, sess) -> None:
        import threading

        def worker(i):
            def step(t):
                self.seen[i, t] = sess.run(
                    self.steps[i],
                    {self.feeds[i][0]: self.X[i, t], self.feeds[i][1]: self.Y[i, t]},
                    options=self.options,
                )

            self._loop("worker", step, self.rounds)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(self.workers)]
        threads.append(
            threading.Thread(
                target=self._loop,
                args=("chief", lambda t: sess.run(self.chief_op, options=self.options), self.rounds),
                daemon=True,
            )
        )
        for th in threads:
            th.start()
        deadline = time.monotonic() + self.timeout * (self.rounds + 1)
        while any(th.is_alive() for th in threads) and not self.failures and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.failures and not any(th.is_alive() for th in threads):
            return
        why = next((f for f in self.failures if f), "") or self._diagnose(sess)
        sess.close()
        for th in threads:
            th.join(self.timeout)
        raise RoundError(why)

    def _diagnose(self, sess) -> str:
        """Why the round is stuck, from the global step and the gradients the accumulators hold."""
        g, *held = sess.run(self.state, options=self.tf.compat.v1.RunOptions(timeout_in_ms=5000))
        waited = f"waited {self.timeout:g} s in round {g + 1}"
        if min(held) < self.workers:
            return (
                f"the chief {waited} for the workers' gradients, but the accumulators hold {min(held)} of "
                f"{self.workers}: worker_op must push each gradient (apply_grad) before it waits for its "
                f"token, tagged with the global step it was computed at (local_step): an accumulator drops "
                f"a gradient tagged with a step below the rounds it has taken, as stale"
            )
        if "worker" in self.blocked:
            return (
                f"a worker {waited} for its token, with all {self.workers} gradients in: chief_op must take "
                f"their mean (take_grad(num_workers)), apply it, and then put one token into each worker's "
                f"queue, shared.tokens[w]; worker_op must wait on its own, shared.tokens[shared.worker]"
            )
        return f"the round {waited}, with all {self.workers} gradients in and no worker waiting"


# ---------------------------------------------------------------------------------------------
# The notebooks' self-check of the round (Labs 2 and 3): check_sync_round's failures as properties

ROUND_PROPERTIES = (  # what check_sync_round's message begins with -> the property that failed
    ("after", "global step is", "the global step: one more per round, added by the chief once the update is applied"),
    ("worker", "returned at global step", "a worker released only after its round's update was applied"),
    ("after", "weights are off", "the weights: plain SGD on the mean of every worker's gradient, once per round"),
)


SOURCE_PROPERTY = (
    "a function named sync_round(tf, grads_and_vars, global_step, learning_rate, num_workers, shared), "
    "defined with def at the top level of a cell (the tasks build their round from its source)"
)


def selfcheck(fn, workers: int = 3) -> Verdict:
    """``fn(tf, grads_and_vars, global_step, learning_rate, num_workers, shared)`` run as a cluster
    runs it (worker threads and a chief, in one process, by ``check_sync_round``) with ``workers``
    and with one worker fewer: a round that counts the workers itself fails the second."""
    v = Verdict("sync_round")
    failed = []
    for n in (workers, workers - 1):
        try:
            check_sync_round(fn, workers=n, timeout=5.0)
        except RoundError as e:
            failed.append(_round_property(str(e)))
        except ValueError:  # its source cannot be sent to the tasks
            v.expect(False, SOURCE_PROPERTY)
            return verdict(v)
    props = [p for _, _, p in ROUND_PROPERTIES] + [_round_property("")]
    for p in props:
        v.expect(p not in failed, p)
    return verdict(v)


def _round_property(message: str) -> str:
    for start, part, prop in ROUND_PROPERTIES:
        if message.startswith(start) and part in message:
            return prop
    return (
        "a round that completes, for any number of workers: every worker's push taken, the update "
        "applied once, and each worker released (no op blocked or failed)"
    )
