"""Softmax regression on MNIST with TensorFlow's parameter-server runtime (TF1 graph mode).

``python -m labkit.tasks.ps_sgd --steps 300`` as every task of a cluster with a ``ps``
and a ``worker`` job (worker 0 is the chief, unless there is a ``chief`` job). The API is
the one the course taught: ``tf.compat.v1`` graph mode, ``replica_device_setter``
placing the variables on the ps tasks, and a ``MonitoredSession`` per trainer.

Modes:
- ``async``: every trainer applies its own gradients to the ps as fast as it can.
  (Lab 2 adds ``sync`` here: ``make_optimizer`` wraps the optimizer in
  ``SyncReplicasOptimizer``, ``hooks`` adds its session hook, and the trainers pass a
  start barrier built from ``common.shared_queue`` before training.)

Pitfalls of this API on TF 2.21, and where each is handled:
- ``tf.compat.v1.device(replica_device_setter(...))``, not ``tf.device``: ``build_model``;
- device filters on every session and server: ``TaskRuntime.session_config``;
- non-chief workers polling every 30 s for initialized variables:
  ``TaskRuntime.session_creator`` (1 s);
- the ps never exiting: ``DoneSignal`` (each trainer signals, each ps dequeues, exits);
- ``stop_grace_period_secs`` of a few seconds, not 120 (matters in sync mode);
- slow exits after training: the runtime writes the result, then ``os._exit``.

Result (``<type>-<index>.json``): steps ``local`` and ``global_at_exit`` (trainers),
``global_final`` (ps 0, after every trainer finished: the sum of the local steps in
async mode); series ``train`` (every ``--log-every`` local steps) and, on the chief,
``eval`` (test loss and accuracy every ``--eval-every`` global steps); metrics
``test_loss``/``test_accuracy`` (chief, at the end).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from labkit.tasks.common import DoneSignal, TaskRuntime

MODES = ("async",)
NUM_CLASSES, NUM_FEATURES = 10, 784


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m labkit.tasks.ps_sgd", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=MODES, default="async")
    p.add_argument("--steps", type=int, default=300, help="stop when the global step reaches this")
    p.add_argument("--batch-size", type=int, default=50, help="examples per trainer step")
    p.add_argument("--learning-rate", type=float, default=0.5)
    p.add_argument("--train-limit", type=int, default=10000, help="MNIST training examples (stratified subset)")
    p.add_argument("--test-limit", type=int, default=2000, help="MNIST test examples the chief evaluates on")
    p.add_argument("--eval-every", type=int, default=100, help="chief: test loss/accuracy every N global steps "
                                                              "(0: at the end only)")
    p.add_argument("--log-every", type=int, default=25, help="record the training loss every N local steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-interval", type=float, default=0.5, help="seconds between resource samples")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "train_limit", "test_limit"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    return args


@dataclass
class Model:
    x: object
    y: object
    loss: object
    accuracy: object
    train_op: object
    global_step: object
    optimizer: object


def make_optimizer(tf, args, num_trainers: int):
    """The optimizer for ``args.mode`` (async: plain SGD applied by each trainer)."""
    return tf.compat.v1.train.GradientDescentOptimizer(args.learning_rate)


def build_model(tf, rt: TaskRuntime, args) -> Model:
    """Softmax regression (784 x 10 + 10 = 7,850 weights), variables on the ps tasks.

    Every task, the ps included, builds the same graph, so the variables get the same
    names and the same ps placement everywhere."""
    tf.compat.v1.set_random_seed(args.seed)
    worker_device = f"/job:{rt.task.type}/task:{rt.task.index}"
    setter = tf.compat.v1.train.replica_device_setter(worker_device=worker_device, cluster=rt.spec.as_dict())
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        x = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES], name="x")
        y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
        w = tf.compat.v1.get_variable("weights", [NUM_FEATURES, NUM_CLASSES],
                                      initializer=tf.compat.v1.random_normal_initializer(stddev=0.01, seed=args.seed))
        b = tf.compat.v1.get_variable("bias", [NUM_CLASSES], initializer=tf.compat.v1.zeros_initializer())
        logits = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
        optimizer = make_optimizer(tf, args, rt.num_trainers)
        train_op = optimizer.minimize(loss, global_step=global_step)
    return Model(x, y, loss, accuracy, train_op, global_step, optimizer)


def hooks(tf, rt: TaskRuntime, model: Model, args) -> list:
    return [tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]


def trainer_rank(rt: TaskRuntime) -> int:
    """0 for the chief, then the workers in order: which shard of the data to read."""
    if rt.task.type == "chief":
        return 0
    return rt.task.index + rt.spec.num_tasks("chief")


def batches(x: np.ndarray, y: np.ndarray, batch_size: int, seed: int):
    """Endless shuffled mini-batches, a new permutation every epoch."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i:i + batch_size]
            yield x[idx], y[idx]


