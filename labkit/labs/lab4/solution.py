"""Lab 4's prediction: which configurations of the sweep's grid compute the same SGD
(``identical_pairs``). The ring all-reduce's reference is the ring's schedule of chunks
(``reference_ring_bytes``) and the plain sum."""

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
