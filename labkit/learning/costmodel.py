"""An alpha-beta(-gamma) model of one synchronous data-parallel step, fitted to measured runs.

Lab 5 explains and extrapolates its measured scaling with :class:`CostModel`:

    t_step(N) = t_compute(batch) + t_comm(N)
    t_comm    = messages * alpha + critical_bytes * (1/B + gamma)

The messages and bytes on a step's critical path are Lab 5's exercise: every function here that
needs them takes the student's ``comm_terms`` as ``terms=`` (default: the kit's reference,
``labkit.labs.lab5.solution``, which the student kit leaves out). Calibration needs no cluster:
compute from a 1-worker run, alpha and B from a loopback micro-benchmark (``fit_link``) or the
runs themselves; gamma, the hosts' time per byte besides the wire (:class:`HostCost`, per
architecture), is fitted where the wire is nearly free (``fit_host_cost``). Imports no
TensorFlow. More in docs/internals.md, section labkit.learning (the symbols, gamma's origin).
"""

from __future__ import annotations

import math
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from labkit.learning.costargs import (  # noqa: F401  (even_shards: re-exported, part of this API)
    ARCHS,
    check_arch,
    check_count,
    check_positive,
    check_shards,
    even_shards,
)

MIB = 2**20


def gbit(x: float) -> float:
    """A link speed in Gb/s (10^9 bits/s, as NICs are sold) as bytes/s."""
    return x * 1e9 / 8


# ---------------------------------------------------------------------------------------
# Bytes on the wire
# ---------------------------------------------------------------------------------------


def round_robin_shards(variable_bytes: Sequence[float], n_ps: int) -> tuple[float, ...]:
    """Bytes per ps when whole variables are dealt out in turn, as ParameterServerStrategy
    does without a partitioner. One big kernel then lands on one ps, and adding ps tasks
    stops helping: for the MLP 784-2048-2048-10 and k=2, one ps holds ~all the bytes."""
    n_ps = check_count("n_ps", n_ps)
    loads = [0.0] * n_ps
    for i, b in enumerate(variable_bytes):
        loads[i % n_ps] += float(b)
    return tuple(loads)


# ---------------------------------------------------------------------------------------
# The critical path of a step: Lab 5's exercise
# ---------------------------------------------------------------------------------------

Terms = Callable[..., tuple]  # comm_terms(arch, M, N, n_ps=1, shards=None) -> (messages, bytes)


def reference_terms() -> Terms:
    """The kit's reference ``comm_terms(arch, M, N, n_ps=1, shards=None) -> (messages, bytes)``,
    Lab 5's exercise (``labkit.labs.lab5.solution``; also ``costmodel.comm_terms``). The student kit
    has none: pass your own where a function takes ``terms=``."""
    from labkit.core.reference import solution

    return solution("lab5", "comm_terms", "terms=comm_terms, your function from section 3")


def __getattr__(name: str):
    """``comm_terms`` and ``step_bytes``: the references, which live with the solutions (the
    student kit leaves them out: writing the first, and measuring what the second predicts, is Lab 5)."""
    if name == "comm_terms":
        return reference_terms()
    if name == "step_bytes":
        from labkit.core.reference import solution

        return solution("lab5", "step_bytes", "the measured bytes per task (ring_vs_ps.Scaling.task_bytes())")
    raise AttributeError(f"module 'labkit.learning.costmodel' has no attribute {name!r}")


def critical_path(
    arch: str,
    model_bytes: float,
    workers: int,
    n_ps: int = 1,
    shards: Sequence[float] | None = None,
    terms: Terms | None = None,
) -> tuple[float, float]:
    """(messages, bytes) on the critical path of one step, by ``terms`` (default
    :func:`reference_terms`): t_comm = messages*alpha + bytes/B.

    The inputs are checked before ``terms`` sees them (``shards``, PS only: one per ps task,
    together the whole model) and its answer after, so a wrong exercise fails here with a
    message, not as a strange fit."""
    check_arch(arch)
    n = check_count("workers", workers)
    k = check_count("n_ps", n_ps) if arch == "ps" else n_ps  # a ring has no ps: its runs say 0
    m = check_positive("model_bytes", model_bytes)
    if arch == "ps" and shards is not None:
        shards = check_shards(m, shards)
        if len(shards) != k:
            raise ValueError(f"{len(shards)} shard(s) for n_ps={k}: give one per ps task")
    fn = terms if terms is not None else reference_terms()
    call = f"{getattr(fn, '__name__', 'terms')}({arch!r}, M={m:g}, N={n}, n_ps={k})"
    out = fn(arch, m, n, k, shards if arch == "ps" else None)
    try:
        msgs, nbytes = (float(v) for v in out)
    except (TypeError, ValueError):
        raise ValueError(f"{call} returned {out!r}; return (messages, bytes), two numbers") from None
    if not (math.isfinite(msgs) and math.isfinite(nbytes) and msgs >= 0 and nbytes >= 0):
        raise ValueError(f"{call} returned {out!r}; messages and bytes must be finite and >= 0")
    return msgs, nbytes


