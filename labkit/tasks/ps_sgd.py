"""Softmax regression on MNIST with TensorFlow's parameter-server runtime (TF1 graph mode).

``python -m labkit.tasks.ps_sgd --mode sync --steps 300`` as every task of a cluster with a
``ps`` and a ``worker`` job (worker 0 is the chief, unless there is a ``chief`` job). The API is
the one the course taught: ``tf.compat.v1`` graph mode, ``replica_device_setter`` and a
``MonitoredSession`` per trainer. ``async``: every trainer applies its own gradients as fast as
it can. ``sync``: a round built by ``sync_round`` (Lab 2's exercise, sent with
``--round-source``; else the kit's reference) from the kit's ``SyncQueues``; ``check_round``
refuses a round that brings queues of its own. Weights start from NumPy's seeded draw, so a
grader can recompute a run's updates without TensorFlow.

A run stops at a step count, a target test loss or a number of local steps, through a stop step
on the ps that lets every sync trainer finish its round. Several configurations (``--configs``)
each get fresh state in a resource container of their own. More in docs/internals.md, section
labkit.tasks (stopping, report 002's start, the API's pitfalls and their fixes, the result).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from dataclasses import dataclass

import numpy as np

from labkit.wire import events
from labkit.tasks.common import (
    DoneSignal,
    TaskRuntime,
    define_function,
    mnist_for,
    parse_with_configs,
    run_graph_task,
    shared_queue,
)

MODES = ("async", "sync")
NUM_CLASSES, NUM_FEATURES = 10, 784
MNIST_TRAIN = 60000
# What a configuration may set; the rest (the sync round's source, the NIC, sampling) is the cluster's.
VARYING = (
    "mode",
    "batch_size",
    "steps",
    "epochs",
    "target_loss",
    "local_steps",
    "learning_rate",
    "train_limit",
    "test_limit",
    "eval_every",
    "log_every",
    "seed",
    "barrier",
)
NO_STOP = 2**62  # the stop step of a run that stops by --local-steps: never reached
# Stateful containers a sync round must not create: its state is the kit's SyncQueues.
CONTAINER_OPS = frozenset(
    {
        "ConditionalAccumulator",
        "SparseConditionalAccumulator",
        "ResourceConditionalAccumulator",
        "FIFOQueue",
        "FIFOQueueV2",
        "PaddingFIFOQueue",
        "PaddingFIFOQueueV2",
        "RandomShuffleQueue",
        "RandomShuffleQueueV2",
        "PriorityQueue",
        "PriorityQueueV2",
        "Barrier",
        "Stage",
        "MapStage",
        "OrderedMapStage",
    }
)
ROUND_SIGNATURE = "(tf, grads_and_vars, global_step, learning_rate, num_workers, shared)"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m labkit.tasks.ps_sgd", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=MODES, default="async")
    p.add_argument("--steps", type=int, default=300, help="stop when the global step reaches this")
    p.add_argument(
        "--epochs",
        type=float,
        default=None,
        help="stop after this many passes over the training set instead (sets --steps)",
    )
    p.add_argument(
        "--target-loss",
        type=float,
        default=None,
        help="stop once the chief's test loss is at or below this (checked every --eval-every global steps)",
    )
    p.add_argument(
        "--local-steps",
        type=int,
        default=None,
        help="each trainer stops after this many steps of its own (instead of a global stop step)",
    )
    p.add_argument("--batch-size", type=int, default=50, help="examples per trainer step")
    p.add_argument("--learning-rate", type=float, default=0.5)
    p.add_argument("--train-limit", type=int, default=10000, help="MNIST training examples (stratified subset)")
    p.add_argument("--test-limit", type=int, default=2000, help="MNIST test examples the chief evaluates on")
    p.add_argument(
        "--eval-every",
        type=int,
        default=100,
        help="chief: test loss/accuracy every N global steps (0: at the end only)",
    )
    p.add_argument("--log-every", type=int, default=25, help="record the training loss every N local steps")
    p.add_argument(
        "--barrier",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="trainers wait for each other before the first step",
    )
    p.add_argument(
        "--stop-grace",
        type=float,
        default=0.25,
        help="seconds the chief's session close waits for its threads (TensorFlow's default: 120)",
    )
    p.add_argument(
        "--round-source",
        default=None,
        help="Python source defining sync_round"
        + ROUND_SIGNATURE
        + ", the synchronous round, used instead of the kit's",
    )
    p.add_argument(
        "--recovery-wait-secs",
        type=float,
        default=0.2,
        help="seconds a non-chief trainer sleeps when it finds the variables uninitialized, before it "
        "looks again (TensorFlow's MonitoredTrainingSession: 30)",
    )
    p.add_argument(
        "--chief-delay-secs",
        type=float,
        default=0.0,
        help="the chief opens its session this many seconds late, as a chief that comes up last does",
    )
    p.add_argument("--save-weights", action="store_true", help="the chief's result holds the final weights")
    p.add_argument(
        "--nic",
        default="auto",
        help="interface whose bytes are counted while training (besides lo): "
        "auto (the one holding the task's address), a name, or none",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-interval", type=float, default=0.5, help="seconds between resource samples")
    return parse_with_configs(p, argv, VARYING, check_args)


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
    if args.local_steps is not None and args.local_steps <= 0:
        p.error(f"--local-steps must be positive, got {args.local_steps}")
    if args.local_steps is not None and (args.target_loss is not None or args.epochs is not None):
        p.error("--local-steps is a stopping rule of its own: give it without --target-loss and --epochs")
    if args.target_loss is not None and args.eval_every <= 0:
        p.error("--target-loss needs --eval-every > 0: the chief checks the test loss every N global steps")
    if args.eval_every < 0:
        p.error(f"--eval-every must be >= 0, got {args.eval_every}")


def last_step(args, num_trainers: int) -> int:
    """The global step to stop at: ``--steps``, or ``--epochs`` passes over the training set
    (async: one batch per global step; sync: one batch per trainer per global step); none
    (``NO_STOP``) with ``--local-steps``."""
    if getattr(args, "local_steps", None):
        return NO_STOP
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
    chief_op: object  # sync: what the chief's round runner runs again and again; async: None
    weights: tuple  # (W, b)
    stop_step: object  # variable on the ps: trainers stop once the global step reaches it
    after_step: object  # (global step, stop step) read after the train op
    stop_at: object  # placeholder: lower the stop step to this (never raises it)
    lower_stop: object


def init_weights(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The seeded start, W ~ N(0, 0.01^2) and b = 0, drawn by NumPy as Lab 1's trainers draw it,
    so a run's updates can be recomputed without TensorFlow."""
    from labkit.learning import lr

    return lr.init_weights(np.random.default_rng(seed))


