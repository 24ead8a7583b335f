"""Sparse logistic regression ops that touch and move only what a batch needs.

Report 001 computed the LR gradient with ``sparse_tensor_dense_matmul(X_T, error)``
(``dense_gradient`` here; what that costs is Lab 3's question). Here the gradient is a
``tf.IndexedSlices`` over the batch's *unique* features (Lab 3's exercise, whose reference lives
in ``labkit.labs.lab3.solution``, out of the student kit): no step costs O(num_features). This
module holds what the exercise does not ask for: batches, labels, the dense baseline, applying
an update, the checks and the op profile.

The loss is the mean log-loss, with y in {0, 1} (``labels="01"``) or in {-1, +1} (``"pm1"``,
reports 001/004): the same function, so the same gradient. A batch is a ``tf.SparseTensor`` of
shape ``[B, num_features]``; ``csr_to_sparse`` converts the CSR arrays of a9a
(``labkit.datasets.loaders.SparseData``) or ``labkit.datasets.clickdata`` chunks. TensorFlow is
imported when this module is, so only tasks, experiments and notebooks import it.
More in docs/internals.md, section labkit.learning (the losses and their gradients).
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from labkit.learning.ops import (  # noqa: F401  (LABEL_CONVENTIONS, labels01, static_shape: part of this API)
    LABEL_CONVENTIONS,
    batch_rows,
    labels01,
    mean_logloss,
    static_shape,
)


# ----------------------------------------------------------------------------- batches


def csr_batch(data, rows=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """NumPy ``(indices [nnz, 2] int64, values float32, dense_shape [2] int64, labels float32)``
    for ``rows`` (default all, in the order given) of a CSR ``SparseData``, vectorised.

    The arrays to feed a graph-mode ``tf.compat.v1.sparse_placeholder`` (the cluster tasks),
    or to build a ``tf.SparseTensor`` (``csr_to_sparse``)."""
    if rows is None:
        starts, counts = data.indptr[:-1], np.diff(data.indptr)
        labels = data.labels
    else:
        rows = np.asarray(rows, np.int64)
        starts = data.indptr[rows]
        counts = data.indptr[rows + 1] - starts
        labels = data.labels[rows]
    nnz = int(counts.sum())
    row_ids = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    take = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(nnz)
    indices = np.stack([row_ids, data.indices[take].astype(np.int64)], axis=1)
    shape = np.array([len(counts), data.n_features], np.int64)
    return indices, data.values[take].astype(np.float32), shape, labels.astype(np.float32)


def csr_to_sparse(data, rows=None) -> tuple[tf.SparseTensor, tf.Tensor]:
    """``(X, y)`` for ``rows`` (default all) of a CSR ``SparseData``: X [B, n_features], y float32."""
    indices, values, shape, labels = csr_batch(data, rows)
    return tf.SparseTensor(indices, values, shape), tf.constant(labels, tf.float32)


def batch_iter(data, batch_size: int, *, seed: int = 0, epochs: int | None = None, shard: int = 0, num_shards: int = 1):
    """Yield ``(X, y)`` mini-batches of a CSR data set, reshuffled every epoch (seeded).

    ``shard``/``num_shards`` give a worker its fixed, disjoint slice of the rows.
    ``epochs=None`` repeats forever.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is outside 0..{num_shards - 1}")
    mine = np.arange(shard, len(data), num_shards)
    if len(mine) == 0:
        raise ValueError(f"shard {shard} of {num_shards} has no rows (data has {len(data)})")
    rng = np.random.default_rng(seed + 1000 * shard)
    epoch = 0
    while epochs is None or epoch < epochs:
        order = rng.permutation(mine)
        for i in range(0, len(order), batch_size):
            yield csr_to_sparse(data, order[i : i + batch_size])
        epoch += 1


# ----------------------------------------------------------------------------- loss and gradients


def reference_gradient():
    """The kit's reference sparse gradient, Lab 3's exercise (``labkit.labs.lab3.solution``; also
    ``sparse.sparse_gradient(w, x, y, labels="01") -> (loss, IndexedSlices)``), O(nnz) whatever
    ``w``'s length. The student kit has none: pass your own where a function takes ``gradient=``."""
    from labkit.core.reference import solution

    return solution("lab3", "sparse_gradient", "gradient=sparse_lr_gradient, your function from section 1")


