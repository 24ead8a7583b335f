"""Lab 5's self-checks: properties each exercise's function has, tried on cases of the check's own.

Each function tests one exercise (``ps_bytes_per_step``, ``dense_model_bytes``,
``ring_bytes_per_worker``, ``comm_terms``, ``link_ceiling``, ``slice_shares``) against what a step
does, never against a formula: one worker as the limit, proportions (twice the workers, twice the
ps's bytes), bounds (a ring worker below twice the model, approaching it), invariances (an even
split is the default; the steps of a trace in any order), a layer's float32 arrays as NumPy
allocates them, ``link_ceiling`` beside the student's own ``comm_terms``, and failure traces built
here so that each step a wrong window takes in shows; ``audit_003`` against the ring worker's
measured bytes. None uses the grader's cases, and a failure names the function and the property,
never a value (``labkit.notebook.verdicts``). Each returns the ``Verdict`` it showed in the cell.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np

from labkit.notebook.verdicts import Verdict, verdict

MODELS = (1.25e6, 3.3e7)  # model bytes of the checks' own, a small model and a large one
WORKERS = (1, 2, 3, 4, 5, 7)
RATES = (1e8, 2.5e9)  # link rates, bits per second
FAR = 1000  # workers: "as N grows" (a ring of a thousand sends within 0.1% of twice the model)


def _near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _calls(v: Verdict, fn, cases, convert=float, what: str = "a number") -> dict | None:
    """``{case: fn(*case)}``, or None (a failed property) when a call raises or gives no value."""
    got = v.values(lambda c: fn(*c), cases, convert, what)
    return None if got is None else dict(zip(cases, got))


def ps_bytes_per_step(fn) -> Verdict:
    """``fn(model_bytes, workers)``: twice the model at one worker (a read and a write of the model,
    both counted), and in proportion to the workers and to the model."""
    v = Verdict("ps_bytes_per_step")
    cases = [(m, n) for m in MODELS for n in WORKERS] + [(m, 2 * n) for m in MODELS for n in WORKERS]
    got = _calls(v, fn, list(dict.fromkeys(cases + [(3 * m, n) for m in MODELS for n in WORKERS])))
    if got is None:
        return verdict(v)
    v.expect(
        all(_near(got[m, 1], 2 * m) for m in MODELS),
        "at one worker, the model read from the ps and a gradient as large written into it: both counted",
    )
    v.expect(
        all(_near(got[m, 2 * n], 2 * got[m, n]) for m in MODELS for n in WORKERS),
        "in proportion to the workers: every worker reads and writes through the one ps",
    )
    v.expect(
        all(_near(got[3 * m, n], 3 * got[m, n]) for m in MODELS for n in WORKERS), "in proportion to the model's bytes"
    )
    return verdict(v)


def dense_model_bytes(fn) -> Verdict:
    """``fn(units)``: a whole number of bytes; for one layer, the bytes of its float32 weight matrix
    and bias as NumPy allocates them; for a stack, the sum over its layers."""
    v = Verdict("dense_model_bytes")
    stacks = ([784, 2048, 2048, 10], [20, 7, 3], [3, 1, 1], [100, 50, 50, 50, 2])
    layers = list(dict.fromkeys((a, b) for u in stacks for a, b in zip(u, u[1:])))
    whole = v.values(lambda u: fn(list(u)), stacks)
    single = v.values(lambda ab: fn(list(ab)), layers) if whole is not None else None
    if whole is None or single is None:
        return verdict(v)
    v.expect(all(float(b).is_integer() and b > 0 for b in whole + single), "a whole, positive number of bytes")
    allocated = [np.empty((a, b), np.float32).nbytes + np.empty(b, np.float32).nbytes for a, b in layers]
    v.expect(
        all(_near(g, a) for g, a in zip(single, allocated)),
        "one layer: the bytes of its float32 weight matrix (inputs x outputs) and its bias (one per output)",
    )
    per_layer = dict(zip(layers, single))
    v.expect(
        all(_near(g, sum(per_layer[a, b] for a, b in zip(u, u[1:]))) for g, u in zip(whole, stacks)),
        "a stack: one dense layer per pair of consecutive widths, their bytes added up",
    )
    return verdict(v)


def _ring_bound(v: Verdict, got: dict, models, name: str) -> None:
    """The properties of a ring worker's bytes sent per step, ``got[(M, N)]`` for N in WORKERS and FAR."""
    v.expect(all(_near(got[m, 1], 0.0) for m in models), f"{name}: none at one worker (a ring of one sends nothing)")
    v.expect(
        all(got[m, a] < got[m, b] for m in models for a, b in zip(WORKERS, WORKERS[1:])),
        f"{name}: more with every worker added (more rounds, each of a smaller chunk)",
    )
    v.expect(
        all(got[m, n] < 2 * m * (1 + 1e-9) for m in models for n in (*WORKERS, FAR))
        and all(got[m, FAR] > 2 * m * (1 - 0.01) for m in models),
        f"{name}: below twice the model at every N, and approaching it as N grows "
        "(the reduce-scatter and the all-gather each send almost the whole model)",
    )