def load_round(source: str | None):
    """``sync_round`` from ``--round-source`` (the notebook's), else the kit's reference (Lab 2's
    exercise, ``labkit.labs.lab2.solution``), which the student kit does not have."""
    if not source:
        from labkit.core.reference import solution

        return solution("lab2", "sync_round", "sync_round=sync_round, your function from the notebook")
    return define_function(source, "sync_round", "--round-source", ROUND_SIGNATURE)


@dataclass
class SyncQueues:
    """The ps's shared state of a synchronous round (the ``shared`` argument of ``sync_round``):

    - ``accumulators[i]``: a ``tf.compat.v1.ConditionalAccumulator`` on variable i's ps that
      averages the gradients pushed into it (``apply_grad(g, local_step)``); ``take_grad(n)``
      waits for n of them, returns their mean and starts the next round; a gradient whose
      local_step is below the rounds taken so far is dropped as stale;
    - ``tokens[w]``: worker w's token queue (a FIFO queue of int64 on the global step's ps, empty
      at the start). One per worker, unlike ``SyncReplicasOptimizer``'s one shared queue, from
      which a fast worker may take a slow one's token and push two gradients into one round;
    - ``worker``: the rank of the worker building the graph (0 is the chief).

    Every task builds the same names, so they are shared."""

    accumulators: list
    tokens: list
    worker: int

    @classmethod
    def build(cls, tf, variables, global_step, workers: int, worker: int) -> "SyncQueues":
        accumulators = []
        for v in variables:
            with tf.compat.v1.device(v.device):
                accumulators.append(
                    tf.compat.v1.ConditionalAccumulator(
                        v.dtype.base_dtype,
                        shape=v.shape,
                        reduction_type="MEAN",
                        shared_name=f"labkit_round_{v.op.name}",
                        name=f"labkit_round_{v.op.name}",
                    )
                )
        with tf.compat.v1.device(global_step.device):
            tokens = [
                tf.compat.v1.FIFOQueue(
                    -1, tf.int64, shapes=[[]], shared_name=f"labkit_round_tokens_{w}", name=f"labkit_round_tokens_{w}"
                )
                for w in range(workers)
            ]
        return cls(accumulators, tokens, worker)


