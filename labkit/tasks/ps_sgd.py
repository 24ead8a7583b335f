"""Softmax regression on MNIST with TensorFlow's parameter-server runtime (TF1 graph mode).

``python -m labkit.tasks.ps_sgd --mode sync --steps 300`` as every task of a cluster with
a ``ps`` and a ``worker`` job (worker 0 is the chief, unless there is a ``chief`` job). The
API is the one the course taught: ``tf.compat.v1`` graph mode, ``replica_device_setter``
placing the variables on the ps tasks, and a ``MonitoredSession`` per trainer.

Modes (``make_optimizer``):
- ``async``: every trainer applies its own gradients to the ps as fast as it can; each
  application is one global step, so the local steps add up to the global step.
- ``sync``: ``SyncReplicasOptimizer`` with ``replicas_to_aggregate`` = every trainer. Each
  trainer pushes its gradients into accumulators on the ps and waits for a token; the
  chief's queue runner averages N gradients, applies them (one global step) and hands out
  N tokens. The token queue starts empty (``num_tokens=0``), so every trainer makes one
  step per global step.

``--optimizer-source`` replaces ``make_optimizer`` with a function of the same name and
signature given as Python source (the Lab 2 notebook passes the student's own), checked
against the mode before training.

Stopping: at ``--steps`` global steps (or ``--epochs`` passes over the training set), or,
with ``--target-loss``, once the chief's periodic test loss (every ``--eval-every`` global
steps, report 002's criterion) reaches it. The stop step is a variable on the ps that
every trainer reads *after* each of its steps (a read ordered after the train op): when
the chief lowers it to the next global step, every sync trainer still makes that step,
so none is left waiting for a token that never comes.

Pitfalls of this API on TF 2.21, and where each is handled:
- ``tf.compat.v1.device(replica_device_setter(...))``, not ``tf.device``: ``build_model``;
- device filters on every session and server: ``TaskRuntime.session_config``;
- non-chief workers polling every 30 s for initialized variables:
  ``TaskRuntime.session_creator`` (1 s);
- sync: a chief that starts alone filling the aggregation slots: the start barrier
  (``StartBarrier``, a shared queue on ps 0) and an empty token queue;
- the ps never exiting: ``DoneSignal`` (each trainer signals, each ps dequeues, exits);
- the chief's close waiting ``stop_grace_period_secs`` (120 s by default) for its sync
  queue runner: ``--stop-grace`` (0.25 s: when the last round's tokens are out, the runner
  waits for gradients no trainer will send, and only the session's close ends that wait);
- slow exits after training: the runtime writes the result, then ``os._exit``.

Several configurations in one cluster (``--configs``, ``VARYING``: mode, batch size, stopping,
learning rate, data, seed) run one after the other, each in a graph of its own whose stateful
ops (variables, the sync token queue and gradient accumulators, the barrier and done queues)
live in a resource container named after the configuration, on the ps as on the trainers: every
configuration starts from fresh variables, optimizer state and global step, as a fresh process
would (the same graph-level and op seeds). The ps ends each configuration when every trainer has
signalled its done queue (recording that configuration's ``global_final``), and exits after the
last. A finished configuration's variables stay in its container until the process ends (7,850
weights: nothing worth a ``Session.reset``, which would close the other tasks' sessions too).

Result (``<type>-<index>.json``; per configuration, ``results.configuration_file``): steps ``local`` and ``global_at_exit`` (trainers),
``global_final`` (ps 0, after every trainer finished: the number of updates applied);
``stop`` (why and at which global step); ``net`` (bytes sent and received while it
trained: on the task's NIC and ``lo``, and on its own TCP sockets); series ``train``
(every ``--log-every`` local steps) and, on the chief, ``eval`` (test loss and accuracy
every ``--eval-every`` global steps, ``t`` in seconds since training started); metrics
``test_loss``/``test_accuracy`` (chief, at the end).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import time
from dataclasses import dataclass

import numpy as np

from labkit import events
from labkit.tasks.common import (DoneSignal, TaskRuntime, add_configs_option, configurations, define_function,
                                 mnist_for, run_graph_task, shared_queue)

MODES = ("async", "sync")
NUM_CLASSES, NUM_FEATURES = 10, 784
MNIST_TRAIN = 60000
# What a configuration may set; the rest (the optimizer's source, the NIC, sampling) is the cluster's.
VARYING = ("mode", "batch_size", "steps", "epochs", "target_loss", "learning_rate", "train_limit", "test_limit",
           "eval_every", "log_every", "seed", "barrier")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m labkit.tasks.ps_sgd", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=MODES, default="async")
    p.add_argument("--steps", type=int, default=300, help="stop when the global step reaches this")
    p.add_argument("--epochs", type=float, default=None, help="stop after this many passes over the training set "
                                                              "instead (sets --steps)")
    p.add_argument("--target-loss", type=float, default=None, help="stop once the chief's test loss is at or below "
                                                                   "this (checked every --eval-every global steps)")
    p.add_argument("--batch-size", type=int, default=50, help="examples per trainer step")
    p.add_argument("--learning-rate", type=float, default=0.5)
    p.add_argument("--train-limit", type=int, default=10000, help="MNIST training examples (stratified subset)")
    p.add_argument("--test-limit", type=int, default=2000, help="MNIST test examples the chief evaluates on")
    p.add_argument("--eval-every", type=int, default=100, help="chief: test loss/accuracy every N global steps "
                                                              "(0: at the end only)")
    p.add_argument("--log-every", type=int, default=25, help="record the training loss every N local steps")
    p.add_argument("--barrier", action=argparse.BooleanOptionalAction, default=True,
                   help="trainers wait for each other before the first step")
    p.add_argument("--stop-grace", type=float, default=0.25, help="seconds the chief's session close waits for its "
                                                                 "threads (TensorFlow's default: 120)")
    p.add_argument("--optimizer-source", default=None, help="Python source defining make_optimizer(tf, mode, "
                                                            "learning_rate, num_workers), used instead of the kit's")
    p.add_argument("--nic", default="auto", help="interface whose bytes are counted while training (besides lo): "
                                                 "auto (the one holding the task's address), a name, or none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-interval", type=float, default=0.5, help="seconds between resource samples")
    add_configs_option(p, VARYING)
    args = p.parse_args(argv)
    check_args(p, args)
    args.plan = configurations(p, args, VARYING, check_args)
    return args


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The command line's (or a configuration's) arguments make sense together."""
    if args.mode not in MODES:
        p.error(f"mode must be one of {MODES}, got {args.mode!r}")
    for name in ("steps", "batch_size", "train_limit", "test_limit"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.epochs is not None and not args.epochs > 0:
        p.error(f"--epochs must be positive, got {args.epochs}")
    if args.target_loss is not None and not args.target_loss > 0:
        p.error(f"--target-loss must be positive, got {args.target_loss}")
    if args.target_loss is not None and args.eval_every <= 0:
        p.error("--target-loss needs --eval-every > 0: the chief checks the test loss every N global steps")
    if args.eval_every < 0:
        p.error(f"--eval-every must be >= 0, got {args.eval_every}")


def last_step(args, num_trainers: int) -> int:
    """The global step to stop at: ``--steps``, or ``--epochs`` passes over the training set
    (async: one batch per global step; sync: one batch per trainer per global step)."""
    if args.epochs is None:
        return args.steps
    per_step = args.batch_size * (num_trainers if args.mode == "sync" else 1)
    return max(1, math.ceil(args.epochs * (args.train_limit or MNIST_TRAIN) / per_step))


@dataclass
class Model:
    x: object
    y: object
    loss: object
    accuracy: object
    train_op: object
    global_step: object
    optimizer: object
    stop_step: object       # variable on the ps: trainers stop once the global step reaches it
    after_step: object      # (global step, stop step) read after the train op
    stop_at: object         # placeholder: lower the stop step to this (never raises it)
    lower_stop: object


def load_optimizer_factory(source: str | None):
    """``make_optimizer`` from ``--optimizer-source`` (the notebook's), else the kit's reference
    (Lab 2's exercise, ``labkit.solutions.lab2``), which the student kit does not have."""
    if not source:
        from labkit.reference import solution

        return solution("lab2", "make_optimizer", "optimizer=make_optimizer, your function from the notebook")
    return define_function(source, "make_optimizer", "--optimizer-source", "(tf, mode, learning_rate, num_workers)")


def check_optimizer(tf, optimizer, mode: str, num_workers: int, learning_rate: float | None = None) -> None:
    """A ValueError that says what is wrong unless ``optimizer`` fits ``mode``: async, a
    plain (unwrapped) optimizer; sync, a ``SyncReplicasOptimizer`` aggregating every
    trainer's gradients. ``learning_rate``: the inner SGD's rate must be it."""
    sync_cls = tf.compat.v1.train.SyncReplicasOptimizer
    base_cls = tf.compat.v1.train.Optimizer
    if mode == "sync":
        if not isinstance(optimizer, sync_cls):
            raise ValueError(f"sync mode needs tf.compat.v1.train.SyncReplicasOptimizer wrapping SGD, but "
                             f"make_optimizer returned {type(optimizer).__name__}: without it every worker "
                             f"applies its own gradients, which is async SGD")
        want = (num_workers, num_workers)
        got = (optimizer._replicas_to_aggregate, optimizer._total_num_replicas)
        if got != want:
            raise ValueError(f"sync mode with {num_workers} workers: replicas_to_aggregate and total_num_replicas "
                             f"must both be {num_workers}, got {got[0]} and {got[1]}")
        inner = optimizer._opt
    else:
        if isinstance(optimizer, sync_cls):
            raise ValueError("async mode must not wrap the optimizer in SyncReplicasOptimizer: each worker "
                             "applies its own gradients")
        inner = optimizer
    if not isinstance(inner, base_cls):
        raise ValueError(f"make_optimizer must return a tf.compat.v1.train optimizer (graph mode), got "
                         f"{type(inner).__name__}; Keras optimizers do not work with replica_device_setter")
    if learning_rate is not None and isinstance(inner, tf.compat.v1.train.GradientDescentOptimizer):
        lr = float(inner._learning_rate)
        if not math.isclose(lr, learning_rate, rel_tol=1e-6):
            raise ValueError(f"the SGD learning rate is {lr}, expected {learning_rate}")


def build_model(tf, rt: TaskRuntime, args) -> Model:
    """Softmax regression (784 x 10 + 10 = 7,850 weights), variables on the ps tasks.

    Every task, the ps included, builds the same graph, so the variables get the same
    names and the same ps placement everywhere."""
    tf.compat.v1.set_random_seed(args.seed)
    worker_device = f"/job:{rt.task.type}/task:{rt.task.index}"
    setter = tf.compat.v1.train.replica_device_setter(worker_device=worker_device, cluster=rt.spec.as_dict())
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        stop_step = tf.compat.v1.get_variable("stop_step", dtype=tf.int64, trainable=False,
                                              initializer=tf.constant(last_step(args, rt.num_trainers), tf.int64))
        x = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES], name="x")
        y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
        w = tf.compat.v1.get_variable("weights", [NUM_FEATURES, NUM_CLASSES],
                                      initializer=tf.compat.v1.random_normal_initializer(stddev=0.01, seed=args.seed))
        b = tf.compat.v1.get_variable("bias", [NUM_CLASSES], initializer=tf.compat.v1.zeros_initializer())
        logits = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
        factory = load_optimizer_factory(args.optimizer_source)
        optimizer = factory(tf, args.mode, args.learning_rate, rt.num_trainers)
        check_optimizer(tf, optimizer, args.mode, rt.num_trainers, args.learning_rate)
        train_op = optimizer.minimize(loss, global_step=global_step)
        with tf.control_dependencies([train_op]):
            after_step = (tf.identity(global_step.read_value()), tf.identity(stop_step.read_value()))
        stop_at = tf.compat.v1.placeholder(tf.int64, [], name="stop_at")
        lower_stop = stop_step.assign(tf.minimum(stop_step, stop_at))
    return Model(x, y, loss, accuracy, train_op, global_step, optimizer, stop_step, after_step, stop_at, lower_stop)


