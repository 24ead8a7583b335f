"""Hidden checks (nbgrader's sense): the student's own functions, run on the grader's inputs.

A rubric check ``kind = "hidden"`` names one: ``check = "lab1_sgd_step"`` and optional
``args = { seed = 3 }`` (the inputs: seeds and sizes, from the rubric only). After the
notebook has run, the grader

1. starts a fresh sandboxed process that sees the student's view of the kit and nothing of
   the run (``labkit/grading/judge/probe.py``): it takes the named functions from the notebook's
   code cells (definitions and imports only) and runs them on inputs it builds from ``args``,
   writing what they return;
2. starts the judge, another sandboxed process with the full kit (``labkit.grading.judge.checks``),
   which rebuilds the same inputs, computes the answer with the grader's own reference and
   compares (``judge`` functions below). Its ``Verdict`` scores the check.

Monkey-patching in the notebook cannot reach either process, and the student's code never
shares a process with the reference.

Adding a hidden check for a new exercise (say Lab 4's ``lr_schedule``):

1. in ``probe.py``, write ``inputs_<probe>(**args)`` (deterministic inputs from a seed) and a
   ``@probe("<probe>")`` function ``(fns, args, out) -> {name: numpy array}`` that calls
   ``fns["lr_schedule"]`` on them (import TensorFlow inside it, not at the top);
2. here, write ``@hidden("lab4_lr_schedule", functions=["lr_schedule"], probe_name="<probe>",
   inputs=probe.inputs_<probe>)`` on a judge ``(args, arrays, folder) -> Verdict`` that rebuilds the inputs with
   ``probe.inputs_<probe>(**args)``, computes the reference (here or in ``labkit.solutions``:
   the student kit ships neither) and compares with a tolerance;
   ``folder`` is the probe's output folder, for probes that leave files (a cluster run); keyword
   arguments after ``inputs`` are defaults the rubric's ``args`` add to;
   a check whose probe may end its process (memory, time) can say why with ``@when_died(name)``
   on a ``(args, folder) -> Verdict | None`` that reads what the probe left in ``folder``;
3. add the check to ``notebooks/rubric.toml`` (``kind = "hidden"``, ``check = ...``) and,
   when it shows the exercise works, its name to the lab's ``evidence``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from labkit.grading.judge import probe
from labkit.grading.judge.verify import Unverifiable, Verdict
from labkit.core.registry import Registry


@dataclass(frozen=True)
class Hidden:
    name: str
    functions: tuple[str, ...]  # the student's functions the probe imports, by name
    probe: str  # probe.PROBES key
    judge: Callable  # (args, arrays, folder) -> Verdict, with the grader's reference
    inputs: Callable  # the probe's input builder or settings (validates args)
    defaults: dict  # arguments the check always passes (the rubric's args add to them)

    def args(self, rubric_args: dict) -> dict:
        return {**self.defaults, **rubric_args}

    def validate(self, args: dict) -> None:
        """A TypeError/ValueError when ``args`` are not inputs of this check."""
        self.inputs(**self.args(args))


HIDDEN = Registry("hidden check")
DIED: dict[str, Callable] = {}  # check name -> (args, folder) -> Verdict or None, when its probe's process died


def when_died(name: str):
    """Register hidden check ``name``'s verdict when the probe's process ended without its status
    (``(args, folder) -> Verdict | None``, from what the probe left in ``folder``; None: unverified)."""

    def register(fn):
        DIED[name] = fn
        return fn

    return register


def hidden(name: str, functions, probe_name: str, inputs: Callable, **defaults):
    def register(fn):
        if probe_name not in probe.PROBES:
            raise ValueError(f"hidden check {name!r}: no probe {probe_name!r} in labkit/grading/judge/probe.py")
        HIDDEN.add(name, Hidden(name, tuple(functions), probe_name, fn, inputs, defaults))
        return fn

    return register


def judge(name: str, rubric_args: dict, folder: Path) -> Verdict:
    """The verdict of hidden check ``name`` from its probe's output in ``folder``; raises Unverifiable."""
    h = HIDDEN[name]
    args = h.args(rubric_args)
    status = _status(folder).get(name)
    if status is None:
        verdict = DIED[name](args, folder) if name in DIED else None
        if verdict is not None:
            return verdict
        raise Unverifiable("the student's functions did not finish (time or memory limit, or the process died)")
    if not status.get("ok"):
        what = ", ".join(h.functions) or "code"
        return Verdict(False, f"running your {what} failed: {status.get('error', '?')}")
    arrays = _arrays(folder / f"{name}.npz")
    try:
        return h.judge(args, arrays, folder)
    except KeyError as e:
        raise Unverifiable(f"the probe's output lacks {e}") from None


