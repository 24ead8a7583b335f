"""Sparse logistic regression on a parameter server, synchronous or asynchronous (Lab 3).

``python -m labkit.tasks.ps_sparse_lr --runs sync:100 async:100 --data click`` as every task
of a cluster with one ``ps`` and 1-N ``worker`` tasks (worker 0 is the chief). Each ``--runs``
item (``MODE:BATCH``) is one run from zero weights, all in one cluster, so TensorFlow's start-up
is paid once. TF1 graph mode, as the course taught it: ps 0 alone holds the weight vector, and a
worker step gathers and updates only the batch's unique features on the ps, so bytes per step
are O(unique features). ``async``: each worker scatters its update as fast as it can. ``sync``:
the round is Lab 2's exercise (the student's ``sync_round``, else the kit's reference) on a
summing ``SparseConditionalAccumulator``; not ``SyncReplicasOptimizer``, whose sparse "mean"
gives a rare feature N times a common one's step. Every run starts behind a barrier.

Data: ``a9a`` or ``click`` (each worker makes its own slice). More in docs/internals.md,
section labkit.tasks (a step's traffic, the modes, the barrier, the result file's fields).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass

import numpy as np

from labkit.wire import events
from labkit.measure import sockets
from labkit.measure.sockets import Meter, step_bytes
from labkit.tasks.common import DoneSignal, TaskRuntime, define_function, run_graph_task, shared_queue
from labkit.tasks.ps_sgd import ROUND_SIGNATURE, SyncQueues, check_round, load_round

MODES = ("async", "sync")
DATASETS = ("a9a", "click")
WEIGHTS_FILE = "weights"  # + "-<mode>-b<batch>.npz", one per run


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m labkit.tasks.ps_sparse_lr", description=__doc__.splitlines()[0])
    p.add_argument(
        "--runs",
        nargs="+",
        default=["async:100"],
        metavar="MODE:BATCH",
        help=f"training runs in order, MODE one of {MODES}, BATCH examples per worker step",
    )
    p.add_argument("--data", choices=DATASETS, default="click")
    p.add_argument("--num-features", type=int, default=1_000_000, help="click data: hashed features")
    p.add_argument("--train-rows", type=int, default=200_000, help="click data: training rows (all workers)")
    p.add_argument("--test-rows", type=int, default=10_000, help="click data: test rows the chief evaluates on")
    p.add_argument("--click-seed", type=int, default=0, help="click data: the data set's seed")
    p.add_argument("--samples", type=int, default=200_000, help="training examples over all workers")
    p.add_argument("--learning-rate", type=float, default=0.5)
    p.add_argument(
        "--eval-every",
        type=int,
        default=20_000,
        help="chief: test error every N training samples (0: at the start and the end only)",
    )
    p.add_argument("--log-every", type=int, default=50, help="record the training loss every N local steps")
    p.add_argument("--seed", type=int, default=0, help="shuffling")
    p.add_argument("--save-weights", action="store_true", help="chief: write each run's weights to the run directory")
    p.add_argument(
        "--gradient-source",
        default=None,
        help="Python source defining sparse_lr_gradient(w, x, y) -> "
        "(loss, IndexedSlices), labels in {0, 1} (the notebook's "
        "own); default the kit's reference",
    )
    p.add_argument(
        "--round-source",
        default=None,
        help="Python source defining sync_round"
        + ROUND_SIGNATURE
        + " (Lab 2's exercise), the synchronous round; default the kit's reference",
    )
    p.add_argument("--sample-interval", type=float, default=0.5, help="seconds between resource samples")
    args = p.parse_args(argv)
    for name in ("num_features", "train_rows", "test_rows", "samples"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if not args.learning_rate > 0:
        p.error(f"--learning-rate must be positive, got {args.learning_rate}")
    try:
        args.plan = parse_runs(args.runs)
    except ValueError as e:
        p.error(str(e))
    return args


@dataclass(frozen=True)
class Run:
    mode: str
    batch_size: int

    @property
    def label(self) -> str:
        return f"{self.mode} b{self.batch_size}"

    @property
    def file_label(self) -> str:
        return f"{self.mode}-b{self.batch_size}"


def parse_runs(items) -> list[Run]:
    """``["sync:100", "async:100"]`` -> Runs, with errors that say how to write one."""
    runs = []
    for item in items:
        mode, sep, batch = str(item).partition(":")
        if not sep or mode not in MODES or not batch.isdigit() or int(batch) < 1:
            raise ValueError(
                f"run {item!r} must be MODE:BATCH with MODE one of {MODES} and BATCH a positive integer, e.g. sync:100"
            )
        runs.append(Run(mode, int(batch)))
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"runs {items} repeat a configuration; each MODE:BATCH may appear once")
    return runs


# ----------------------------------------------------------------------------- data


def load_rows(
    data: str,
    split: str,
    *,
    num_features: int = 1_000_000,
    rows: int | None = None,
    start: int = 0,
    click_seed: int = 0,
):
    """The rows of a data set as ``labkit.datasets.loaders.SparseData`` (no TensorFlow).

    ``a9a``: the whole split (``rows``/``start`` ignored). ``click``: rows
    ``start .. start+rows`` of the synthetic split with ``ClickSpec(num_features, seed=click_seed)``.
    """
    if data == "a9a":
        from labkit.datasets.loaders import load_a9a

        train, test = load_a9a()
        return train if split == "train" else test
    if data == "click":
        from labkit.datasets import clickdata

        if rows is None:
            raise ValueError("click data needs rows=: how many rows of the split to generate")
        return clickdata.generate(
            clickdata.ClickSpec(num_features=int(num_features), seed=click_seed), rows, split, start
        ).data
    raise ValueError(f"data must be one of {DATASETS}, got {data!r}")


def data_settings(args) -> dict:
    """What identifies the test set: saved with the weights, so a checker can rebuild it."""
    return {
        "data": args.data,
        "num_features": num_features_of(args),
        "test_rows": args.test_rows,
        "click_seed": args.click_seed,
    }


def num_features_of(args) -> int:
    if args.data == "a9a":
        from labkit.datasets.loaders import A9A_FEATURES

        return A9A_FEATURES
    return args.num_features


def train_shard(args, rank: int, n: int):
    """This worker's training rows: a9a rows rank::n; click rows of its contiguous slice."""
    if args.data == "a9a":
        full = load_rows("a9a", "train")
        return full.rows(np.arange(rank, len(full), n))
    bounds = np.linspace(0, args.train_rows, n + 1).astype(np.int64)
    return load_rows(
        "click",
        "train",
        num_features=args.num_features,
        rows=int(bounds[rank + 1] - bounds[rank]),
        start=int(bounds[rank]),
        click_seed=args.click_seed,
    )