def is_sync(tf, model: Model) -> bool:
    return isinstance(model.optimizer, tf.compat.v1.train.SyncReplicasOptimizer)


def hooks(tf, rt: TaskRuntime, model: Model) -> list:
    """Sync: the optimizer's hook (chief: initial tokens and the queue runner that applies
    the aggregated gradients). The token queue starts empty, so no trainer can take a
    second step before every trainer's first gradient has been applied."""
    if is_sync(tf, model):
        return [model.optimizer.make_session_run_hook(rt.is_chief, num_tokens=0)]
    return []


class StartBarrier:
    """Trainers wait for each other before their first step: each enqueues once into a
    shared queue on ps 0, then polls its size until every trainer has (ops built before the
    graph is finalized)."""

    def __init__(self, tf, trainers: int):
        self.trainers = trainers
        queue = shared_queue(tf, "ready", 0, trainers)
        self.arrive, self.size = queue.enqueue(1), queue.size()

    def wait(self, run, poll: float = 0.05, timeout: float = 300) -> float:
        """``run``: a function that runs a fetch. Returns the seconds waited."""
        t = time.monotonic()
        run(self.arrive)
        while (arrived := run(self.size)) < self.trainers:
            if time.monotonic() - t > timeout:
                raise TimeoutError(f"waited {timeout:.0f} s at the start barrier for {self.trainers} trainers; "
                                   f"{arrived} arrived (see the other tasks' logs)")
            time.sleep(poll)
        return time.monotonic() - t


