"""The student's side of a hidden check: import the student's functions and run them on the grader's inputs.

This file runs as a script (``python probe.py SPEC``) in a fresh sandbox that sees the
student's view of the kit (no solutions, no grader) and an empty folder to write to; it is
bound there on its own, so it imports nothing from ``labkit.grading``. For each hidden check
in SPEC it

1. takes from the submitted notebook's code cells only plain definitions (``load_functions``,
   ``plain``): top-level ``import`` statements (only those binding a name the functions use),
   assignments of literal constants to names, and ``def``/``class`` statements whose
   definition runs nothing of the student's: a function's decorators are dropped (the probe
   traces with ``tf.function`` itself) and its annotations too; every default value must be a
   literal, a name or a dotted name (``tf.float32``); a class has no decorator, no keyword
   (``metaclass=``), only names or dotted names as bases, and a body of a docstring, literal
   constants and such functions (``staticmethod``, ``classmethod`` and ``property`` the only
   decorators), and no ``__init_subclass__``. Anything else is skipped with a note the check's
   reason shows. So no statement of the notebook runs here (not a patch of the kit, a file
   write or a printed record), and the student's code runs only when a probe calls the
   functions. (An import runs the library's own code, and so may a library base class's
   metaclass when a class is defined on it: never code from the notebook.)
2. runs the named functions on inputs built from the rubric's arguments (a seed, sizes) by
   the check's probe (``PROBES``);
3. writes what they returned to ``<out>/<check>.npz`` (arrays only, no pickles) and how it
   went to ``<out>/status.json``.

A check whose probe is marked ``last`` (``sparse_gradient``: its w of 10^8 features may end the
process) runs after the others, so that they keep their results; what such a probe leaves in
``<out>`` while it runs tells the judge where it was (``hidden.when_died``). ``sparse_gradient``
runs the student's step only in child processes and reads their CPU time itself (``_measure``).

The grader's judge (``labkit.grading.judge.hidden``, in another process) rebuilds the same inputs
with the same ``inputs_*`` functions below, computes the answer itself and compares. Whatever
the student's code does in this process can only change what it returns.
"""

from __future__ import annotations

import ast
import json
import linecache
import os
import resource
import sys
import traceback
from pathlib import Path

import numpy as np

from labkit.notebook.record import cell_name  # light: json, math, re

PROBES: dict = {}


def probe(name: str):
    def register(fn):
        PROBES[name] = fn
        return fn

    return register


# ---------------------------------------------------------------------------------------------
# The student's functions


def load_functions(notebook: Path, names) -> tuple[dict, list[str]]:
    """``({name: function}, notes)`` from the notebook's code cells: imports, plain definitions
    and literal constants (``plain``), in notebook order (a later definition wins); nothing else runs.
    Only the imports that bind a name the functions use run (``used_names``): a check of a NumPy
    function does not pay for the TensorFlow a notebook imports for its other cells."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "student", "__notebook__": str(notebook)}  # where a child process finds them
    notes, taken, bound = [], [], set(namespace)
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError as e:
            notes.append(f"{cell_name(i)}: not Python ({e.msg}, line {e.lineno}); skipped")
            continue
        filename = f"<{cell_name(i)}>"  # the source, for tracebacks and for tf.function's autograph
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        for node in tree.body:
            node, why = plain(node, bound)
            if why:
                notes.append(f"{cell_name(i)} line {why[0]}: {why[1]}")
            if node is not None:
                taken.append((i, filename, node))
                bound.update(_bound(node))
    used = used_names([node for _, _, node in taken], names)
    for i, filename, node in taken:
        for statement in _needed(node, used):
            try:
                exec(compile(ast.Module([statement], []), filename, "exec"), namespace)
            except Exception as e:  # an import the student kit lacks, say: the function may not need it
                notes.append(f"{cell_name(i)} line {statement.lineno}: {type(e).__name__}: {e}")
    return {n: namespace[n] for n in names if callable(namespace.get(n))}, notes


DYNAMIC = {"globals", "vars", "eval", "exec", "__import__", "importlib", "locals"}


def used_names(nodes: list, names) -> set[str] | None:
    """The names the definitions of ``names`` use, directly or through other definitions
    among ``nodes``; None (every import runs) when one looks names up by string (``globals()``)."""
    defines: dict[str, list] = {}
    for node in nodes:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            for name in _bound(node):
                defines.setdefault(name, []).append(node)
    used, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in used:
            continue
        used.add(name)
        for node in defines.get(name, []):
            todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    return None if used & DYNAMIC else used


def _bound(node) -> list[str]:
    """The names a top-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [_alias_name(a) for a in node.names]
    return []


def _alias_name(alias: ast.alias) -> str:
    """The name ``import a.b``, ``import a.b as c`` or ``from m import a`` binds: ``a``, ``c``, ``a``."""
    return (alias.asname or alias.name).split(".")[0]


def _needed(node, used: set[str] | None) -> list:
    """``node`` to run: a definition always, an import only for the names of it ``used``, one
    name per statement (``from m import a, b`` runs as ``from m import a`` when only ``a`` is)."""
    if used is None or not isinstance(node, (ast.Import, ast.ImportFrom)):
        return [node]
    keep = [a for a in node.names if a.name == "*" or _alias_name(a) in used]
    if not keep:
        return []
    part = ast.Import(names=keep) if isinstance(node, ast.Import) else ast.ImportFrom(node.module, keep, node.level)
    return [ast.copy_location(part, node)]


METHOD_DECORATORS = ("staticmethod", "classmethod", "property")


def plain(node, bound: set[str]):
    """``(statement to run or None, (line, why) or None)``: ``node`` as a plain definition,
    whose execution runs nothing of the student's (see the module docstring), or None with the
    reason when it is not one. A function's decorators and annotations are dropped (noted).
    ``bound``: the names the notebook's statements taken before it bind (a method's decorator
    must be Python's own ``property``, not the notebook's)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return node, None
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return _constant(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        why = _defaults_problem(node)
        if why:
            return None, (node.lineno, f"{why}; not taken")
        dropped = [ast.unparse(d) for d in node.decorator_list]
        node = _strip(node)
        node.decorator_list = []
        return node, (
            (node.lineno, f"{node.name} taken without its decorator(s) @{', @'.join(dropped)}") if dropped else None
        )
    if isinstance(node, ast.ClassDef):
        why = _class(node, bound)
        return (None, (node.lineno, f"{why}; not taken")) if why else (_strip(node), None)
    return None, None


def _constant(node):
    """``NAME = literal`` (an annotation is dropped: it would be evaluated)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if node.value is None or not all(isinstance(t, ast.Name) for t in targets):
        return None, None
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None, None
    return ast.copy_location(ast.Assign(targets=targets, value=node.value), node), None


