"""Lab 1's hidden checks: the SGD step (eager and traced, against a float64 step, its graph free of
Python callbacks), the chance that the best of n small-batch readings reaches a level, and the
loss at the seeded start for class counts the notebook never had (see ``labkit.labs.declare``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from labkit.labs.declare import Numbers, Unverifiable, Verdict, close, declare, probe_file, solution

# ---------------------------------------------------------------------------------------------
# The SGD step, against the softmax regression's gradient in float64


def inputs_lr_step(seed: int = 0, batch: int = 50, learning_rate: float = 0.5, trials: int = 2) -> list[dict]:
    """Random batches and starting weights (a nonzero bias, so its gradient matters)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        out.append(
            {
                "x": rng.random((batch, 784), dtype=np.float32),
                "y": rng.integers(0, 10, batch).astype(np.int32),
                "W": (rng.standard_normal((784, 10)) * 0.01).astype(np.float32),
                "b": (rng.standard_normal(10) * 0.1).astype(np.float32),
                "learning_rate": float(learning_rate),
            }
        )
    return out


def lr_step(fns: dict, args: dict, out: Path) -> dict:
    """``sgd_step(W, b, x, y, learning_rate)`` on tf.Variables, eagerly and traced (as the kit's
    epoch loop runs it): the updated W, b and the returned loss. The trace's GraphDef goes to
    ``<out>/GRAPH_FILE`` as bytes, counted by the judge in its own process: nothing here counts
    ops, so a step that resets or patches a counter in this process changes nothing that is read."""
    import tensorflow as tf

    from labkit.learning import lr

    step, arrays = fns["sgd_step"], {}
    traced = tf.function(step)  # one function for every case, as the epoch loop has: cases of one shape share a trace

    def step_args(case) -> tuple:
        W, b = tf.Variable(case["W"]), tf.Variable(case["b"])
        return W, b, tf.constant(case["x"]), tf.constant(case["y"]), case["learning_rate"]

    cases = inputs_lr_step(**args)
    graph = lr.traced_graph_def(traced, step_args(cases[0])).SerializeToString()  # before any eager call
    (out / GRAPH_FILE).write_bytes(graph)
    for t, case in enumerate(cases):
        for mode, fn in (("eager", step), ("graph", traced)):
            given = step_args(case)
            loss = fn(*given)
            arrays[f"{t}_{mode}_W"], arrays[f"{t}_{mode}_b"] = given[0].numpy(), given[1].numpy()
            arrays[f"{t}_{mode}_loss"] = np.asarray(float(loss) if loss is not None else np.nan)
    return arrays


GRAPH_FILE = "lr_step.graph.pb"  # the traced step's GraphDef, serialized: the judge counts its ops


PYTHON_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")  # tf.py_function / tf.numpy_function


def python_ops(graph_def) -> int:
    """How many ops of ``graph_def`` (its functions' bodies too) call back into Python: a step
    built from them computes in NumPy what the graph should compute itself."""
    from labkit.learning import lr  # TensorFlow: only where a graph is read

    return sum(n.op in PYTHON_OPS for n in lr.graph_nodes(graph_def))


def graph_def_file(path: Path, limit: int = 16 * 2**20):
    """The GraphDef a probe wrote to ``path`` (a file, not a link), parsed here, in the judge's
    process, where no student code runs; Unverifiable when it is missing, too large or not one.
    Only the fields ``lr.graph_nodes`` walks are read (``node_schema``), so no TensorFlow loads."""
    from google.protobuf.message import DecodeError

    graph_def = node_schema()()
    try:
        graph_def.ParseFromString(probe_file(path, limit).read_bytes())
    except DecodeError as e:
        raise Unverifiable(f"{path.name} is not a GraphDef ({e})") from None
    return graph_def


def node_schema():
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