def build_round(tf, round_fn, loss, variables, global_step, learning_rate: float, num_workers: int, worker: int):
    """``(train_op, chief_op)`` of one synchronous round for trainer ``worker``, built by
    ``round_fn`` on the global step's ps from the loss's gradients and the kit's ``SyncQueues``,
    and checked (``check_round``)."""
    grads_and_vars = list(zip(tf.gradients(loss, variables), variables))
    shared = SyncQueues.build(tf, variables, global_step, num_workers, worker)
    graph = tf.compat.v1.get_default_graph()
    before = set(graph.get_operations())
    with tf.compat.v1.device(global_step.device):
        built = round_fn(tf, grads_and_vars, global_step, learning_rate, num_workers, shared)
    return check_round(tf, built, [op for op in graph.get_operations() if op not in before])


def check_round(tf, built, new_ops) -> tuple:
    """``built``, what ``sync_round`` returned, as ``(worker_op, chief_op)``; a ValueError that
    says what to fix unless it is two ops or tensors of this graph, built without queues or
    accumulators of their own (``new_ops``: the ops it created)."""
    if not (isinstance(built, (tuple, list)) and len(built) == 2):
        raise ValueError(f"sync_round must return (worker_op, chief_op), got {type(built).__name__}")
    graph = tf.compat.v1.get_default_graph()
    ops = []
    for name, op in zip(("worker_op", "chief_op"), built):
        try:  # what a session can fetch: an op, a tensor, or what stands for one (an assignment's result)
            ops.append(graph.as_graph_element(op, allow_tensor=True, allow_operation=True))
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"sync_round's {name} must be an op or tensor of the graph it was called in, got "
                f"{type(op).__name__} ({e})"
            ) from None
    own = [op for op in new_ops if op.type in CONTAINER_OPS]
    if own:
        raise ValueError(
            f"sync_round created {len(own)} queue(s) or accumulator(s) of its own ({own[0].type} "
            f"{own[0].name!r}): build the round from shared.accumulators and shared.tokens "
            f"(SyncReplicasOptimizer builds its own; it is the part this exercise asks you to write)"
        )
    return tuple(ops)


def round_runner_hook(tf, chief_op, is_chief: bool):
    """Sync: a session hook that, on the chief, runs ``chief_op`` again and again on a background
    thread (a ``QueueRunner``, as ``SyncReplicasOptimizer``'s hook does), until the session closes.
    The queue it is given is a dummy: closing it stops the runner between rounds; the session's
    close cancels the round it waits in (the last round's tokens are out, no gradient will come),
    which ends it quietly too."""
    dummy = tf.compat.v1.FIFOQueue(1, tf.int32, shapes=[[]], name="labkit_round_runner")
    runner = tf.compat.v1.train.QueueRunner(
        dummy, [chief_op], queue_closed_exception_types=(tf.errors.OutOfRangeError, tf.errors.CancelledError)
    )

    class RoundRunner(tf.compat.v1.train.SessionRunHook):
        def after_create_session(self, session, coord):
            if is_chief:
                runner.create_threads(session, coord=coord, daemon=True, start=True)

    return RoundRunner()


