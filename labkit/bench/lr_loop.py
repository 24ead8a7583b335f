"""Lab 1's training loop, per epoch on MNIST at batch 50: TF Core vs Keras fit vs TF1 feed_dict vs NumPy.

An epoch is 1,200 sequential SGD steps on tiny matrices, so per-step overhead decides. The
contenders run the same math from the same start, one epoch each in turn (a round), so
drift on a shared machine hits them alike; each gets an untimed warm-up epoch first (tracing,
Keras compile). The TF1 contender is the reports' program: a ``tf.compat.v1.Session`` that
feeds each batch through ``feed_dict`` to ``GradientDescentOptimizer.minimize``.

Threads are the same for every contender: TensorFlow intra-op 1 and inter-op 1 (eager
runtime and the TF1 session's ConfigProto) and OpenBLAS (NumPy) 1. At batch 50 a step is too
small to split across cores, and the machine is shared. After the timing, the Core trainer
goes on to 50 epochs: the full run's test accuracy.
"""

from __future__ import annotations

import ctypes
import glob
import os
import time

import numpy as np

from labkit.bench import entry, ratio

THREADS = 1
FULL_EPOCHS = 50


def set_blas_threads(n: int) -> str:
    """Set NumPy's OpenBLAS thread count in this process (numpy is already imported, so the
    OPENBLAS_NUM_THREADS variable is too late); returns what was done, for the notes."""
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*"))
    for path in libs:
        lib = ctypes.CDLL(path)  # already loaded by numpy: dlopen returns the same library
        for setter, getter in (
            ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
            ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
            ("openblas_set_num_threads", "openblas_get_num_threads"),
        ):
            if hasattr(lib, setter) and hasattr(lib, getter):
                getattr(lib, setter)(n)
                return f"OpenBLAS threads {getattr(lib, getter)()}"
    return (
        f"NumPy BLAS threads not set (no OpenBLAS found); OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"
    )


class TF1Trainer:
    """The reports' TF1 program: placeholders, GradientDescentOptimizer, one ``sess.run`` per batch."""

    version = "tf1-feed_dict"

    def __init__(self, x, y, W0, b0, batch_size, learning_rate, seed, threads):
        import tensorflow as tf

        v1 = tf.compat.v1
        self.x, self.y, self.batch_size = x, y, batch_size
        self.rng = np.random.default_rng(seed)
        graph = tf.Graph()
        with graph.as_default():
            self.xp = v1.placeholder(tf.float32, [None, x.shape[1]])
            self.yp = v1.placeholder(tf.int32, [None])
            self.W, self.b = v1.Variable(W0), v1.Variable(b0)
            logits = tf.matmul(self.xp, self.W) + self.b
            onehot = tf.one_hot(self.yp, W0.shape[1])
            self.loss = tf.reduce_mean(-tf.reduce_sum(onehot * tf.nn.log_softmax(logits), axis=1))
            self.train_op = v1.train.GradientDescentOptimizer(learning_rate).minimize(self.loss)
            init = v1.global_variables_initializer()
        config = v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
        self.sess = v1.Session(graph=graph, config=config)
        self.sess.run(init)

    def run_epoch(self) -> float:
        order, total, steps = self.rng.permutation(len(self.x)), 0.0, 0
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            _, loss = self.sess.run([self.train_op, self.loss], feed_dict={self.xp: self.x[idx], self.yp: self.y[idx]})
            total, steps = total + loss, steps + 1
        return total / steps

    def weights(self):
        return self.sess.run([self.W, self.b])


def run(quick: bool = False) -> dict:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(THREADS)
    blas = set_blas_threads(THREADS)

    from labkit.learning import lr
    from labkit.datasets.loaders import load_mnist

    data = load_mnist(limit=6000 if quick else None, test_limit=2000 if quick else None)
    rounds, full_epochs = (2, 5) if quick else (5, FULL_EPOCHS)
    bs, rate, seed = lr.BATCH_SIZE, lr.LEARNING_RATE, 0
    core = lr.CoreTrainer(data.x_train, data.y_train, bs, rate, seed)
    contenders = {
        "TF Core (in-graph epoch)": core,
        "Keras fit": lr.KerasTrainer(data.x_train, data.y_train, bs, rate, seed),
        "TF1 Session feed_dict": TF1Trainer(core.x, core.y, core.W0, core.b0, bs, rate, seed, THREADS),
        "NumPy reference": lr.NumpyTrainer(data.x_train, data.y_train, bs, rate, seed),
    }
    times = {name: [] for name in contenders}
    for t in contenders.values():
        t.run_epoch()  # warm-up: tracing, Keras compile, session start
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate who goes first
            t0 = time.perf_counter()
            contenders[name].run_epoch()
            times[name].append(time.perf_counter() - t0)

    rows, sec = [], {}
    for name, trainer in contenders.items():
        sec[name] = float(np.median(times[name]))
        acc, loss = lr.evaluate(*trainer.weights(), data.x_test, data.y_test)
        rows.append(
            {
                "contender": name,
                "s/epoch (median)": sec[name],
                "epochs/s": 1 / sec[name],
                "steps/s": core.steps_per_epoch / sec[name],
                "epochs": rounds + 1,
                "test accuracy": acc,
                "test loss": loss,
            }
        )

    t0 = time.perf_counter()
    while core.epochs_done < full_epochs:
        core.run_epoch()
    full_acc, full_loss = lr.evaluate(*core.weights(), data.x_test, data.y_test)
    rows.append(
        {
            "contender": f"TF Core, full run ({full_epochs} epochs)",
            "epochs": full_epochs,
            "test accuracy": full_acc,
            "test loss": full_loss,
        }
    )

    c, k, t1, n = (sec[x] for x in names)
    return {
        "title": f"Lab 1 LR loop: per epoch, {len(core.x):,} MNIST images, batch {bs} "
        f"({core.steps_per_epoch} steps/epoch)",
        "rows": rows,
        "ratios": [
            ratio("Core time / Keras fit time", c / k, "<= 0.35"),
            ratio("TF1 feed_dict time / Core time (Core speed-up)", t1 / c, ">= 1.5"),
            ratio("Core time / NumPy time", c / n, "<= 1.5"),
            ratio(f"Core test accuracy after {full_epochs} epochs", full_acc, "" if quick else ">= 0.92"),
        ],
        "notes": [
            f"threads: TensorFlow intra-op {THREADS}, inter-op {THREADS} (eager runtime and the TF1 "
            f"session's ConfigProto); {blas}; the same for every contender",
            f"one untimed warm-up epoch each, then {rounds} timed rounds of one epoch per contender, "
            f"order rotated each round; median seconds per epoch",
            "same math and start: W ~ N(0, 0.01^2) from one seed, b = 0, mean cross-entropy, SGD lr "
            f"{rate}; Core and NumPy also share the shuffles (Keras gets a seeded tf.data pipeline built once)",
            f"the Core trainer continued to {full_epochs} epochs in {time.perf_counter() - t0:.1f} s "
            f"(report 000 ran 50 epochs in 82 s)",
        ],
    }


if __name__ == "__main__":
    entry(run)