def _reference(expr) -> bool:
    """A literal, a name or a dotted name: evaluating it looks a value up and calls nothing."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    if isinstance(expr, ast.Name):
        return True
    try:
        ast.literal_eval(expr)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _defaults_problem(fn) -> str | None:
    args = fn.args
    for value in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        if not _reference(value):
            return (
                f"the default value {ast.unparse(value)[:60]!r} of {fn.name} is not a literal or a name "
                f"(a default is evaluated when the function is defined)"
            )
    return None


def _strip(node):
    """``node`` with every annotation of its own definition (not of nested code) removed."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                arg.annotation = None
        node.returns = None
    elif isinstance(node, ast.ClassDef):
        body = []
        for item in node.body:
            if isinstance(item, ast.AnnAssign):
                if item.value is None:
                    continue
                item = ast.copy_location(ast.Assign(targets=[item.target], value=item.value), item)
            elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                item = _strip(item)
            body.append(item)
        node.body = body or [ast.Pass()]
    return ast.fix_missing_locations(node)


def _class(node, bound: set[str]) -> str | None:
    """Why the class statement ``node`` is not a plain definition (None when it is)."""
    name = node.name
    if node.decorator_list:
        return f"class {name} is decorated (a decorator runs when the class is defined)"
    if node.keywords:
        return f"class {name} has keyword arguments ({ast.unparse(node.keywords[0])[:40]}): a metaclass runs code"
    for base in node.bases:
        if not _reference(base) or isinstance(base, ast.Constant):
            return f"the base {ast.unparse(base)[:40]!r} of class {name} is not a name or a dotted name"
    for item in node.body:
        if isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant):
            continue  # a docstring
        if isinstance(item, ast.Pass):
            continue
        if isinstance(item, (ast.Assign, ast.AnnAssign)):
            if _constant(item)[0] is None:
                return f"class {name} assigns something other than a literal to a name"
            continue
        if isinstance(item, ast.ClassDef):
            why = _class(item, bound)
            if why:
                return why
            continue
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if item.name == "__init_subclass__":
                return f"class {name} defines __init_subclass__, which would run when a subclass is defined"
            for d in item.decorator_list:
                if not (isinstance(d, ast.Name) and d.id in METHOD_DECORATORS and d.id not in bound):
                    return (
                        f"the method {name}.{item.name} has the decorator @{ast.unparse(d)[:40]}; only "
                        f"{', '.join(METHOD_DECORATORS)} are taken in a class"
                    )
            why = _defaults_problem(item)
            if why:
                return why
            continue
        return f"class {name} runs a statement in its body ({ast.unparse(item).splitlines()[0][:40]})"
    return None


# ---------------------------------------------------------------------------------------------
# Lab 1: the SGD step


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


@probe("lr_step")
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


@probe("best_reading")
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


@probe("initial_loss")
def initial_loss(fns: dict, args: dict, out: Path) -> dict:
    """``initial_test_loss(num_classes)`` for every class count: one number each."""
    fn = fns["initial_test_loss"]
    return {"losses": np.asarray([float(fn(k)) for k in inputs_initial_loss(**args)], np.float64)}


# ---------------------------------------------------------------------------------------------
# Lab 3: the prediction of distinct features per step, and the sparse gradient