def __getattr__(name: str):
    if name == "sparse_gradient":  # the reference lives with the solutions, which the student kit leaves out
        return reference_gradient()
    raise AttributeError(f"module 'labkit.learning.sparse' has no attribute {name!r}")


def dense_gradient(w, x: tf.SparseTensor, y, labels: str = "01", per_example: bool = False):
    """Report 001's approach, as the baseline: mean log-loss and a *dense* [num_features] gradient.

    ``z = sparse_tensor_dense_matmul(X, W)`` then ``grad = sparse_tensor_dense_matmul(X_T, error)``.
    The result is as long as ``w`` (O(num_features) to write, reduce and ship). With
    ``per_example=True`` it first builds report 001 Table 1's per-example gradient matrix
    ``[num_features, B]`` (``X_T @ diag(error)``) and then reduces it, as that table did:
    B x num_features x 4 bytes, 13.5 GB at 33.7M features and B = 100.
    """
    w = tf.convert_to_tensor(w)
    y01 = tf.cast(labels01(y, labels), w.dtype)
    xs = tf.SparseTensor(x.indices, tf.cast(x.values, w.dtype), x.dense_shape)
    z = tf.reshape(tf.sparse.sparse_dense_matmul(xs, tf.reshape(w, [-1, 1])), [-1])
    b, bf = batch_rows(x, w.dtype)
    err = (tf.sigmoid(z) - y01) / bf
    if per_example:
        per_row = tf.sparse.sparse_dense_matmul(xs, tf.linalg.diag(err), adjoint_a=True)  # [F, B]
        grad = tf.reduce_sum(per_row, axis=1)
    else:
        grad = tf.reshape(tf.sparse.sparse_dense_matmul(xs, tf.reshape(err, [-1, 1]), adjoint_a=True), [-1])
    return mean_logloss(z, y01), grad


def loss_dense(w, x_dense, y, labels: str = "01") -> tf.Tensor:
    """The same loss on a dense [B, F] matrix, for checking gradients against autodiff."""
    w = tf.convert_to_tensor(w)
    z = tf.linalg.matvec(tf.cast(x_dense, w.dtype), w)
    return mean_logloss(z, tf.cast(labels01(y, labels), w.dtype))


def predict_logits(w, x: tf.SparseTensor) -> tf.Tensor:
    """``z = X w`` for a batch, O(nnz): each non-zero's weight (a gather per non-zero, repeats and
    all: the exercise's gradient gathers each distinct feature once), summed per row."""
    vals = tf.cast(x.values, w.dtype)
    b, _ = batch_rows(x, w.dtype)
    return tf.math.unsorted_segment_sum(vals * tf.gather(w, x.indices[:, 1]), x.indices[:, 0], b)


def evaluate(w, x: tf.SparseTensor, y, labels: str = "01") -> dict:
    """Accuracy and mean log-loss of weights ``w`` on one batch (eager)."""
    z = predict_logits(w, x)
    y01 = tf.cast(labels01(y, labels), z.dtype)
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.cast(z > 0, z.dtype), y01), tf.float32))
    return {"accuracy": float(acc), "logloss": float(mean_logloss(z, y01)), "rows": int(z.shape[0])}


# ----------------------------------------------------------------------------- updates (ps side)


def apply_sparse(var, grad: tf.IndexedSlices, lr: float):
    """``var[grad.indices] -= lr * grad.values``: a scatter that ships O(|uniq|) rows to the ps.

    Returns the update op (graph mode). Fetching the variable's value instead would read,
    and after a sparse update copy, the whole vector: O(num_features) again.
    """
    return tf.group(var.scatter_sub(tf.IndexedSlices(lr * grad.values, grad.indices, grad.dense_shape)))


def apply_dense(var, grad: tf.Tensor, lr: float):
    """``var -= lr * grad`` with a dense gradient: ships all num_features floats."""
    return var.assign_sub(lr * grad, read_value=False)


def make_train_step(w, lr: float, labels: str = "01", gradient=None):
    """A compiled in-process SGD step ``step(x, y) -> loss`` on variable ``w`` (sparse update),
    with ``gradient(w, x, y, labels)`` (default: the kit's reference).

    The input signature takes any batch size and nnz, so it traces once.
    """
    gradient = gradient or reference_gradient()
    spec = (tf.SparseTensorSpec([None, int(w.shape[0])], tf.float32), tf.TensorSpec([None], tf.float32))

    @tf.function(input_signature=spec)
    def step(x, y):
        loss, g = gradient(w, x, y, labels)
        with tf.control_dependencies([apply_sparse(w, g, lr)]):
            return tf.identity(loss)

    return step


