"""What a correct collective does, said once for the notebook's self-check and the grader's check.

- ``CollectiveRun``: what a run of the notebook's collectives measured (``collective.all_reduce``),
  to and from plain arrays (the grader's probe writes them, its judge reads them).
- ``model_bytes``: the cost model, bytes each worker sends and receives in each phase: a ring
  worker sends (N-1)/N of the gradient per phase, 2(N-1)/N in all; gather/scatter puts (N-1) x the
  gradient through worker 0 in each direction.
- ``problems``: the properties a run breaks, each named as a property (which worker, which phase),
  never with a value the checker computed: the averages, the chunk each worker owns after
  reduce-scatter, which links carry bytes, and how many bytes each phase moves.
- ``table``: measured bytes and seconds beside the model's, per collective, phase and worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

COLLECTIVES = {"ring": ("reduce-scatter", "all-gather"), "gather/scatter": ("gather", "scatter")}


@dataclass
class CollectiveRun:
    world: int
    values: int  # the gradient's length
    itemsize: int  # bytes per value (4: float32)
    collectives: tuple[str, ...]  # per phase
    phases: tuple[str, ...]
    results: list  # [phase][rank]: what the phase's function returned (an array or None)
    link_bytes: np.ndarray  # [phase, src, dst]: payload bytes the relay forwarded
    messages: np.ndarray  # [phase, src, dst]
    seconds: np.ndarray  # [phase]: from the relay's start signal to the last worker's result
    link_bytes_per_s: float | None = None  # each worker's emulated link, each way (None: loopback)
    folder: Path | None = field(default=None, repr=False)
    verdict: object = field(default=None, repr=False)  # the self-check's, when one ran

    def index(self, phase: str) -> int:
        return self.phases.index(phase)

    def result(self, phase: str, rank: int):
        return self.results[self.index(phase)][rank]

    def sent(self, phase: str) -> np.ndarray:
        return self.link_bytes[self.index(phase)].sum(axis=1)

    def received(self, phase: str) -> np.ndarray:
        return self.link_bytes[self.index(phase)].sum(axis=0)

    def to_arrays(self) -> dict:
        """Plain arrays (no pickles): what the grader's probe writes."""
        arrays = {
            "shape": np.asarray([self.world, self.values, self.itemsize]),
            "phases": np.asarray(self.phases),
            "collectives": np.asarray(self.collectives),
            "link_bytes": self.link_bytes,
            "messages": self.messages,
            "seconds": self.seconds,
        }
        for i, per_rank in enumerate(self.results):
            for r, value in enumerate(per_rank):
                if value is not None:
                    arrays[f"result_{i}_{r}"] = np.asarray(value)
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict, prefix: str = "") -> "CollectiveRun":
        world, values, itemsize = (int(v) for v in arrays[prefix + "shape"])
        phases = tuple(str(p) for p in arrays[prefix + "phases"])
        results = [[arrays.get(f"{prefix}result_{i}_{r}") for r in range(world)] for i in range(len(phases))]
        return cls(
            world,
            values,
            itemsize,
            tuple(str(c) for c in arrays[prefix + "collectives"]),
            phases,
            results,
            np.asarray(arrays[prefix + "link_bytes"]),
            np.asarray(arrays[prefix + "messages"]),
            np.asarray(arrays[prefix + "seconds"], float),
        )


def chunk_bounds(values: int, world: int) -> list[tuple[int, int]]:
    """``np.array_split``'s chunks of ``values`` into ``world``, as (start, stop)."""
    q, extra = divmod(values, world)
    stops = np.cumsum([q + (c < extra) for c in range(world)])
    return [(int(stop - q - (c < extra)), int(stop)) for c, stop in enumerate(stops)]