def check_terms(terms: Terms, measured: pd.DataFrame | None = None, tolerance: float = 0.25) -> pd.DataFrame:
    """Check ``terms`` (the student's ``comm_terms``) without a reference: properties every
    correct answer has, then its bytes against the critical-path bytes measured runs showed.

    ``measured``: one row per run with communication, columns arch, workers, n_ps, shards,
    model_bytes and ``measured_bytes`` (``ring_vs_ps.Scaling.critical_bytes``). Raises
    ValueError saying what is off; returns the runs with ``your_bytes`` and ``deviation`` =
    your_bytes / measured_bytes - 1."""
    name = getattr(terms, "__name__", "terms")
    for arch in ARCHS:
        for n in (1, 2, 3, 6):
            msgs, nbytes = critical_path(arch, 1e6, n, terms=terms)
            twice = critical_path(arch, 2e6, n, terms=terms)
            if msgs != int(msgs):
                raise ValueError(f"{name}({arch!r}, N={n}) gives {msgs} messages: count whole messages")
            if twice[0] != msgs or not math.isclose(twice[1], 2 * nbytes, rel_tol=1e-9, abs_tol=1e-6):
                raise ValueError(
                    f"{name}({arch!r}, N={n}): twice the model gives {twice}, against {(msgs, nbytes)} "
                    f"for M: the bytes should double and the messages stay the same"
                )
    if critical_path("ring", 1e6, 1, terms=terms) != (0.0, 0.0):
        raise ValueError(
            f"{name}('ring', N=1) gives {critical_path('ring', 1e6, 1, terms=terms)}: "
            f"a ring of one worker has nobody to talk to"
        )
    if critical_path("ring", 1e6, 2, terms=terms)[0] < 1:
        raise ValueError(f"{name}('ring', N=2) sends no message: two workers must exchange their gradients")
    ps = [critical_path("ps", 1e6, 4, k, terms=terms)[1] for k in (1, 2, 4)]
    if any(b > a * (1 + 1e-9) for a, b in zip(ps, ps[1:])):
        raise ValueError(
            f"{name}('ps', N=4): n_ps = 1, 2, 4 even shards give {ps} bytes; more ps tasks sharing "
            f"the model evenly cannot load the busiest link more"
        )
    if critical_path("ps", 1e6, 4, 2, (9e5, 1e5), terms)[1] <= critical_path("ps", 1e6, 4, 2, terms=terms)[1]:
        raise ValueError(
            f"{name}('ps', N=4, n_ps=2): shards (900 KB, 100 KB) give no more bytes than an even "
            f"split; the ps holding more of the model serves more bytes"
        )
    if measured is None or not len(measured):
        return pd.DataFrame()
    out = measured.copy()
    out["your_bytes"] = [
        critical_path(
            r.arch,
            r.model_bytes,
            int(r.workers),
            int(r.n_ps),
            tuple(r.shards) if isinstance(r.shards, (list, tuple)) else None,
            terms,
        )[1]
        for r in out.itertuples()
    ]
    out["deviation"] = out["your_bytes"] / out["measured_bytes"] - 1
    off = out[out["deviation"].abs() > tolerance]
    if len(off):
        r = off.iloc[0]
        raise ValueError(
            f"{r['arch']} N={r['workers']}: your bytes on the critical path are {r['your_bytes']:,.0f}, "
            f"but the run measured {r['measured_bytes']:,.0f} ({r['deviation']:+.0%}; at most "
            f"±{tolerance:.0%}): which task's link is the busiest, and which of its directions lie "
            f"on the path one after the other?"
        )
    return out