def ring_bytes_per_worker(fn) -> Verdict:
    """``fn(model_bytes, workers)``: none at one worker, more with every worker added, below twice
    the model and approaching it, and in proportion to the model."""
    v = Verdict("ring_bytes_per_worker")
    cases = [(m, n) for m in (*MODELS, *(3 * m for m in MODELS)) for n in (*WORKERS, FAR)]
    got = _calls(v, fn, cases)
    if got is None:
        return verdict(v)
    _ring_bound(v, got, MODELS, "a ring worker's bytes")
    v.expect(
        all(_near(got[3 * m, n], 3 * got[m, n]) for m in MODELS for n in WORKERS), "in proportion to the model's bytes"
    )
    return verdict(v)


def _pair(result) -> tuple[float, float]:
    messages, nbytes = result
    return float(messages), float(nbytes)


def comm_terms(fn) -> Verdict:
    """``fn(arch, M, N, n_ps=1, shards=None)``: the ring's (none at one worker, two more rounds per
    worker added, bytes below twice the model and approaching it); the PS's (a pull then a push at any
    N; both directions of the busiest link; the even split as the default; the busiest ps the one
    with the largest shard; a worker's own link the floor)."""
    v = Verdict("comm_terms")
    m = MODELS[0]
    ring = _calls(
        v,
        lambda a, mm, n: fn("ring", mm, n),
        [("ring", mm, n) for mm in MODELS for n in (*WORKERS, FAR)],
        _pair,
        "a pair (messages, bytes)",
    )
    if ring is None:
        return verdict(v)
    v.expect(
        _near(ring["ring", m, 1][0], 0.0)
        and all(
            _near(ring["ring", m, b][0] - ring["ring", m, a][0], 2 * (b - a)) for a, b in zip(WORKERS, WORKERS[1:])
        ),
        "the ring's messages: none at one worker, and two more rounds one after another (one to reduce, "
        "one to gather) with every worker added",
    )
    _ring_bound(
        v, {(mm, n): ring["ring", mm, n][1] for mm in MODELS for n in (*WORKERS, FAR)}, MODELS, "the ring's bytes"
    )

    splits = {
        1: [None],
        2: [None, (0.7, 0.3)],
        3: [None, (0.5, 0.3, 0.2), (0.5, 0.25, 0.25), (0.6, 0.2, 0.2)],
        8: [None],
    }
    workers = sorted({*WORKERS, *(2 * n for n in WORKERS)})
    cases = [(n, k, s) for n in workers for k, ss in splits.items() for s in ss]

    def ps(n, k, split):
        shards = None if split is None else [f * m for f in split]
        return fn("ps", m, n, k, shards)

    got = _calls(v, ps, cases, _pair, "a pair (messages, bytes)")
    even = _calls(
        v,
        lambda n, k: fn("ps", m, n, k, [m / k] * k),
        [(n, k) for n in WORKERS for k in splits],
        _pair,
        "a pair (messages, bytes)",
    )
    if got is None or even is None:
        return verdict(v)
    v.expect(
        len({got[c][0] for c in cases}) == 1 and _near(got[1, 1, None][0], 2.0),
        "a PS step's messages: a pull, then a push, whatever the workers and ps tasks (the workers' pulls "
        "overlap, and so do their pushes)",
    )
    v.expect(
        _near(got[1, 1, None][1], 2 * m),
        "one worker and one ps: the pull and the push come one after the other, so both directions count",
    )
    v.expect(
        all(_near(got[2 * n, 1, None][1], 2 * got[n, 1, None][1]) for n in WORKERS),
        "one ps: its link carries every worker's pull and push, in proportion to the workers",
    )
    v.expect(
        all(_near(a, b) for n in WORKERS for k in splits for a, b in zip(got[n, k, None], even[n, k])),
        "shards=None: the model split evenly over the n_ps ps tasks",
    )
    v.expect(
        all(_near(got[n, 3, (0.5, 0.3, 0.2)][1], got[n, 3, (0.5, 0.25, 0.25)][1]) for n in WORKERS if n >= 2)
        and all(got[n, 3, (0.6, 0.2, 0.2)][1] > got[n, 3, (0.5, 0.3, 0.2)][1] * (1 + 1e-9) for n in WORKERS if n >= 2),
        "uneven shards: the ps with the largest shard is the busiest (moving bytes between the smaller "
        "shards changes nothing)",
    )
    v.expect(
        all(got[n, 2, None][1] <= got[n, 1, None][1] * (1 + 1e-9) for n in WORKERS)
        and all(_near(got[n, 8, None][1], got[1, 1, None][1]) for n in WORKERS if n <= 4),
        "more ps tasks: less on the busiest ps's link, but never less than a worker's own link carries "
        "(it pulls and pushes the whole model)",
    )
    return verdict(v)


