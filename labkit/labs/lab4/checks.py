"""Lab 4's hidden checks: the ring all-reduce (every worker's sums against the plain sum, the bytes
each sent against the ring's schedule of chunks), the count of configurations that compute the
same SGD, on grids the notebook never had, and the student's collectives between worker processes
on a cluster shape and gradients of the grader's, the bytes counted by the kit's relay (see
``labkit.labs.declare``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from labkit.labs.declare import Unverifiable, Verdict, close, declare, numbers, shuffled

# ---------------------------------------------------------------------------------------------
# The ring all-reduce, against the plain sum and the ring's schedule of chunks


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


def ring_allreduce(fns: dict, args: dict, out: Path) -> dict:
    """``ring_allreduce(grads) -> (sums, sent)`` on the grader's gradients: every worker's vector, the
    bytes each sent, and the gradients it was given as they are after the call (``_given``): the
    judge compares them with its own, so nothing here decides whether they changed."""
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
        arrays[f"{t}_given"] = _given(grads, len(case["grads"]), case["grads"][0].size)
    return arrays


def _given(grads: list, n: int, size: int) -> np.ndarray:
    """The ``n`` gradients of ``size`` values the student's function was given, as they are after it
    ran (float32, one row each), or an empty array when it replaced one by something of another shape."""
    after = [np.asarray(g) for g in grads]
    if len(after) != n or any(a.shape != (size,) for a in after):
        return np.zeros((0, size), np.float32)
    return np.stack(after).astype(np.float32)


def judge_ring_allreduce(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Every worker ends with the plain sum of all the gradients, the inputs unchanged, and each
    sent the bytes of the ring's 2(N-1) rounds of one chunk each (``reference_ring_bytes``)."""
    from labkit.labs.lab4.solution import reference_ring_bytes

    for t, case in enumerate(inputs_ring_allreduce(**args)):
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
        if close(sums, np.broadcast_to(want, sums.shape), 1e-4, 1e-4) > 1:
            return Verdict(False, f"{where}: not every worker ends with the sum of all the gradients")
        if not np.array_equal(arrays[f"{t}_given"], np.stack(case["grads"])):
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


declare(
    "lab4_ring_allreduce", ["ring_allreduce"], inputs_ring_allreduce, probe=ring_allreduce, judge=judge_ring_allreduce
)


# ---------------------------------------------------------------------------------------------
# The prediction of the configurations with the same SGD, on grids the notebook never had


NOTEBOOK_GRIDS = (([1, 2, 3], [50, 100, 200]), ([1, 2, 3], [32, 64, 128, 256]))  # its own, and report 002's


def inputs_identical_pairs(seed: int = 0, cases: int = 16) -> list[dict]:
    """Grids drawn from ``seed``: 2-5 distinct worker counts of 1-8 and 2-5 distinct per-worker batch
    sizes, small multiples of one base so that global batches often coincide (three or more
    configurations to one global batch in some), in no particular order; a grid of one worker count,
    one of one batch size, and one whose global batches all differ among them; never the notebook's
    grids (``NOTEBOOK_GRIDS``)."""
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
        if all((sorted(grid["workers"]), sorted(grid["batch_sizes"])) != g for g in NOTEBOOK_GRIDS):
            out.append(grid)
    return shuffled(rng, out)


IDENTICAL_PAIRS_HINT = (
    "identical_pairs(workers={workers}, batch_sizes={batch_sizes}) is {mine:.10g}, not the grader's count for this "
    "grid: check what makes two configurations the same SGD, and that you count each pair of configurations once"
)
numbers(
    "identical_pairs",
    inputs_identical_pairs,
    "pairs",
    1e-6,
    0.0,
    IDENTICAL_PAIRS_HINT,
    order=("workers", "batch_sizes"),
    what="a count of pairs",
)


# ---------------------------------------------------------------------------------------------
# The collectives between processes, on a cluster shape and gradients of the grader's

COLLECTIVE_FUNCTIONS = ("reduce_scatter", "all_gather", "gather", "scatter")


def inputs_collective(seed: int = 0, workers: int = 4, values: int = 10_007, timeout: float = 20.0) -> dict:
    """One float32 gradient per worker, drawn from ``seed``, each at a scale of its own (so a sum
    where the average is due, or one worker's vector, is far off); by default 4 workers and a length
    they do not divide. ``timeout``: seconds a phase may take (the four phases and the start-up stay
    well within the grader's check_timeout when a worker hangs)."""
    workers, values = int(workers), int(values)
    if workers < 2 or values < workers or not float(timeout) > 0:
        raise ValueError(f"the collective check needs 2 <= workers <= values and a timeout, got {workers}, {values}")
    rng = np.random.default_rng(seed)
    scales = rng.uniform(0.01, 10.0, size=workers)
    return {"grads": [(rng.standard_normal(values) * s).astype(np.float32) for s in scales], "timeout": float(timeout)}


def collective_probe(fns: dict, args: dict, out: Path) -> dict:
    """The student's ring and gather/scatter between ``workers`` processes on the grader's gradients;
    the relay (in this process, which runs none of the student's code) counts the bytes."""
    from labkit.labs.lab4.collective import all_reduce

    case = inputs_collective(**args)
    run = all_reduce(
        case["grads"],
        ring=(fns["reduce_scatter"], fns["all_gather"]),
        gather_scatter=(fns["gather"], fns["scatter"]),
        folder=out / "collective",
        phase_timeout=case["timeout"],
    )
    return run.to_arrays()


def judge_collective(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Every property of ``collective_model.properties`` on the grader's gradients: the averages, the
    chunk each ring worker owns, the links used, and the bytes of every phase within the model's bound."""
    from labkit.labs.lab4.collective_model import COLLECTIVES, CollectiveRun, problems

    grads = inputs_collective(**args)["grads"]
    run = CollectiveRun.from_arrays(arrays)
    phases = tuple(p for c in COLLECTIVES.values() for p in c)
    if (run.world, run.values, run.itemsize, run.phases) != (len(grads), grads[0].size, 4, phases):
        raise Unverifiable("the probe's run does not match the grader's cluster")
    bad = problems(run, grads)
    return Verdict(not bad, "; ".join(bad))


declare(
    "lab4_collective",
    list(COLLECTIVE_FUNCTIONS),
    inputs_collective,
    probe=collective_probe,
    judge=judge_collective,
)