def sparse_ps_step_bytes(n_unique: float, value_bytes: int = 4, index_bytes: int = 8) -> float:
    """Lab 3: bytes one worker step of sparse LR exchanges with the ps, for ``n_unique``
    distinct features in its batch: the ids once (the ps's gather and scatter read the
    same received tensor), their weights back, their gradient values out.
    ``n_unique x (index_bytes + 2 x value_bytes)``: 16 bytes per unique feature."""
    if n_unique < 0:
        raise ValueError(f"n_unique must be >= 0, got {n_unique}")
    return float(n_unique) * (index_bytes + 2 * value_bytes)


def dense_ps_step_bytes(num_features: int, value_bytes: int = 4) -> float:
    """Lab 3: bytes of a dense PS step (report 001): the whole weight vector pulled and a
    gradient as long as it pushed, ``2 x num_features x value_bytes``."""
    return 2.0 * num_features * value_bytes


# ---------------------------------------------------------------------------------------
# Links: alpha and B, from a loopback micro-benchmark or from measured runs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A network link in the alpha-beta model: each message costs alpha s, each byte 1/B s."""

    alpha_s: float
    bandwidth: float  # bytes/s
    source: str = ""
    rel_error: float = float("nan")  # median |measured - fitted| / measured of the fit, if fitted

    def __post_init__(self):
        if not (math.isfinite(self.alpha_s) and self.alpha_s >= 0):
            raise ValueError(f"alpha_s must be >= 0 seconds, got {self.alpha_s!r}")
        check_positive("bandwidth (bytes/s)", self.bandwidth)

    def seconds(self, messages: float, nbytes: float) -> float:
        return messages * self.alpha_s + nbytes / self.bandwidth


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a few columns: the best of the plain least-squares
    fits on each column subset whose coefficients are all >= 0 (exact: the NNLS optimum
    is the unconstrained optimum on its own support)."""
    n = a.shape[1]
    best, best_res = np.zeros(n), float(np.sum(b**2))
    for r in range(1, n + 1):
        for cols in combinations(range(n), r):
            sub = a[:, cols]
            coef, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.all(coef >= 0):
                res = float(np.sum((sub @ coef - b) ** 2))
                if res < best_res:
                    best, best_res = np.zeros(n), res
                    best[list(cols)] = coef
    return best


def fit_link(
    nbytes: Iterable[float], seconds: Iterable[float], source: str = "fit", alpha_s: float | None = None
) -> Link:
    """Fit t = alpha + bytes/B to transfer timings (one message each).

    Least squares on relative error (each row weighted by 1/t), so the small transfers
    that fix alpha count as much as the large ones that fix B; alpha >= 0 and B > 0.
    ``alpha_s``: alpha measured apart (a shaped link's small messages, which its token
    bucket lets through at once); B is then fitted alone, from one size or more.
    """
    x = np.asarray(list(nbytes), dtype=float)
    t = np.asarray(list(seconds), dtype=float)
    least = 1 if alpha_s is not None else 2
    if x.shape != t.shape or x.size < least:
        raise ValueError(f"fit_link needs the same number (>= {least}) of sizes and times")
    if np.any(t <= 0) or np.any(x < 0):
        raise ValueError("fit_link needs positive times and non-negative sizes")
    if alpha_s is not None and not alpha_s >= 0:
        raise ValueError(f"alpha_s must be a non-negative number of seconds, got {alpha_s!r}")
    if alpha_s is None and np.unique(x).size < 2:
        raise ValueError("fit_link needs at least two different transfer sizes to separate alpha from B")
    w = 1.0 / t
    if alpha_s is None:
        alpha, inv_b = _nnls(np.column_stack([w, x * w]), np.ones_like(t))
    else:
        alpha, (inv_b,) = float(alpha_s), _nnls(np.column_stack([x * w]), (t - alpha_s) * w)
    if inv_b <= 0:
        raise ValueError(
            "the timings do not grow with size, so no bandwidth can be fitted; "
            "use larger transfers (e.g. up to tens of MB)"
        )
    fitted = alpha + x * inv_b
    return Link(float(alpha), float(1.0 / inv_b), source, float(np.median(np.abs(fitted - t) / t)))


DEFAULT_SIZES = tuple(2**p for p in range(10, 25, 2))  # 1 KiB .. 16 MiB


def _recv_exact(conn: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``conn``; False if the peer closed before sending anything."""
    got = 0
    while got < len(view):
        r = conn.recv_into(view[got:])
        if r == 0:
            if got == 0:
                return False
            raise ConnectionError(f"peer closed after {got} of {len(view)} bytes")
        got += r
    return True