def run_ps(rt: TaskRuntime, tf, server, args) -> None:
    model = build_model(tf, rt, args)
    done = DoneSignal(tf, rt.spec)
    final_step = rt.serve_until_done(server, done, model.global_step if rt.task.index == 0 else None)
    if final_step is not None:
        rt.steps["global_final"] = int(final_step)


def run_trainer(rt: TaskRuntime, tf, server, args) -> None:
    from labkit.data import load_mnist

    data = load_mnist(limit=args.train_limit, test_limit=args.test_limit, seed=args.seed)
    rank, n = trainer_rank(rt), rt.num_trainers
    x_train = data.x_train.reshape(-1, NUM_FEATURES)[rank::n]
    y_train = data.y_train[rank::n]
    if len(x_train) < args.batch_size:
        raise ValueError(f"this trainer's shard has {len(x_train)} examples, fewer than --batch-size "
                         f"{args.batch_size}; raise --train-limit or lower --batch-size")
    test_feed = None
    model = build_model(tf, rt, args)
    done = DoneSignal(tf, rt.spec)
    if rt.is_chief:
        test_feed = {model.x: data.x_test.reshape(-1, NUM_FEATURES), model.y: data.y_test}
    rt.log(f"trainer {rank}/{n}: {len(x_train)} examples, batch {args.batch_size}, mode {args.mode}")

    train_rows, eval_rows = rt.series.setdefault("train", []), rt.series.setdefault("eval", [])
    local, next_eval = 0, args.eval_every
    stream = batches(x_train, y_train, args.batch_size, args.seed + rank)
    creator = rt.session_creator(server)
    with rt.timed("train"):
        t0 = rt.since_start()
        with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks(tf, rt, model, args),
                                                 stop_grace_period_secs=5) as sess:
            rt.timings["session_ready_s"] = rt.since_start()
            while not sess.should_stop():
                xb, yb = next(stream)
                _, loss, step = sess.run([model.train_op, model.loss, model.global_step], {model.x: xb, model.y: yb})
                local += 1
                if local % args.log_every == 0:
                    train_rows.append({"t": rt.since_start() - t0, "local_step": local, "global_step": int(step),
                                       "loss": float(loss)})
                if test_feed is not None and args.eval_every and step >= next_eval and not sess.should_stop():
                    test_loss, test_acc = sess.run([model.loss, model.accuracy], test_feed)
                    eval_rows.append({"t": rt.since_start() - t0, "global_step": int(step), "local_step": local,
                                      "test_loss": float(test_loss), "test_accuracy": float(test_acc)})
                    next_eval = step + args.eval_every
    rt.steps["local"] = local

    # The session is closed; the variables still live on the ps until we signal done.
    with tf.compat.v1.Session(server.target, config=rt.session_config()) as sess:
        rt.steps["global_at_exit"] = int(sess.run(model.global_step))
        if test_feed is not None:
            test_loss, test_acc = sess.run([model.loss, model.accuracy], test_feed)
            rt.metrics.update(test_loss=float(test_loss), test_accuracy=float(test_acc))
            eval_rows.append({"t": rt.since_start() - t0, "global_step": rt.steps["global_at_exit"],
                              "local_step": local, "test_loss": float(test_loss), "test_accuracy": float(test_acc)})
    rt.signal_done(server.target, done)
    rt.log(f"done: {local} local steps, global step {rt.steps['global_at_exit']}, metrics {rt.metrics}")


def main(argv=None) -> None:
    args = parse_args(argv)
    with TaskRuntime("ps_sgd", args=vars(args), sample_interval=args.sample_interval) as rt:
        tf = rt.tf()
        tf.compat.v1.disable_eager_execution()
        server = rt.server()
        if rt.task.type == "ps":
            run_ps(rt, tf, server, args)
        else:
            run_trainer(rt, tf, server, args)


if __name__ == "__main__":
    main()