def check_gradient(gradient, seed: int = 0, trials: int = 3) -> float:
    """Largest difference between ``gradient(w, x, y) -> (loss, IndexedSlices)`` and the
    gradient of the same loss on the *dense* batch, by automatic differentiation
    (``loss_dense``), on random click-like batches (repeated features, unsorted ids, an empty
    row), checked in eager mode and inside a ``tf.function``. It needs no reference sparse
    gradient: the dense computation is the definition the sparse one must reproduce.

    Raises ``TypeError``/``ValueError`` that say what is wrong when the result is not a
    loss and an ``IndexedSlices``, or is dense (one row per feature, not per unique
    feature of the batch). A correct gradient gives ~1e-7.
    """
    name = getattr(gradient, "__name__", repr(gradient))
    rng = np.random.default_rng(seed)
    worst = 0.0
    for trial in range(trials):
        f, b = 50, 6 + trial
        dense = (rng.random((b, f)) < 0.2) * rng.choice([1.0, 2.0], size=(b, f))
        dense[1], dense[2] = dense[0], 0.0
        rows, cols = np.nonzero(dense)
        perm = rng.permutation(len(cols))
        x = tf.SparseTensor(
            np.stack([rows, cols], 1)[perm].astype(np.int64), dense[rows, cols][perm].astype(np.float32), [b, f]
        )
        y = tf.constant((rng.random(b) < 0.5).astype(np.float32))
        w = tf.Variable(rng.normal(size=f).astype(np.float32))
        w64 = tf.constant(w.numpy(), tf.float64)
        with tf.GradientTape() as tape:
            tape.watch(w64)
            ref_loss = loss_dense(w64, dense, y)
        want = tape.gradient(ref_loss, w64).numpy()
        for mode, fn in (("eagerly", gradient), ("in a tf.function", tf.function(gradient))):
            out = fn(w, x, y)
            if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], tf.IndexedSlices)):
                raise TypeError(
                    f"{name} must return (loss, tf.IndexedSlices(values, unique_ids, dense_shape)); "
                    f"called {mode} it returned {type(out).__name__}"
                )
            loss, g = out
            n_unique = len(np.unique(cols))
            if int(tf.size(g.indices)) != n_unique:
                raise ValueError(
                    f"{name}: the gradient has {int(tf.size(g.indices))} rows but the batch touches "
                    f"{n_unique} distinct features; return one row per unique feature (tf.unique), "
                    "not one per feature or per non-zero"
                )
            mine = tf.math.unsorted_segment_sum(g.values, g.indices, f).numpy()
            worst = max(worst, float(np.abs(mine - want).max()), abs(float(loss) - float(ref_loss)))
    return worst


# ----------------------------------------------------------------------------- measuring a step

METHODS = ("sparse", "dense", "dense_per_example")


def _build_step(method: str, w, x, y, lr: float, labels: str, gradient=None):
    if method == "sparse":
        loss, g = gradient(w, x, y) if gradient is not None else reference_gradient()(w, x, y, labels)
        return loss, apply_sparse(w, g, lr)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    loss, g = dense_gradient(w, x, y, labels, per_example=method == "dense_per_example")
    return loss, apply_dense(w, g, lr)


def step_graph(
    method: str, num_features: int, x: tf.SparseTensor, y, lr: float = 0.1, labels: str = "01", gradient=None
):
    """A TF1 graph for one training step (gradient + update of a local weight variable).

    Returns ``(graph, init_op, train_op)``. Graph mode gives per-op timing and memory
    through ``RunMetadata`` (``op_profile``), the counterpart of report 001's profile.
    ``gradient``: a function ``(w, x, y) -> (loss, IndexedSlices)`` (labels in {0, 1}) to
    use instead of ``sparse_gradient`` in the sparse step, e.g. the one a student wrote.
    """
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(tf.zeros([num_features], tf.float32), name="w")
        # The batch sits in variables, not constants, so graph optimisation cannot fold
        # ops such as Unique away: a real step gets its batch from an input pipeline.
        held = [tf.Variable(np.asarray(t), trainable=False) for t in (x.indices, x.values, x.dense_shape, y)]
        xg = tf.SparseTensor(*(h.read_value() for h in held[:3]))
        _, train = _build_step(method, w, xg, held[3].read_value(), lr, labels, gradient)
        init = tf.compat.v1.global_variables_initializer()
    return g, init, train