def loopback_transfers(sizes: Sequence[int] = DEFAULT_SIZES, repeats: int = 5, timeout_s: float = 30.0) -> pd.DataFrame:
    """Time TCP transfers over 127.0.0.1: send ``size`` bytes, wait for a 1-byte ack.

    Each timing is one message of the alpha-beta model (latency includes the ack's trip).
    A server thread in this process receives; sockets time out after ``timeout_s``, so a
    stuck transfer raises instead of hanging. Returns rows (bytes, seconds), one per transfer.
    """
    sizes = [int(s) for s in sizes]
    if not sizes or min(sizes) < 1 or repeats < 1:
        raise ValueError("loopback_transfers needs positive sizes and repeats >= 1")
    errors: list[BaseException] = []
    with socket.create_server(("127.0.0.1", 0)) as srv:
        srv.settimeout(timeout_s)
        port = srv.getsockname()[1]

        def serve():
            try:
                conn, _ = srv.accept()
                with conn:
                    conn.settimeout(timeout_s)
                    header, buf = bytearray(8), memoryview(bytearray(max(sizes)))
                    while _recv_exact(conn, memoryview(header)):
                        _recv_exact(conn, buf[: int.from_bytes(header, "big")])
                        conn.sendall(b"\x01")
            except BaseException as e:  # reported by the caller below
                errors.append(e)

        server = threading.Thread(target=serve, name="labkit-loopback", daemon=True)
        server.start()
        rows = []
        payload = memoryview(bytes(max(sizes)))
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ack = bytearray(1)
            for rep in range(repeats + 1):  # the first round warms up buffers and is dropped
                for n in sizes:
                    t0 = time.perf_counter()
                    c.sendall(n.to_bytes(8, "big"))
                    c.sendall(payload[:n])
                    if not _recv_exact(c, memoryview(ack)):
                        break
                    if rep:
                        rows.append({"bytes": n, "seconds": time.perf_counter() - t0})
            c.shutdown(socket.SHUT_WR)
        server.join(timeout_s)
    if errors:
        raise RuntimeError(f"loopback server failed: {errors[0]!r}") from errors[0]
    if len(rows) != repeats * len(sizes):
        raise RuntimeError(f"loopback benchmark got {len(rows)} of {repeats * len(sizes)} acks")
    return pd.DataFrame(rows)


def measure_loopback_link(sizes: Sequence[int] = DEFAULT_SIZES, repeats: int = 5) -> Link:
    """alpha and B of 127.0.0.1, fitted to the median time of each transfer size."""
    med = loopback_transfers(sizes, repeats).groupby("bytes")["seconds"].median()
    return fit_link(med.index, med.values, source="loopback TCP micro-benchmark")


# ---------------------------------------------------------------------------------------
# The step-time model
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostCost:
    """gamma: host seconds per byte on a step's critical path, per architecture (``ps``, ``ring``).

    What a step's transport does per byte besides the wire (serialise, copy, reduce) costs
    the same on any link between the same hosts, so it is calibrated where the wire is
    nearly free (:func:`fit_host_cost` on loopback runs) and added to another link's wire
    time. Each architecture has its own: PS moves the weights as gRPC variable reads, the
    ring as collective ops. NaN: not calibrated (no run of that architecture moved bytes).
    """

    ps: float = 0.0
    ring: float = 0.0
    source: str = ""
    rel_error: float = float("nan")  # median |predicted / measured - 1| on the runs it was fitted to

    def __post_init__(self):
        for arch in ARCHS:
            g = getattr(self, arch)
            if not (isinstance(g, (int, float, np.number)) and (math.isnan(g) or (math.isfinite(g) and g >= 0))):
                raise ValueError(f"HostCost.{arch} must be >= 0 seconds per byte (or NaN: not calibrated), got {g!r}")

    def s_per_byte(self, arch: str) -> float:
        g = getattr(self, check_arch(arch))
        if math.isnan(g):
            raise ValueError(
                f"no host cost (gamma) for {arch!r}: it was calibrated on no {arch} run that moved "
                f"bytes; calibrate on runs with N >= 2 of both architectures"
            )
        return g

    def seconds(self, arch: str, nbytes: float) -> float:
        """Host seconds for ``nbytes`` on the critical path (0 for no bytes, calibrated or not)."""
        return self.s_per_byte(arch) * nbytes if nbytes else 0.0