def build_model(tf, rt: TaskRuntime, args) -> Model:
    """Softmax regression (784 x 10 + 10 = 7,850 weights), variables on the ps tasks.

    Every task, the ps included, builds the same variables, so they get the same names and the
    same ps placement everywhere. Only the trainers build the sync round: the ps runs no line of
    the ``--round-source`` (its process is the one whose readings of the variables a grader can
    trust), and serves the ops the trainers place on it."""
    tf.compat.v1.set_random_seed(args.seed)
    worker_device = f"/job:{rt.task.type}/task:{rt.task.index}"
    setter = tf.compat.v1.train.replica_device_setter(worker_device=worker_device, cluster=rt.spec.as_dict())
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        stop_step = tf.compat.v1.get_variable(
            "stop_step",
            dtype=tf.int64,
            trainable=False,
            initializer=tf.constant(last_step(args, rt.num_trainers), tf.int64),
        )
        x = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES], name="x")
        y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
        W0, b0 = init_weights(args.seed)
        w = tf.compat.v1.get_variable("weights", initializer=tf.constant(W0))
        b = tf.compat.v1.get_variable("bias", initializer=tf.constant(b0))
        logits = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
        chief_op = None
        if args.mode == "async":
            sgd = tf.compat.v1.train.GradientDescentOptimizer(args.learning_rate)
            train_op = sgd.minimize(loss, global_step=global_step)
        elif rt.task.type == "ps":
            train_op = tf.no_op(name="ps_serves_the_round")
        else:
            train_op, chief_op = build_round(
                tf,
                load_round(args.round_source),
                loss,
                [w, b],
                global_step,
                args.learning_rate,
                rt.num_trainers,
                rt.trainer_rank,
            )
        with tf.control_dependencies([train_op]):
            after_step = (tf.identity(global_step.read_value()), tf.identity(stop_step.read_value()))
        stop_at = tf.compat.v1.placeholder(tf.int64, [], name="stop_at")
        lower_stop = stop_step.assign(tf.minimum(stop_step, stop_at))
    return Model(
        x, y, loss, accuracy, train_op, global_step, chief_op, (w, b), stop_step, after_step, stop_at, lower_stop
    )


def hooks(tf, rt: TaskRuntime, model: Model) -> list:
    """Sync: the round's runner (chief: applies the aggregated gradients, round after round).
    The token queues start empty, so no trainer can take a second step before every
    trainer's first gradient has been applied."""
    if model.chief_op is not None:
        return [round_runner_hook(tf, model.chief_op, rt.is_chief)]
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
                raise TimeoutError(
                    f"waited {timeout:.0f} s at the start barrier for {self.trainers} trainers; "
                    f"{arrived} arrived (see the other tasks' logs)"
                )
            time.sleep(poll)
        return time.monotonic() - t