def model_bytes(
    collective: str, phase: str, world: int, values: int, itemsize: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """(sent, received) bytes per worker in ``phase`` by the cost model: a ring worker sends and
    receives (N-1)/N of the gradient per phase; in gather every worker but 0 sends the gradient
    to worker 0, which receives N-1 of them; scatter is gather backwards."""
    size, n = values * itemsize, world
    if collective == "ring":
        each = np.full(n, (n - 1) / n * size)
        return each, each.copy()
    one = np.zeros(n)
    if phase == "gather":
        one[1:] = size
        return one, np.r_[(n - 1) * size, np.zeros(n - 1)]
    one[1:] = size
    return np.r_[(n - 1) * size, np.zeros(n - 1)], one


def properties(run: CollectiveRun, grads, rtol: float = 1e-4) -> list[tuple[str, bool]]:
    """Every property a correct run has, as ``(sentence, held)``; a sentence that did not hold says
    where (which workers, which links), never a value. ``grads`` are the workers' inputs."""
    grads = np.asarray(grads, np.float64)
    mean = grads.mean(axis=0)
    tol = (1e-5 * max(float(np.abs(grads).max()), 1e-30), rtol)
    out: list[tuple[str, bool]] = []
    for collective, (first, second) in COLLECTIVES.items():
        if first not in run.phases:
            continue
        (_ring if collective == "ring" else _gather_scatter)(run, mean, tol, out)
        what = f"{collective}: every worker ends with the average of all the workers' gradients"
        _expect(out, what, [r for r in range(run.world) if not _close(run.result(second, r), mean, tol)])
    return out


def problems(run: CollectiveRun, grads) -> list[str]:
    """The properties ``run`` breaks (empty: none)."""
    return [what for what, held in properties(run, grads) if not held]


def _expect(out: list, what: str, bad) -> None:
    """Add property ``what``, broken by the workers in ``bad`` (ranks), or as a string ``bad`` says."""
    if isinstance(bad, str):
        out.append((f"{what} ({bad})", False) if bad else (what, True))
    else:
        _expect(out, what, f"worker(s) {', '.join(str(b) for b in bad)} do not" if bad else "")


def _close(value, want: np.ndarray, tol) -> bool:
    if value is None:
        return False
    v, (atol, rtol) = np.asarray(value, np.float64).reshape(-1), tol
    return v.shape == want.shape and bool(np.all(np.abs(v - want) <= atol + rtol * np.abs(want)))


def _links(run, phase: str, allowed) -> str:
    """The links that carried bytes in ``phase`` though ``allowed(src, dst)`` is False, said ('' if none)."""
    b = run.link_bytes[run.index(phase)]
    bad = [f"{s} -> {d}" for s in range(run.world) for d in range(run.world) if b[s, d] and not allowed(s, d)]
    return f"bytes went {', '.join(bad)}" if bad else ""


def _ring(run, mean, tol, out) -> None:
    n, size = run.world, run.values * run.itemsize
    bounds = chunk_bounds(run.values, n)
    owned = [mean[slice(*bounds[(w + 1) % n])] for w in range(n)]
    _expect(
        out,
        "reduce-scatter: worker w returns the average of chunk (w + 1) mod N (np.array_split's chunks)",
        [w for w in range(n) if not _close(run.result("reduce-scatter", w), owned[w], tol)],
    )
    smallest, largest = (run.values // n) * run.itemsize, -(-run.values // n) * run.itemsize
    for phase in COLLECTIVES["ring"]:
        _expect(
            out,
            f"{phase}: worker w sends only to its right-hand neighbour (w + 1) mod N",
            _links(run, phase, lambda s, d: d == (s + 1) % n),
        )
        total = int(run.link_bytes[run.index(phase)].sum())
        _expect(
            out,
            f"{phase}: each of the N chunks crosses N-1 links, so the workers together send (N-1) x the "
            "gradient's bytes (its float32 values as they came)",
            "" if total == (n - 1) * size else f"they sent {'more' if total > (n - 1) * size else 'less'}",
        )
        sent = run.sent(phase)
        _expect(
            out,
            f"{phase}: each worker sends N-1 chunks of about 1/N of the gradient",
            [w for w in range(n) if not (n - 1) * smallest <= sent[w] <= (n - 1) * largest],
        )


def _gather_scatter(run, mean, tol, out) -> None:
    n, size = run.world, run.values * run.itemsize
    _expect(out, "gather: every worker sends only to worker 0", _links(run, "gather", lambda s, d: d == 0))
    sent = run.sent("gather")
    _expect(
        out,
        "gather: every worker but 0 sends its whole gradient once, as it came (float32)",
        [w for w in range(1, n) if sent[w] != size],
    )
    _expect(
        out,
        "gather: worker 0 returns the average of all the gradients",
        [] if _close(run.result("gather", 0), mean, tol) else [0],
    )
    _expect(out, "scatter: only worker 0 sends", _links(run, "scatter", lambda s, d: s == 0))
    to = run.link_bytes[run.index("scatter")][0]
    _expect(
        out,
        "scatter: worker 0 sends the average (float32) once to every other worker",
        [w for w in range(1, n) if to[w] != size],
    )


def table(run: CollectiveRun, mwms_bytes_per_worker: float | None = None):
    """Per collective, phase and worker: bytes sent and received, measured (by the relay) and by the
    model, and the phase's seconds; with ``mwms_bytes_per_worker`` (a worker's measured socket bytes
    per step under MultiWorkerMirroredStrategy, from the sweep), a row for it."""
    import pandas as pd

    rows = []
    for i, (collective, phase) in enumerate(zip(run.collectives, run.phases)):
        model_sent, model_recv = model_bytes(collective, phase, run.world, run.values, run.itemsize)
        for w in range(run.world):
            rows.append(
                {
                    "collective": collective,
                    "phase": phase,
                    "worker": w,
                    "sent_bytes": int(run.link_bytes[i, w].sum()),
                    "model_sent_bytes": float(model_sent[w]),
                    "received_bytes": int(run.link_bytes[i, :, w].sum()),
                    "model_received_bytes": float(model_recv[w]),
                    "messages_sent": int(run.messages[i, w].sum()),
                    "phase_s": float(run.seconds[i]),
                    "model_phase_s": _model_seconds(run, model_sent, model_recv),
                }
            )
    if mwms_bytes_per_worker is not None:
        ring_model = 2 * (run.world - 1) / run.world * run.values * run.itemsize
        rows.append(
            {
                "collective": "MWMS (sweep)",
                "phase": "all-reduce",
                "worker": -1,
                "sent_bytes": float(mwms_bytes_per_worker),
                "model_sent_bytes": ring_model,
            }
        )
    return pd.DataFrame(rows)


def _model_seconds(run: CollectiveRun, sent: np.ndarray, received: np.ndarray) -> float | None:
    """A phase's time by the model on emulated links: its busiest worker's bytes, one way, at the
    link's rate (links are full duplex); None on loopback, where no link limits it."""
    if not run.link_bytes_per_s:
        return None
    return float(max(sent.max(), received.max()) / run.link_bytes_per_s)


def per_worker(frame):
    """``table``'s rows summed over each collective's phases: one row per collective and worker, with
    measured over model bytes each way, and the collective's seconds (its phases' sum)."""
    cols = ["sent_bytes", "model_sent_bytes", "received_bytes", "model_received_bytes", "phase_s", "model_phase_s"]
    ran = frame[frame["worker"] >= 0]
    out = ran.groupby(["collective", "worker"], sort=False)[cols].sum(min_count=1)
    for col in ("phase_s", "model_phase_s"):  # a phase's time once per collective, not once per worker
        per_phase = ran.groupby(["collective", "phase"], sort=False)[col].first()
        out[col] = per_phase.groupby(level=0, sort=False).sum(min_count=1).reindex(out.index, level=0)
    for way in ("sent", "received"):
        model = out[f"model_{way}_bytes"]
        out[f"{way}_over_model"] = (out[f"{way}_bytes"] / model.where(model > 0)).round(4)  # none where the model has 0
    return out.rename(columns={"phase_s": "seconds", "model_phase_s": "model_seconds"})


def plot(frame, title: str = "Bytes per worker in one all-reduce: measured (bars) and the cost model (black marks)"):
    """Per worker, the bytes each collective sent and received as the relay counted them, the cost
    model's as black marks, and MultiWorkerMirroredStrategy's measured bytes per step when given."""
    import matplotlib.pyplot as plt

    summary = per_worker(frame).reset_index()
    collectives = list(dict.fromkeys(summary["collective"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, way in zip(axes, ("sent", "received")):
        width = 0.8 / len(collectives)
        for k, c in enumerate(collectives):
            rows = summary[summary["collective"] == c]
            x = rows["worker"].to_numpy() + (k - (len(collectives) - 1) / 2) * width
            ax.bar(x, rows[f"{way}_bytes"] / 1e3, width, label=c)
            ax.hlines(rows[f"model_{way}_bytes"] / 1e3, x - width / 2, x + width / 2, colors="black")
        mwms = frame[frame["worker"] < 0]
        if way == "sent" and len(mwms):
            ax.axhline(float(mwms["sent_bytes"].iloc[0]) / 1e3, ls="--", color="gray", label="MWMS, measured per step")
        ax.set_xlabel("worker")
        ax.set_xticks(sorted(summary["worker"].unique()))
        ax.set_title(f"{way}")
    axes[0].set_ylabel("KB")
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