def eval_set(args):
    """The test rows the chief evaluates on."""
    return load_rows(args.data, "test", num_features=args.num_features, rows=args.test_rows, click_seed=args.click_seed)


def batches(data, batch_size: int, seed: int):
    """Endless mini-batches of NumPy arrays for the sparse placeholders, reshuffled every epoch.
    A shard smaller than a batch is repeated to fill it."""
    from labkit.learning.sparse import csr_batch

    rng = np.random.default_rng(seed)
    n = len(data)
    while True:
        order = rng.permutation(n)
        if n < batch_size:
            order = np.resize(order, batch_size)
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield csr_batch(data, order[i : i + batch_size])


def evaluate_arrays(w: np.ndarray, data) -> dict:
    """Accuracy and mean log-loss of a dense NumPy weight vector on a SparseData (no TensorFlow)."""
    rows = np.repeat(np.arange(len(data)), np.diff(data.indptr))
    z = np.bincount(rows, weights=data.values * w[data.indices], minlength=len(data))
    y = data.labels.astype(np.float64)
    logloss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    return {"accuracy": float(np.mean((z > 0) == (y > 0.5))), "logloss": logloss, "rows": len(data)}


def load_weights(path) -> tuple[np.ndarray, dict]:
    """``(w, settings)`` from a ``weights-*.npz`` the chief saved (``--save-weights``)."""
    with np.load(path) as f:
        settings = json.loads(str(f["settings"]))
        w = np.zeros(int(settings["num_features"]), np.float32)
        w[f["indices"]] = f["values"]
    return w, settings


# ----------------------------------------------------------------------------- the graph