def batches(x: np.ndarray, y: np.ndarray, batch_size: int, seed: int):
    """Endless shuffled mini-batches, a new permutation every epoch."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size]
            yield x[idx], y[idx]


@contextlib.contextmanager
def fresh_graph(tf, config):
    """A graph of the configuration's own, its stateful ops in its own resource container (on
    every task the same: the ps's variables and queues of one configuration are never another's)."""
    graph = tf.Graph()
    with graph.as_default(), graph.container(config.name or ""):
        yield graph


def run_ps(rt: TaskRuntime, tf, server, args) -> None:
    """Serve each configuration until every trainer is done, then read, in this process (which
    runs none of the notebook's code), the final global step (ps 0) and, with
    ``--save-weights``, the weights that live on this ps (``ps_readings``)."""
    for config in args.plan:
        with rt.configuration(config), fresh_graph(tf, config):
            model = build_model(tf, rt, config.args)
            done = DoneSignal(tf, rt.spec)
            fetches = ps_readings(tf, rt, model, config.args.save_weights)
            final = rt.serve_until_done(server, done, fetches or None, last=config.index == config.count - 1) or {}
            if "global_step" in final:
                rt.steps["global_final"] = int(final["global_step"])
            if final.get("weights"):
                rt.result["weights"] = {k: v.tolist() for k, v in final["weights"].items()}


def ps_readings(tf, rt: TaskRuntime, model: Model, save_weights: bool) -> dict:
    """What a ps reads once the trainers are done: the global step on ps 0; with ``save_weights``
    the weights placed on this ps, as ``{"W": ..., "b": ...}`` (with several ps tasks each holds
    its share, and a reader merges their result files)."""
    fetches: dict = {"global_step": model.global_step} if rt.task.index == 0 else {}
    if save_weights:
        here = {
            name: v
            for name, v in zip(("W", "b"), model.weights)
            if (d := tf.DeviceSpec.from_string(v.device)).job == "ps" and d.task == rt.task.index
        }
        if here:
            fetches["weights"] = here
    return fetches


def run_trainer(rt: TaskRuntime, tf, server, args) -> None:
    loaded: dict = {}
    for config in args.plan:
        with rt.configuration(config), fresh_graph(tf, config):
            train(rt, tf, server, config.args, mnist_for(config.args, loaded))


def train(rt: TaskRuntime, tf, server, args, data) -> None:
    """One trainer's run of one configuration, from building the graph to signalling done."""
    from labkit.measure.sockets import Meter, pick_nic, traffic

    rank, n = rt.trainer_rank, rt.num_trainers
    x_train = data.x_train.reshape(-1, NUM_FEATURES)[rank::n]
    y_train = data.y_train[rank::n]
    if len(x_train) < args.batch_size:
        raise ValueError(
            f"this trainer's shard has {len(x_train)} examples, fewer than --batch-size "
            f"{args.batch_size}; raise --train-limit or lower --batch-size"
        )
    model = build_model(tf, rt, args)
    done = DoneSignal(tf, rt.spec)
    barrier = StartBarrier(tf, n)
    test_feed = None
    if rt.is_chief:
        test_feed = {model.x: data.x_test.reshape(-1, NUM_FEATURES), model.y: data.y_test}
    mode = args.mode
    until = (
        f"{args.local_steps} steps of its own"
        if args.local_steps
        else f"global step {last_step(args, n)}" + (f" or test loss <= {args.target_loss}" if args.target_loss else "")
    )
    rt.log(f"trainer {rank}/{n}: {len(x_train)} examples, batch {args.batch_size}, mode {mode}, stop at {until}")

    train_rows, eval_rows = rt.series.setdefault("train", []), rt.series.setdefault("eval", [])
    local, step, next_eval = 0, 0, args.eval_every
    stop = {"reason": "steps"}
    stream = batches(x_train, y_train, args.batch_size, args.seed + rank)
    nic = pick_nic(args.nic, rt.task.host)
    meter = Meter(nics=sorted({n for n in (nic, "lo") if n}))  # its NIC and lo: its traffic with tasks on its host
    creator = rt.session_creator(server, recovery_wait_secs=args.recovery_wait_secs)
    if rt.is_chief and args.chief_delay_secs > 0:
        rt.log(f"opening the session {args.chief_delay_secs:g} s late (--chief-delay-secs)")
        time.sleep(args.chief_delay_secs)
    with tf.compat.v1.train.MonitoredSession(
        session_creator=creator, hooks=hooks(tf, rt, model), stop_grace_period_secs=args.stop_grace
    ) as sess:
        rt.timings["session_ready_s"] = rt.since_start()

        def raw(fetches, feed=None):  # without the hooks
            return sess.run_step_fn(lambda step_context: step_context.session.run(fetches, feed))

        if args.barrier:
            rt.timings["barrier_s"] = barrier.wait(raw)
        global_start, stop_step = (int(v) for v in raw([model.global_step, model.stop_step]))
        step = global_start
        if global_start >= stop_step:  # the others stopped before this trainer got here (no barrier)
            stop.update(
                reason="target" if stop_step < last_step(args, n) else "steps",
                at_global_step=stop_step,
                before_first_step=True,
            )
        meter.start()
        rt.first_step()
        with rt.timed("train"):
            t0 = time.monotonic()
            while not sess.should_stop() and not stop.get("before_first_step"):
                xb, yb = next(stream)
                loss, (step, stop_step) = sess.run([model.loss, model.after_step], {model.x: xb, model.y: yb})
                local += 1
                if local % args.log_every == 0:
                    train_rows.append(
                        {"t": time.monotonic() - t0, "local_step": local, "global_step": int(step), "loss": float(loss)}
                    )
                if args.local_steps and local >= args.local_steps:
                    stop.update(reason="local_steps", at_global_step=int(step))
                    break
                if step >= stop_step:
                    if stop["reason"] != "target":  # the chief lowered the stop step, or --steps was reached
                        stop.update(
                            reason="target" if stop_step < last_step(args, n) else "steps",
                            at_global_step=int(stop_step),
                        )
                    break
                if test_feed is not None and args.eval_every and step >= next_eval:
                    test_loss, test_acc = raw([model.loss, model.accuracy], test_feed)
                    eval_rows.append(
                        {
                            "t": time.monotonic() - t0,
                            "global_step": int(step),
                            "local_step": local,
                            "test_loss": float(test_loss),
                            "test_accuracy": float(test_acc),
                        }
                    )
                    next_eval = step + args.eval_every
                    rt.log(f"global step {step}: test loss {test_loss:.4f}, accuracy {test_acc:.4f}")
                    rt.emit(
                        events.Eval(
                            run=None,
                            global_step=int(step),
                            metrics={"test_loss": float(test_loss), "test_accuracy": float(test_acc)},
                        )
                    )
                    if args.target_loss is not None and test_loss <= args.target_loss and stop["reason"] != "target":
                        # everyone stops after the next global step (sync trainers are already making it)
                        raw(model.lower_stop, {model.stop_at: step + 1})
                        stop.update(
                            reason="target",
                            target_loss=args.target_loss,
                            reached_at_global_step=int(step),
                            test_loss=float(test_loss),
                            at_global_step=int(step) + 1,
                        )
                        rt.log(
                            f"test loss {test_loss:.4f} <= {args.target_loss} at global step {step}: "
                            f"stopping at {step + 1}"
                        )
        reading = meter.stop()
    rt.steps["local"] = local
    rt.steps["global_start"] = global_start
    rt.result["stop"] = stop
    rt.result["mode"] = mode
    rt.result["traffic"] = {**traffic([reading], local), "global_steps": int(step) - global_start}

    # The session is closed; the variables still live on the ps until we signal done.
    with tf.compat.v1.Session(server.target, config=rt.session_config()) as plain:
        rt.steps["global_at_exit"] = int(plain.run(model.global_step))
        if rt.is_chief and args.save_weights:
            W, b = plain.run(list(model.weights))
            rt.result["weights"] = {"W": W.tolist(), "b": b.tolist()}
        if test_feed is not None:
            test_loss, test_acc = plain.run([model.loss, model.accuracy], test_feed)
            rt.metrics.update(test_loss=float(test_loss), test_accuracy=float(test_acc))
            eval_rows.append(
                {
                    "t": rt.timings["train_s"],
                    "global_step": rt.steps["global_at_exit"],
                    "local_step": local,
                    "test_loss": float(test_loss),
                    "test_accuracy": float(test_acc),
                }
            )
    rt.signal_done(server.target, done)
    rt.log(f"done: {local} local steps, global step {rt.steps['global_at_exit']}, stop {stop}, metrics {rt.metrics}")
    rt.emit(
        events.Done(
            run=None,
            local_steps=local,
            global_steps=rt.steps["global_at_exit"],
            seconds=rt.timings["train_s"],
            metrics=dict(rt.metrics),
        )
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    with TaskRuntime(
        "ps_sgd", args={k: v for k, v in vars(args).items() if k != "plan"}, sample_interval=args.sample_interval
    ) as rt:
        run_graph_task(rt, args, run_ps, run_trainer)


if __name__ == "__main__":
    main()