def _cpu_stretch(workers: int, cores: int | None) -> float:
    """How much longer each worker computes when N workers share ``cores`` (1 on a cluster)."""
    return max(1.0, workers / cores) if cores else 1.0


@dataclass(frozen=True)
class CostModel:
    """t_step = per_sample_s * batch (+ overhead) + t_comm, for one model on one network.

    ``cores``: set it when all workers share one machine (127.0.0.1): compute per worker
    then stretches by N/cores once N exceeds the cores. Leave None for a cluster.
    ``terms``: the communication terms, Lab 5's ``comm_terms`` (default the kit's reference).
    ``host``: gamma per architecture (:class:`HostCost`), host seconds per critical-path byte
    added to the link's; None: the link alone (the alpha-beta model).
    """

    per_sample_s: float
    link: Link
    step_overhead_s: float = 0.0
    cores: int | None = None
    terms: Terms | None = field(default=None, compare=False)
    host: HostCost | None = None

    def __post_init__(self):
        check_positive("per_sample_s", self.per_sample_s)
        if self.step_overhead_s < 0:
            raise ValueError(f"step_overhead_s must be >= 0, got {self.step_overhead_s!r}")
        if self.cores is not None and self.cores < 1:
            raise ValueError(f"cores must be >= 1 or None, got {self.cores!r}")

    @classmethod
    def from_single_worker(cls, step_s: float, batch: int, link: Link, **kwargs) -> "CostModel":
        """Compute per sample from a 1-worker run without communication (ring, N=1)."""
        return cls(check_positive("step_s", step_s) / check_positive("batch", batch), link, **kwargs)

    def t_compute(self, batch: int, workers: int = 1) -> float:
        return self.per_sample_s * batch * _cpu_stretch(workers, self.cores) + self.step_overhead_s

    def t_comm(
        self, arch: str, model_bytes: float, workers: int, n_ps: int = 1, shards: Sequence[float] | None = None
    ) -> float:
        msgs, nbytes = critical_path(arch, model_bytes, workers, n_ps, shards, self.terms)
        return self.link.seconds(msgs, nbytes) + (self.host.seconds(arch, nbytes) if self.host else 0.0)

    def t_step(
        self,
        arch: str,
        model_bytes: float,
        workers: int,
        batch: int,
        n_ps: int = 1,
        shards: Sequence[float] | None = None,
    ) -> float:
        """Seconds per synchronous step; ``batch`` is per worker."""
        return self.t_compute(batch, workers) + self.t_comm(arch, model_bytes, workers, n_ps, shards)

    def images_per_s(
        self,
        arch: str,
        model_bytes: float,
        workers: int,
        batch: int,
        n_ps: int = 1,
        shards: Sequence[float] | None = None,
    ) -> float:
        return workers * batch / self.t_step(arch, model_bytes, workers, batch, n_ps, shards)

    def predict(
        self, arch: str, model_bytes: float, workers: Iterable[int], batch: int, n_ps: int = 1, baseline: str = "self"
    ) -> pd.DataFrame:
        """Predicted scaling, one row per N: t_compute, t_comm, step_s, images_per_s, speedup.

        ``baseline``: 'self' divides by the same architecture at N=1 (as report 003's
        Figures 4.3-4.4 do); 'single' by one process without communication.
        """
        if baseline not in ("self", "single"):
            raise ValueError(f"baseline must be 'self' or 'single', got {baseline!r}")
        base = (
            self.images_per_s(arch, model_bytes, 1, batch, n_ps)
            if baseline == "self"
            else batch / self.t_compute(batch, 1)
        )
        rows = []
        for n in workers:
            tc, tm = self.t_compute(batch, n), self.t_comm(arch, model_bytes, n, n_ps)
            ips = n * batch / (tc + tm)
            rows.append(
                {
                    "arch": arch,
                    "workers": n,
                    "t_compute": tc,
                    "t_comm": tm,
                    "step_s": tc + tm,
                    "images_per_s": ips,
                    "speedup": ips / base,
                }
            )
        return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------
# Calibration against measured runs
# ---------------------------------------------------------------------------------------

RUN_COLUMNS = ("arch", "workers", "batch", "model_bytes", "step_s", "per_sample_s")