def link_ceiling(fn, comm_terms) -> Verdict:
    """``fn(arch, batch, model_bytes, workers, rate_bits)`` against the student's own ``comm_terms``:
    the images of a step (workers x batch) per the seconds its critical-path bytes take at
    ``rate_bits`` bits per second; infinite for a ring of one; in proportion to the batch and the
    rate; the PS's the same at any N."""
    v = Verdict("link_ceiling")
    cases = [(a, b, m, n, r) for a in ("ps", "ring") for b in (32, 96) for m in MODELS for n in WORKERS for r in RATES]
    got = _calls(v, fn, cases)
    terms = _calls(
        v,
        lambda a, m, n: comm_terms(a, m, n),
        list(dict.fromkeys(c[:1] + c[2:4] for c in cases)),
        _pair,
        "comm_terms: a pair (messages, bytes)",
    )
    if got is None or terms is None:
        return verdict(v)
    v.expect(
        all(
            math.isinf(got["ring", b, m, 1, r]) and got["ring", b, m, 1, r] > 0
            for b in (32, 96)
            for m in MODELS
            for r in RATES
        ),
        "a ring of one worker: no byte on its path, no ceiling (infinite)",
    )
    finite = [c for c in cases if not (c[0] == "ring" and c[3] == 1)]
    v.expect(
        all(
            _near(got["ps", 96, m, n, r], 3 * got["ps", 32, m, n, r])
            and _near(got[a, b, m, n, RATES[1]], got[a, b, m, n, RATES[0]] * RATES[1] / RATES[0])
            for a, b, m, n, r in finite
        ),
        "in proportion to the batch and to the link's rate",
    )
    v.expect(
        all(_near(got[a, b, m, n, r], n * b * r / (8 * terms[a, m, n][1])) for a, b, m, n, r in finite),
        "the images a step trains (workers x batch) over the seconds your comm_terms' critical-path bytes "
        "take at rate_bits bits per second (8 bits a byte)",
    )
    v.expect(
        all(
            _near(got["ps", b, m, n, r], got["ps", b, m, 1, r])
            for b in (32, 96)
            for m in MODELS
            for n in WORKERS
            for r in RATES
        ),
        "PS: the same ceiling at any number of workers (the ps's link carries every worker's bytes)",
    )
    return verdict(v)


def _trace(workers: int, kills: list[tuple[str, int]], phases: list[tuple[int, list[int]]]) -> dict:
    """A failure trace in ``ring_vs_ps.ps_failure``'s shape: ``phases`` lists (last step, the workers
    that ran each slice of every step up to it), from step 1 on."""
    steps, step = [], 1
    for last, slices in phases:
        for step in range(step, last + 1):
            steps.append({"step": step, "seconds": 0.1, "slices_on": list(slices)})
        step = last + 1
    return {
        "workers": workers,
        "steps": steps,
        "kills": [{"task": task, "after_step": after} for task, after in kills],
        "events": [],
        "failure": None,
    }


# Traces whose every phase shows in the shares: before a kill, at the step in flight when it
# landed, after it, at the step the next kill came after, and after that. (trace, {kill: shares})
_SLICES_A = [
    (10, [0, 0, 0, 0]),
    (11, [3, 3, 3, 3]),
    (19, [1, 2, 2, 0]),
    (20, [1, 1, 1, 1]),
    (21, [1, 1, 2, 2]),
    (29, [2, 2, 0, 0]),
    (30, [0, 2, 0, 0]),
]
_SLICES_B = [(5, [0, 1, 2]), (6, [0, 0, 0]), (14, [1, 1, 2])]


