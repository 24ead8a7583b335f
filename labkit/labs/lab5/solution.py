"""Lab 5's exercise and the model it rests on: the bytes each task moves in one synchronous
step (``step_bytes``), and the cost model's communication terms, (messages, bytes) on one step's
critical path (``comm_terms``). The student kit leaves both out: it measures what the first
predicts, and asks the student for the second; and the answers of sections 1 and 2's predictions,
``ps_bytes_per_step``, ``dense_model_bytes`` and ``ring_bytes_per_worker``, and of sections 10 and 11's exercises,
``link_ceiling`` and ``slice_shares``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from labkit.learning.costargs import check_arch, check_count, check_positive, check_shards, even_shards


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


def ps_bytes_per_step(model_bytes: float, workers: int) -> float:
    """Lab 5 section 1's prediction: the bytes the one ps task sends and receives, together, in one
    synchronous step of ``workers`` workers on a model of ``model_bytes`` bytes: every worker's
    closure reads the model from the ps and adds a gradient of the same size into its sums. With one
    ps, ``comm_terms("ps", M, N)``'s bytes (for N >= 1)."""
    return 2 * workers * model_bytes


def dense_model_bytes(units: Sequence[int]) -> float:
    """Lab 5 section 1's M: the bytes of a float32 MLP whose layers have ``units`` (inputs first,
    e.g. [784, 2048, 2048, 10]): every dense layer holds a weight matrix and a bias, 4 bytes a value."""
    return float(4 * sum(n_in * n_out + n_out for n_in, n_out in zip(units, units[1:])))


def ring_bytes_per_worker(model_bytes: float, workers: int) -> float:
    """Lab 5 section 2's prediction: the bytes one ring worker sends in one synchronous step of
    ``workers`` workers on a model of ``model_bytes`` bytes: 2(N-1) rounds, one chunk of M/N each
    (``comm_terms("ring", M, N)``'s bytes); none at N = 1."""
    return 2 * (workers - 1) / workers * model_bytes


@dataclass(frozen=True)
class StepBytes:
    """Bytes that one synchronous step puts on the wire, per task.

    ``total`` is the sum over tasks of bytes sent, which is what the system-wide ``lo``
    counter sees on one side on 127.0.0.1; on a cluster compare a node's NIC with its
    task's ``sent``/``recv``. For asynchronous PS, one worker step is ``workers=1``.
    """

    arch: str
    workers: int
    model_bytes: float
    worker_sent: float
    worker_recv: float
    ps_sent: tuple[float, ...] = ()
    ps_recv: tuple[float, ...] = ()

    @property
    def total(self) -> float:
        return self.workers * self.worker_sent + sum(self.ps_sent)

    def per_task(self) -> pd.DataFrame:
        """One row per task: task name, bytes sent, bytes received."""
        rows = [
            {"task": f"worker:{i}", "sent": self.worker_sent, "recv": self.worker_recv} for i in range(self.workers)
        ]
        rows += [{"task": f"ps:{i}", "sent": s, "recv": r} for i, (s, r) in enumerate(zip(self.ps_sent, self.ps_recv))]
        return pd.DataFrame(rows)


def step_bytes(
    arch: str, model_bytes: float, workers: int, n_ps: int = 1, shards: Sequence[float] | None = None
) -> StepBytes:
    """Bytes per synchronous step for ``arch`` ('ps' or 'ring'), per task.

    PS: every worker pulls M of weights and pushes M of gradients; ps task j, holding shard
    s_j, serves N workers: N*s_j each way (``shards`` default: an even split). Ring all-reduce:
    reduce-scatter then all-gather, 2(N-1) rounds of M/N each way: 2(N-1)/N*M each way per worker.
    """
    check_arch(arch)
    n = check_count("workers", workers)
    m = check_positive("model_bytes", model_bytes)
    if arch == "ring":
        per_dir = 2 * (n - 1) / n * m
        return StepBytes("ring", n, m, per_dir, per_dir)
    shards = check_shards(m, shards if shards is not None else even_shards(m, n_ps))
    per_ps = tuple(n * s for s in shards)
    return StepBytes("ps", n, m, m, m, per_ps, per_ps)


def slice_shares(trace: dict, kill: int = 0) -> dict[int, float]:
    """Lab 5 section 11's exercise: after kill ``kill`` of ``trace`` (a ``ps_failure`` trace:
    ``steps`` with ``step`` and ``slices_on``, ``kills`` with ``after_step``), each worker's share
    of the slices of the steps that followed, up to the next kill. The first step after the kill
    was in flight when it landed, so it is left out, as ``faults.Trace.summary`` does.
    {worker: share}, the shares summing to 1; {} when no step followed."""
    kills = sorted(trace["kills"], key=lambda k: k["after_step"])
    first = kills[kill]["after_step"] + 1
    last = kills[kill + 1]["after_step"] if kill + 1 < len(kills) else float("inf")
    slices = [w for s in trace["steps"] if first < s["step"] <= last for w in s["slices_on"]]
    return {w: slices.count(w) / len(slices) for w in sorted(set(slices))}


def link_ceiling(arch: str, batch: int, model_bytes: float, workers: int, rate_bits: float) -> float:
    """Lab 5 section 10's exercise: the images per second a synchronous step of ``arch`` ('ps', one
    ps, or 'ring') reaches at most when only its busiest link takes time: a step trains ``workers``
    x ``batch`` images and lasts at least as long as the bytes on its critical path take at
    ``rate_bits`` bits per second (``comm_terms``' bytes with one ps: 2N·M through the ps's link,
    the pull and the push in turn; 2(N-1)/N·M for a ring worker, the two directions overlapping).
    Infinite where no byte is on the path (the ring at N = 1)."""
    path = 2 * (workers - 1) / workers * model_bytes if arch == "ring" else 2 * workers * model_bytes
    return workers * batch * rate_bits / (8 * path) if path > 0 else float("inf")