def _check_runs(runs: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in RUN_COLUMNS if c not in runs.columns]
    if missing:
        raise ValueError(
            f"runs lack column(s) {missing}; each row needs {list(RUN_COLUMNS)} "
            f"(n_ps optional, default 1; shards optional, default even; per_sample_s from "
            f"that model's 1-worker run)"
        )
    runs = runs.copy()
    if "n_ps" not in runs.columns:
        runs["n_ps"] = 1
    if "shards" not in runs.columns:
        runs["shards"] = None
    return runs


def _row_shards(r) -> tuple[float, ...] | None:
    """A run's bytes per ps (its ``shards`` column: the real placement), or None for even shards."""
    return tuple(r.shards) if r.arch == "ps" and isinstance(r.shards, (list, tuple)) and len(r.shards) else None


def fit_link_to_runs(
    runs: pd.DataFrame,
    cores: int | None = None,
    fit_overhead: bool = False,
    alpha_s: float | None = None,
    terms: Terms | None = None,
) -> tuple[Link, float]:
    """Fit alpha and B (and a per-step overhead) so the model explains measured step times.

    Each row's compute (per_sample_s * batch, stretched for ``cores``) is taken as known;
    the rest of its step time is regressed on its messages and critical-path bytes. Returns
    (link, overhead_s). Rows without communication only inform the overhead. ``alpha_s``
    fixes the latency (e.g. the loopback micro-benchmark's) and fits B alone: one run with
    communication is then enough. ``terms``: the messages and bytes of each run (:func:`critical_path`).
    """
    runs = _check_runs(runs)
    cols, target = [], []
    for r in runs.itertuples():
        msgs, nbytes = critical_path(r.arch, r.model_bytes, int(r.workers), int(r.n_ps), _row_shards(r), terms)
        comp = r.per_sample_s * r.batch * _cpu_stretch(int(r.workers), cores)
        w = 1.0 / r.step_s  # relative error, as in fit_link
        known = msgs * alpha_s if alpha_s is not None else 0.0
        cols.append(([msgs * w] if alpha_s is None else []) + [nbytes * w] + ([w] if fit_overhead else []))
        target.append((r.step_s - comp - known) * w)
    coef = list(_nnls(np.asarray(cols, float), np.asarray(target, float)))
    if alpha_s is not None:
        coef.insert(0, float(alpha_s))
    if coef[1] <= 0:
        raise ValueError(
            "the measured step times do not grow with bytes on the wire, so no bandwidth "
            "can be fitted; include runs with N >= 2 of a communication-heavy model"
        )
    link = Link(
        float(coef[0]),
        float(1.0 / coef[1]),
        "fit to measured runs" if alpha_s is None else "B fitted to measured runs, alpha given",
    )
    overhead = float(coef[2]) if fit_overhead else 0.0
    pred = predict_runs(runs, link, cores=cores, step_overhead_s=overhead, terms=terms)
    return replace(link, rel_error=float(pred["rel_error"].abs().median())), overhead


def predict_runs(
    runs: pd.DataFrame,
    link: Link,
    cores: int | None = None,
    step_overhead_s: float = 0.0,
    terms: Terms | None = None,
    host: HostCost | None = None,
) -> pd.DataFrame:
    """The runs with the model's predicted step_s and images_per_s, and rel_error =
    (predicted - measured) / measured step time. ``host``: gamma added to the link (:class:`HostCost`)."""
    runs = _check_runs(runs)
    pred = []
    for r in runs.itertuples():
        m = CostModel(r.per_sample_s, link, step_overhead_s, cores, terms, host)
        pred.append(m.t_step(r.arch, r.model_bytes, int(r.workers), int(r.batch), int(r.n_ps), _row_shards(r)))
    runs["predicted_step_s"] = pred
    runs["predicted_images_per_s"] = runs["workers"] * runs["batch"] / runs["predicted_step_s"]
    runs["rel_error"] = runs["predicted_step_s"] / runs["step_s"] - 1
    return runs