@dataclass
class Graph:
    w: object
    global_step: object
    x: object  # sparse placeholder [batch, num_features]
    y: object
    loss: object
    n_unique: object
    async_step: object  # scatter + global_step += 1; returns the new global step
    sync_step: object  # the round's worker_op, then the global step
    local_step: object  # sync: the global step the gradient is computed at (fed; a round may ignore it)
    aggregate: object  # sync, run by the ps: the round's chief_op
    test_x: object
    test_y: object
    test_accuracy: object
    test_logloss: object
    arrive: object  # barrier: "I am ready" ...
    arrived: object  # ... how many have said so
    reset: object  # chief: w = 0
    go: object  # chief: let the n - 1 others start
    wait_go: object  # others: wait for the chief's go
    done: DoneSignal


def load_gradient(source: str | None):
    """``sparse_lr_gradient`` from ``--gradient-source`` (the notebook's), else the kit's reference
    (Lab 3's exercise, ``labkit.labs.lab3.solution``), which the student kit does not have."""
    if source:
        return define_function(source, "sparse_lr_gradient", "--gradient-source", "(w, x, y)")
    from labkit.learning.sparse import reference_gradient

    return reference_gradient()


class SparseRound:
    """Sparse stand-ins for what Lab 2's ``sync_round`` uses, so the same function builds this
    task's round: an accumulator whose ``apply_grad(IndexedSlices, local_step)`` pushes 1/N of
    the gradient into a summing ``SparseConditionalAccumulator`` and whose ``take_grad(n)``
    returns their sum (the global batch's mean gradient) as ``Slices``; ``Slices`` scale by a
    number (``learning_rate * mean``); ``Variable.assign_sub(Slices)`` scatters them into ``w``."""

    class Slices:
        def __init__(self, tf, values, indices, shape):
            self.tf, self.values, self.indices, self.dense_shape = tf, values, indices, shape

        def __mul__(self, k):
            return SparseRound.Slices(self.tf, self.values * k, self.indices, self.dense_shape)

        __rmul__ = __mul__

    class Accumulator:
        def __init__(self, tf, accumulator, shape, n: int):
            self.tf, self.accumulator, self.shape, self.n = tf, accumulator, shape, n

        def apply_grad(self, grad, local_step=0, name=None):
            tf = self.tf
            local_step = tf.cast(tf.convert_to_tensor(local_step), tf.int64)
            return self.accumulator.apply_indexed_slices_grad(
                tf.IndexedSlices(grad.values / float(self.n), grad.indices, self.shape), local_step=local_step
            )

        def take_grad(self, num_required, name=None):
            total = self.accumulator.take_indexed_slices_grad(num_required)
            return SparseRound.Slices(self.tf, total.values, total.indices, self.shape)

    class Variable:
        def __init__(self, tf, var, shape):
            self.tf, self.var, self.shape = tf, var, shape
            self.device, self.dtype, self.name = var.device, var.dtype, var.name

        def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
            from labkit.learning import sparse

            if isinstance(delta, SparseRound.Slices):
                return sparse.apply_sparse(
                    self.var, self.tf.IndexedSlices(delta.values, delta.indices, self.shape), 1.0
                )
            raise TypeError(
                "sync_round applied something other than the accumulator's mean to w: apply "
                "learning_rate * take_grad(...) with var.assign_sub"
            )


def build_sync_round(tf, round_fn, grad, w, global_step, num_features: int, learning_rate: float, n: int, rank: int):
    """``(worker_op, chief_op)`` of the student's ``round_fn`` on this task's sparse gradient."""
    shape = tf.constant([num_features], tf.int64)
    with tf.compat.v1.device(global_step.device):
        tokens = [
            tf.compat.v1.FIFOQueue(
                -1,
                tf.int64,
                shapes=[[]],
                shared_name=f"labkit_sparse_lr_round_token{i}",
                name=f"labkit_sparse_lr_round_token{i}",
            )
            for i in range(n)
        ]
    with tf.compat.v1.device(w.device):
        accumulator = tf.compat.v1.SparseConditionalAccumulator(
            tf.float32, shape=tf.TensorShape([num_features]), shared_name="labkit_sparse_lr_grad", reduction_type="SUM"
        )
    shared = SyncQueues([SparseRound.Accumulator(tf, accumulator, shape, n)], tokens, rank)
    graph = tf.compat.v1.get_default_graph()
    before = set(graph.get_operations())
    with tf.compat.v1.device(global_step.device):
        built = round_fn(tf, [(grad, SparseRound.Variable(tf, w, shape))], global_step, learning_rate, n, shared)
    return check_round(tf, built, [op for op in graph.get_operations() if op not in before])


