"""Lab 4's prediction: which configurations of the sweep's grid compute the same SGD
(``identical_pairs``). The ring all-reduce's reference is the ring's schedule of chunks
(``reference_ring_bytes``) and the plain sum. The collectives between processes: the ring's
``reduce_scatter`` and ``all_gather``, and the ``gather``/``scatter`` baseline."""

from __future__ import annotations

from collections import Counter

import numpy as np


def identical_pairs(workers, batch_sizes) -> int:
    """Lab 4 section 3's prediction: the pairs of configurations of the grid (every worker count in
    ``workers`` with every per-worker batch size in ``batch_sizes``) that compute the same SGD. From
    the same weights, order of the training set and learning rate, the ring's summed gradient is the
    mean over the global batch, workers x batch: two configurations with the same global batch make
    the same updates. k configurations sharing a global batch make k(k-1)/2 pairs."""
    same = Counter(w * b for w in workers for b in batch_sizes)
    return sum(k * (k - 1) // 2 for k in same.values())


def reference_ring_bytes(size: int, n: int, value_bytes: int = 4) -> list[int]:
    """Bytes each of ``n`` workers sends to all-reduce ``size`` values in ``n`` chunks
    (``np.array_split``): in round s worker w sends chunk (w - s) mod n in the reduce-scatter and
    chunk (w + 1 - s) mod n in the all-gather, for s = 0 .. n-2."""
    chunk = [len(c) * value_bytes for c in np.array_split(np.zeros(size), n)]
    return [sum(chunk[(w - s) % n] + chunk[(w + 1 - s) % n] for s in range(n - 1)) for w in range(n)]


# The collectives between processes (section 1): each runs in a worker process of its own, with the
# kit's send(dst, array) and recv(src) (labkit.labs.lab4.collective).


def reduce_scatter(rank, world, value, send, recv):
    """Ring reduce-scatter: this worker ends with the average of chunk (rank + 1) mod world."""
    chunks = [c.copy() for c in np.array_split(value, world)]
    right, left = (rank + 1) % world, (rank - 1) % world
    for s in range(world - 1):
        send(right, chunks[(rank - s) % world])
        chunks[(rank - s - 1) % world] += recv(left)
    return chunks[(rank + 1) % world] / world


def all_gather(rank, world, value, send, recv):
    """Ring all-gather: every worker ends with every averaged chunk, in order."""
    chunks = [None] * world
    chunks[(rank + 1) % world] = value
    right, left = (rank + 1) % world, (rank - 1) % world
    for s in range(world - 1):
        send(right, chunks[(rank + 1 - s) % world])
        chunks[(rank - s) % world] = recv(left)
    return np.concatenate(chunks)


def gather(rank, world, value, send, recv):
    """Every worker sends its gradient to worker 0, which returns their average."""
    if rank != 0:
        send(0, value)
        return None
    total = value.copy()
    for src in range(1, world):
        total += recv(src)
    return total / world


def scatter(rank, world, value, send, recv):
    """Worker 0 sends the average to every other worker; every worker returns it."""
    if rank == 0:
        for dst in range(1, world):
            send(dst, value)
        return value
    return recv(0)