def _shares_of(phases, first: int, last: float) -> dict[int, float]:
    """Each worker's share of the slices of the steps first..last of ``phases``, tallied phase by phase."""
    counts, start = Counter(), 1
    for end, slices in phases:
        steps = max(0, min(end, last) - max(start, first) + 1)
        counts.update({w: steps * c for w, c in Counter(slices).items()})
        start = end + 1
    total = sum(counts.values())
    return {w: c / total for w, c in counts.items() if c}


def _cases() -> list[tuple[dict, int, dict]]:
    a = _trace(4, [("worker:3", 10), ("worker:1", 20), ("ps:0", 30)], _SLICES_A)
    b = _trace(3, [("worker:0", 5)], _SLICES_B)
    return [
        (a, 0, _shares_of(_SLICES_A, 12, 20)),
        (a, 1, _shares_of(_SLICES_A, 22, 30)),
        (a, 2, {}),
        (b, 0, _shares_of(_SLICES_B, 7, math.inf)),
    ]


def _shares(result) -> dict[int, float]:
    """A ``slice_shares`` result as {worker: share}, the workers with no share left out."""
    return {int(w): float(s) for w, s in dict(result).items() if float(s) != 0}


def _shuffled(trace: dict, seed: int) -> dict:
    steps = list(trace["steps"])
    random.Random(seed).shuffle(steps)
    return {**trace, "steps": steps}


def slice_shares(fn, trace: dict | None = None) -> Verdict:
    """``fn(trace, kill)`` on traces built here (every phase of a trace shows in the shares a wrong
    window gives) and on ``trace``, the notebook's own: a share per worker summing to 1, the same
    with the steps in any order, none for the worker killed, none when no step followed, and the
    slices of the steps after the kill up to the next kill's (the step in flight left out)."""
    v = Verdict("slice_shares")
    built = _cases()
    own = [(trace, k) for k in range(len(trace["kills"]))] if trace else []
    tried = [(t, k) for t, k, _ in built] + own
    got = v.values(lambda c: fn(*c), tried, _shares, "a {worker: share} dict")
    if got is None:
        return verdict(v)
    again = v.values(lambda c: fn(_shuffled(c[0], 1), c[1]), tried, _shares, "a {worker: share} dict")
    if again is None:
        return verdict(v)
    v.expect(
        all(not g or math.isclose(sum(g.values()), 1.0, abs_tol=1e-9) for g in got),
        "a share per worker, the shares summing to 1",
    )
    v.expect(
        all(
            g.keys() == a.keys() and all(math.isclose(g[w], a[w], abs_tol=1e-12) for w in g) for g, a in zip(got, again)
        ),
        "the same shares with the trace's steps in any order (find them by their step number)",
    )
    killed = [
        int(t["kills"][k]["task"].split(":")[1]) if t["kills"][k]["task"].startswith("worker:") else None
        for t, k in tried
    ]
    v.expect(
        all(w is None or w not in g for w, g in zip(killed, got)),
        "none for the worker killed: the step in flight when the kill landed is left out",
    )
    v.expect(got[2] == {}, "no step after the kill: no shares")
    v.expect(
        all(
            g.keys() == want.keys() and all(math.isclose(g[w], want[w], abs_tol=1e-9) for w in want)
            for g, (_, _, want) in zip(got, built)
        ),
        "the slices of the steps after the kill, up to and including the step the next kill came after "
        "(to the end of the trace if none did), each counted once",
    )
    return verdict(v)


def audit_003(audit, ring_bytes: dict) -> Verdict:
    """``audit["chunk_over_model"]``: the "Size of chunk", over M, that makes report 003's formula,
    2 (N-1)/N x Size of chunk, equal the bytes a ring worker sent per step at the largest N
    (``ring_bytes``, the notebook's ``ring_worker_bytes``: workers, sent_per_step, model_bytes),
    within 1% as the grader reads it."""
    v = Verdict("audit_003")
    try:
        mine = float(audit["chunk_over_model"])
        n, sent, m = int(ring_bytes["workers"]), float(ring_bytes["sent_per_step"]), float(ring_bytes["model_bytes"])
    except (TypeError, ValueError, KeyError, IndexError):
        mine = n = None
    v.expect(
        mine is not None and n > 1 and math.isclose(2 * (n - 1) / n * mine * m, sent, rel_tol=0.01),
        "chunk_over_model: the Size of chunk, as a multiple of the model's bytes, for which the report's "
        "2 (N-1)/N x Size of chunk is what your ring worker sent per step at the largest N",
    )
    return verdict(v)
