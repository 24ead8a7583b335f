"""Lab 5's hidden checks: the cost model's communication terms, who carried the steps after a kill,
the busiest link's ceiling on images/s, and the predictions of a step's bytes (the ps's, a dense
model's, a ring worker's), each on cases the notebook never had (see ``labkit.labs.declare``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from labkit.labs.declare import Verdict, close, declare, numbers, shuffled

# ---------------------------------------------------------------------------------------------
# The cost model's communication terms, against the reference on inputs the run never had


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


def judge_comm_terms(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Messages exactly, bytes to a byte (or 1e-6), for every case of ``inputs_comm_terms``:
    model sizes, worker and ps counts and uneven shards that the notebook's runs never had."""
    from labkit.labs.lab5.solution import comm_terms

    cases = inputs_comm_terms(**args)
    got = arrays["terms"]
    if got.shape != (len(cases), 2):
        return Verdict(False, f"comm_terms gave {got.shape[0]} answers for {len(cases)} cases")
    for case, (msgs, nbytes) in zip(cases, got):
        want_msgs, want_bytes = comm_terms(**case)
        bad_bytes = close(np.asarray(nbytes), np.asarray(want_bytes), 1.0, 1e-6) > 1
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


declare("lab5_comm_terms", ["comm_terms"], inputs_comm_terms, probe=comm_terms, judge=judge_comm_terms)


# ---------------------------------------------------------------------------------------------
# Who carried the steps after a kill, on failure traces the notebook never had


def inputs_slice_shares(seed: int = 0, cases: int = 12) -> list[dict]:
    """Failure traces in the kit's format (``ring_vs_ps.ps_failure``), drawn from ``seed``: 2-6
    workers, one killed after a random step, in some a second worker later, and in most the ps
    at the end; every step has one slice per worker, each run by a worker alive when the step
    began, unevenly (under load one survivor may take most); steps listed out of order; one case
    in three asks about the first of two killed workers. Each case is ``{"trace", "kill"}``: the
    question is about kill ``kill``."""
    rng = np.random.default_rng(seed)
    out = []
    for case in range(int(cases)):
        apart = case % 3 == 0  # one case in three asks about a worker killed before another one:
        n = int(rng.integers(3 if apart else 2, 7))  # only there do "to the next kill" and "to the
        order = [int(w) for w in rng.permutation(n)]  # end of the trace" give different windows
        kills, at = [], 0
        for dead in order[: 2 if apart or (n >= 3 and rng.random() < 0.5) else 1]:
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
        out.append({"trace": trace, "kill": 0 if apart else int(rng.integers(0, len(kills)))})
    return out


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


def judge_slice_shares(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Each worker's share of the slices after a kill, to 1e-9, on every trace of
    ``inputs_slice_shares``: worker counts, kill steps and slice placements the shipped
    trace never had, steps listed out of order."""
    from labkit.labs.lab5.solution import slice_shares

    cases = inputs_slice_shares(**args)
    got = arrays["shares"]
    if got.shape != (len(cases), 6):
        return Verdict(False, f"slice_shares gave {got.shape[0]} answers for {len(cases)} traces")
    for case, row in zip(cases, got):
        want = np.zeros(6)
        for w, share in slice_shares(case["trace"], case["kill"]).items():
            want[w] = share
        if close(row, want, 1e-9, 0.0) > 1:
            kill = case["trace"]["kills"][case["kill"]]
            return Verdict(
                False,
                f"a trace of {case['trace']['workers']} workers, the kill of {kill['task']} after "
                f"step {kill['after_step']}: shares {np.round(row, 3).tolist()} (by worker index) are not the "
                f"grader's for this trace: check which steps each worker had finished when the kill came",
            )
    return Verdict(True)


declare("lab5_slice_shares", ["slice_shares"], inputs_slice_shares, probe=slice_shares, judge=judge_slice_shares)


# ---------------------------------------------------------------------------------------------
# The busiest link's ceiling on images/s, on cases the notebook never had


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
    return shuffled(rng, out)


LINK_CEILING_HINT = (
    "link_ceiling({arch!r}, batch={batch}, model_bytes={model_bytes:,.0f}, workers={workers}, "
    "rate_bits={rate_bits:,.0f}) is {mine:.6g} images/s, not the grader's value for this case: check the images a "
    "step trains, the bytes on its critical path and the rate in bits"
)
LINK_CEILING_ORDER = ("arch", "batch", "model_bytes", "workers", "rate_bits")
numbers(
    "link_ceiling",
    inputs_link_ceiling,
    "ceilings",
    1e-9,
    1e-6,
    LINK_CEILING_HINT,
    order=LINK_CEILING_ORDER,
    what="images/s",
)


# ---------------------------------------------------------------------------------------------
# The predictions of a step's bytes (the ps's, a ring worker's), on cases the notebook never had.
# With one ps they are comm_terms' bytes, which lab5_comm_terms judges at 1, 2, 3, 5 and 8 workers: these
# judge the prediction functions at other worker counts (1 aside) and model sizes.


NOTEBOOK_MODELS = (23_298_088, 246_824)  # the MLP's and LeNet's bytes


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
        if model_bytes not in NOTEBOOK_MODELS:
            out.append({"model_bytes": model_bytes, "workers": workers})
    return shuffled(rng, out)


NOTEBOOK_UNITS = ([784, 2048, 2048, 10],)  # the MLP's layers


def inputs_dense_models(seed: int = 0, cases: int = 24) -> list[dict]:
    """``units`` cases drawn from ``seed``: MLPs of 1 to 6 dense layers of 1 to 4096 units each,
    never the notebook's MLP; one of a single layer of one input and one output."""
    rng = np.random.default_rng([seed, 5])
    out = [{"units": [1, 1]}]
    while len(out) < int(cases):
        units = [int(u) for u in rng.integers(1, 4097, size=int(rng.integers(2, 8)))]
        if units not in NOTEBOOK_UNITS:
            out.append({"units": units})
    return shuffled(rng, out)


DENSE_MODEL_HINT = (
    "dense_model_bytes(units={units}) is {mine:,.10g}, not the grader's value for this MLP: check that each pair of "
    "consecutive widths is one dense layer, with a weight matrix and a bias, at 4 bytes a value"
)
numbers(
    "dense_model_bytes",
    inputs_dense_models,
    "bytes",
    0.5,
    0.0,
    DENSE_MODEL_HINT,
    order=("units",),
    what="the model's bytes",
)

# The ps's bytes and a ring worker's, on the same cases
for function, what, advice in (
    (
        "ps_bytes_per_step",
        "the ps's bytes per step",
        "what each worker reads from the ps and adds into it in a step, and that the ps's sent and received bytes "
        "are both counted",
    ),
    (
        "ring_bytes_per_worker",
        "a ring worker's bytes sent per step",
        "how many rounds the ring runs, what one worker sends in each, and the ring of one worker",
    ),
):
    hint = (
        function
        + "(model_bytes={model_bytes:,.0f}, workers={workers}) is {mine:,.10g}, not the grader's value for this case: check "
        + advice
    )
    numbers(function, inputs_model_workers, "bytes", 1e-6, 1e-9, hint, order=("model_bytes", "workers"), what=what)