def build_graph(tf, rt: TaskRuntime, args, num_features: int) -> Graph:
    """The same graph on every task (the ps included), so shared variables and queues match."""
    from labkit.learning import sparse

    n = rt.num_trainers
    ps = "/job:ps/task:0"
    here = f"/job:{rt.task.type}/task:{rt.task.index}"
    with tf.compat.v1.device(ps):
        w = tf.compat.v1.get_variable(
            "w", [num_features], tf.float32, tf.compat.v1.zeros_initializer(), use_resource=True
        )
        global_step = tf.compat.v1.train.get_or_create_global_step()
        reset = w.assign(tf.zeros([num_features], tf.float32), read_value=False)
    arrived_q = shared_queue(tf, "sparse_lr_arrived", 0, n * len(args.plan))
    go_q = shared_queue(tf, "sparse_lr_go", 0, max(n - 1, 1))
    with tf.compat.v1.device(here):
        x = tf.compat.v1.sparse_placeholder(tf.float32, [None, num_features], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [None], name="y")
        loss, grad = load_gradient(args.gradient_source)(w, x, y)  # the gather runs on the ps, the rest here
        n_unique = tf.size(grad.indices)
        # async: this worker's own update, applied at once
        with tf.control_dependencies([sparse.apply_sparse(w, grad, args.learning_rate)]):  # a scatter on the ps
            async_step = global_step.assign_add(1)
        # sync: the student's round (Lab 2's exercise) on the sparse gradient; the ps runs its chief_op
        local_step = tf.compat.v1.placeholder_with_default(tf.constant(0, tf.int64), [], name="local_step")
        rank = rt.trainer_rank if rt.task.type != "ps" else 0
        worker_op, aggregate = build_sync_round(
            tf, load_round(args.round_source), grad, w, global_step, num_features, args.learning_rate, n, rank
        )
        with tf.control_dependencies([worker_op]):
            sync_step = tf.identity(global_step)  # the round this worker's gradient went into, applied
        test_x = tf.compat.v1.sparse_placeholder(tf.float32, [None, num_features], name="test_x")
        test_y = tf.compat.v1.placeholder(tf.float32, [None], name="test_y")
        z = sparse.predict_logits(w, test_x)
        test_accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(z > 0, tf.float32), test_y), tf.float32))
        test_logloss = tf.reduce_mean(tf.nn.softplus(z) - test_y * z)
    go = go_q.enqueue_many(tf.ones([max(n - 1, 1)], tf.int32)) if n > 1 else tf.no_op()
    return Graph(
        w,
        global_step,
        x,
        y,
        loss,
        n_unique,
        async_step,
        sync_step,
        local_step,
        aggregate,
        test_x,
        test_y,
        test_accuracy,
        test_logloss,
        arrived_q.enqueue(1),
        arrived_q.size(),
        reset,
        go,
        go_q.dequeue(),
        DoneSignal(tf, rt.spec),
    )


def samples_per_step(run: Run, n: int) -> int:
    """Training examples per global step: one worker batch (async), a round of n (sync)."""
    return run.batch_size * (n if run.mode == "sync" else 1)


def global_steps(samples: int, run: Run, n: int) -> int:
    """Global steps for a run's sample budget (at least one)."""
    return max(1, math.ceil(samples / samples_per_step(run, n)))


# ----------------------------------------------------------------------------- tasks


def run_ps(rt: TaskRuntime, tf, server, args) -> None:
    g = build_graph(tf, rt, args, num_features_of(args))
    runs = rt.result.setdefault("runs", [])
    with tf.compat.v1.Session(server.target, config=rt.session_config()) as sess:
        for run in args.plan:
            entry = {"label": run.label, "mode": run.mode, "batch_size": run.batch_size, "steps": {}}
            runs.append(entry)
            if run.mode == "sync":  # the aggregation loop: n gradients in, one update, n tokens out
                rounds = global_steps(args.samples, run, rt.num_trainers)
                with rt.timed(run.label):
                    for _ in range(rounds):
                        sess.run(g.aggregate)
                entry["steps"]["rounds"] = rounds
                entry["train_s"] = rt.timings[f"{run.label}_s"]
                rt.log(f"{run.label}: aggregated {rounds} rounds of {rt.num_trainers} gradients")
    final = rt.serve_until_done(server, g.done, g.global_step)
    rt.steps["global_final"] = int(final)


