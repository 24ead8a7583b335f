"""Lab 4's self-checks: properties each exercise's function has, tried on cases of the check's own.

``ring_allreduce`` against what the ring does, never against a reference ring: for N = 1..5
workers and lengths N divides and does not, every worker ends with the elementwise sum (the same
vector on every worker, the inputs untouched), each sends one of ``np.array_split``'s chunks per
round for 2(N-1) rounds, and scaling the gradients scales the sums and changes no byte.
``identical_pairs`` against what a pair of configurations with the same SGD is: a whole number
within the grid's pairs, none for one configuration (no configuration pairs with itself), each
pair counted once, the same in any order of the grid, with workers and batch sizes swapped, with
every batch size scaled, and never fewer when the grid grows. None uses the grader's cases, and a
failure names the function and the property, never a value (``labkit.notebook.verdicts``).
Each returns the ``Verdict`` it showed in the cell.
"""

from __future__ import annotations

import math

import numpy as np

from labkit.notebook.verdicts import Verdict, verdict

WORKERS = (1, 2, 3, 4, 5)
SIZES = (13, 24, 29, 60)  # values per gradient: 60 divisible by every N; 13 and 29 by none above 1
SCALES = (2.0**-12, 2.0**12)  # powers of two: float32 sums scale exactly


# ---------------------------------------------------------------------------------------------
# The ring all-reduce


def _ring_cases(rng) -> list[list[np.ndarray]]:
    """One list of N float32 gradients per (N, length): lengths of SIZES and one value per worker."""
    return [
        [rng.standard_normal(size).astype(np.float32) for _ in range(n)]
        for n in WORKERS
        for size in (*SIZES, n)
        if size >= n
    ]


def _call_ring(fn, grads):
    """``fn``'s (sums as one array per worker, bytes sent per worker) on copies of ``grads``; a
    TypeError when it returns no such pair."""
    given = [g.copy() for g in grads]
    result = fn(given)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise TypeError("ring_allreduce must return (sums, sent)")
    sums, sent = result
    sums = [np.asarray(s, np.float64).reshape(-1) for s in sums]
    sent = [float(b) for b in sent]
    kept = all(np.array_equal(a, b) for a, b in zip(given, grads))
    return sums, sent, kept


def _schedule_bytes(n: int, size: int, itemsize: int = 4) -> list[int]:
    """What each worker sends when, in round s, it sends chunk (w - s) mod n of ``np.array_split``'s
    n (reduce-scatter), then chunk (w + 1 - s) mod n (all-gather): the exercise's schedule."""
    chunk = [len(c) * itemsize for c in np.array_split(np.arange(size), n)]
    return [sum(chunk[(w - s) % n] + chunk[(w + 1 - s) % n] for s in range(n - 1)) for w in range(n)]


def ring_allreduce(fn) -> Verdict:
    """``fn(grads) -> (sums, sent)``: for N = 1..5 and lengths N does not divide too, every worker
    ends with the same vector, the elementwise sum of all the gradients, the gradients untouched;
    each worker sends 2(N-1) chunks, one per round, as the exercise's schedule names them; the
    sums scale with the gradients and the bytes do not change."""
    v = Verdict("ring_allreduce")
    cases = _ring_cases(np.random.default_rng(2024))
    got = v.values(lambda grads: _call_ring(fn, grads), cases, convert=tuple, what="a pair (sums, sent)")
    if got is None:
        return verdict(v)
    shaped = all(
        len(sums) == len(grads) == len(sent) and all(s.size == grads[0].size for s in sums)
        for grads, (sums, sent, _) in zip(cases, got)
    )
    if not v.expect(shaped, "one vector of the gradients' length per worker, and one byte count per worker"):
        return verdict(v)
    v.expect(
        all(_is_sum(sums, grads) for grads, (sums, _, _) in zip(cases, got)),
        "every worker ends with the elementwise sum of all the workers' gradients (not their mean, "
        "not a partial sum of some chunks)",
    )
    v.expect(
        all(all(np.array_equal(s, sums[0]) for s in sums) for sums, _, _ in got),
        "every worker ends with the same vector: the all-gather copies each summed chunk round the ring",
    )
    v.expect(all(kept for _, _, kept in got), "the gradients it is given are left unchanged")
    v.expect(
        all(sum(sent) == 2 * (len(g) - 1) * g[0].nbytes for g, (_, sent, _) in zip(cases, got)),
        "all the workers together send 2(N-1) times a gradient's bytes: each chunk crosses N-1 links "
        "in the reduce-scatter and N-1 in the all-gather (none at N = 1)",
    )
    v.expect(
        all(sent == _schedule_bytes(len(g), g[0].size) for g, (_, sent, _) in zip(cases, got)),
        "each worker sends one of np.array_split's N chunks in each of the 2(N-1) rounds: chunk "
        "(w - s) mod N in reduce-scatter round s, chunk (w + 1 - s) mod N in all-gather round s "
        "(chunks of unequal length when N does not divide the length)",
    )
    scaled = v.values(
        lambda c: _call_ring(fn, [(g * np.float32(c[1])) for g in c[0]]),
        [(grads, k) for grads in cases[::3] for k in SCALES],
        convert=tuple,
        what="a pair (sums, sent) at every scale",
    )
    if scaled is not None:
        base = [got[i] for i in range(0, len(cases), 3) for _ in SCALES]
        v.expect(
            all(
                all(np.allclose(s, k * b, rtol=1e-6, atol=0) for s, b in zip(mine[0], ref[0])) and mine[1] == ref[1]
                for mine, ref, k in zip(scaled, base, SCALES * len(cases[::3]))
            ),
            "the gradients scaled by a factor: the sums scaled by it, and the same bytes sent",
        )
    return verdict(v)