def fit_host_cost(
    runs: pd.DataFrame,
    link: Link,
    cores: int | None = None,
    terms: Terms | None = None,
    source: str = "fit to measured runs",
) -> HostCost:
    """gamma per architecture: the host seconds per critical-path byte that ``runs`` spent
    beyond their compute and what ``link`` (alpha and B, measured apart) says the wire takes.

    Fit it where the wire is nearly free, runs on 127.0.0.1 with the loopback micro-benchmark's
    link: what is left of a step there is the hosts' work per byte, which a slower link between
    the same hosts adds to its own wire time. Per architecture, a least-squares fit through the
    origin on relative error (rows weighted by 1/step_s, as :func:`fit_link_to_runs`), clipped
    at 0; an architecture without a run that moves bytes gets NaN (not calibrated).
    """
    runs = _check_runs(runs)
    if runs.empty:
        raise ValueError("fit_host_cost needs runs; give runs with N >= 2 (and each model's 1-worker run for compute)")
    sums = {arch: [0.0, 0.0] for arch in ARCHS}  # sum(w^2 * rest * bytes), sum(w^2 * bytes^2)
    moves = []  # whether each run moves bytes: the runs the fit's error is measured on
    for r in runs.itertuples():
        msgs, nbytes = critical_path(r.arch, r.model_bytes, int(r.workers), int(r.n_ps), _row_shards(r), terms)
        moves.append(nbytes > 0)
        if nbytes <= 0:
            continue
        rest = r.step_s - r.per_sample_s * r.batch * _cpu_stretch(int(r.workers), cores) - link.seconds(msgs, nbytes)
        w2 = 1.0 / r.step_s**2
        sums[r.arch][0] += w2 * rest * nbytes
        sums[r.arch][1] += w2 * nbytes**2
    gamma = {arch: max(0.0, num / den) if den else math.nan for arch, (num, den) in sums.items()}
    if all(math.isnan(g) for g in gamma.values()):
        raise ValueError(
            "no run moves bytes on the wire (all have N = 1), so no host cost per byte can be "
            "fitted; include runs with N >= 2"
        )
    host = HostCost(gamma["ps"], gamma["ring"], source)
    pred = predict_runs(runs[moves], link, cores=cores, terms=terms, host=host)
    return replace(host, rel_error=float(pred["rel_error"].abs().median()))


# ---------------------------------------------------------------------------------------
# Crossover: where ring all-reduce beats a parameter server
# ---------------------------------------------------------------------------------------


def _linear_comm(arch: str, workers: int, link: Link, n_ps: int, terms: Terms | None) -> tuple[float, float]:
    """t_comm = a + b*M for even shards: (a seconds, b seconds per model byte)."""
    msgs, nbytes = critical_path(arch, 1.0, workers, n_ps, terms=terms)
    return msgs * link.alpha_s, nbytes / link.bandwidth


def crossover_model_bytes(workers: int, link: Link, n_ps: int = 1, terms: Terms | None = None) -> float:
    """The model size above which ring all-reduce communicates faster than PS with ``n_ps``
    even shards (0: ring always faster; inf: never). Compute is the same for both and cancels.

    Each architecture's t_comm is a + b*M by ``terms``: where the one with fewer latencies
    (a) has more bytes per model byte (b), they tie at M = (a_ring - a_ps) / (b_ps - b_ring),
    a multiple of alpha*B (the link's latency-bandwidth product).
    """
    n = check_count("workers", workers)
    a_ps, b_ps = _linear_comm("ps", n, link, n_ps, terms)
    a_r, b_r = _linear_comm("ring", n, link, n_ps, terms)
    if a_r <= a_ps and b_r <= b_ps:
        return 0.0
    if b_r >= b_ps:
        return math.inf
    return max(0.0, (a_r - a_ps) / (b_ps - b_r))


def crossover_workers(
    model_bytes: float, link: Link, n_ps: int = 1, max_workers: int = 1024, terms: Terms | None = None
) -> int:
    """The largest N up to which the ring communicates faster than PS (1 if not even at N=2;
    ``max_workers`` if at every N): :func:`crossover_model_bytes` at each N in turn."""
    m = check_positive("model_bytes", model_bytes)
    last = 1
    for n in range(2, max_workers + 1):
        if m <= crossover_model_bytes(n, link, n_ps, terms):
            break
        last = n
    return last


def crossover_map(
    model_bytes: Iterable[float],
    workers: Iterable[int],
    links: Iterable[Link],
    n_ps: int = 1,
    per_sample_s: float | None = None,
    batch: int = 32,
    terms: Terms | None = None,
) -> pd.DataFrame:
    """Ring vs PS over model size x N x network: one row per point with t_ps, t_ring and
    ``ring_speedup`` = t_ps / t_ring (> 1: the ring is faster). Communication only, unless
    ``per_sample_s`` adds the (shared) compute, which shrinks the ratio toward 1."""
    rows = []
    for link in links:
        for n in workers:
            for m in model_bytes:
                tc = per_sample_s * batch if per_sample_s else 0.0
                t_ps = tc + link.seconds(*critical_path("ps", m, n, n_ps, terms=terms))
                t_ring = tc + link.seconds(*critical_path("ring", m, n, n_ps, terms=terms))
                rows.append(
                    {
                        "network": link.source,
                        "bandwidth": link.bandwidth,
                        "alpha_s": link.alpha_s,
                        "workers": n,
                        "model_bytes": float(m),
                        "n_ps": n_ps,
                        "t_ps": t_ps,
                        "t_ring": t_ring,
                        "ring_speedup": t_ps / t_ring if t_ring > 0 else math.inf,
                        "winner": "ring" if t_ring < t_ps else "ps",
                    }
                )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------