class Trainer:
    """One trainer task: its data, its session, and one ``train`` per run."""

    def __init__(self, rt: TaskRuntime, tf, server, args):
        from labkit.learning.sparse import csr_batch

        self.rt, self.args = rt, args
        self.rank, self.n = rt.trainer_rank, rt.num_trainers
        self.num_features = num_features_of(args)
        with rt.timed("data"):
            self.shard = train_shard(args, self.rank, self.n)
            test = eval_set(args) if rt.is_chief else None
        self.g = build_graph(tf, rt, args, self.num_features)
        self.test_feed = None
        if test is not None:
            ti, tv, ts, tl = csr_batch(test)
            self.test_feed = {self.g.test_x: (ti, tv, ts), self.g.test_y: tl}
        rt.log(
            f"trainer {self.rank}/{self.n}: {len(self.shard):,} rows, {self.num_features:,} features, "
            f"runs {[r.label for r in args.plan]}"
        )
        self.sess = rt.session_creator(server).create_session()
        rt.timings["session_ready_s"] = rt.since_start()
        self.meter = Meter()  # this process's own sockets: exactly its traffic, whatever else uses lo
        self.eval_s = 0.0

    def start_together(self, index: int) -> int:
        """The barrier before run ``index``: everyone has arrived (finished the run before);
        the chief zeroes w and says go. Returns the global step the run starts at."""
        g, sess = self.g, self.sess
        t = time.monotonic()
        sess.run(g.arrive)
        if self.rt.is_chief:
            while sess.run(g.arrived) < self.n * (index + 1):
                time.sleep(0.05)
            sess.run(g.reset)
            sess.run(g.go)
        else:
            sess.run(g.wait_go)
        self.rt.timings["barrier_s"] = self.rt.timings.get("barrier_s", 0.0) + time.monotonic() - t
        return int(sess.run(g.global_step))

    def evaluate(self, entry: dict, step: int, local: int, t0: float) -> dict:
        """Test accuracy and log-loss now (chief); its time and traffic are kept out of the steps'."""
        started = time.monotonic()
        self.meter.pause()
        acc, ll = self.sess.run([self.g.test_accuracy, self.g.test_logloss], self.test_feed)
        self.meter.resume()
        self.eval_s += time.monotonic() - started
        row = {
            "t": time.monotonic() - t0,
            "samples": step * entry["samples_per_step"],
            "global_step": step,
            "local_step": local,
            "test_accuracy": float(acc),
            "test_error": 1.0 - float(acc),
            "test_logloss": float(ll),
        }
        entry["series"]["eval"].append(row)
        self.rt.log(
            f"{entry['label']} eval samples={row['samples']} global_step={step} "
            f"test_error={row['test_error']:.4f} test_logloss={row['test_logloss']:.4f}"
        )
        self.rt.emit(
            events.Eval(
                run=entry["label"],
                global_step=step,
                samples=row["samples"],
                metrics={k: row[k] for k in ("test_error", "test_accuracy", "test_logloss")},
            )
        )
        return row

    def train(self, index: int, run: Run) -> dict:
        from labkit.learning.costmodel import dense_ps_step_bytes, sparse_ps_step_bytes

        rt, g, sess, args = self.rt, self.g, self.sess, self.args
        target = global_steps(args.samples, run, self.n)
        entry = {
            "label": run.label,
            "mode": run.mode,
            "batch_size": run.batch_size,
            "samples_per_step": samples_per_step(run, self.n),
            "steps": {"target": target},
            "metrics": {},
            "series": {"train": [], "eval": []},
        }
        g0 = self.start_together(index)
        fetch = [g.sync_step if run.mode == "sync" else g.async_step, g.loss, g.n_unique]
        stream = batches(self.shard, run.batch_size, args.seed + 1000 * self.rank + index)
        local, step, unique_sum = 0, 0, 0
        next_eval = args.eval_every
        self.eval_s = 0.0
        chief = self.test_feed is not None
        with rt.timed(run.label):
            t0 = time.monotonic()
            self.meter.start()
            if chief:
                self.evaluate(entry, 0, 0, t0)
            while step < target:
                idx, vals, shp, labels = next(stream)
                feed = {g.x: (idx, vals, shp), g.y: labels}
                if run.mode == "sync":
                    feed[g.local_step] = g0 + step  # the global step this gradient is computed at
                new, loss, u = sess.run(fetch, feed)
                step = int(new) - g0
                local += 1
                unique_sum += int(u)
                if local % args.log_every == 0:
                    entry["series"]["train"].append(
                        {
                            "t": time.monotonic() - t0,
                            "local_step": local,
                            "global_step": step,
                            "loss": float(loss),
                            "unique": int(u),
                        }
                    )
                if chief and args.eval_every and step * entry["samples_per_step"] >= next_eval and step < target:
                    self.evaluate(entry, step, local, t0)
                    next_eval = (step * entry["samples_per_step"] // args.eval_every + 1) * args.eval_every
            reading = self.meter.stop()
        # the chief's evaluations are not training: in sync every worker waits for them too
        train_s = entry["train_s"] = rt.timings[f"{run.label}_s"] - self.eval_s
        entry["eval_s"] = self.eval_s
        entry["steps"].update({"local": local, "global": step})
        unique = unique_sum / max(local, 1)
        m = entry["metrics"]
        m.update(
            unique_per_step=unique,
            bound_bytes_per_step=sparse_ps_step_bytes(unique),
            dense_bytes_per_step=dense_ps_step_bytes(self.num_features),
            num_features=self.num_features,
            s_per_1k_global_steps=1000 * train_s / max(step, 1),
            s_per_1k_local_steps=1000 * train_s / max(local, 1),
            examples_per_s=local * run.batch_size / train_s,
        )
        entry["traffic"] = sockets.traffic([reading], local)
        if chief:
            final = self.evaluate(entry, int(sess.run(g.global_step)) - g0, local, t0)
            m.update(
                test_accuracy=final["test_accuracy"],
                test_error=final["test_error"],
                test_logloss=final["test_logloss"],
                samples=final["samples"],
            )
            if args.save_weights:
                w = sess.run(g.w)  # the whole vector, once, at the end of the run
                nz = np.flatnonzero(w)
                path = rt.run_dir / f"{WEIGHTS_FILE}-{run.file_label}.npz"
                np.savez_compressed(path, indices=nz, values=w[nz], settings=json.dumps(data_settings(args)))
                entry["weights"] = path.name
        moved = step_bytes(entry["traffic"])
        rt.log(
            f"{run.label}: {local} local steps of {step} global, {train_s:.1f} s, "
            f"{moved if moved is not None else math.nan:,.0f} B/step (bound {m['bound_bytes_per_step']:,.0f})"
            + (f", test accuracy {m['test_accuracy']:.4f}" if chief else "")
        )
        rt.emit(
            events.Done(
                run=run.label,
                local_steps=local,
                global_steps=step,
                seconds=train_s,
                metrics={k: v for k, v in m.items() if k.startswith("test_")},
            )
        )
        return entry

    def finish(self, server) -> None:
        self.rt.steps["global_at_exit"] = int(self.sess.run(self.g.global_step))
        self.sess.close()
        self.rt.signal_done(server.target, self.g.done)


def run_trainer(rt: TaskRuntime, tf, server, args) -> None:
    trainer = Trainer(rt, tf, server, args)
    runs = rt.result.setdefault("runs", [])
    for i, run in enumerate(args.plan):
        runs.append(trainer.train(i, run))
        rt.steps["local"] = sum(r["steps"]["local"] for r in runs)
    trainer.finish(server)


def main(argv=None) -> None:
    args = parse_args(argv)
    with TaskRuntime(
        "sparse_lr", args={k: v for k, v in vars(args).items() if k != "plan"}, sample_interval=args.sample_interval
    ) as rt:
        if rt.spec.num_tasks("ps") != 1:
            raise ValueError(
                f"sparse_lr needs exactly one ps task (w is not partitioned), the cluster has "
                f"{rt.spec.num_tasks('ps')}; build it with ps=1"
            )
        run_graph_task(rt, args, run_ps, run_trainer)


if __name__ == "__main__":
    main()
