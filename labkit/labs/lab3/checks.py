"""Lab 3's hidden checks: the expected distinct features per step (a formula, to 1e-6), the sparse
gradient (its values against the dense gradient, then its CPU time per step as w grows from 10^4 to
10^8 features, measured from outside the processes that run it), and the ps's link shares under the
dense step, on cases the notebook never had (see ``labkit.labs.declare``)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np

from labkit.core.cputime import cpu_seconds, tree_cpu_seconds
from labkit.labs.declare import (
    Numbers,
    Unverifiable,
    Verdict,
    child_command,
    close,
    declare,
    small_json,
    solution,
)

# ---------------------------------------------------------------------------------------------
# The prediction of distinct features per step, against the exact expectation


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


def distinct_features(fns: dict, args: dict, out: Path) -> dict:
    """``expected_distinct_features(spec, rows)`` on every case: one number each."""
    from labkit.datasets.clickdata import ClickSpec

    fn = fns["expected_distinct_features"]
    return {
        "expected": np.asarray(
            [float(fn(ClickSpec(**c["spec"]), c["rows"])) for c in inputs_distinct_features(**args)], np.float64
        )
    }


def _want_distinct_features(case: dict) -> float:
    from labkit.datasets.clickdata import ClickSpec
    from labkit.labs.lab3.solution import reference_distinct_features

    return reference_distinct_features(ClickSpec(**case["spec"]), case["rows"])


def _distinct_features_hint(case: dict, mine: float) -> str:
    spec = ", ".join(f"{k}={v}" for k, v in case["spec"].items())
    return (
        f"expected_distinct_features(ClickSpec({spec}), {case['rows']}) is {mine:.6g}: "
        f"not the expected number of distinct (field, value) pairs; check each value's "
        f"probability (from the CDF), the optional fields, and the chance it is in no row"
    )


declare(
    "lab3_distinct_features",
    ["expected_distinct_features"],
    inputs_distinct_features,
    probe=distinct_features,
    numbers=Numbers("expected", _want_distinct_features, 1e-9, 1e-6, _distinct_features_hint),
)


# ---------------------------------------------------------------------------------------------
# The sparse gradient: the probe's side. The student's step runs only in child processes; the
# probe reads their CPU time from /proc, where nothing the step does reaches.


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


def sparse_gradient(fns: dict, args: dict, out: Path) -> dict:
    """``sparse_lr_gradient(w, x, y) -> (loss, IndexedSlices)``: the loss and the slices' indices
    and values on the value cases, eagerly and traced, then its CPU time per step at two numbers of
    features (``sparse_scaling``). The student's function runs only in child processes
    (``sparse_child``); this process, which reads their CPU time, never calls it."""
    return sparse_scaling(_function_source(fns["sparse_lr_gradient"], out), args, out)


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
        child_command("lab3_sparse_gradient", str(spec), str(write_fd)),
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


def sparse_child(argv: list[str], load_functions) -> int:
    """A child of ``_measure``: load the function, make w and the batch, a warm-up call (the first
    child also runs the value cases), say "ready", then answer each line of stdin (a draw of labels)
    with one call's result. ``load_functions``: the probe engine's, which takes the function from
    the notebook as the probe does."""
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
# The sparse gradient: the judge's side, against the dense computation


def judge_sparse_gradient(args: dict, arrays: dict, folder: Path) -> Verdict:
    """The student's gradient on the grader's batches against the dense gradient (one row per
    unique feature, the same values), then its cost as the number of features grows
    (``judge_sparse_scaling``)."""
    from labkit.labs.lab3.solution import reference_sparse_gradient

    worst = 0.0
    for t, case in enumerate(inputs_sparse_gradient(**args)):
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
                worst, close(mine, grad, 1e-5, 1e-3), close(arrays[f"{t}_{mode}_loss"], np.asarray(loss), 1e-5, 1e-4)
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
from ``/proc`` of a child process that runs the step (``_measure``), so no clock or
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
    s = scaling_settings(args)
    return s, batch_sparse_scaling(int(args.get("seed", 0)), s)


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
    from labkit.labs.lab3.solution import reference_sparse_gradient

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
        drawn = {**case, "y": labels_sparse_scaling(int(arrays[f"scale_{mode}_draw"]), s["rows"])}
        loss, grad = reference_sparse_gradient(drawn)
        idx, vals = arrays[f"scale_{mode}_indices"], arrays[f"scale_{mode}_values"]
        mine = np.zeros(s["small_features"])
        if idx.shape != vals.shape or (idx.size and (idx.min() < 0 or idx.max() >= s["small_features"])):
            mine[:] = np.inf
        else:
            np.add.at(mine, idx, vals)
        off = max(close(mine, grad, 1e-5, 1e-3), close(arrays[f"scale_{mode}_loss"], np.asarray(loss), 1e-5, 1e-4))
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


def died_sparse_gradient(args: dict, folder: Path) -> Verdict | None:
    """The probe's process ended (its memory or time limit, a crash) while the scaling check ran
    the student's step with the large w: that step's memory or work grows with F."""
    running = small_json(folder / SPARSE_RUNNING)
    s, case = _scaling_settings(args)
    mode, at = running.get("mode"), running.get("features")
    if mode not in ("eager", "graph") or at != s["large_features"]:
        return None
    return Verdict(False, _grew(s, case, mode, "ended the process running it (out of memory or time)"))


declare(
    "lab3_sparse_gradient",
    ["sparse_lr_gradient"],
    inputs_sparse_gradient,
    probe=sparse_gradient,
    judge=judge_sparse_gradient,
    last=True,  # the other checks' results are saved before its large w is allocated
    died=died_sparse_gradient,
    child=sparse_child,
)


# ---------------------------------------------------------------------------------------------
# The ps's link under the dense step, in each direction, on cases the notebook never had


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


PS_LINK_SHARES_HINT = (
    "ps_link_shares(num_features={num_features:,}, local_steps={local_steps}, window_s={window_s:.4g}, "
    "rate_bits={rate_bits:,.0f}, beside_ps={beside_ps}) is ({mine[0]:.6g}, {mine[1]:.6g}) as (in, out), not the "
    "grader's values for this case: check each direction's bytes per step, whose steps cross the ps's link, and the "
    "rate in bits"
)
# Both directions' shares, to 1e-6, on every case: feature counts, steps per worker, windows, link rates and
# placements the notebook never had
PS_LINK_SHARES = Numbers(
    "shares", solution("labkit.labs.lab3.solution:reference_ps_link_shares"), 1e-12, 1e-6, PS_LINK_SHARES_HINT, width=2
)
declare("lab3_ps_link_shares", ["ps_link_shares"], inputs_ps_link_shares, probe=ps_link_shares, numbers=PS_LINK_SHARES)