def inputs_distinct_features(seed: int = 0, cases: int = 6) -> list[dict]:
    """Click-data shapes (``clickdata.ClickSpec`` fields) and batch sizes the notebook never had."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(int(cases)):
        fields = int(rng.integers(4, 41))
        s = float(rng.choice([rng.uniform(0.6, 0.95), rng.uniform(1.05, 2.0)]))
        out.append(
            {
                "spec": {
                    "num_features": int(rng.integers(1_000, 300_000)),
                    "num_fields": fields,
                    "optional_fields": int(rng.integers(0, fields)),
                    "zipf_s": round(s, 3),
                    "min_vocab": int(rng.integers(2, 12)),
                },
                "rows": int(rng.integers(5, 600)),
            }
        )
    return out


@probe("distinct_features")
def distinct_features(fns: dict, args: dict, out: Path) -> dict:
    """``expected_distinct_features(spec, rows)`` on every case: one number each."""
    from labkit.datasets.clickdata import ClickSpec

    fn = fns["expected_distinct_features"]
    return {
        "expected": np.asarray(
            [float(fn(ClickSpec(**c["spec"]), c["rows"])) for c in inputs_distinct_features(**args)], np.float64
        )
    }


def inputs_sparse_gradient(seed: int = 0, features: int = 60, trials: int = 3, **scaling) -> list[dict]:
    """Click-like batches: repeated features, a duplicated row, an empty row, unsorted ids.
    ``scaling``: the settings of the check that the step's cost does not grow with F
    (``settings_sparse_scaling``), validated here."""
    settings_sparse_scaling(**scaling)
    rng = np.random.default_rng(seed)
    out = []
    for t in range(trials):
        b = 6 + t
        dense = (rng.random((b, features)) < 0.2) * rng.choice([1.0, 2.0], size=(b, features))
        dense[1], dense[2] = dense[0], 0.0
        rows, cols = np.nonzero(dense)
        perm = rng.permutation(len(cols))
        out.append(
            {
                "indices": np.stack([rows, cols], 1)[perm].astype(np.int64),
                "values": dense[rows, cols][perm].astype(np.float32),
                "shape": np.array([b, features], np.int64),
                "y": (rng.random(b) < 0.5).astype(np.float32),
                "w": rng.normal(size=features).astype(np.float32),
            }
        )
    return out


def settings_sparse_scaling(
    small_features: int = 10_000,
    large_features: int = 100_000_000,
    rows: int = 16,
    per_row: int = 20,
    cpu_s: float = 0.5,
    min_calls: int = 3,
    max_calls: int = 2000,
    time_limit_s: float = 60.0,
) -> dict:
    """How the sparse gradient's scaling is measured: one batch of ``rows`` x ``per_row`` non-zeros
    (feature ids below ``small_features``) with w of ``small_features`` and of ``large_features``
    features; at each size and mode (eagerly, traced), in a child process of its own, after a
    warm-up, calls until they have used ``cpu_s`` CPU seconds (``min_calls`` to ``max_calls``
    calls; /proc counts in 10 ms ticks), the child's whole life within ``time_limit_s``.

    The sizes fit Lab 3's ``check_memory_mb`` (3 GB, the default) with margin: w of 10^8 float32
    is 400 MB, and a dense gradient beside it another 400 MB; a dense [rows, F] batch (6.4 GB) does not."""
    s = {
        "small_features": int(small_features),
        "large_features": int(large_features),
        "rows": int(rows),
        "per_row": int(per_row),
        "cpu_s": float(cpu_s),
        "min_calls": int(min_calls),
        "max_calls": int(max_calls),
        "time_limit_s": float(time_limit_s),
    }
    if not 0 < s["small_features"] < s["large_features"] or min(s["rows"], s["per_row"], s["min_calls"]) < 1:
        raise ValueError(f"the sparse gradient's scaling settings are not sizes: {s}")
    if not (s["time_limit_s"] > 0 and s["cpu_s"] > 0 and s["max_calls"] >= s["min_calls"]):
        raise ValueError(f"time_limit_s and cpu_s must be positive and max_calls >= min_calls, got {s}")
    return s


def batch_sparse_scaling(seed: int, s: dict) -> dict:
    """The scaling check's batch (drawn from ``seed``): ``s["rows"]`` rows of ``s["per_row"]``
    non-zeros, features repeated across rows, unsorted, all below ``s["small_features"]``;
    labels, and w of ``s["small_features"]`` (the large w is these, then zeros)."""
    rng = np.random.default_rng([seed, 3])
    b, f = s["rows"], s["small_features"]
    rows = np.repeat(np.arange(b), s["per_row"])
    pool = rng.choice(f, size=max(1, len(rows) // 2), replace=False)  # about two non-zeros per feature
    cols = rng.choice(pool, size=len(rows))
    keep = np.unique(np.stack([rows, cols], 1), axis=0)  # one value per (row, feature)
    perm = rng.permutation(len(keep))
    return {
        "indices": keep[perm].astype(np.int64),
        "values": rng.choice([1.0, 2.0], size=len(keep)).astype(np.float32),
        "shape": np.array([b, f], np.int64),
        "y": (rng.random(b) < 0.5).astype(np.float32),
        "w": rng.normal(size=f).astype(np.float32),
    }


SPARSE_RUNNING = "sparse_gradient.running.json"  # the scaling case under way, for the judge if the process dies


def _memory_error(e: BaseException) -> bool:
    import tensorflow as tf

    text = str(e).lower()
    words = ("out of memory", "oom when allocating", "failed to allocate", "cannot allocate memory")
    return isinstance(e, (MemoryError, tf.errors.ResourceExhaustedError)) or any(w in text for w in words)


@probe("sparse_gradient")
def sparse_gradient(fns: dict, args: dict, out: Path) -> dict:
    """``sparse_lr_gradient(w, x, y) -> (loss, IndexedSlices)``: the loss and the slices' indices
    and values on the value cases, eagerly and traced, then its CPU time per step at two numbers of
    features (``sparse_scaling``). The student's function runs only in child processes
    (``sparse_child``); this process, which reads their CPU time, never calls it."""
    return sparse_scaling(_function_source(fns["sparse_lr_gradient"], out), args, out)


sparse_gradient.last = True  # the other checks' results are saved before its large w is allocated


def _function_source(fn, out: Path) -> dict:
    """Where a child process finds ``fn``: the notebook ``load_functions`` took it from, or (a
    function of a Python module, in the kit's tests) a notebook of that module's source."""
    notebook = getattr(fn, "__globals__", {}).get("__notebook__")
    if notebook:
        return {"notebook": str(notebook), "function": "sparse_lr_gradient"}
    import inspect

    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    if module is None or getattr(module, fn.__name__, None) is not fn:
        raise TypeError(
            f"{fn!r} is neither a notebook's function nor a module-level one: a child process cannot load it"
        )
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    nb = {"cells": [{**cell, "source": inspect.getsource(module)}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = out / ".sparse_source.ipynb"
    path.write_text(json.dumps(nb))
    return {"notebook": str(path), "function": fn.__name__}


def _sparse_result(result, mode: str):
    import tensorflow as tf

    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], tf.IndexedSlices)):
        raise TypeError(
            f"sparse_lr_gradient must return (loss, tf.IndexedSlices); called {mode} it returned {type(result).__name__}"
        )
    return result


def scaling_settings(args: dict) -> dict:
    """``settings_sparse_scaling`` from a check's args, which also hold the value cases' keys."""
    return settings_sparse_scaling(**{k: v for k, v in args.items() if k not in ("seed", "features", "trials")})


def labels_sparse_scaling(draw: int, rows: int) -> np.ndarray:
    """The labels of one timed call, drawn from ``draw``: each call has its own, so a step cannot
    reuse a result it computed before the timing began."""
    return (np.random.default_rng([int(draw), 7]).random(int(rows)) < 0.5).astype(np.float32)


def sparse_scaling(source: dict, args: dict, out: Path) -> dict:
    """The step's CPU time per call at ``small_features`` and at ``large_features``
    (``settings_sparse_scaling``), eagerly and traced, each in a child process of its own
    (``_measure``): ``scale_<mode>_<small|large>_cpu_s`` (CPU seconds per call),
    ``_calls`` and ``_wall_s``, and the last large call's labels (``scale_<mode>_draw``), loss and
    gradient. ``scale_<mode>_outcome`` is "ok", "memory", "time" or "died", with
    ``scale_<mode>_at`` the size it was at; the first mode that fails ends the measurement. The
    first child also runs the value cases. While a child runs, ``SPARSE_RUNNING`` in ``out``
    names its case."""
    s = scaling_settings(args)
    arrays: dict = {}
    for mode in ("eager", "graph"):
        for size in ("small", "large"):
            f = s[f"{size}_features"]
            child = {**source, "args": args, "mode": mode, "features": f, "values": not arrays}
            running = out / SPARSE_RUNNING
            running.write_text(json.dumps({"mode": mode, "features": f}))
            try:
                got = _measure(child, s, out)
            finally:
                running.unlink(missing_ok=True)
            arrays.update(got.pop("cases", {}))
            if got["outcome"] != "ok":
                arrays[f"scale_{mode}_outcome"] = np.asarray(got["outcome"])
                arrays[f"scale_{mode}_at"] = np.asarray(f, np.int64)
                return arrays
            for key in ("cpu_s", "wall_s", "calls"):
                arrays[f"scale_{mode}_{size}_{key}"] = np.asarray(got[key], np.float64)
            if size == "large":
                arrays[f"scale_{mode}_draw"] = np.asarray(got["draw"], np.int64)
                arrays[f"scale_{mode}_loss"] = np.asarray(got["loss"], np.float64)
                arrays[f"scale_{mode}_indices"] = np.asarray(got["indices"], np.int64).reshape(-1)
                arrays[f"scale_{mode}_values"] = np.asarray(got["values"], np.float64).reshape(-1)
        arrays[f"scale_{mode}_outcome"] = np.asarray("ok")
        arrays[f"scale_{mode}_at"] = np.asarray(s["large_features"], np.int64)
    return arrays


def _measure(child: dict, s: dict, out: Path) -> dict:
    """One child's measurement: it loads the function, builds w of ``child["features"]`` and makes
    a warm-up call, then says "ready"; from then this process reads the child's CPU time from
    ``/proc`` (``cpu_seconds``) and sends calls, each with labels of a fresh draw, until the
    calls have used ``cpu_s`` (at least ``min_calls``, at most ``max_calls``). Nothing the
    child runs can change that reading. ``time_limit_s`` bounds the child's whole life."""
    import secrets
    import subprocess
    import time

    spec = out / f".sparse_child_{child['mode']}_{child['features']}.json"
    spec.write_text(json.dumps(child))
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--sparse-child", str(spec), str(write_fd)],
        stdin=subprocess.PIPE,
        stdout=sys.stderr.fileno(),  # the student's prints go to the probe's log
        pass_fds=(write_fd,),
        start_new_session=True,
    )
    os.close(write_fd)
    replies = _Replies(read_fd, time.monotonic() + s["time_limit_s"])
    try:
        ready = replies.next()
        if ready.get("event") != "ready":
            return _failed(ready, child)
        got = {"cases": {k: np.asarray(v) for k, v in ready.get("cases", {}).items()}}
        start_tree, start_cpu = tree_cpu_seconds(proc.pid), cpu_seconds(proc.pid)
        start_wall, calls = time.monotonic(), 0
        while True:
            draw = secrets.randbelow(2**62)
            proc.stdin.write(f"{draw}\n".encode())
            proc.stdin.flush()
            reply = replies.next()
            if reply.get("event") != "result":
                return {**_failed(reply, child), **got}
            calls += 1
            used = cpu_seconds(proc.pid) - start_cpu
            if calls >= s["max_calls"] or (used >= s["cpu_s"] and calls >= s["min_calls"]):
                break
        wall = time.monotonic() - start_wall
        used = max(used, tree_cpu_seconds(proc.pid) - start_tree)  # and any process it started
        return {
            **got,
            "outcome": "ok",
            "cpu_s": used / calls,
            "wall_s": wall / calls,
            "calls": calls,
            "draw": draw,
            "loss": reply.get("loss"),
            "indices": reply.get("indices"),
            "values": reply.get("values"),
        }
    except (BrokenPipeError, _Ended) as e:
        return {"outcome": "time" if isinstance(e, _Ended) and e.late else "died"}
    finally:
        _stop(proc)
        os.close(read_fd)
        spec.unlink(missing_ok=True)


