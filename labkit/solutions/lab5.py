"""Lab 5's exercise: the cost model's communication terms, (messages, bytes) on one step's critical path."""
from __future__ import annotations


def comm_terms(arch: str, M: float, N: int, n_ps: int = 1, shards=None) -> tuple[int, float]:
    """(messages, bytes) on the critical path of one synchronous step of ``arch`` ('ps' or 'ring'):
    M model bytes, N workers, ``n_ps`` ps tasks holding ``shards`` bytes each (None: M / n_ps each).

    Ring: 2(N-1) rounds one after the other, each sending M/N to one neighbour while receiving
    M/N from the other; on a full-duplex link the two directions overlap, so one counts.
    PS: a worker pulls, computes, then pushes, and the next pull waits for the update, so within
    a step both directions lie on the path one after the other: the busiest ps moves N x its
    shard each way, a worker M each way (the busiest link when the ps outnumber the workers).
    The N workers' pulls overlap with each other, as do their pushes: 2 latencies."""
    if arch == "ring":
        return 2 * (N - 1), 2 * (N - 1) / N * M
    shards = shards if shards is not None else [M / n_ps] * n_ps
    return 2, max(2 * N * max(shards), 2 * M)