def judge_lr_step(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The step's update, eager and traced, against the float64 reference on the grader's batches,
    computed by TensorFlow ops: its traced graph (the probe's file, counted here) calls nothing back
    in Python, where NumPy would compute what the exercise asks the graph for.

    Whether the gradient came from a tape is not checked: no property of a graph tells a correct
    hand-derived gradient from autodiff's (op names are the student's to choose; a hand gradient
    under ``tf.name_scope("gradient_tape")`` reads as the tape's), so the check claims only what
    it can measure. The notebook keeps its exercise contract, ``sgd_step(W, b, x, y, learning_rate)``."""
    from labkit.labs.lab1.solution import reference_lr_step

    callbacks = python_ops(graph_def_file(folder / GRAPH_FILE))
    worst, where = 0.0, ""
    for t, case in enumerate(inputs_lr_step(**args)):
        W, b, loss = reference_lr_step(case["x"], case["y"], case["W"], case["b"], case["learning_rate"])
        for mode in ("eager", "graph"):
            errs = {
                "W": close(arrays[f"{t}_{mode}_W"], W, 1e-5, 1e-3),
                "b": close(arrays[f"{t}_{mode}_b"], b, 1e-5, 1e-3),
                "loss": close(arrays[f"{t}_{mode}_loss"], np.asarray(loss), 1e-5, 1e-4),
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


declare("lab1_sgd_step", ["sgd_step"], inputs_lr_step, probe=lr_step, judge=judge_lr_step)


# ---------------------------------------------------------------------------------------------
# The best of n small-batch readings, and the loss at the seeded start


def inputs_best_reading(seed: int = 0, cases: int = 12) -> list[dict]:
    """``(q, n, batch_size, level)`` cases for Lab 1's model of the best of n small-batch accuracy
    readings: accuracies 0.5-0.995, 1-300 readings, batches of 10-100 images, levels whose
    level x batch_size is not a whole number (so "at least level" needs no rounding convention)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < int(cases):
        batch = int(rng.integers(10, 101))
        level = round(float(rng.uniform(0.6, 0.99)), 3)
        if abs(level * batch - round(level * batch)) < 0.05:
            continue
        out.append(
            {
                "q": round(float(rng.uniform(0.5, 0.995)), 4),
                "n": int(rng.integers(1, 301)),
                "batch_size": batch,
                "level": level,
            }
        )
    return out


def best_reading(fns: dict, args: dict, out: Path) -> dict:
    """``chance_best_reading(q, n, batch_size, level)`` on every case: one number each."""
    fn = fns["chance_best_reading"]
    return {
        "chances": np.asarray(
            [float(fn(c["q"], c["n"], c["batch_size"], c["level"])) for c in inputs_best_reading(**args)], np.float64
        )
    }


def inputs_initial_loss(seed: int = 0, cases: int = 6) -> list[int]:
    """Class counts for Lab 1's prediction of the loss at the seeded start: never 10, the notebook's."""
    rng = np.random.default_rng(seed)
    counts = [2, 3] + [int(k) for k in rng.integers(4, 5000, size=max(0, int(cases) - 2))]
    return [k if k != 10 else 11 for k in counts]


def initial_loss(fns: dict, args: dict, out: Path) -> dict:
    """``initial_test_loss(num_classes)`` for every class count: one number each."""
    fn = fns["initial_test_loss"]
    return {"losses": np.asarray([float(fn(k)) for k in inputs_initial_loss(**args)], np.float64)}


BEST_READING_HINT = (
    "chance_best_reading(q={q}, n={n}, batch_size={batch_size}, level={level}) is {mine:.6g}, not the chance that "
    "the best of n binomial batch readings reaches the level: check how many images 'at least level' needs, one "
    "reading's chance, and the best of n"
)
BEST_READING = Numbers(
    "chances", solution("labkit.labs.lab1.solution:chance_best_reading"), 1e-9, 1e-6, BEST_READING_HINT
)
declare("lab1_best_reading", ["chance_best_reading"], inputs_best_reading, probe=best_reading, numbers=BEST_READING)


def _initial_loss_hint(k: int, mine: float) -> str:
    return f"initial_test_loss({k}) is {mine:.6g}: not the mean cross-entropy of weights near zero with {k} classes"


declare(
    "lab1_initial_loss",
    ["initial_test_loss"],
    inputs_initial_loss,
    probe=initial_loss,
    numbers=Numbers("losses", math.log, 1e-6, 1e-3, _initial_loss_hint, noun="class counts"),
)