def _session(graph, threads: int = 0):
    cfg = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    return tf.compat.v1.Session(graph=graph, config=cfg)


def time_step(
    method: str,
    num_features: int,
    x: tf.SparseTensor,
    y,
    *,
    runs: int = 20,
    warmup: int = 2,
    threads: int = 0,
    gradient=None,
) -> dict:
    """Median wall time of one training step (gradient + update), in a fresh graph and session."""
    g, init, train = step_graph(method, num_features, x, y, gradient=gradient)
    with _session(g, threads) as s:
        s.run(init)
        for _ in range(warmup):
            s.run(train)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            s.run(train)
            times.append(time.perf_counter() - t0)
    return {
        "method": method,
        "num_features": num_features,
        "batch": int(x.dense_shape[0]),
        "nnz": int(x.values.shape[0]),
        "step_ms": 1e3 * float(np.median(times)),
        "runs": runs,
    }


def op_profile(
    method: str,
    num_features: int,
    x: tf.SparseTensor,
    y,
    *,
    runs: int = 3,
    threads: int = 0,
    trace_path=None,
    gradient=None,
):
    """Per-op time and memory of one training step, from TF's step trace (``FULL_TRACE``).

    Returns a pandas DataFrame, one row per op: ``op`` (name), ``type``, ``output`` (shape),
    ``ms`` (median over ``runs`` traced steps) and ``alloc_bytes`` (bytes the op allocated).
    ``trace_path`` also writes the last step as a Chrome trace (open it at chrome://tracing
    or https://ui.perfetto.dev).
    """
    import pandas as pd

    g, init, train = step_graph(method, num_features, x, y, gradient=gradient)
    opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    rows: dict[str, dict] = {}
    with _session(g, threads) as s:
        s.run(init)
        s.run(train)  # warm-up
        for _ in range(runs):
            md = tf.compat.v1.RunMetadata()
            s.run(train, options=opts, run_metadata=md)
            for dev in md.step_stats.dev_stats:
                for n in dev.node_stats:
                    if n.node_name.startswith(("_SOURCE", "_retval", "_arg")):
                        continue
                    r = rows.setdefault(
                        n.node_name,
                        {
                            "op": n.node_name,
                            "type": n.timeline_label.split("(")[0].split("=")[-1].strip(),
                            "output": "",
                            "ms": [],
                            "alloc_bytes": 0,
                            "start": n.all_start_micros,
                        },
                    )
                    r["ms"].append((n.op_end_rel_micros - n.op_start_rel_micros) / 1e3)
                    r["alloc_bytes"] = max(r["alloc_bytes"], sum(m.total_bytes for m in n.memory))
                    shapes = [[d.size for d in o.tensor_description.shape.dim] for o in n.output]
                    r["output"] = " ".join(str(sh) for sh in shapes)
        if trace_path is not None:
            from tensorflow.python.client import timeline

            with open(trace_path, "w") as f:
                f.write(timeline.Timeline(md.step_stats).generate_chrome_trace_format())
    frame = pd.DataFrame([{**r, "ms": float(np.median(r["ms"]))} for r in rows.values()])
    frame = frame.sort_values("start").drop(columns="start").reset_index(drop=True)
    frame.insert(0, "method", method)
    frame.insert(1, "num_features", num_features)
    return frame


def step_cost(
    method: str,
    num_features: int,
    x: tf.SparseTensor,
    y,
    *,
    runs: int = 20,
    warmup: int = 2,
    threads: int = 0,
    gradient=None,
) -> dict:
    """One row: median step time (untraced) and bytes allocated per step (traced)."""
    t = time_step(method, num_features, x, y, runs=runs, warmup=warmup, threads=threads, gradient=gradient)
    prof = op_profile(method, num_features, x, y, runs=1, threads=threads, gradient=gradient)
    return {**t, "alloc_bytes": int(prof["alloc_bytes"].sum())}