def batches(x: np.ndarray, y: np.ndarray, batch_size: int, seed: int):
    """Endless shuffled mini-batches, a new permutation every epoch."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i:i + batch_size]
            yield x[idx], y[idx]


@contextlib.contextmanager
def fresh_graph(tf, config):
    """A graph of the configuration's own, its stateful ops in its own resource container (on
    every task the same: the ps's variables and queues of one configuration are never another's)."""
    graph = tf.Graph()
    with graph.as_default(), graph.container(config.name or ""):
        yield graph


def run_ps(rt: TaskRuntime, tf, server, args) -> None:
    for config in args.plan:
        with rt.configuration(config), fresh_graph(tf, config):
            model = build_model(tf, rt, config.args)
            done = DoneSignal(tf, rt.spec)
            final_step = rt.serve_until_done(server, done, model.global_step if rt.task.index == 0 else None,
                                             last=config.index == config.count - 1)
            if final_step is not None:
                rt.steps["global_final"] = int(final_step)


def run_trainer(rt: TaskRuntime, tf, server, args) -> None:
    loaded: dict = {}
    for config in args.plan:
        with rt.configuration(config), fresh_graph(tf, config):
            train(rt, tf, server, config.args, mnist_for(config.args, loaded))


def train(rt: TaskRuntime, tf, server, args, data) -> None:
    """One trainer's run of one configuration, from building the graph to signalling done."""
    from labkit.sockets import NetCounter, pick_nic

    rank, n = rt.trainer_rank, rt.num_trainers
    x_train = data.x_train.reshape(-1, NUM_FEATURES)[rank::n]
    y_train = data.y_train[rank::n]
    if len(x_train) < args.batch_size:
        raise ValueError(f"this trainer's shard has {len(x_train)} examples, fewer than --batch-size "
                         f"{args.batch_size}; raise --train-limit or lower --batch-size")
    model = build_model(tf, rt, args)
    done = DoneSignal(tf, rt.spec)
    barrier = StartBarrier(tf, n)
    test_feed = None
    if rt.is_chief:
        test_feed = {model.x: data.x_test.reshape(-1, NUM_FEATURES), model.y: data.y_test}
    mode = "sync" if is_sync(tf, model) else "async"
    rt.log(f"trainer {rank}/{n}: {len(x_train)} examples, batch {args.batch_size}, mode {mode}, "
           f"stop at global step {last_step(args, n)}" + (f" or test loss <= {args.target_loss}" if args.target_loss
                                                          else ""))

    train_rows, eval_rows = rt.series.setdefault("train", []), rt.series.setdefault("eval", [])
    local, step, next_eval = 0, 0, args.eval_every
    stop = {"reason": "steps"}
    stream = batches(x_train, y_train, args.batch_size, args.seed + rank)
    net = NetCounter(pick_nic(args.nic, rt.task.host))
    creator = rt.session_creator(server)
    with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks(tf, rt, model),
                                             stop_grace_period_secs=args.stop_grace) as sess:
        rt.timings["session_ready_s"] = rt.since_start()

        def raw(fetches, feed=None):  # without the hooks
            return sess.run_step_fn(lambda step_context: step_context.session.run(fetches, feed))

        if args.barrier:
            rt.timings["barrier_s"] = barrier.wait(raw)
        global_start = int(raw(model.global_step))
        net.start()
        rt.first_step()
        with rt.timed("train"):
            t0 = time.monotonic()
            while not sess.should_stop():
                xb, yb = next(stream)
                loss, (step, stop_step) = sess.run([model.loss, model.after_step], {model.x: xb, model.y: yb})
                local += 1
                if local % args.log_every == 0:
                    train_rows.append({"t": time.monotonic() - t0, "local_step": local, "global_step": int(step),
                                       "loss": float(loss)})
                if step >= stop_step:
                    if stop["reason"] != "target":  # the chief lowered the stop step, or --steps was reached
                        stop.update(reason="target" if stop_step < last_step(args, n) else "steps",
                                    at_global_step=int(stop_step))
                    break
                if test_feed is not None and args.eval_every and step >= next_eval:
                    test_loss, test_acc = raw([model.loss, model.accuracy], test_feed)
                    eval_rows.append({"t": time.monotonic() - t0, "global_step": int(step), "local_step": local,
                                      "test_loss": float(test_loss), "test_accuracy": float(test_acc)})
                    next_eval = step + args.eval_every
                    rt.log(f"global step {step}: test loss {test_loss:.4f}, accuracy {test_acc:.4f}")
                    rt.emit(events.Eval(run=None, global_step=int(step), metrics={
                        "test_loss": float(test_loss), "test_accuracy": float(test_acc)}))
                    if args.target_loss is not None and test_loss <= args.target_loss and stop["reason"] != "target":
                        # everyone stops after the next global step (sync trainers are already making it)
                        raw(model.lower_stop, {model.stop_at: step + 1})
                        stop.update(reason="target", target_loss=args.target_loss, reached_at_global_step=int(step),
                                    test_loss=float(test_loss), at_global_step=int(step) + 1)
                        rt.log(f"test loss {test_loss:.4f} <= {args.target_loss} at global step {step}: "
                               f"stopping at {step + 1}")
        net.stop()
    rt.steps["local"] = local
    rt.steps["global_start"] = global_start
    rt.result["stop"] = stop
    rt.result["mode"] = mode
    rt.result["net"] = {**net.result, "global_steps": int(step) - global_start}

    # The session is closed; the variables still live on the ps until we signal done.
    with tf.compat.v1.Session(server.target, config=rt.session_config()) as plain:
        rt.steps["global_at_exit"] = int(plain.run(model.global_step))
        if test_feed is not None:
            test_loss, test_acc = plain.run([model.loss, model.accuracy], test_feed)
            rt.metrics.update(test_loss=float(test_loss), test_accuracy=float(test_acc))
            eval_rows.append({"t": rt.timings["train_s"], "global_step": rt.steps["global_at_exit"],
                              "local_step": local, "test_loss": float(test_loss), "test_accuracy": float(test_acc)})
    rt.signal_done(server.target, done)
    rt.log(f"done: {local} local steps, global step {rt.steps['global_at_exit']}, stop {stop}, metrics {rt.metrics}")
    rt.emit(events.Done(run=None, local_steps=local, global_steps=rt.steps["global_at_exit"],
                        seconds=rt.timings["train_s"], metrics=dict(rt.metrics)))


def main(argv=None) -> None:
    args = parse_args(argv)
    with TaskRuntime("ps_sgd", args={k: v for k, v in vars(args).items() if k != "plan"},
                     sample_interval=args.sample_interval) as rt:
        run_graph_task(rt, args, run_ps, run_trainer)


if __name__ == "__main__":
    main()