class _Ended(Exception):
    def __init__(self, late: bool):
        self.late = late


class _Replies:
    """The child's replies, one JSON object a line, each within ``deadline`` (``_Ended`` if not)."""

    LIMIT = 16 * 2**20

    def __init__(self, fd: int, deadline: float):
        self.fd, self.deadline, self.buffer = fd, deadline, b""

    def next(self) -> dict:
        import select
        import time

        while b"\n" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise _Ended(late=True)
            chunk = os.read(self.fd, 1 << 16)
            if not chunk or len(self.buffer) > self.LIMIT:
                raise _Ended(late=False)
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            raise _Ended(late=False) from None
        return reply if isinstance(reply, dict) else {}


def _failed(reply: dict, child: dict) -> dict:
    """A child's error: "memory" (it ran out), else the function's error, raised here as the
    built-in exception it was (``NotImplementedError``) or a RuntimeError."""
    if reply.get("event") != "error":
        return {"outcome": "died"}
    if reply.get("memory"):
        return {"outcome": "memory"}
    import builtins

    called = "traced by tf.function" if child["mode"] == "graph" else "called eagerly"
    kind = getattr(builtins, str(reply.get("type")), None)
    text = str(reply.get("error", "?"))[:500]
    if child.get("values") and isinstance(kind, type) and issubclass(kind, Exception):
        raise kind(text)
    where = f"with w of {child['features']:,} features ({called})"
    where = f"on the grader's batches or {where}" if child.get("values") else where  # this child ran both
    raise RuntimeError(f"{where}: {reply.get('type')}: {text}")


def _stop(proc) -> None:
    """End a child and everything it started (its own session), then reap it."""
    import signal
    import subprocess

    try:
        proc.stdin.close()
    except OSError:
        pass  # the child already closed its end: it is ending
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass  # killed below
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group has ended
    proc.wait()


def _stat(pid) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command's name (state, ppid, pgrp, session, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cpu(fields: list[str]) -> float:
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime, stime, cutime, cstime


def cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` has used, all its threads and its reaped children, from
    ``/proc/<pid>/stat``: read from outside the process."""
    return _cpu(_stat(pid))


def tree_cpu_seconds(pid: int) -> float:
    """``cpu_seconds`` of ``pid`` and of every living process it started: its descendants, and
    any process left in its session (``pid`` leads one: ``start_new_session``), so a step that
    hands its work to a helper process is charged for it."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stats[int(entry)] = _stat(entry)
            except (OSError, IndexError):
                continue  # it ended while listed
    ours, grew = {pid}, True
    while grew:
        more = {p for p, f in stats.items() if p not in ours and (int(f[1]) in ours or int(f[3]) == pid)}
        ours, grew = ours | more, bool(more)
    return sum(_cpu(stats[p]) for p in ours if p in stats)


def sparse_child(argv: list[str]) -> int:
    """A child of ``_measure``: load the function, make w and the batch, a warm-up call (the first
    child also runs the value cases), say "ready", then answer each line of stdin (a draw of labels)
    with one call's result."""
    child = json.loads(Path(argv[0]).read_text())
    replies = os.fdopen(int(argv[1]), "w")

    def send(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    try:
        import tensorflow as tf

        fns, notes = load_functions(child["notebook"], [child["function"]])
        if child["function"] not in fns:
            raise LookupError(
                f"no function {child['function']} at the top level of a code cell ({'; '.join(notes[:3])})"
            )
        grad, mode, f = fns[child["function"]], child["mode"], int(child["features"])
        ready = {"event": "ready", "cases": _value_cases(grad, child["args"]) if child["values"] else {}}
        s = scaling_settings(child["args"])
        case = batch_sparse_scaling(int(child["args"].get("seed", 0)), s)
        fn = grad if mode == "eager" else tf.function(grad)
        w = tf.Variable(tf.zeros([f], tf.float32))
        w[: s["small_features"]].assign(case["w"])
        x = tf.SparseTensor(case["indices"], case["values"], [s["rows"], f])
        _materialize(_sparse_result(fn(w, x, tf.constant(case["y"])), mode))
        send(ready)
        for line in sys.stdin:
            y = tf.constant(labels_sparse_scaling(int(line), s["rows"]))
            loss, (indices, values) = _materialize(_sparse_result(fn(w, x, y), mode))
            send({"event": "result", "loss": loss, "indices": indices.tolist(), "values": values.tolist()})
        return 0
    except BaseException as e:  # the student's code failed, or ran out of memory: the parent decides
        send({"event": "error", "type": type(e).__name__, "error": str(e)[:500], "memory": _memory_error(e)})
        return 1


def _value_cases(grad, args: dict) -> dict:
    """The value cases, eagerly and traced, as lists for the child's reply."""
    import tensorflow as tf

    values = {}
    for t, case in enumerate(inputs_sparse_gradient(**args)):
        x = tf.SparseTensor(case["indices"], case["values"], case["shape"])
        for mode, fn in (("eager", grad), ("graph", tf.function(grad))):
            w = tf.Variable(case["w"])
            loss, g = _sparse_result(fn(w, x, tf.constant(case["y"])), mode)
            values[f"{t}_{mode}_loss"] = float(loss)
            values[f"{t}_{mode}_indices"] = np.asarray(g.indices).astype(np.int64).reshape(-1).tolist()
            values[f"{t}_{mode}_values"] = np.asarray(g.values, np.float64).reshape(-1).tolist()
    return values


def _materialize(result):
    """``(loss, (indices, values))`` as NumPy: every op of the step has run."""
    loss, g = result
    return float(loss), (np.asarray(g.indices), np.asarray(g.values))


# ---------------------------------------------------------------------------------------------
# Lab 4: the ring all-reduce

RING_CASES = ((1, 7), (2, 10), (3, 10), (3, 11), (4, 1003), (5, 12), (3, 61_706))  # (workers, values)


def inputs_ring_allreduce(seed: int = 0, cases=RING_CASES) -> list[dict]:
    """Every worker's float32 gradient for each (N, length): lengths N divides and lengths it does not."""
    rng = np.random.default_rng(seed)
    out = []
    for n, size in cases:
        if int(n) < 1 or int(size) < int(n):
            raise ValueError(f"each case needs 1 <= workers <= values, got {(n, size)}")
        out.append({"grads": [rng.standard_normal(int(size)).astype(np.float32) for _ in range(int(n))]})
    return out


@probe("ring_allreduce")
def ring_allreduce(fns: dict, args: dict, out: Path) -> dict:
    """``ring_allreduce(grads) -> (sums, sent)`` on the grader's gradients: every worker's vector, the
    bytes each sent, and whether the inputs came back unchanged."""
    fn = fns["ring_allreduce"]
    arrays = {}
    for t, case in enumerate(inputs_ring_allreduce(**args)):
        grads = [g.copy() for g in case["grads"]]
        result = fn(grads)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"ring_allreduce must return (sums, sent), got {type(result).__name__}")
        sums, sent = result
        arrays[f"{t}_sums"] = (
            np.stack([np.asarray(s, np.float64).reshape(-1) for s in sums]) if len(sums) else np.zeros((0, 0))
        )
        arrays[f"{t}_sent"] = np.asarray(sent, np.float64).reshape(-1)
        arrays[f"{t}_inputs_kept"] = np.asarray(all(np.array_equal(g, c) for g, c in zip(grads, case["grads"])))
    return arrays


# ---------------------------------------------------------------------------------------------
# Lab 5: the cost model's communication terms


def inputs_comm_terms(seed: int = 0, sizes: int = 2) -> list[dict]:
    """Model sizes drawn from ``seed``, N = 1..8 workers, 1-9 ps tasks (more ps than workers too),
    each ps count with an even split (``shards`` None) and a random uneven one; the ring once per N."""
    rng = np.random.default_rng(seed)
    out = []
    for M in (float(rng.integers(10_000, 10**9)) for _ in range(int(sizes))):
        for N in (1, 2, 3, 5, 8):
            out.append({"arch": "ring", "M": M, "N": N, "n_ps": 1, "shards": None})
            for k in (1, 2, 3, 9):
                out.append({"arch": "ps", "M": M, "N": N, "n_ps": k, "shards": None})
                if k > 1:
                    out.append(
                        {
                            "arch": "ps",
                            "M": M,
                            "N": N,
                            "n_ps": k,
                            "shards": tuple(float(x) for x in M * rng.dirichlet(np.ones(k))),
                        }
                    )
    return out


@probe("comm_terms")
def comm_terms(fns: dict, args: dict, out: Path) -> dict:
    """``comm_terms(arch, M, N, n_ps, shards) -> (messages, bytes)`` on every case: one row each."""
    fn = fns["comm_terms"]
    rows = []
    for case in inputs_comm_terms(**args):
        result = fn(case["arch"], case["M"], case["N"], case["n_ps"], case["shards"])
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise TypeError(
                f"comm_terms must return (messages, bytes); for {case['arch']!r} it returned {type(result).__name__}"
            )
        rows.append([float(result[0]), float(result[1])])
    return {"terms": np.asarray(rows, np.float64)}


# ---------------------------------------------------------------------------------------------
# Lab 5: the PS failure trace, on traces the notebook never had


def inputs_slice_shares(seed: int = 0, cases: int = 12) -> list[dict]:
    """Failure traces in the kit's format (``ring_vs_ps.ps_failure``), drawn from ``seed``: 2-6
    workers, one killed after a random step, in some a second worker later, and in most the ps
    at the end; every step has one slice per worker, each run by a worker alive when the step
    began, unevenly (under load one survivor may take most); steps listed out of order. Each
    case is ``{"trace", "kill"}``: the question is about kill ``kill``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(int(cases)):
        n = int(rng.integers(2, 7))
        order = [int(w) for w in rng.permutation(n)]
        kills, at = [], 0
        for dead in order[: 2 if n >= 3 and rng.random() < 0.5 else 1]:
            at += int(rng.integers(3, 25))
            kills.append({"task": f"worker:{dead}", "after_step": at, "t_s": 0.1 * at})
        last = at + int(rng.integers(2, 20))
        if rng.random() < 0.7:
            kills.append({"task": "ps:0", "after_step": last, "t_s": 0.1 * last})
        weights = rng.dirichlet(np.ones(n))
        steps = []
        for step in range(1, last + 1):
            gone = {
                int(k["task"].split(":")[1])
                for k in kills
                if k["task"].startswith("worker:") and k["after_step"] + 1 < step
            }
            live = [w for w in range(n) if w not in gone]
            p = weights[live] / weights[live].sum()
            steps.append(
                {
                    "step": step,
                    "seconds": float(rng.uniform(0.05, 0.5)),
                    "loss": 2.3 - 0.001 * step,
                    "slices_on": [int(w) for w in rng.choice(live, size=n, p=p)],
                    "t_s": 0.1 * step,
                }
            )
        shuffled = [steps[i] for i in rng.permutation(len(steps))]
        trace = {"model": "lenet5", "workers": n, "steps": shuffled, "kills": kills, "events": [], "failure": None}
        out.append({"trace": trace, "kill": int(rng.integers(0, len(kills)))})
    return out


@probe("slice_shares")
def slice_shares(fns: dict, args: dict, out: Path) -> dict:
    """``slice_shares(trace, kill) -> {worker: share}`` on every case: one row of shares per case,
    one column per worker index (0 where the answer has none; -1 for a key that is no worker)."""
    import copy

    fn = fns["slice_shares"]
    cases = inputs_slice_shares(**args)
    rows = np.zeros((len(cases), 6), np.float64)
    for i, case in enumerate(cases):
        got = fn(copy.deepcopy(case["trace"]), case["kill"])
        if not isinstance(got, dict):
            raise TypeError(f"slice_shares must return a dict {{worker: share}}, not {type(got).__name__}")
        for w, share in got.items():
            w = int(w)
            rows[i, w if 0 <= w < 6 else 0] = float(share) if 0 <= w < 6 else -1.0
    return {"shares": rows}


def _numbers(fns: dict, name: str, cases: list[dict], order: tuple[str, ...], what: str) -> np.ndarray:
    """The student's ``name`` called with each case's values in ``order``: one number each, or a
    TypeError that says it must return ``what``."""
    fn, out = fns[name], []
    for case in cases:
        got = fn(*(case[k] for k in order))
        try:
            out.append(float(got))
        except (TypeError, ValueError):
            raise TypeError(f"{name} must return one number, {what}; got {type(got).__name__}") from None
    return np.asarray(out, np.float64)


# ---------------------------------------------------------------------------------------------
# Lab 5: the busiest link's ceiling on images/s, on cases the notebook never had


def inputs_link_ceiling(seed: int = 0, cases: int = 24) -> list[dict]:
    """Cases drawn from ``seed``: 'ps' or 'ring', a batch of 1-512 per worker, a model of 10 KB to
    1 GB (never the notebook's CNN or MLP), 1-8 workers (the ring at N = 1 once at least) and a
    link of 1 Mbit/s to 100 Gbit/s."""
    rng = np.random.default_rng(seed)
    out = [{"arch": "ring", "batch": 32, "model_bytes": 1_000_000.0, "workers": 1, "rate_bits": 1e9}]
    for _ in range(int(cases) - 1):
        out.append(
            {
                "arch": str(rng.choice(["ps", "ring"])),
                "batch": int(rng.integers(1, 513)),
                "model_bytes": float(round(10 ** rng.uniform(4, 9))),
                "workers": int(rng.integers(1, 9)),
                "rate_bits": float(round(10 ** rng.uniform(6, 11))),
            }
        )
    return [out[i] for i in rng.permutation(len(out))]


@probe("link_ceiling")
def link_ceiling(fns: dict, args: dict, out: Path) -> dict:
    """``link_ceiling(arch, batch, model_bytes, workers, rate_bits) -> images/s`` on every case: one number each."""
    order = ("arch", "batch", "model_bytes", "workers", "rate_bits")
    return {"ceilings": _numbers(fns, "link_ceiling", inputs_link_ceiling(**args), order, "images/s")}


# ---------------------------------------------------------------------------------------------
# Lab 2: the synchronous round, in a short real cluster


def settings_sync_round(
    deploy: str = "cluster",
    rounds: int = 20,
    batch_size: int = 50,
    learning_rate: float = 0.5,
    train_limit: int = 2000,
    test_limit: int = 500,
    seed: int = 0,
    timeout: float = 240,
) -> dict:
    if int(rounds) < 1 or int(batch_size) < 1 or not float(learning_rate) > 0:
        raise ValueError(
            f"rounds, batch_size and learning_rate must be positive, got {rounds}, {batch_size}, {learning_rate}"
        )
    return {
        "deploy": str(deploy),
        "rounds": int(rounds),
        "batch_size": int(batch_size),
        "learning_rate": float(learning_rate),
        "train_limit": int(train_limit),
        "test_limit": int(test_limit),
        "seed": int(seed),
        "timeout": float(timeout),
    }


@probe("sync_round")
def sync_round(fns: dict, args: dict, out: Path) -> dict:
    """``sync_round`` runs a parameter-server cluster of the kit's tasks in sync mode for
    ``rounds`` global steps from the seeded start; the chief saves the final weights. The
    tasks' result files land in ``out/runs`` for the judge."""
    from labkit.labs.lab2 import experiment as sync_async

    s = settings_sync_round(**args)
    os.environ["LABKIT_RUNS"] = str(out / "runs")
    run = sync_async.run(
        "sync",
        s["deploy"],
        s["batch_size"],
        log=None,
        target_loss=None,
        max_steps=s["rounds"],
        learning_rate=s["learning_rate"],
        train_limit=s["train_limit"],
        test_limit=s["test_limit"],
        eval_every=0,
        seed=s["seed"],
        sync_round=fns["sync_round"],
        run="hidden-sync",
        timeout=s["timeout"],
        save_weights=True,
        scalars=False,
    )
    return {"run_dir": np.asarray(str(Path(run.result.run_dir).resolve().relative_to(out.resolve())))}


# ---------------------------------------------------------------------------------------------
# Lab 2: worker 0's share of the async steps on emulated links, on cases the notebook never had


def inputs_worker0_share(seed: int = 0, cases: int = 24) -> list[dict]:
    """Cases drawn from ``seed``: a worker step's bytes (1 KB to 100 MB), a link rate (1 Mbit/s to
    100 Gbit/s), a step time (0.1 ms to 1 s), 1-8 workers and 1 to all of them beside the ps (one in
    most cases, as in the notebook; never the notebook's own 2 x 31,400 bytes, 3 workers and two links),
    so the link is in turn negligible and most of a remote step."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(int(cases)):
        workers = int(rng.integers(1, 9))
        beside = 1 if workers == 1 or rng.random() < 0.6 else int(rng.integers(2, workers + 1))
        out.append(
            {
                "step_bytes": float(round(10 ** rng.uniform(3, 8))),
                "rate_bits": float(round(10 ** rng.uniform(6, 11))),
                "step_s": float(10 ** rng.uniform(-4, 0)),
                "workers": workers,
                "beside_ps": beside,
            }
        )
    return out


@probe("worker0_share")
def worker0_share(fns: dict, args: dict, out: Path) -> dict:
    """``worker0_share(step_bytes, rate_bits, step_s, workers, beside_ps) -> share`` on every case: one number each."""
    order = ("step_bytes", "rate_bits", "step_s", "workers", "beside_ps")
    return {"shares": _numbers(fns, "worker0_share", inputs_worker0_share(**args), order, "worker 0's share")}


# ---------------------------------------------------------------------------------------------
# Lab 3: the ps's link under the dense step, in each direction, on cases the notebook never had


def inputs_ps_link_shares(seed: int = 0, cases: int = 24) -> list[dict]:
    """Cases drawn from ``seed``: 10^3-10^9 features (never the notebook's 10^6), 1-8 workers with
    their steps in the window (all alike, as in a sync run, or each its own, as in async), a window
    of 0.1 s to 1,000 s, a link of 1 Mbit/s to 100 Gbit/s, and 0 to 3 workers beside the ps (one in
    most cases, as in the notebook)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < int(cases):
        features = int(round(10 ** rng.uniform(3, 9)))
        if features == 1_000_000:
            continue
        workers = int(rng.integers(1, 9))
        if rng.random() < 0.5:
            steps = [int(rng.integers(1, 300))] * workers
        else:
            steps = [int(s) for s in rng.integers(0, 300, size=workers)]
        beside = 1 if rng.random() < 0.5 else int(rng.integers(0, min(3, workers) + 1))
        out.append(
            {
                "num_features": features,
                "local_steps": steps,
                "window_s": float(10 ** rng.uniform(-1, 3)),
                "rate_bits": float(round(10 ** rng.uniform(6, 11))),
                "beside_ps": beside,
            }
        )
    return out


@probe("ps_link_shares")
def ps_link_shares(fns: dict, args: dict, out: Path) -> dict:
    """``ps_link_shares(num_features, local_steps, window_s, rate_bits, beside_ps) -> (in_share,
    out_share)`` on every case: one row of two shares each."""
    fn = fns["ps_link_shares"]
    rows = []
    for case in inputs_ps_link_shares(**args):
        got = fn(
            case["num_features"], list(case["local_steps"]), case["window_s"], case["rate_bits"], case["beside_ps"]
        )
        try:
            into, out_of = got
            rows.append([float(into), float(out_of)])
        except (TypeError, ValueError):
            raise TypeError(
                f"ps_link_shares must return two numbers, (in_share, out_share); got {type(got).__name__}"
            ) from None
    return {"shares": np.asarray(rows, np.float64).reshape(-1, 2)}


# ---------------------------------------------------------------------------------------------
# Lab 2: the prediction of the ps's global step, on clusters the notebook never had


def inputs_global_step(seed: int = 0, cases: int = 24) -> list[dict]:
    """Cases drawn from ``seed``: 'sync' and 'async' alike, 1-64 workers and 1-10,000 steps per
    worker; one worker in each mode, and one step each in each mode, among them; never the
    notebook's 3 workers with 100 steps each."""
    rng = np.random.default_rng(seed)
    modes = ("sync", "async")
    out = [{"mode": m, "workers": 1, "local_steps": int(rng.integers(2, 10_001))} for m in modes]
    out += [{"mode": m, "workers": int(rng.integers(2, 65)), "local_steps": 1} for m in modes]
    while len(out) < int(cases):
        workers, steps = int(rng.integers(2, 65)), int(rng.integers(2, 10_001))
        if (workers, steps) != (3, 100):
            out.append({"mode": modes[len(out) % 2], "workers": workers, "local_steps": steps})
    return [out[i] for i in rng.permutation(len(out))]


@probe("global_step")
def global_step(fns: dict, args: dict, out: Path) -> dict:
    """``global_step(mode, workers, local_steps) -> the ps's global step`` on every case: one number each."""
    order = ("mode", "workers", "local_steps")
    return {"steps": _numbers(fns, "global_step", inputs_global_step(**args), order, "the ps's global step")}


# ---------------------------------------------------------------------------------------------
# Lab 4: the prediction of the configurations with the same SGD, on grids the notebook never had

NOTEBOOK_GRIDS_LAB4 = (([1, 2, 3], [50, 100, 200]), ([1, 2, 3], [32, 64, 128, 256]))  # its own, and report 002's


def inputs_identical_pairs(seed: int = 0, cases: int = 16) -> list[dict]:
    """Grids drawn from ``seed``: 2-5 distinct worker counts of 1-8 and 2-5 distinct per-worker batch
    sizes, small multiples of one base so that global batches often coincide (three or more
    configurations to one global batch in some), in no particular order; a grid of one worker count,
    one of one batch size, and one whose global batches all differ among them; never the notebook's
    grids (``NOTEBOOK_GRIDS_LAB4``)."""
    rng = np.random.default_rng(seed)
    out = [
        {"workers": [1], "batch_sizes": [64, 16, 32]},
        {"workers": [4, 1, 2], "batch_sizes": [48]},
        {"workers": [1, 2, 4], "batch_sizes": [25, 50, 100]},  # 4 x 25 = 2 x 50 = 1 x 100
        {"workers": [2, 3], "batch_sizes": [7, 11]},  # no two alike
    ]
    while len(out) < int(cases):
        workers = [int(w) for w in rng.choice([1, 2, 3, 4, 5, 6, 8], size=int(rng.integers(2, 6)), replace=False)]
        base = int(rng.choice([4, 5, 8, 10, 16, 25]))
        multiples = rng.choice([1, 2, 3, 4, 6, 8, 12, 16], size=int(rng.integers(2, 6)), replace=False)
        grid = {"workers": workers, "batch_sizes": [base * int(m) for m in multiples]}
        if all((sorted(grid["workers"]), sorted(grid["batch_sizes"])) != g for g in NOTEBOOK_GRIDS_LAB4):
            out.append(grid)
    return [out[i] for i in rng.permutation(len(out))]


@probe("identical_pairs")
def identical_pairs(fns: dict, args: dict, out: Path) -> dict:
    """``identical_pairs(workers, batch_sizes) -> pairs`` on every grid: one number each."""
    order = ("workers", "batch_sizes")
    return {"pairs": _numbers(fns, "identical_pairs", inputs_identical_pairs(**args), order, "a count of pairs")}


# ---------------------------------------------------------------------------------------------
# Lab 5: the predictions of a step's bytes (the ps's, a ring worker's), on cases the notebook never had

NOTEBOOK_MODELS_LAB5 = (23_298_088, 246_824)  # the MLP's and LeNet's bytes


def inputs_model_workers(seed: int = 0, cases: int = 24) -> list[dict]:
    """``(model_bytes, workers)`` cases drawn from ``seed``: models of 4 bytes (one float32 weight)
    to 40 GB, never the notebook's MLP or LeNet; one worker in one case, and otherwise 4, 6, 7 or
    9-64 workers, the counts the comm_terms check (1, 2, 3, 5 and 8 workers) never has."""
    rng = np.random.default_rng(seed)
    out = [{"model_bytes": float(4 * int(rng.integers(1, 10**6))), "workers": 1}]
    out.append({"model_bytes": 4.0, "workers": int(rng.integers(9, 65))})
    while len(out) < int(cases):
        model_bytes = float(4 * int(round(10 ** rng.uniform(0, 10))))
        workers = int(rng.choice([4, 6, 7, *range(9, 65)]))
        if model_bytes not in NOTEBOOK_MODELS_LAB5:
            out.append({"model_bytes": model_bytes, "workers": workers})
    return [out[i] for i in rng.permutation(len(out))]


@probe("ps_bytes_per_step")
def ps_bytes_per_step(fns: dict, args: dict, out: Path) -> dict:
    """``ps_bytes_per_step(model_bytes, workers) -> bytes`` on every case: one number each."""
    cases, order = inputs_model_workers(**args), ("model_bytes", "workers")
    return {"bytes": _numbers(fns, "ps_bytes_per_step", cases, order, "the ps's bytes per step")}


NOTEBOOK_UNITS_LAB5 = ([784, 2048, 2048, 10],)  # the MLP's layers


def inputs_dense_models(seed: int = 0, cases: int = 24) -> list[dict]:
    """``units`` cases drawn from ``seed``: MLPs of 1 to 6 dense layers of 1 to 4096 units each,
    never the notebook's MLP; one of a single layer of one input and one output."""
    rng = np.random.default_rng([seed, 5])
    out = [{"units": [1, 1]}]
    while len(out) < int(cases):
        units = [int(u) for u in rng.integers(1, 4097, size=int(rng.integers(2, 8)))]
        if units not in NOTEBOOK_UNITS_LAB5:
            out.append({"units": units})
    return [out[i] for i in rng.permutation(len(out))]


@probe("dense_model_bytes")
def dense_model_bytes(fns: dict, args: dict, out: Path) -> dict:
    """``dense_model_bytes(units) -> bytes`` on every case (each a list of its own): one number each."""
    return {"bytes": _numbers(fns, "dense_model_bytes", inputs_dense_models(**args), ("units",), "the model's bytes")}


@probe("ring_bytes_per_worker")
def ring_bytes_per_worker(fns: dict, args: dict, out: Path) -> dict:
    """``ring_bytes_per_worker(model_bytes, workers) -> bytes`` on every case: one number each."""
    cases, order = inputs_model_workers(**args), ("model_bytes", "workers")
    return {"bytes": _numbers(fns, "ring_bytes_per_worker", cases, order, "a ring worker's bytes sent per step")}


# ---------------------------------------------------------------------------------------------


def _limit(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))


def main(argv=None) -> int:
    spec = json.loads(Path((argv or sys.argv[1:])[0]).read_text())
    _limit(int(spec["memory_bytes"]))
    out = Path(spec["out"])
    status = {}
    checks = sorted(spec["checks"], key=lambda c: bool(getattr(PROBES.get(c["probe"]), "last", False)))
    for check in checks:  # in the rubric's order, those whose probe may end the process last
        name = check["check"]
        try:
            fns, notes = load_functions(spec["notebook"], check["functions"])
            missing = [f for f in check["functions"] if f not in fns]
            if missing:
                hint = f" ({'; '.join(notes[:3])})" if notes else ""
                raise LookupError(f"no function {', '.join(missing)} defined at the top level of a code cell{hint}")
            arrays = PROBES[check["probe"]](fns, check.get("args", {}), out)
            np.savez(out / f"{name}.npz", **arrays)
            status[name] = {"ok": True}
        except BaseException as e:  # the student's code failed: that is the check's result, not the probe's
            if isinstance(e, KeyboardInterrupt):
                raise
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"{f.filename} line {f.lineno}" for f in reversed(tb) if f.filename.startswith("<cell")), "")
            status[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500] + (f" ({where})" if where else "")}
        (out / "status.json").write_text(json.dumps(status))
    return 0


if __name__ == "__main__":
    sys.exit(sparse_child(sys.argv[2:]) if sys.argv[1:2] == ["--sparse-child"] else main())