def _is_sum(sums, grads) -> bool:
    """Each of ``sums`` within float32 rounding of the float64 sum of ``grads``."""
    g = np.asarray(grads, np.float64)
    want, size = g.sum(axis=0), np.abs(g).sum(axis=0)
    return all(np.all(np.abs(s - want) <= 1e-5 * size + 1e-30) for s in sums)


# ---------------------------------------------------------------------------------------------
# The configurations that compute the same SGD

GRIDS = (  # (worker counts, per-worker batch sizes): the checks' own
    ([1, 2], [14, 7]),  # 2 x 7 = 1 x 14: one pair
    ([1, 3], [9, 27]),  # 3 x 9 = 1 x 27: one pair
    ([1, 2, 3], [42, 21, 14]),  # 1 x 42 = 2 x 21 = 3 x 14: three configurations, three pairs
    ([1, 2, 3, 6], [9, 18, 27, 54, 81]),
    ([2, 5, 7], [3, 11]),  # every global batch its own
    ([3], [7, 9, 21, 63]),
    ([1, 2, 4, 8], [33]),
)


def identical_pairs(fn) -> Verdict:
    """``fn(workers, batch_sizes)``: a whole number, at least 0 and at most the grid's pairs of
    configurations; none for a single configuration or a grid whose global batches all differ; two
    configurations sharing a global batch make one pair, three make three; the same in any order,
    with workers and batch sizes swapped, and with every batch size scaled by one factor; and a grid
    grown by a worker count or a batch size never has fewer pairs."""
    v = Verdict("identical_pairs")
    grids = list(GRIDS)
    grids += [(w[::-1], b[::-1]) for w, b in GRIDS] + [(w[1:] + w[:1], b[1:] + b[:1]) for w, b in GRIDS]
    grids += [(b, w) for w, b in GRIDS] + [(w, [5 * x for x in b]) for w, b in GRIDS]
    grids += [(w[:-1], b) for w, b in GRIDS if len(w) > 1] + [(w, b[:-1]) for w, b in GRIDS if len(b) > 1]
    grids += [([w], [b]) for w, b in ((1, 7), (3, 11), (4, 4))]
    keys = [(tuple(w), tuple(b)) for w, b in grids]
    got = v.values(lambda c: fn(list(c[0]), list(c[1])), keys)
    if got is None:
        return verdict(v)
    g = dict(zip(keys, got))
    if not v.expect(
        all(x.is_integer() and 0 <= x <= math.comb(len(w) * len(b), 2) for (w, b), x in g.items()),
        "a whole number of pairs, at least 0 and at most every pair of the grid's configurations",
    ):
        return verdict(v)
    v.expect(
        all(g[(w,), (b,)] == 0 for w, b in ((1, 7), (3, 11), (4, 4))) and g[(2, 5, 7), (3, 11)] == 0,
        "no pair in a grid of one configuration (a configuration is not a pair with itself), nor in one "
        "whose global batches (workers x batch size) all differ",
    )
    v.expect(
        g[(1, 2), (14, 7)] == g[(1, 3), (9, 27)] == 1 and g[(1, 2, 3), (42, 21, 14)] == 3,
        "configurations sharing one global batch pair up, each pair once: two make one pair, three make three",
    )
    base = [(tuple(w), tuple(b)) for w, b in GRIDS]
    v.expect(
        all(g[w, b] == g[w[::-1], b[::-1]] == g[w[1:] + w[:1], b[1:] + b[:1]] for w, b in base),
        "the same count in any order of the worker counts and of the batch sizes",
    )
    v.expect(
        all(g[w, b] == g[b, w] for w, b in base),
        "the same count with the worker counts and batch sizes swapped: only workers x batch size matters",
    )
    v.expect(
        all(g[w, b] == g[w, tuple(5 * x for x in b)] for w, b in base),
        "the same count with every batch size scaled by one factor: equal global batches stay equal",
    )
    v.expect(
        all(g[w, b] >= g[w[:-1], b] for w, b in base if len(w) > 1)
        and all(g[w, b] >= g[w, b[:-1]] for w, b in base if len(b) > 1),
        "a grid grown by a worker count or a batch size never has fewer pairs",
    )
    return verdict(v)