# Report 003's models and networks
# ---------------------------------------------------------------------------------------

BENCHMARK_SOURCE = (
    "TensorFlow performance benchmarks (tensorflow/tensorflow, "
    "tensorflow/docs_src/performance/benchmarks.md, 2017): Google Compute Engine, "
    "NVIDIA Tesla K80, training on synthetic ImageNet data, 1 GPU"
)


@dataclass(frozen=True)
class PublishedModel:
    """A model of report 003 (Table 3.1), with the single-K80 throughput that sets its compute.

    Report 003 gives no single-node images/s in its text (its Figures 4.1-4.4 are images),
    so compute comes from TensorFlow's own K80 benchmark on the same cloud (GCE).
    """

    name: str
    size_mib: float  # report 003 Table 3.1 "Model size (MB)" of the ImageNet (224x224) models, read as MiB
    gflops: float  # report 003 Table 3.1, forward pass per 224x224 image
    k80_images_per_s: float
    note: str = field(default="", compare=False)

    @property
    def model_bytes(self) -> float:
        return self.size_mib * MIB

    @property
    def per_sample_s(self) -> float:
        return 1.0 / self.k80_images_per_s


_VGG16_K80 = 35.4
REPORT_003_MODELS: dict[str, PublishedModel] = {
    m.name: m
    for m in [
        PublishedModel(
            "AlexNet",
            233,
            0.7,
            656,
            "benchmark batch 512 (32 not published); AlexNet's compute is ~2% of its step at 1 Gb/s either way",
        ),
        PublishedModel("VGG16", 528, 15.5, _VGG16_K80, "benchmark batch 32"),
        PublishedModel(
            "VGG19",
            548,
            19.6,
            round(_VGG16_K80 * 15.5 / 19.6, 1),
            "not benchmarked: VGG16's rate scaled by the GFLOPs ratio 15.5/19.6",
        ),
        PublishedModel("ResNet50", 98, 3.9, 49.5, "benchmark batch 32"),
        PublishedModel("ResNet152", 230, 11.3, 20.0, "benchmark batch 32"),
    ]
}

# Latency of a cloud LAN message: tens to hundreds of microseconds. For these model sizes
# (M/B is 0.08-4.6 s on these networks) even the ring's 10 latencies at N=6 are under 1% of
# t_comm, so the exact value hardly matters.
CLOUD_ALPHA_S = 100e-6
NETWORKS = {"1 Gb/s": Link(CLOUD_ALPHA_S, gbit(1), "1 Gb/s"), "10 Gb/s": Link(CLOUD_ALPHA_S, gbit(10), "10 Gb/s")}


def report_003_curves(
    workers: Iterable[int] = range(1, 7),
    networks: dict[str, Link] | None = None,
    batch: int = 32,
    n_ps: int = 1,
    baseline: str = "self",
    terms: Terms | None = None,
) -> pd.DataFrame:
    """Predicted images/s and speed-up for report 003's models, networks and 1-6 workers
    (batch 32 per worker and one ps, as in its Tables 3.2-3.3): one row per
    (model, network, arch, N). The thesis trained on 32x32 CIFAR-10 images, which need far
    less compute than the 224x224 benchmark rates assumed here, so its communication share
    was if anything larger: these curves are optimistic for both architectures."""
    workers = list(workers)
    frames = []
    for name, net in (networks or NETWORKS).items():
        for spec in REPORT_003_MODELS.values():
            cm = CostModel(spec.per_sample_s, net, terms=terms)
            for arch in ARCHS:
                df = cm.predict(arch, spec.model_bytes, workers, batch, n_ps, baseline)
                df.insert(0, "network", name)
                df.insert(0, "model", spec.name)
                df["model_bytes"] = spec.model_bytes
                frames.append(df)
    return pd.concat(frames, ignore_index=True)