def _status(folder: Path) -> dict:
    try:
        status = json.loads((folder / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return status if isinstance(status, dict) else {}


def _small_json(path: Path, limit: int = 4096) -> dict:
    """A small JSON object the probe wrote (not a link); {} for anything else."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > limit:
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _probe_file(path: Path, limit: int) -> Path:
    """``path``, a file the probe wrote (not a link) of at most ``limit`` bytes; else Unverifiable."""
    if not path.is_file() or path.is_symlink():
        raise Unverifiable(f"the probe wrote no {path.name}")
    if path.stat().st_size > limit:
        raise Unverifiable(f"{path.name} is over {limit // 2**20} MB")
    return path


def _arrays(path: Path, limit: int = 64 * 2**20) -> dict:
    with np.load(_probe_file(path, limit), allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def _graph_def(path: Path, limit: int = 16 * 2**20):
    """The GraphDef a probe wrote to ``path`` (a file, not a link), parsed here, in the judge's
    process, where no student code runs; Unverifiable when it is missing, too large or not one.
    Only the fields ``lr.graph_nodes`` walks are read (``_node_schema``), so no TensorFlow loads."""
    from google.protobuf.message import DecodeError

    graph_def = _node_schema()()
    try:
        graph_def.ParseFromString(_probe_file(path, limit).read_bytes())
    except DecodeError as e:
        raise Unverifiable(f"{path.name} is not a GraphDef ({e})") from None
    return graph_def


def _node_schema():
    """A message class for TensorFlow's GraphDef with the fields and numbers of graph.proto that
    name its nodes: ``node`` (1) and ``library.function[].node_def`` (2, 1, 3), each node's
    ``name`` and ``op`` (1, 2). Protobuf skips every other field, so real GraphDefs parse."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    proto = descriptor_pb2.FileDescriptorProto(name="labkit_graph_nodes.proto", package="labkit")
    repeated, optional = (
        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    string, message = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
    for name, fields in {
        "Node": [("name", 1, optional, string, None), ("op", 2, optional, string, None)],
        "Function": [("node_def", 3, repeated, message, ".labkit.Node")],
        "Library": [("function", 1, repeated, message, ".labkit.Function")],
        "Graph": [("node", 1, repeated, message, ".labkit.Node"), ("library", 2, optional, message, ".labkit.Library")],
    }.items():
        m = proto.message_type.add(name=name)
        for field, number, label, kind, type_name in fields:
            m.field.add(
                name=field, number=number, label=label, type=kind, **({"type_name": type_name} if type_name else {})
            )
    return message_factory.GetMessageClass(pool.Add(proto).message_types_by_name["Graph"])


def _close(mine: np.ndarray, want: np.ndarray, atol: float, rtol: float) -> float:
    """Largest error of ``mine`` against ``want``, in units of the tolerance (<= 1 is close)."""
    mine, want = np.asarray(mine, np.float64), np.asarray(want, np.float64)
    if mine.shape != want.shape:
        return math.inf
    if not np.all(np.isfinite(mine)):
        return math.inf
    return float(np.max(np.abs(mine - want) / (atol + rtol * np.abs(want)), initial=0.0))


def _each_number(name: str, got: np.ndarray, cases: list, want: Callable, atol: float, rtol: float, wrong: Callable):
    """The verdict on a probe's one number per case: each within ``atol`` + ``rtol`` x |want| of
    ``want(case)`` (an infinite want only by itself); the first that is not says ``wrong(case, mine)``,
    which names the case, never the grader's value."""
    if got.shape != (len(cases),):
        return Verdict(False, f"{name} gave {got.size} answers for {len(cases)} cases")
    for case, mine in zip(cases, got):
        expected = want(case)
        off = (
            mine != expected if math.isinf(expected) else _close(np.asarray(mine), np.asarray(expected), atol, rtol) > 1
        )
        if off:
            return Verdict(False, wrong(case, mine))
    return Verdict(True)


# ---------------------------------------------------------------------------------------------
# Lab 1: the SGD step, against the softmax regression's gradient in float64


def reference_lr_step(x, y, W, b, learning_rate):
    """One SGD step of softmax regression on the mean cross-entropy, computed in float64."""
    x, W, b = x.astype(np.float64), W.astype(np.float64), b.astype(np.float64)
    z = x @ W + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = float(np.mean(-np.log(p[np.arange(len(y)), y])))
    g = p.copy()
    g[np.arange(len(y)), y] -= 1
    g /= len(y)
    return W - learning_rate * (x.T @ g), b - learning_rate * g.sum(axis=0), loss


@hidden("lab1_sgd_step", functions=["sgd_step"], probe_name="lr_step", inputs=probe.inputs_lr_step)
def judge_lr_step(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The step's update, eager and traced, against the float64 reference on the grader's batches,
    computed by TensorFlow ops: its traced graph (the probe's file, counted here) calls nothing back
    in Python, where NumPy would compute what the exercise asks the graph for.

    Whether the gradient came from a tape is not checked: no property of a graph tells a correct
    hand-derived gradient from autodiff's (op names are the student's to choose; a hand gradient
    under ``tf.name_scope("gradient_tape")`` reads as the tape's), so the check claims only what
    it can measure. The notebook keeps its exercise contract, ``sgd_step(W, b, x, y, learning_rate)``."""
    callbacks = probe.python_ops(_graph_def(folder / probe.GRAPH_FILE))
    worst, where = 0.0, ""
    for t, case in enumerate(probe.inputs_lr_step(**args)):
        W, b, loss = reference_lr_step(case["x"], case["y"], case["W"], case["b"], case["learning_rate"])
        for mode in ("eager", "graph"):
            errs = {
                "W": _close(arrays[f"{t}_{mode}_W"], W, 1e-5, 1e-3),
                "b": _close(arrays[f"{t}_{mode}_b"], b, 1e-5, 1e-3),
                "loss": _close(arrays[f"{t}_{mode}_loss"], np.asarray(loss), 1e-5, 1e-4),
            }
            part, err = max(errs.items(), key=lambda kv: kv[1])
            if err > worst:
                worst, where = (
                    err,
                    f"{part} after one step ({'traced by tf.function' if mode == 'graph' else mode}, batch {t})",
                )
    if callbacks:
        return Verdict(
            False,
            "sgd_step, traced by tf.function, calls back into Python (tf.numpy_function or "
            "tf.py_function): its update is not computed by TensorFlow ops; compute the loss and its "
            "gradient with TensorFlow ops, under a GradientTape",
        )
    if worst <= 1:
        return Verdict(True, value=worst)
    if math.isinf(worst):
        return Verdict(False, f"sgd_step gave no usable {where.split()[0]} (wrong shape, NaN or no loss returned)")
    return Verdict(
        False,
        f"sgd_step is off in {where}: {worst:.3g} x the tolerance; check the loss (mean "
        f"over the batch), the gradient and the update's sign",
        worst,
    )


@hidden(
    "lab1_best_reading", functions=["chance_best_reading"], probe_name="best_reading", inputs=probe.inputs_best_reading
)
def judge_best_reading(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The chance that the best of n binomial batch accuracies reaches a level, against the
    reference, on cases the notebook never had (``probe.inputs_best_reading``)."""
    from labkit.solutions.lab1 import chance_best_reading

    def wrong(case, mine):
        return (
            f"chance_best_reading(q={case['q']}, n={case['n']}, batch_size="
            f"{case['batch_size']}, level={case['level']}) is {mine:.6g}, not the chance "
            f"that the best of n binomial batch readings reaches the level: check how many "
            f"images 'at least level' needs, one reading's chance, and the best of n"
        )

    cases = probe.inputs_best_reading(**args)
    return _each_number(
        "chance_best_reading", arrays["chances"], cases, lambda c: chance_best_reading(**c), 1e-9, 1e-6, wrong
    )


@hidden(
    "lab1_initial_loss", functions=["initial_test_loss"], probe_name="initial_loss", inputs=probe.inputs_initial_loss
)
def judge_initial_loss(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The mean cross-entropy of near-zero weights (a uniform softmax) for class counts the notebook
    never had: log K. The failure names the class count, never the value."""
    counts = probe.inputs_initial_loss(**args)
    got = arrays["losses"]
    if got.shape != (len(counts),):
        return Verdict(False, f"initial_test_loss gave {got.size} answers for {len(counts)} class counts")
    for k, mine in zip(counts, got):
        if _close(np.asarray(mine), np.asarray(math.log(k)), 1e-6, 1e-3) > 1:
            return Verdict(
                False,
                f"initial_test_loss({k}) is {mine:.6g}: not the mean cross-entropy of weights "
                f"near zero with {k} classes",
            )
    return Verdict(True)


# ---------------------------------------------------------------------------------------------
# Lab 3: the prediction of distinct features per step, against the exact expectation


def reference_distinct_features(spec, rows: int) -> float:
    """Expected distinct (field, value) pairs among ``rows`` rows of ``spec``'s click data: each
    field's values are bounded-Zipf draws, P(id <= k) = (1 - (k+2)^(1-s)) / (1 - (V+1)^(1-s)); the
    last ``optional_fields`` fields are present with probability 1/2; a value turns up in none of
    the rows with probability (1 - p)^rows."""
    a = 1.0 - spec.zipf_s
    optional = np.arange(spec.num_fields) >= spec.num_fields - spec.optional_fields
    total = 0.0
    for present, vocab in zip(np.where(optional, 0.5, 1.0), spec.vocab_sizes):
        k = np.arange(vocab, dtype=np.float64)
        p = present * ((k + 1) ** a - (k + 2) ** a) / (1.0 - (vocab + 1.0) ** a)
        total += float(np.sum(1.0 - (1.0 - p) ** rows))
    return total


@hidden(
    "lab3_distinct_features",
    functions=["expected_distinct_features"],
    probe_name="distinct_features",
    inputs=probe.inputs_distinct_features,
)
def judge_distinct_features(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The student's formula on click-data shapes and batch sizes the notebook never had, to 1e-6:
    a simulation (generate and count) cannot reach it. The failure names the case, not the value."""
    from labkit.datasets.clickdata import ClickSpec

    def wrong(case, mine):
        spec = ", ".join(f"{k}={v}" for k, v in case["spec"].items())
        return (
            f"expected_distinct_features(ClickSpec({spec}), {case['rows']}) is {mine:.6g}: "
            f"not the expected number of distinct (field, value) pairs; check each value's "
            f"probability (from the CDF), the optional fields, and the chance it is in no row"
        )

    cases = probe.inputs_distinct_features(**args)
    return _each_number(
        "expected_distinct_features",
        arrays["expected"],
        cases,
        lambda c: reference_distinct_features(ClickSpec(**c["spec"]), c["rows"]),
        1e-9,
        1e-6,
        wrong,
    )


# ---------------------------------------------------------------------------------------------
# Lab 3: the sparse gradient, against the dense computation


def reference_sparse_gradient(case: dict) -> tuple[float, np.ndarray]:
    """Mean log-loss and its dense gradient X^T (sigmoid(Xw) - y) / B, in float64."""
    b, f = (int(v) for v in case["shape"])
    X = np.zeros((b, f))
    np.add.at(X, (case["indices"][:, 0], case["indices"][:, 1]), case["values"].astype(np.float64))
    w, y = case["w"].astype(np.float64), case["y"].astype(np.float64)
    z = X @ w
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    return loss, X.T @ (1 / (1 + np.exp(-z)) - y) / b


@hidden(
    "lab3_sparse_gradient",
    functions=["sparse_lr_gradient"],
    probe_name="sparse_gradient",
    inputs=probe.inputs_sparse_gradient,
)
def judge_sparse_gradient(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The student's gradient on the grader's batches against the dense gradient (one row per
    unique feature, the same values), then its cost as the number of features grows
    (``judge_sparse_scaling``)."""
    worst = 0.0
    for t, case in enumerate(probe.inputs_sparse_gradient(**args)):
        loss, grad = reference_sparse_gradient(case)
        f = grad.shape[0]
        n_unique = len(np.unique(case["indices"][:, 1]))
        for mode in ("eager", "graph"):
            idx, vals = arrays[f"{t}_{mode}_indices"], arrays[f"{t}_{mode}_values"]
            if idx.shape != vals.shape or (idx.size and (idx.min() < 0 or idx.max() >= f)):
                return Verdict(
                    False,
                    f"the gradient's indices and values do not match ({mode}): one value per feature id in 0..{f - 1}",
                )
            if idx.size != n_unique:
                return Verdict(
                    False,
                    f"the gradient has {idx.size} rows but the batch touches {n_unique} distinct "
                    f"features ({mode}); return one row per unique feature (tf.unique), not one per "
                    f"feature or per non-zero",
                )
            mine = np.zeros(f)
            np.add.at(mine, idx, vals)
            worst = max(
                worst, _close(mine, grad, 1e-5, 1e-3), _close(arrays[f"{t}_{mode}_loss"], np.asarray(loss), 1e-5, 1e-4)
            )
    if worst > 1:
        return Verdict(
            False,
            f"sparse_lr_gradient differs from the dense gradient by {worst:.3g} x the tolerance: check "
            f"the logits (a segment sum over rows), the error sigmoid(z) - y, and the division by B",
            worst,
        )
    return judge_sparse_scaling(args, arrays, worst)


MAX_GROWTH = 5.0
"""How many times the CPU time of a step with w of ``large_features`` (10^8) may be that with
``small_features`` (10^4), on the same batch, in either mode: each read by the probe's parent
from ``/proc`` of a child process that runs the step (``probe._measure``), so no clock or
counter the student's code can reach decides it. CPU time, unlike wall time, does not grow with
the load of other processes; measured on 2 cores quiet and with both kept busy (see the
scaling tests), the reference's ratio stays near 1x, while a read of all of w each step or a
dense gradient is one pass over 400 MB a call, tens of times the reference's step."""


def growth(small_cpu_s, large_cpu_s) -> float:
    """How many times the CPU time per call at the large size is that at the small size."""
    small, large = (float(np.asarray(v, np.float64).reshape(-1)[0]) for v in (small_cpu_s, large_cpu_s))
    if not (math.isfinite(small) and math.isfinite(large)) or min(small, large) < 0:
        raise Unverifiable("the probe's CPU times of the sparse gradient are missing or not numbers")
    floor = 1e-5
    return max(large, floor) / max(small, floor)


def _scaling_settings(args: dict) -> tuple[dict, dict]:
    s = probe.scaling_settings(args)
    return s, probe.batch_sparse_scaling(int(args.get("seed", 0)), s)


def _batch_words(s: dict, case: dict) -> str:
    return f"a batch of {s['rows']} rows and {len(case['values'])} non-zeros, every feature id below {s['small_features']:,}"


def _grew(s: dict, case: dict, mode: str, what: str) -> str:
    called = "traced by tf.function" if mode == "graph" else "called eagerly"
    return (
        f"sparse_lr_gradient {what} with w of {s['large_features']:,} features ({called}, on "
        f"{_batch_words(s, case)}), though it ran with w of {s['small_features']:,}: its "
        f"{'memory or work' if 'memory' in what or 'ended' in what else 'work'} grows with the number of "
        f"features F, so something in the step is as long as F (a tensor of F values, or an op on all of w). "
        f"A step may touch only the batch's features"
    )


def judge_sparse_scaling(args: dict, arrays: dict, value: float = 0.0) -> Verdict:
    """The step's cost does not grow with F: at ``large_features`` it ran (no memory or time limit
    hit, its process not ended), gave the loss and gradient of its last call's labels, and used at
    most ``MAX_GROWTH`` times the CPU time per call it used at ``small_features``. The reason
    names the factor and both measured times, passed or not; never an expected value."""
    s, case = _scaling_settings(args)
    ratios = {}
    for mode in ("eager", "graph"):
        called = "traced by tf.function" if mode == "graph" else "called eagerly"
        outcome = str(arrays[f"scale_{mode}_outcome"])
        if outcome in ("memory", "time", "died"):
            what = {
                "memory": "ran out of memory",
                "time": f"did not finish in {s['time_limit_s']:g} s",
                "died": "ended the process running it (out of memory or time)",
            }[outcome]
            at = int(arrays[f"scale_{mode}_at"])
            if at == s["large_features"]:
                return Verdict(False, _grew(s, case, mode, what))
            return Verdict(
                False, f"sparse_lr_gradient {what} with w of {at:,} features ({called}, on {_batch_words(s, case)})"
            )
        if outcome != "ok":
            raise Unverifiable(f"the probe's scaling outcome is {outcome[:40]!r}")
        drawn = {**case, "y": probe.labels_sparse_scaling(int(arrays[f"scale_{mode}_draw"]), s["rows"])}
        loss, grad = reference_sparse_gradient(drawn)
        idx, vals = arrays[f"scale_{mode}_indices"], arrays[f"scale_{mode}_values"]
        mine = np.zeros(s["small_features"])
        if idx.shape != vals.shape or (idx.size and (idx.min() < 0 or idx.max() >= s["small_features"])):
            mine[:] = np.inf
        else:
            np.add.at(mine, idx, vals)
        off = max(_close(mine, grad, 1e-5, 1e-3), _close(arrays[f"scale_{mode}_loss"], np.asarray(loss), 1e-5, 1e-4))
        if off > 1:
            return Verdict(
                False,
                f"with w of {s['large_features']:,} features ({called}), on {_batch_words(s, case)}, "
                f"sparse_lr_gradient's loss or gradient differs from the dense gradient of the batch, though "
                f"the weights of its features are those of w of {s['small_features']:,}",
            )
        small, large = arrays[f"scale_{mode}_small_cpu_s"], arrays[f"scale_{mode}_large_cpu_s"]
        ratios[mode] = (growth(small, large), float(small), float(large))
    words = "; ".join(
        f"{'traced' if m == 'graph' else 'eagerly'} {r:.3g}x ({lg * 1e3:.3g} ms against {sm * 1e3:.3g} ms)"
        for m, (r, sm, lg) in ratios.items()
    )
    sizes = f"with w of {s['large_features']:,} features over that with {s['small_features']:,}"
    mode = max(ratios, key=lambda m: ratios[m][0])
    if ratios[mode][0] > MAX_GROWTH:
        return Verdict(
            False,
            f"sparse_lr_gradient's CPU time per step grows with the number of features F: on the same "
            f"batch ({_batch_words(s, case)}), CPU time per step {sizes}: {words}; at most {MAX_GROWTH:g}x "
            f"passes. Something in the step is as long as F (a tensor of F values, or an op on all of w); "
            f"a step may touch only the batch's features",
            value,
        )
    return Verdict(True, f"CPU time per step {sizes}: {words} (at most {MAX_GROWTH:g}x passes)", value)


@when_died("lab3_sparse_gradient")
def died_sparse_gradient(args: dict, folder: Path) -> Verdict | None:
    """The probe's process ended (its memory or time limit, a crash) while the scaling check ran
    the student's step with the large w: that step's memory or work grows with F."""
    running = _small_json(folder / probe.SPARSE_RUNNING)
    s, case = _scaling_settings(args)
    mode, at = running.get("mode"), running.get("features")
    if mode not in ("eager", "graph") or at != s["large_features"]:
        return None
    return Verdict(False, _grew(s, case, mode, "ended the process running it (out of memory or time)"))


# ---------------------------------------------------------------------------------------------
# Lab 2: the synchronous round, from the weights and step counts the cluster's tasks wrote


def reference_sync_weights(s: dict, workers: int) -> tuple[np.ndarray, np.ndarray]:
    """The weights after ``s["rounds"]`` synchronous rounds of ``workers`` workers, computed in
    float64 without TensorFlow: from the tasks' seeded start, each round one SGD step on the mean
    of the workers' gradients, each on the next batch of its own shard and stream (the tasks'
    ``batches``, seeded ``seed + rank``)."""
    from labkit.datasets.loaders import load_mnist
    from labkit.learning.lr import softmax_gradient
    from labkit.tasks.ps_sgd import NUM_FEATURES, batches, init_weights

    data = load_mnist(limit=s["train_limit"], test_limit=s["test_limit"], seed=s["seed"])
    x, y = data.x_train.reshape(-1, NUM_FEATURES), data.y_train
    streams = [batches(x[r::workers], y[r::workers], s["batch_size"], s["seed"] + r) for r in range(workers)]
    W, b = (a.astype(np.float64) for a in init_weights(s["seed"]))
    for _ in range(s["rounds"]):
        grads = [softmax_gradient(W, b, *next(stream))[:2] for stream in streams]
        W = W - s["learning_rate"] * np.mean([g[0] for g in grads], axis=0)
        b = b - s["learning_rate"] * np.mean([g[1] for g in grads], axis=0)
    return W, b


@hidden("lab2_sync_round", functions=["sync_round"], probe_name="sync_round", inputs=probe.settings_sync_round)
def judge_sync_round(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Every worker made ``rounds`` steps and the global step is ``rounds`` (one update per
    round), and the chief's final weights are plain SGD on the mean of the workers' gradients,
    round after round, from the same seeded start and batches (``reference_sync_weights``)."""
    from labkit.tasks.ps_sgd import init_weights

    s = probe.settings_sync_round(**args)
    rel = str(arrays["run_dir"])
    run = (folder / rel).resolve()
    if folder.resolve() not in run.parents or not run.is_dir():
        raise Unverifiable("the sync run left no folder of task results")
    workers = {}
    for f in sorted(run.glob("worker-*.json")):
        if not f.name.endswith(".hello.json"):
            data = json.loads(f.read_text())
            workers[str(data.get("task"))] = data
    if not workers or "worker:0" not in workers:
        raise Unverifiable("the sync run's workers wrote no result files")
    local = {k: v.get("steps", {}).get("local") for k, v in workers.items()}
    final = {k: v.get("steps", {}).get("global_at_exit") for k, v in workers.items()}
    found = {"local": local, "global": final}
    if set(local.values()) != {s["rounds"]} or set(final.values()) != {s["rounds"]}:
        return Verdict(
            False,
            f"after {s['rounds']} rounds the workers made {local} steps and saw global steps "
            f"{final}: in a synchronous round every worker makes one step and the chief one "
            f"update",
            found,
        )
    weights = workers["worker:0"].get("weights") or {}
    try:
        W, b = np.asarray(weights["W"], np.float64), np.asarray(weights["b"], np.float64)
    except KeyError:
        raise Unverifiable("the chief saved no final weights") from None
    want_W, want_b = reference_sync_weights(s, len(workers))
    W0, b0 = init_weights(s["seed"])
    scale = max(np.abs(want_W - W0).max(), np.abs(want_b - b0).max())  # the whole update's size
    error = max(_close(W, want_W, 1e-3 * scale, 1e-3), _close(b, want_b, 1e-3 * scale, 1e-3))
    if error <= 1:
        return Verdict(True, value={**found, "error": error})
    if math.isinf(error):
        return Verdict(False, f"the chief's final weights have shapes {W.shape}, {b.shape} or are not finite", found)
    return Verdict(
        False,
        f"after {s['rounds']} rounds of {len(workers)} workers the weights are {error:.3g} x the "
        f"tolerance away from SGD on the mean of their gradients: does the chief apply the mean of "
        f"all {len(workers)} gradients, once per round, at the learning rate?",
        found,
    )


# ---------------------------------------------------------------------------------------------
# Lab 4: the ring all-reduce, against the plain sum and the ring's schedule of chunks


def reference_ring_bytes(size: int, n: int, value_bytes: int = 4) -> list[int]:
    """Bytes each of ``n`` workers sends to all-reduce ``size`` values in ``n`` chunks
    (``np.array_split``): in round s worker w sends chunk (w - s) mod n in the reduce-scatter and
    chunk (w + 1 - s) mod n in the all-gather, for s = 0 .. n-2."""
    chunk = [len(c) * value_bytes for c in np.array_split(np.zeros(size), n)]
    return [sum(chunk[(w - s) % n] + chunk[(w + 1 - s) % n] for s in range(n - 1)) for w in range(n)]


@hidden(
    "lab4_ring_allreduce", functions=["ring_allreduce"], probe_name="ring_allreduce", inputs=probe.inputs_ring_allreduce
)
def judge_ring_allreduce(args: dict, arrays: dict, folder: Path) -> Verdict:
    for t, case in enumerate(probe.inputs_ring_allreduce(**args)):
        n, size = len(case["grads"]), case["grads"][0].size
        where = f"N = {n}, {size} values"
        sums = arrays[f"{t}_sums"]
        if sums.shape != (n, size):
            return Verdict(
                False,
                f"{where}: ring_allreduce returned vectors of shape {sums.shape}; expected one vector "
                f"of {size} values per worker",
            )
        want = np.sum(np.asarray(case["grads"], np.float64), axis=0)
        if _close(sums, np.broadcast_to(want, sums.shape), 1e-4, 1e-4) > 1:
            return Verdict(False, f"{where}: not every worker ends with the sum of all the gradients")
        if not bool(arrays[f"{t}_inputs_kept"]):
            return Verdict(False, f"{where}: ring_allreduce changed the gradients it was given")
        want_sent = reference_ring_bytes(size, n)
        if arrays[f"{t}_sent"].tolist() != want_sent:
            return Verdict(
                False,
                f"{where}: the workers sent {arrays[f'{t}_sent'].astype(int).tolist()} bytes, not "
                f"what the ring's 2(N-1) rounds of one chunk each send: check which chunk each "
                f"worker sends in each round, and the chunks' sizes when N does not divide the length",
            )
    return Verdict(True)


# ---------------------------------------------------------------------------------------------
# Lab 5: the cost model's communication terms, against the reference on inputs the run never had


@hidden("lab5_comm_terms", functions=["comm_terms"], probe_name="comm_terms", inputs=probe.inputs_comm_terms)
def judge_comm_terms(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Messages exactly, bytes to a byte (or 1e-6), for every case of ``probe.inputs_comm_terms``:
    model sizes, worker and ps counts and uneven shards that the notebook's runs never had."""
    from labkit.solutions.lab5 import comm_terms

    cases = probe.inputs_comm_terms(**args)
    got = arrays["terms"]
    if got.shape != (len(cases), 2):
        return Verdict(False, f"comm_terms gave {got.shape[0]} answers for {len(cases)} cases")
    for case, (msgs, nbytes) in zip(cases, got):
        want_msgs, want_bytes = comm_terms(**case)
        bad_bytes = _close(np.asarray(nbytes), np.asarray(want_bytes), 1.0, 1e-6) > 1
        if msgs != want_msgs or bad_bytes:
            shards = f", shards={tuple(round(x) for x in case['shards'])}" if case["shards"] else ""
            where = f"comm_terms({case['arch']!r}, M={case['M']:.0f}, N={case['N']}, n_ps={case['n_ps']}{shards})"
            wrong = " and ".join(what for what, bad in (("messages", msgs != want_msgs), ("bytes", bad_bytes)) if bad)
            return Verdict(
                False,
                f"{where} is ({msgs:g}, {nbytes:,.0f}): its {wrong} are not those of the step's "
                f"critical path; check the busiest link and which transfers overlap",
            )
    return Verdict(True)


# ---------------------------------------------------------------------------------------------
# Lab 5: who carried the steps after a kill, on failure traces the notebook never had


@hidden("lab5_slice_shares", functions=["slice_shares"], probe_name="slice_shares", inputs=probe.inputs_slice_shares)
def judge_slice_shares(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Each worker's share of the slices after a kill, to 1e-9, on every trace of
    ``probe.inputs_slice_shares``: worker counts, kill steps and slice placements the shipped
    trace never had, steps listed out of order."""
    from labkit.solutions.lab5 import slice_shares

    cases = probe.inputs_slice_shares(**args)
    got = arrays["shares"]
    if got.shape != (len(cases), 6):
        return Verdict(False, f"slice_shares gave {got.shape[0]} answers for {len(cases)} traces")
    for case, row in zip(cases, got):
        want = np.zeros(6)
        for w, share in slice_shares(case["trace"], case["kill"]).items():
            want[w] = share
        if _close(row, want, 1e-9, 0.0) > 1:
            kill = case["trace"]["kills"][case["kill"]]
            return Verdict(
                False,
                f"a trace of {case['trace']['workers']} workers, the kill of {kill['task']} after "
                f"step {kill['after_step']}: shares {np.round(row, 3).tolist()} (by worker index) are not the "
                f"grader's for this trace: check which steps each worker had finished when the kill came",
            )
    return Verdict(True)


# ---------------------------------------------------------------------------------------------
# Lab 5: the busiest link's ceiling on images/s, on cases the notebook never had


@hidden("lab5_link_ceiling", functions=["link_ceiling"], probe_name="link_ceiling", inputs=probe.inputs_link_ceiling)
def judge_link_ceiling(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Images/s to 1e-6 (infinite where no byte is on the path) on every case of
    ``probe.inputs_link_ceiling``: batches, model sizes, worker counts and rates the notebook never had."""
    from labkit.solutions.lab5 import link_ceiling

    def wrong(case, mine):
        return (
            f"link_ceiling({case['arch']!r}, batch={case['batch']}, model_bytes={case['model_bytes']:,.0f}, "
            f"workers={case['workers']}, rate_bits={case['rate_bits']:,.0f}) is {mine:.6g} images/s, not the "
            f"grader's value for this case: check the images a step trains, the bytes on its critical path "
            f"and the rate in bits"
        )

    cases = probe.inputs_link_ceiling(**args)
    return _each_number("link_ceiling", arrays["ceilings"], cases, lambda c: link_ceiling(**c), 1e-9, 1e-6, wrong)


# ---------------------------------------------------------------------------------------------
# Lab 2: worker 0's share of the async steps on emulated links, on cases the notebook never had


@hidden(
    "lab2_worker0_share", functions=["worker0_share"], probe_name="worker0_share", inputs=probe.inputs_worker0_share
)
def judge_worker0_share(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Worker 0's share, to 1e-6, on every case of ``probe.inputs_worker0_share``: step bytes, link
    rates, step times and worker counts the notebook never had, several workers beside the ps in some."""
    from labkit.solutions.lab2 import worker0_share

    def wrong(case, share):
        return (
            f"worker0_share(step_bytes={case['step_bytes']:,.0f}, rate_bits={case['rate_bits']:,.0f}, "
            f"step_s={case['step_s']:.4g}, workers={case['workers']}, beside_ps={case['beside_ps']}) is "
            f"{share:.6g}, not the grader's value for this case: check the link's seconds per step (bits, not bytes), "
            f"which workers cross it, and that the share is of every worker's steps per second"
        )

    cases = probe.inputs_worker0_share(**args)
    return _each_number("worker0_share", arrays["shares"], cases, lambda c: worker0_share(**c), 1e-9, 1e-6, wrong)


# ---------------------------------------------------------------------------------------------
# Lab 3: the ps's link under the dense step, in each direction, on cases the notebook never had


def reference_ps_link_shares(
    num_features: int, local_steps, window_s: float, rate_bits: float, beside_ps: int = 1
) -> tuple[float, float]:
    """Lab 3 section 9's exercise: ``(in_share, out_share)``, the shares of a window of ``window_s``
    seconds that the ps's link needs, at ``rate_bits`` bits per second each way, to carry report 001's
    dense steps that cross it: into the ps's node each step's push, ``num_features`` (int64 index,
    float32 value) pairs, 12 bytes per feature; out of it each step's pull, all of w, 4 bytes per
    feature. ``local_steps[i]`` is worker i's steps in the window; workers 0 .. ``beside_ps`` - 1
    share the ps's node, so their steps cross only its loopback. Here, as the distinct features'
    reference is, not in ``labkit.solutions.lab3``: that module loads TensorFlow, which the judge of
    a formula does not need."""
    crossing = sum(local_steps[beside_ps:])
    capacity = rate_bits / 8 * window_s  # bytes the link carries each way in the window
    return 12 * num_features * crossing / capacity, 4 * num_features * crossing / capacity


@hidden(
    "lab3_ps_link_shares",
    functions=["ps_link_shares"],
    probe_name="ps_link_shares",
    inputs=probe.inputs_ps_link_shares,
)
def judge_ps_link_shares(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Both directions' shares, to 1e-6, on every case of ``probe.inputs_ps_link_shares``: feature
    counts, steps per worker, windows, link rates and placements the notebook never had."""
    cases = probe.inputs_ps_link_shares(**args)
    got = arrays["shares"]
    if got.shape != (len(cases), 2):
        return Verdict(False, f"ps_link_shares gave {got.shape[0]} answers for {len(cases)} cases")
    for case, row in zip(cases, got):
        want = np.asarray(reference_ps_link_shares(**case))
        if _close(row, want, 1e-12, 1e-6) > 1:
            return Verdict(
                False,
                f"ps_link_shares(num_features={case['num_features']:,}, local_steps={case['local_steps']}, "
                f"window_s={case['window_s']:.4g}, rate_bits={case['rate_bits']:,.0f}, "
                f"beside_ps={case['beside_ps']}) is ({row[0]:.6g}, {row[1]:.6g}) as (in, out), not the grader's "
                f"values for this case: check each direction's bytes per step, "
                f"whose steps cross the ps's link, and the rate in bits",
            )
    return Verdict(True)


# ---------------------------------------------------------------------------------------------
# Lab 2: the prediction of the ps's global step, on clusters the notebook never had


@hidden("lab2_global_step", functions=["global_step"], probe_name="global_step", inputs=probe.inputs_global_step)
def judge_global_step(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The global step exactly, on every case of ``probe.inputs_global_step``: both modes, worker
    counts and steps per worker the notebook never had (one worker, and one step, among them)."""
    from labkit.solutions.lab2 import global_step

    def wrong(case, mine):
        return (
            f"global_step({case['mode']!r}, workers={case['workers']}, local_steps={case['local_steps']}) is "
            f"{mine:.10g}, not the grader's value for this case: check how many updates the ps applies in a "
            f"{case['mode']} run for each step a worker makes"
        )

    cases = probe.inputs_global_step(**args)
    return _each_number("global_step", arrays["steps"], cases, lambda c: global_step(**c), 1e-6, 0.0, wrong)


# ---------------------------------------------------------------------------------------------
# Lab 4: the prediction of the configurations with the same SGD, on grids the notebook never had


@hidden(
    "lab4_identical_pairs",
    functions=["identical_pairs"],
    probe_name="identical_pairs",
    inputs=probe.inputs_identical_pairs,
)
def judge_identical_pairs(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The count of pairs exactly, on every grid of ``probe.inputs_identical_pairs``: worker counts
    and batch sizes the notebook never had, three or more configurations to one global batch in some."""
    from labkit.solutions.lab4 import identical_pairs

    def wrong(case, mine):
        return (
            f"identical_pairs(workers={case['workers']}, batch_sizes={case['batch_sizes']}) is {mine:.10g}, not "
            f"the grader's count for this grid: check what makes two configurations the same SGD, and that "
            f"you count each pair of configurations once"
        )

    cases = probe.inputs_identical_pairs(**args)
    return _each_number("identical_pairs", arrays["pairs"], cases, lambda c: identical_pairs(**c), 1e-6, 0.0, wrong)


# ---------------------------------------------------------------------------------------------
# Lab 5: the predictions of a step's bytes (the ps's, a ring worker's), on cases the notebook never had.
# With one ps they are comm_terms' bytes, which lab5_comm_terms judges at 1, 2, 3, 5 and 8 workers: these
# judge the prediction functions at other worker counts (1 aside) and model sizes.


@hidden(
    "lab5_ps_bytes_per_step",
    functions=["ps_bytes_per_step"],
    probe_name="ps_bytes_per_step",
    inputs=probe.inputs_model_workers,
)
def judge_ps_bytes_per_step(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The ps's bytes per step, to 1e-9, on every case of ``probe.inputs_model_workers``."""
    from labkit.solutions.lab5 import ps_bytes_per_step

    def wrong(case, mine):
        return (
            f"ps_bytes_per_step(model_bytes={case['model_bytes']:,.0f}, workers={case['workers']}) is {mine:,.10g}, "
            f"not the grader's value for this case: check what each worker reads from the ps and adds into it in "
            f"a step, and that the ps's sent and received bytes are both counted"
        )

    cases = probe.inputs_model_workers(**args)
    return _each_number(
        "ps_bytes_per_step", arrays["bytes"], cases, lambda c: ps_bytes_per_step(**c), 1e-6, 1e-9, wrong
    )


@hidden(
    "lab5_dense_model_bytes",
    functions=["dense_model_bytes"],
    probe_name="dense_model_bytes",
    inputs=probe.inputs_dense_models,
)
def judge_dense_model_bytes(args: dict, arrays: dict, folder: Path) -> Verdict:
    """An MLP's bytes, to the byte, on every case of ``probe.inputs_dense_models``."""
    from labkit.solutions.lab5 import dense_model_bytes

    def wrong(case, mine):
        return (
            f"dense_model_bytes(units={case['units']}) is {mine:,.10g}, not the grader's value for this MLP: check "
            f"that each pair of consecutive widths is one dense layer, with a weight matrix and a bias, at 4 bytes a value"
        )

    cases = probe.inputs_dense_models(**args)
    return _each_number("dense_model_bytes", arrays["bytes"], cases, lambda c: dense_model_bytes(**c), 0.5, 0.0, wrong)


@hidden(
    "lab5_ring_bytes_per_worker",
    functions=["ring_bytes_per_worker"],
    probe_name="ring_bytes_per_worker",
    inputs=probe.inputs_model_workers,
)
def judge_ring_bytes_per_worker(args: dict, arrays: dict, folder: Path) -> Verdict:
    """A ring worker's bytes sent per step, to 1e-9, on every case of ``probe.inputs_model_workers``."""
    from labkit.solutions.lab5 import ring_bytes_per_worker

    def wrong(case, mine):
        return (
            f"ring_bytes_per_worker(model_bytes={case['model_bytes']:,.0f}, workers={case['workers']}) is "
            f"{mine:,.10g}, not the grader's value for this case: check how many rounds the ring runs, what one "
            f"worker sends in each, and the ring of one worker"
        )

    cases = probe.inputs_model_workers(**args)
    return _each_number(
        "ring_bytes_per_worker", arrays["bytes"], cases, lambda c: ring_bytes_per_worker(**c), 1e-6, 1e-9, wrong
    )
