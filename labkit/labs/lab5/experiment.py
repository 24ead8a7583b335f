"""Lab 5: ring all-reduce vs parameter server on the same model and loop: scaling, bytes, a cost model.

    s = scaling(workers=(1, 2), models=("lenet5", "mlp"), steps=16)
    s.table(); s.task_bytes(); s.check_terms(comm_terms)
    cal = s.calibrate(terms=comm_terms, fit_workers=(1, 2)); cal.errors(); cal.curves()
    e = emulated("100mbit", "cifar_cnn")  # report 003's measurement on emulated links
    f = ps_failure(3)                      # a worker killed, then the ps

Every (architecture, N) is a real cluster of ``labkit.tasks.strategy_train`` processes, its models
run one after the other in it (``labkit.experiments.shared``). The kit measures the bytes;
predicting them is the lab's work (the reference model is this lab's ``solution``, which the
student kit leaves out). More in docs/internals.md, "Lab 5's experiment".
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from labkit.wire import spec as cluster, faults
from labkit.learning import costargs, costmodel
from labkit import experiments
from labkit.distributed import live
from labkit.core import paths
from labkit.experiments import positive_ints, shared, traces
from labkit.distributed.launch import Cluster
from labkit.core.proc import usable_cores
from labkit.measure.progress import tqdm
from labkit.wire.results import ClusterResult

LAB = "lab5"
PROGRAM = "strategy_train"
ARCHS = costmodel.ARCHS  # ("ps", "ring")
STRATEGY = {"ps": "ps", "ring": "mwms"}
MODELS = ("lenet5", "mlp")
TOLERANCE = 0.25  # a measured byte count further than this from the expected one is flagged


# ------------------------------------------------------------------------------ one run


def make_cluster(
    arch: str,
    model: str,
    workers: int,
    *,
    batch_size: int = 64,
    steps: int = 16,
    epochs: int = 2,
    n_ps: int = 1,
    ps_sync: bool = True,
    hosts=None,
    train_limit: int | None = None,
    test_limit: int | None = 1000,
    lr: float = 0.05,
    seed: int = 0,
    run: str | None = None,
    timeout: float = 600,
    sample_interval: float = 0.25,
    threads="auto",
    trace_steps: bool = False,
    **cluster_kwargs,
) -> Cluster:
    """A (not yet started) cluster training ``model`` under ``arch`` on ``workers`` workers.

    ``steps`` training steps in all, split over ``epochs`` (each epoch ends with the chief's
    validation, so the loss can be seen to fall). ``train_limit`` defaults to just enough
    images for those steps. ``threads``: (intra, inter) op threads per task; "auto" gives
    every task one intra-op thread on 127.0.0.1 and lets each node choose on a cluster.
    ``trace_steps`` (synchronous PS): the chief reports every step (``labkit.wire.faults``)."""
    costargs.check_arch(arch)
    if steps < epochs:
        raise ValueError(f"steps={steps} must be at least epochs={epochs} (steps are split over the epochs)")
    if steps % epochs:
        raise ValueError(f"steps={steps} must split evenly over epochs={epochs}, e.g. steps={steps - steps % epochs}")
    per_epoch = steps // epochs
    images = per_epoch * batch_size * workers
    if train_limit is None:
        train_limit = max(1000, -(-images // 1000) * 1000)
    elif train_limit < images:
        raise ValueError(
            f"train_limit={train_limit} holds fewer images than one epoch of {per_epoch} steps x "
            f"{workers} workers x batch {batch_size} = {images}; raise it or use None"
        )
    if arch == "ps":
        spec = cluster.build(hosts=hosts or None, ps=n_ps, workers=workers, chief=True)
    else:
        spec = cluster.build(hosts=hosts or None, ps=0, workers=workers)
    if threads == "auto":
        threads = (1, 2) if spec.is_local else None
    extra = {"ps_sync": ps_sync, "trace_steps": trace_steps} if arch == "ps" else {}
    return experiments.make_cluster(
        LAB,
        PROGRAM,
        spec,
        name=f"{model}-{arch}-w{workers}",
        run=run,
        tensorboard=True,
        timeout=timeout,
        threads=threads,
        strategy=STRATEGY[arch],
        model=model,
        batch_size=batch_size,
        epochs=epochs,
        steps_per_epoch=per_epoch,
        lr=lr,
        seed=seed,
        train_limit=train_limit,
        test_limit=test_limit,
        sample_interval=sample_interval,
        task_bytes=True,
        **extra,
        **cluster_kwargs,
    )


@dataclass
class Run(experiments.Run):
    """One finished run: its configuration (architecture, model, N, ps tasks) and the
    launcher's ``ClusterResult``; ``train`` is the loop's result on the chief (the PS chief,
    or ring worker 0), which measured the run."""

    arch: str
    model: str
    workers: int
    n_ps: int
    result: ClusterResult

    @property
    def label(self) -> str:
        ps = f", {self.n_ps} ps" if self.arch == "ps" and self.n_ps > 1 else ""
        return f"{self.model} {self.arch} N={self.workers}{ps}"

    def shards(self) -> tuple[float, ...] | None:
        """Bytes each ps task holds, from where the variables really live (PS only)."""
        if self.arch != "ps":
            return None
        loads = [0.0] * self.n_ps
        for v in self.train["variables"]:
            device = v["device"]
            if "/job:ps/" not in device:
                raise ValueError(f"{self.label}: variable {v['name']} lives on {device!r}, not on a ps")
            loads[int(device.split("/task:")[1].split("/")[0])] += v["bytes"]
        return tuple(loads)

    def loop_steps_per_step(self) -> float:
        """The training loop's steps in one of this lab's steps (N x batch images): N for
        asynchronous PS, whose loop counts each worker's batch as a step; else 1. Bytes per
        step are scaled by it, so both PS modes count the bytes of N x batch images."""
        tr = self.train
        return self.workers * tr["per_worker_batch"] / tr["images_per_step"]

    @property
    def moves_bytes(self) -> bool:
        """Whether a step crosses the wire: every PS run (its workers reach the ps); a ring of two or more."""
        return self.arch == "ps" or self.workers > 1

    def steps(self) -> int:
        tr = self.train
        return sum(h["steps"] for h in tr["history"] if h["epoch"] > tr["start_epoch"])

    def task_bytes(self) -> dict[str, dict]:
        """{task: {"sent", "recv" (bytes per step), "method"}} for every task that moved bytes.

        Socket counters of the trainers that measured (each sees the tasks on its node): a task
        that trained counts its own sockets over its own steps (a ring worker's window holds
        exactly the steps it counted, whoever else is late); a task that only serves (a ps, a
        PS worker) is counted by the chief, which ran the steps. For the rest, the NIC counters
        of their node over the chief's training window."""
        out: dict[str, dict] = {}
        scale = self.loop_steps_per_step()
        chief = self.chief.name

        def rank(reader: str, task: str) -> int:  # lower wins: the task itself, the chief, anyone
            return 0 if reader == task else 1 if reader == chief else 2

        best: dict[str, int] = {}
        for t in self.result:
            for key, value in (t.traffic.get("counters_per_step") or {}).items():
                task, side = key.rsplit(" ", 1)
                r = rank(t.name, task)
                if r <= best.get(task, r):
                    best[task] = r
                    out.setdefault(task, {"method": "sockets"})[side] = value * scale
        missing = [t.name for t in self.result if t.name not in out]
        if missing:
            out.update(self._nic_bytes(missing))
        return out

    def total_bytes(self) -> float:
        """Bytes on the wire per step, all tasks together: the ``lo`` counter on 127.0.0.1
        (one side), else the sum of the tasks' bytes sent."""
        traffic = self.chief.traffic
        if traffic.get("nics") == ["lo"]:
            return traffic["nic_sent_bytes_per_step"] * self.loop_steps_per_step()
        per_task = self.task_bytes()
        return sum(v.get("sent", 0.0) for v in per_task.values()) if per_task else math.nan

    def _nic_bytes(self, tasks: list[str]) -> dict[str, dict]:
        from labkit.measure.summaries import summarize

        frame = self.result.samples()
        marks = {m["label"]: m["t"] for m in frame.attrs["marks"] if m.get("task") == self.chief.name}
        if not {"train start", "train end"} <= set(marks):
            return {}
        steps = max(1, self.steps()) / self.loop_steps_per_step()
        out = {}
        for name in tasks:
            part = frame[frame["task"] == name]
            if len(part):
                s = summarize(part, marks["train start"], marks["train end"], marks=[])
                out[name] = {
                    "sent": s["net_sent_bytes"] / steps,
                    "recv": s["net_recv_bytes"] / steps,
                    "method": f"node NIC ({part['host'].iloc[0]}), chief's training window",
                }
        return out


def run_one(arch: str, model: str, workers: int, **kwargs) -> Run:
    """Start one cluster under a live view, wait for it (``TaskFailed`` with the log tail if a
    task dies), return the run."""
    c = make_cluster(arch, model, workers, **kwargs)
    with live.watch(c, static=False), c:  # the lab draws its own timelines (section 5)
        result = c.wait()
    return Run(arch, model, workers, kwargs.get("n_ps", 1) if arch == "ps" else 0, result)


# ------------------------------------------------------------------------------ the sweep


@dataclass
class Scaling(experiments.Sweep):
    """The runs of one sweep over models x architectures x N, with the lab's tables."""

    _run_settings: dict = field(default_factory=dict, repr=False)  # how scaling() ran them (not recorded)
    _base: str = field(default="", repr=False)  # the sweep's folder under runs/lab5

    def extend(self, workers, progress: bool = True, log=print, timeout: float = 600) -> "Scaling":
        """Run the sweep's models and architectures at more N (those it has not run), with the
        settings :func:`scaling` ran it with, and add them; returns the sweep."""
        if not self._run_settings:
            raise ValueError(
                "this Scaling was not made by ring_vs_ps.scaling(), so it cannot run more N; "
                "call scaling() with the workers you want"
            )
        done = set(self.settings["workers"])
        new = tuple(n for n in sorted(set(positive_ints("workers", workers))) if n not in done)
        return _extend(self, new, progress, log, timeout) if new else self

    @property
    def cores(self) -> int | None:
        """Cores the workers share (127.0.0.1), or None on a cluster (one node each)."""
        return self.settings.get("cores")

    def get(self, arch: str, model: str, workers: int | None = None) -> Run:
        """The run of ``arch`` and ``model`` at ``workers`` (default: the largest N)."""
        found = [r for r in self.runs if r.arch == arch and r.model == model]
        if workers is not None:
            found = [r for r in found if r.workers == workers]
        if not found:
            raise KeyError(
                f"no {arch} run of {model}"
                + (f" with {workers} workers" if workers else "")
                + f"; runs: {[r.label for r in self.runs]}"
            )
        return max(found, key=lambda r: r.workers)

    def table(self):
        """The scaling table: one row per run. ``step_s`` is seconds per step of N x batch
        images (for asynchronous PS, N x batch / images_per_s); ``speedup`` divides by the
        same architecture's N=1 (as report 003's figures do); ``bytes_per_step`` is the
        total on the wire (``lo`` locally, one side), ``bytes_over_model`` that over M."""
        import pandas as pd

        rows = []
        for r in self.runs:
            tr = r.train
            n, b = r.workers, tr["per_worker_batch"]
            hist = tr["history"]
            rows.append(
                {
                    "model": r.model,
                    "arch": r.arch,
                    "workers": n,
                    "n_ps": r.n_ps,
                    "batch": b,
                    "model_bytes": tr["model_bytes"],
                    "steps": r.steps(),
                    "step_s": n * b / tr["images_per_s"],
                    "images_per_s": tr["images_per_s"],
                    "bytes_per_step": r.total_bytes(),
                    "bytes_over_model": r.total_bytes() / tr["model_bytes"],
                    "first_loss": hist[0]["train_loss"],
                    "last_loss": hist[-1]["train_loss"],
                    "val_accuracy": tr.get("val_accuracy"),
                    "wall_s": r.result.wall_s,
                }
            )
        t = pd.DataFrame(rows)
        base = t[t["workers"] == 1].set_index(["model", "arch"])["images_per_s"]
        t["speedup"] = [row.images_per_s / base.get((row.model, row.arch), math.nan) for row in t.itertuples()]
        t["efficiency"] = t["speedup"] / t["workers"]
        return t.sort_values(["model", "arch", "workers"], ignore_index=True)

    def task_bytes(self, expected=None, tolerance: float = TOLERANCE):
        """Bytes per step per task, as each task's own sockets counted them (``sent_bytes``,
        ``recv_bytes``, and both over the model's bytes M), plus a ``total`` row per run (``lo``
        locally). Runs without communication (ring N=1) are left out.

        ``expected``: a model of each task's bytes, ``(arch, M, N, n_ps, shards) -> `` an object
        with ``per_task()`` (task, sent, recv) and ``total`` (the reference,
        ``labkit.labs.lab5.solution.step_bytes``, which the student kit leaves out): adds
        ``expected_sent_bytes``/``expected_recv_bytes``, ``deviation`` = measured / expected - 1
        of the bytes sent, and ``flag`` where |deviation| > ``tolerance``. The PS chief only
        schedules steps: it is expected to send nothing, and gets no deviation."""
        import pandas as pd

        rows = []
        for r in self.runs:
            if not r.moves_bytes:
                continue
            m = r.train["model_bytes"]
            model = expected(r.arch, m, r.workers, r.n_ps, r.shards()) if expected is not None else None
            want = {row.task: (row.sent, row.recv) for row in model.per_task().itertuples()} if model else {}
            measured = r.task_bytes()
            for task in [t.name for t in r.result]:
                got = measured.get(task, {})
                rows.append(
                    {
                        "run": r.label,
                        "model": r.model,
                        "arch": r.arch,
                        "workers": r.workers,
                        "task": task,
                        "sent_bytes": got.get("sent", math.nan),
                        "recv_bytes": got.get("recv", math.nan),
                        "sent_over_model": got.get("sent", math.nan) / m,
                        "recv_over_model": got.get("recv", math.nan) / m,
                        **(
                            {
                                "expected_sent_bytes": want.get(task, (0.0, 0.0))[0],
                                "expected_recv_bytes": want.get(task, (0.0, 0.0))[1],
                            }
                            if model
                            else {}
                        ),
                        "method": got.get("method", "-"),
                    }
                )
            total = r.total_bytes()
            rows.append(
                {
                    "run": r.label,
                    "model": r.model,
                    "arch": r.arch,
                    "workers": r.workers,
                    "task": "total",
                    "sent_bytes": total,
                    "recv_bytes": math.nan,
                    "sent_over_model": total / m,
                    "recv_over_model": math.nan,
                    **({"expected_sent_bytes": model.total, "expected_recv_bytes": math.nan} if model else {}),
                    "method": "lo counter" if r.chief.traffic.get("nics") == ["lo"] else "sum of tasks",
                }
            )
        t = pd.DataFrame(rows)
        if t.empty or expected is None:
            return t
        t["deviation"] = [s / a - 1 if a > 0 else math.nan for s, a in zip(t["sent_bytes"], t["expected_sent_bytes"])]
        t["flag"] = t["deviation"].abs() > tolerance
        return t

    def bytes_deviation(self, expected, tolerance: float = TOLERANCE) -> dict:
        """Against ``expected`` (see :meth:`task_bytes`): the largest |deviation| of a task's
        measured bytes, the task it belongs to, and every row past ``tolerance``. The ``total``
        rows count apart (``lo_max_abs_deviation``): ``lo`` also carries whatever else the machine sends."""
        t = self.task_bytes(expected, tolerance)
        if t.empty:
            return {"max_abs_deviation": None, "worst": None, "lo_max_abs_deviation": None, "flagged": []}
        tasks = t[(t["task"] != "total") & t["deviation"].notna()]
        totals = t[(t["task"] == "total") & t["deviation"].notna()]
        worst = tasks.loc[tasks["deviation"].abs().idxmax()] if len(tasks) else None
        return {
            "max_abs_deviation": float(tasks["deviation"].abs().max()) if len(tasks) else None,
            "worst": f"{worst['run']} {worst['task']}" if worst is not None else None,
            "lo_max_abs_deviation": float(totals["deviation"].abs().max()) if len(totals) else None,
            "flagged": [f"{row.run} {row.task}: {row.deviation:+.1%}" for row in t[t["flag"]].itertuples()],
        }

    def busiest_task(self, workers: int | None = None) -> dict[str, float]:
        """Per architecture, the most bytes any one task sent per step at ``workers`` (default
        the largest N), over every model, as measured."""
        t = self.task_bytes()
        if t.empty:
            return {}
        n = workers or int(t["workers"].max())
        t = t[(t["workers"] == n) & (t["task"] != "total")]
        return {arch: float(t[t["arch"] == arch]["sent_bytes"].max()) for arch in ARCHS if (t["arch"] == arch).any()}

    def worker_bytes(self, arch: str, model: str, workers: int | None = None) -> dict:
        """What a worker of one run sent and received per step, as measured: the median over
        the workers (by symmetry each sends as much; one worker whose count went wrong moves
        the median of three by nothing, the mean by a third of its error), with every worker's
        own figure: ``{"workers", "model_bytes", "sent_per_step", "recv_per_step", "per_worker"}``."""
        r = self.get(arch, model, workers)
        per = {t: v for t, v in sorted(r.task_bytes().items()) if t.startswith("worker:")}

        def median(side: str) -> float:
            return statistics.median(v.get(side, math.nan) for v in per.values()) if per else math.nan

        return {
            "workers": r.workers,
            "model_bytes": r.train["model_bytes"],
            "sent_per_step": median("sent"),
            "recv_per_step": median("recv"),
            "per_worker": {
                t: {"sent": v.get("sent", math.nan), "recv": v.get("recv", math.nan)} for t, v in per.items()
            },
        }

    def records(
        self, calibration: "Calibration | None" = None, crossover: dict | None = None, terms_check=None
    ) -> dict:
        """What the notebook records for the grader: the scaling table, bytes per task, the
        busiest task per architecture, the settings; with ``calibration``, its ``fit_error()``;
        ``crossover`` ({network: {N: model bytes}}) as given; with ``terms_check`` (the frame
        :meth:`check_terms` returned), the largest |deviation| of the student's terms from the
        measured critical-path bytes."""
        out = {
            "scaling_table": self.table(),
            "task_bytes": self.task_bytes(),
            "busiest_task_bytes": self.busiest_task(),
        }
        if calibration is not None:
            out["fit_error"] = calibration.fit_error()
        if crossover is not None:
            out["crossover"] = crossover
        if terms_check is not None:
            out["terms_check"] = {
                "runs": int(len(terms_check)),
                "max_abs_deviation": float(terms_check["deviation"].abs().max()),
            }
        out["settings"] = self.settings
        return out

    def critical_bytes(self):
        """Per run with communication, the bytes its step's critical path carried, as measured
        (``measured_task``: whose sockets counted them): the frame :func:`labkit.learning.costmodel.check_terms`
        compares an answer with."""
        import pandas as pd

        rows = []
        for r in self.runs:
            if not r.moves_bytes:
                continue
            measured = {t: v for t, v in r.task_bytes().items() if not t.startswith("chief")}
            if r.arch == "ring":  # a worker's bytes: the median over the workers (see worker_bytes)
                sent = [v.get("sent", math.nan) for t, v in measured.items() if t.startswith("worker:")]
                task, value = "worker (median)", statistics.median(sent) if sent else math.nan
            else:
                task, value = max(
                    ((t, v.get("sent", 0.0) + v.get("recv", 0.0)) for t, v in measured.items()),
                    key=lambda tv: tv[1],
                    default=("-", math.nan),
                )
            rows.append(
                {
                    "model": r.model,
                    "arch": r.arch,
                    "workers": r.workers,
                    "n_ps": r.n_ps,
                    "shards": r.shards(),
                    "model_bytes": r.train["model_bytes"],
                    "measured_task": task,
                    "measured_bytes": value,
                }
            )
        return pd.DataFrame(rows)

    def check_terms(self, terms):
        """Lab 5's exercise, ``comm_terms``, without a reference: the properties any answer has,
        and its bytes against :meth:`critical_bytes` (:func:`labkit.learning.costmodel.check_terms`), which
        raises saying what is off. Returns the runs with ``your_bytes`` beside ``measured_bytes``."""
        checked = costmodel.check_terms(terms, self.critical_bytes())
        return checked.drop(columns=["shards"], errors="ignore")

    def cost_runs(self):
        """The runs as :mod:`labkit.learning.costmodel` reads them: per_sample_s of each model from its
        ring N=1 run (one worker, no communication), the ps shards as placed."""
        t = self.table()
        base = t[(t["arch"] == "ring") & (t["workers"] == 1)].set_index("model")
        missing = sorted(set(t["model"]) - set(base.index))
        if missing:
            raise ValueError(
                f"no 1-worker ring run of {missing}: the cost model takes compute per sample from it; "
                f"include 1 in the workers"
            )
        t["per_sample_s"] = [base.loc[m, "step_s"] / base.loc[m, "batch"] for m in t["model"]]
        shards = {(r.model, r.arch, r.workers, r.n_ps): r.shards() for r in self.runs}
        t["shards"] = [shards[(row.model, row.arch, row.workers, row.n_ps)] for row in t.itertuples()]
        return t

    def predict(self, link: costmodel.Link, host: costmodel.HostCost | None = None, terms=None):
        """Every run's step time predicted from its model's ring N=1 compute, ``link`` (alpha
        and B, e.g. an emulated link's micro-benchmark) and ``host`` (gamma per architecture,
        e.g. :meth:`Calibration.host_cost` of loopback runs; None: the link alone), fitted to
        none of these runs: ``rel_error`` = predicted / measured step time - 1."""
        return _predicted(self.cost_runs(), self.cores, link, host, terms)

    def calibrate(self, loopback: costmodel.Link | None = None, fit_workers=None, terms=None) -> "Calibration":
        """Fit alpha and B of each architecture to the measured step times (each has its own
        transport: gRPC variable reads for PS, collective ops for the ring), and compare with
        one link for both and with the loopback micro-benchmark's (``loopback``, measured
        here if None). Compute per sample comes from each model's ring N=1 run. ``terms``: the
        messages and bytes of a step, Lab 5's ``comm_terms`` (default the kit's reference).

        ``fit_workers``: fit on the runs with these N only (default all) and predict the
        rest: a test on runs the model has not seen. Where a fit is impossible (no run with
        communication, or step times that do not grow with bytes on a busy machine) the
        loopback link stands in, and ``notes`` says so."""
        runs = self.cost_runs()
        runs["fitted"] = runs["workers"].isin(list(fit_workers)) if fit_workers is not None else True
        loopback = loopback or costmodel.measure_loopback_link()
        notes = []

        def fit(part, what: str) -> costmodel.Link | None:
            """alpha and B; else B alone with the micro-benchmark's alpha; else None."""
            try:
                return costmodel.fit_link_to_runs(part, cores=self.cores, terms=terms)[0]
            except ValueError:
                pass
            try:
                link = costmodel.fit_link_to_runs(part, cores=self.cores, alpha_s=loopback.alpha_s, terms=terms)[0]
                notes.append(
                    f"{what}: too few runs (or too noisy) to fit alpha and B; B fitted with the loopback "
                    f"micro-benchmark's alpha"
                )
                return link
            except ValueError as e:
                notes.append(f"{what}: no link could be fitted ({e})")
                return None

        links = {}
        for arch in ARCHS:
            links[arch] = fit(runs[(runs["arch"] == arch) & runs["fitted"]], arch)
            if links[arch] is None:
                links[arch] = loopback
                notes.append(f"{arch}: the loopback micro-benchmark's link stands in")
        shared = fit(runs[runs["fitted"]], "one link for both")
        load = self.settings.get("load_per_core")
        if load is not None and load > 1:
            notes.append(
                f"the machine was busy (load {load:.1f} per core at the start): every process got a share "
                f"of the cores, and a run of more processes got more of them; step times are noisy"
            )
        return Calibration(runs, links, shared, loopback, self.cores, notes, terms)


_PREDICTED_COLUMNS = [
    "model",
    "arch",
    "workers",
    "n_ps",
    "step_s",
    "predicted_step_s",
    "images_per_s",
    "predicted_images_per_s",
    "rel_error",
]


def _predicted(cost_runs, cores, link: costmodel.Link, host: costmodel.HostCost | None, terms):
    """The cost model's step time and images/s beside the measured ones, one row a run: a live
    sweep and a recorded one predict alike."""
    return costmodel.predict_runs(cost_runs, link, cores=cores, terms=terms, host=host)[_PREDICTED_COLUMNS]


@dataclass
class Calibration:
    """The cost model calibrated on a sweep: per-model compute, a link per architecture."""

    runs: object  # DataFrame: Scaling.cost_runs()
    links: dict  # arch -> Link fitted to that architecture's runs
    shared: costmodel.Link | None  # one link fitted to all runs
    loopback: costmodel.Link  # the TCP micro-benchmark's
    cores: int | None
    notes: list = field(default_factory=list)
    terms: object = None  # the communication terms it was fitted with (None: the kit's reference)

    def per_sample_s(self) -> dict[str, float]:
        return self.runs.groupby("model")["per_sample_s"].first().to_dict()

    def model(self, arch: str, model: str, link: costmodel.Link | None = None) -> costmodel.CostModel:
        return costmodel.CostModel(
            self.per_sample_s()[model], link or self.links[arch], cores=self.cores, terms=self.terms
        )

    def host_cost(self) -> costmodel.HostCost:
        """gamma per architecture from these runs: what their steps took per critical-path byte
        beyond compute and the loopback micro-benchmark's wire (:func:`labkit.learning.costmodel.fit_host_cost`).
        Meaningful for runs on 127.0.0.1, where that wire is nearly free: a prediction for a
        slower link between the same hosts adds it (:meth:`Scaling.predict`)."""
        return costmodel.fit_host_cost(
            self.runs,
            self.loopback,
            cores=self.cores,
            terms=self.terms,
            source="loopback runs beyond the loopback micro-benchmark's link",
        )

    def _predict(self, links: dict):
        import pandas as pd

        parts = [
            costmodel.predict_runs(self.runs[self.runs["arch"] == a], links[a], cores=self.cores, terms=self.terms)
            for a in ARCHS
            if (self.runs["arch"] == a).any()
        ]
        return pd.concat(parts).sort_index()

    def _links(self, using: str) -> dict | None:
        if using not in ("fitted", "shared", "loopback"):
            raise ValueError(
                f"using={using!r}: choose 'fitted' (a link per architecture), 'shared' (one fitted "
                f"link for both) or 'loopback' (the micro-benchmark's)"
            )
        if using == "fitted":
            return self.links
        link = self.shared if using == "shared" else self.loopback
        return {a: link for a in ARCHS} if link is not None else None

    def errors(self, using: str = "fitted"):
        """Every run with its predicted step time and images/s, ``rel_error`` = predicted /
        measured step time - 1, and whether it was ``fitted`` on. ``using``: which link(s)."""
        links = self._links(using)
        if links is None:
            raise ValueError("no shared link could be fitted to these runs (see .notes)")
        cols = [
            "model",
            "arch",
            "workers",
            "n_ps",
            "step_s",
            "predicted_step_s",
            "images_per_s",
            "predicted_images_per_s",
            "rel_error",
            "fitted",
        ]
        return self._predict(links)[cols]

    def _with_comm(self, frame):
        """Leave out each model's ring N=1 run: it is the compute baseline, exact by construction."""
        return frame[~((frame["arch"] == "ring") & (frame["workers"] == 1))]

    def comparison(self):
        """Median and largest |relative error| of the predicted step times, per calibration:
        a link per architecture, one link for both, the loopback micro-benchmark's link."""
        import pandas as pd

        options = {
            "a link per architecture (fitted)": "fitted",
            "one link for both (fitted)": "shared",
            "loopback micro-benchmark": "loopback",
        }
        rows = []
        for name, using in options.items():
            links = self._links(using)
            if links is None:
                continue
            comm = self._with_comm(self._predict(links))
            err = comm["rel_error"].abs()
            for arch in ARCHS:
                link = links[arch]
                rows.append(
                    {
                        "calibration": name,
                        "arch": arch,
                        "alpha_s": link.alpha_s,
                        "bandwidth_bytes_per_s": link.bandwidth,
                        "median_abs_error": float(err[comm["arch"] == arch].median()),
                        "max_abs_error": float(err[comm["arch"] == arch].max()),
                    }
                )
            rows.append(
                {
                    "calibration": name,
                    "arch": "both",
                    "median_abs_error": float(err.median()),
                    "max_abs_error": float(err.max()),
                }
            )
        return pd.DataFrame(rows)

    def fit_error(self) -> dict:
        """The calibrated model's error on the runs with communication: median and max
        |predicted / measured step time - 1|, overall, per architecture, on the runs held out
        of the fit (if any), and with the loopback micro-benchmark's link instead (a
        prediction that saw no run at all)."""
        e = self._with_comm(self.errors())
        err = e["rel_error"].abs()
        loop = self._with_comm(self.errors("loopback"))["rel_error"].abs()
        out = {
            "median_abs_error": float(err.median()),
            "max_abs_error": float(err.max()),
            "runs": int(len(e)),
            "held_out_median_abs_error": float(err[~e["fitted"]].median()) if (~e["fitted"]).any() else None,
            "loopback_median_abs_error": float(loop.median()),
        }
        for arch in ARCHS:
            part = e[e["arch"] == arch]["rel_error"].abs()
            out[f"{arch}_median_abs_error"] = float(part.median()) if len(part) else math.nan
            link = self.links[arch]
            out[f"{arch}_alpha_s"], out[f"{arch}_bandwidth_bytes_per_s"] = link.alpha_s, link.bandwidth
        out["loopback_alpha_s"], out["loopback_bandwidth_bytes_per_s"] = self.loopback.alpha_s, self.loopback.bandwidth
        return out

    def curves(self, workers=None):
        """Predicted images/s and speed-up (over the same architecture at N=1) for every model
        and architecture of the sweep, N = 1..``workers`` (default the sweep's largest N)."""
        import pandas as pd

        workers = list(workers or range(1, int(self.runs["workers"].max()) + 1))
        frames = []
        for (model, arch), part in self.runs.groupby(["model", "arch"]):
            first = part.iloc[0]
            cm = self.model(arch, model)
            shards = first["shards"] if arch == "ps" and isinstance(first["shards"], (list, tuple)) else None
            rows = []
            for n in workers:
                t = cm.t_step(arch, first["model_bytes"], n, int(first["batch"]), int(first["n_ps"]), shards)
                rows.append(
                    {"model": model, "arch": arch, "workers": n, "step_s": t, "images_per_s": n * first["batch"] / t}
                )
            df = pd.DataFrame(rows)
            df["speedup"] = df["images_per_s"] / df["images_per_s"].iloc[0] if workers[0] == 1 else math.nan
            frames.append(df)
        return pd.concat(frames, ignore_index=True)

    def crossover(self, model_bytes=None, workers=range(2, 7)):
        """Where the ring beats PS on this machine, by the fitted links: t_ps / t_ring of the
        communication over model size x N (the frame :func:`labkit.measure.plots.crossover_map` draws),
        one network named "this machine (fitted)"."""
        import numpy as np
        import pandas as pd

        sizes = model_bytes if model_bytes is not None else np.logspace(3, 9.5, 60)
        rows = []
        for n in workers:
            for m in sizes:
                t_ps = self.links["ps"].seconds(*costmodel.critical_path("ps", m, n, terms=self.terms))
                t_ring = self.links["ring"].seconds(*costmodel.critical_path("ring", m, n, terms=self.terms))
                rows.append(
                    {
                        "network": "this machine (fitted)",
                        "workers": n,
                        "model_bytes": float(m),
                        "t_ps": t_ps,
                        "t_ring": t_ring,
                        "ring_speedup": t_ps / t_ring if t_ring else math.inf,
                        "winner": "ring" if t_ring < t_ps else "ps",
                    }
                )
        return pd.DataFrame(rows)

    def crossover_bytes(self, workers=range(2, 7)) -> dict[int, float]:
        """Per N, the model size above which the ring communicates faster than one ps on this
        machine's fitted links (t_comm is linear in M for each: solve a_ps + b_ps M = a_r + b_r M)."""

        def line(arch: str, n: int) -> tuple[float, float]:  # t_comm = a + b * M
            t1, t2 = (
                self.links[arch].seconds(*costmodel.critical_path(arch, m, n, terms=self.terms)) for m in (1.0, 2.0)
            )
            return t1 - (t2 - t1), t2 - t1

        out = {}
        for n in workers:
            (a_ps, b_ps), (a_r, b_r) = line("ps", n), line("ring", n)
            if a_r <= a_ps and b_r <= b_ps:
                out[n] = 0.0
            elif b_r >= b_ps:
                out[n] = math.inf
            else:
                out[n] = max(0.0, (a_r - a_ps) / (b_ps - b_r))
        return out


def lab_workers(workers) -> list[int]:
    """Lab 5's worker counts, checked before its first run: N = 1 (each model's compute per
    image, the speed-ups' baseline; added when missing), N = 2 (run before the predictions that
    section 2 sets beside it) and a largest N of 3 or more, run after them and held out of the
    cost model's fit. With N = 1 and 2 alone, the ring's two N = 2 runs fix its alpha and B
    exactly and no run is left to test the fit. Returns the counts sorted, 1 included."""
    given = list(positive_ints("workers", workers, "[1, 2, 3]"))
    counts = sorted(set(given) | {1})
    if 2 not in counts or counts[-1] < 3:
        raise ValueError(
            f"workers={given}: Lab 5 needs N = 2 and a largest N of 3 or more (N = 1 is added), e.g. "
            "workers=[1, 2, 3]: N = 2 runs before your predictions, and the largest N runs after them and is "
            "held out of the cost model's fit, which predicts it unseen; with N = 1 and 2 alone the ring's "
            "two N = 2 runs fix its alpha and B exactly, and no run is left to test the fit"
        )
    return counts


def scaling(
    workers=(1, 2, 3),
    models=MODELS,
    archs=ARCHS,
    *,
    batch_size: int = 64,
    steps: int = 16,
    epochs: int = 2,
    n_ps: int = 1,
    ps_sync: bool = True,
    hosts=None,
    train_limit: int | None = None,
    test_limit: int | None = 1000,
    lr: float = 0.05,
    seed: int = 0,
    progress: bool = True,
    log=print,
    timeout: float = 600,
    **kwargs,
) -> Scaling:
    """Run every (N, model, architecture), N=1 always included (the baseline of the speed-ups
    and of the cost model's compute): one cluster per (architecture, N), whose models run one
    after the other in it, each from scratch (``labkit.experiments.shared``). ``log`` gets one
    line per run; ``progress`` shows a bar over runs. ``timeout``: seconds one run may take
    (the first of a cluster: from when its servers are up). ``Scaling.extend`` adds more N later."""
    workers = tuple(sorted(set(positive_ints("workers", workers)) | {1}))
    models = (models,) if isinstance(models, str) else tuple(models)  # "mlp" is one model, not three
    archs = (archs,) if isinstance(archs, str) else tuple(archs)
    for a in archs:
        costargs.check_arch(a)
    if not models or not all(isinstance(m, str) and m for m in models):
        raise ValueError(
            f"models must be model names of labkit.learning.models, e.g. ('lenet5', 'mlp'); got {models!r}"
        )
    local = not hosts
    load = os.getloadavg()[0] / usable_cores() if local and hasattr(os, "getloadavg") else None
    if load is not None and load > 1 and log:
        log(
            f"note: this machine is busy (load {load:.1f} per core): the tasks share the cores with other "
            f"programs, so step times will be noisy"
        )
    result = Scaling(
        settings={
            "workers": [],
            "models": list(models),
            "archs": list(archs),
            "batch_size": batch_size,
            "steps": steps,
            "epochs": epochs,
            "n_ps": n_ps,
            "ps_sync": ps_sync,
            "lr": lr,
            "seed": seed,
            "hosts": str(hosts) if hosts else None,
            "cores": usable_cores() if local else None,
            "load_per_core": load,
        }
    )
    result._run_settings = dict(
        batch_size=batch_size,
        steps=steps,
        epochs=epochs,
        n_ps=n_ps,
        ps_sync=ps_sync,
        hosts=hosts,
        train_limit=train_limit,
        test_limit=test_limit,
        lr=lr,
        seed=seed,
        **kwargs,
    )
    result._base = paths.run_name("scaling")
    return result.extend(workers, progress=progress, log=log, timeout=timeout)


def _extend(sweep: Scaling, workers, progress: bool, log, timeout: float) -> Scaling:
    """Run the sweep's models and architectures at each N of ``workers`` (see :meth:`Scaling.extend`)."""
    settings, base = sweep._run_settings, sweep._base
    models, archs = sweep.settings["models"], sweep.settings["archs"]
    runs = {}
    with tqdm(total=len(workers) * len(models) * len(archs), desc="runs", unit="run", disable=not progress) as bar:
        for n in workers:
            for a in archs:
                configs = [
                    shared.Config(
                        f"{m}-{a}-w{n}",
                        f"{m} {a} N={n}",
                        {
                            "model": m,
                            "tensorboard_dir": str(paths.run_dir(LAB, f"{base}/{m}-{a}-w{n}") / "tensorboard"),
                        },
                    )
                    for m in models
                ]

                def make(a=a, n=n, **shared_args):
                    return make_cluster(a, models[0], n, run=f"{base}/cluster-{a}-w{n}", **settings, **shared_args)

                results = shared.run(make, configs, timeout=timeout, bar=bar, static=False)
                for m, res in zip(models, results):
                    run = runs[(n, m, a)] = Run(a, m, n, settings["n_ps"] if a == "ps" else 0, res)
                    if log:
                        tr = run.train
                        log(
                            f"{run.label:<24} {tr['images_per_s']:8.0f} img/s  "
                            f"{n * settings['batch_size'] / tr['images_per_s']:.3f} s/step  loss "
                            f"{tr['history'][0]['train_loss']:.3f} -> {tr['history'][-1]['train_loss']:.3f}  "
                            f"{run.result.wall_s:.0f} s"
                        )
    sweep.runs += [runs[(n, m, a)] for n in workers for m in models for a in archs]
    sweep.settings["workers"] = sorted(set(sweep.settings["workers"]) | set(workers))
    return sweep


# ------------------------------------------------------------------------------ report 003, measured


@dataclass
class Emulated:
    """Runs of one model over emulated links (:func:`emulated`): the sweep, the link as its
    micro-benchmark measured it, and what crossed each node's NIC."""

    sweep: Scaling
    link: costmodel.Link  # alpha and B of the emulated link (netem.measure_link), measured apart from the runs
    link_name: str

    @property
    def steps(self) -> int:
        return self.sweep.settings["steps"]

    def table(self):
        """images/s, seconds per step, speed-up over the same architecture at N=1, bytes per step."""
        return self.sweep.table()[["arch", "workers", "step_s", "images_per_s", "speedup", "bytes_per_step"]]

    def nodes(self):
        """Per run and node, what crossed the node's NIC over the chief's training window, per step
        (every step counted, the untimed first one too), and the tasks on the node."""
        import pandas as pd

        from labkit.measure import summaries
        from labkit.distributed.launchers.netns import task_nodes

        rows = []
        for r in self.sweep.runs:
            samples = r.result.samples()
            marks = [m for m in samples.attrs["marks"] if m.get("task") == r.chief.name]
            rates = summaries.node_rates(samples, task_nodes(r.result), "train start", "train end", marks=marks)
            for node, row in rates.iterrows():
                rows.append(
                    {
                        "arch": r.arch,
                        "workers": r.workers,
                        "node": node,
                        "tasks": row["tasks"],
                        "recv_bytes_per_s": row["recv_bytes_per_s"],
                        "sent_bytes_per_s": row["sent_bytes_per_s"],
                        "bytes_per_step": row["bytes_per_s"] * row["duration_s"] / self.steps,
                    }
                )
        return pd.DataFrame(rows)

    def predict(self, host: costmodel.HostCost | None = None, terms=None):
        """Every run with communication, its step time predicted from the ring N=1 run's compute,
        the emulated link's alpha and B and ``host`` (gamma, from loopback runs; None: the link
        alone), none of them fitted to these runs; ``link_only_rel_error``: the same without gamma."""
        with_gamma = self.sweep.predict(self.link, host=host, terms=terms)
        with_gamma["link_only_rel_error"] = self.sweep.predict(self.link, terms=terms)["rel_error"]
        return with_gamma[~((with_gamma["arch"] == "ring") & (with_gamma["workers"] == 1))]

    def curves(self, host: costmodel.HostCost | None = None, terms=None, workers=range(1, 7)):
        """The cost model's images/s and speed-up (over the same architecture at N=1), per
        architecture: on these nodes (``where`` "these nodes": each with its CPU quota, or all
        sharing the machine's cores where there was none, as the runs did) and on nodes with a
        full core each (``where`` "a core per node", report 003's setting; compute per sample
        scaled by the quota), N = 1..``workers``."""
        import pandas as pd

        runs = self.sweep.cost_runs()
        first = runs.iloc[0]
        quota = self.sweep.settings.get("cpus_per_node")  # a node's compute at a full core: quota x as fast
        full_core_s = float(first["per_sample_s"]) * (quota if quota else 1.0)
        frames = []
        for where, cores, per_sample in (
            ("these nodes", self.sweep.cores, float(first["per_sample_s"])),
            ("a core per node", None, full_core_s),
        ):
            for arch in ARCHS:
                cm = costmodel.CostModel(per_sample, self.link, cores=cores, terms=terms, host=host)
                df = cm.predict(arch, float(first["model_bytes"]), list(workers), int(first["batch"]))
                df["where"] = where
                frames.append(df)
        return pd.concat(frames, ignore_index=True)

    def growth(self, host: costmodel.HostCost | None = None, terms=None) -> dict:
        """Per architecture, images/s at the largest N over images/s at the next one down,
        measured and predicted: about 1 where the speed-up has levelled off."""
        t = self.table().set_index(["arch", "workers"])["images_per_s"]
        p = self.sweep.predict(self.link, host=host, terms=terms).set_index(["arch", "workers"])
        p = p["predicted_images_per_s"]
        n = sorted(self.sweep.settings["workers"])
        if len(n) < 2:
            return {}
        hi, lo = n[-1], n[-2]
        return {
            arch: {
                "from": lo,
                "to": hi,
                "measured": float(t[(arch, hi)] / t[(arch, lo)]),
                "predicted": float(p[(arch, hi)] / p[(arch, lo)]),
            }
            for arch in ARCHS
        }

    def fit_error(self, host: costmodel.HostCost | None = None, terms=None) -> dict:
        """Per architecture, the median |predicted / measured step time - 1| with gamma and with
        the link alone; gamma, alpha and B as used."""
        e = self.predict(host, terms)
        out = {}
        for arch in ARCHS:
            part = e[e["arch"] == arch]
            out[arch] = float(part["rel_error"].abs().median())
            out[f"link_only_{arch}"] = float(part["link_only_rel_error"].abs().median())
            out[f"gamma_{arch}_s_per_byte"] = getattr(host, arch) if host else 0.0
        out["all"] = float(e["rel_error"].abs().median())
        out["alpha_s"], out["bandwidth_bytes_per_s"] = self.link.alpha_s, self.link.bandwidth
        return out

    def records(self, host: costmodel.HostCost | None = None, terms=None) -> dict:
        """What the notebook records: the runs, the per-node traffic, the fit, the growth at the largest N."""
        return {
            "emulated_scaling": self.table(),
            "emulated_node_rates": self.nodes(),
            "emulated_fit_error": self.fit_error(host, terms),
            "emulated_growth": self.growth(host, terms),
            "emulated_settings": {
                "link": self.link_name,
                **{
                    k: self.sweep.settings.get(k)
                    for k in ("model", "workers", "steps", "batch_size", "cores", "cpus_per_node", "quota_note")
                },
            },
        }

    def record(self, host: costmodel.HostCost | None = None, terms=None) -> dict:
        """``records(...)``, each recorded in the notebook (``labkit.notebook.record``); returns them."""
        from labkit.notebook.record import record

        out = self.records(host, terms)
        for name, value in out.items():
            record(name, value)
        return out


def node_quota(cpus_per_node, nodes: int, log=print) -> tuple[float | None, str]:
    """Each emulated node's CPU quota in cores, and what it means: ``"auto"`` splits the machine's
    cores evenly over the ``nodes`` of the largest cluster (N nodes then have N times one node's
    compute), a number is taken as given, None means none; where quotas cannot be set
    (``labkit.infra.cpuquota.availability``) ``log`` says why and the nodes share the cores."""
    from labkit.infra import cpuquota

    if cpus_per_node is None:
        return None, "no CPU quota: the nodes share this machine's cores"
    version, why = cpuquota.availability()
    if version is None:
        if log:
            log(f"note: {why}")
        return None, why
    cpus = usable_cores() / nodes if cpus_per_node == "auto" else float(cpus_per_node)
    return cpus, (
        f"each node capped at {cpus:g} of this machine's {usable_cores()} cores (cgroup {version}), so "
        f"N nodes have N times one node's compute, as separate machines of {cpus:g} core each would"
    )


def emulated(
    link: str = "100mbit",
    model: str = "cifar_cnn",
    workers=(1, 2, 3),
    *,
    batch_size: int = 32,
    steps: int = 12,
    epochs: int = 2,
    test_limit: int = 256,
    cpus_per_node=None,
    timeout: float = 600,
    progress: bool = True,
    log=print,
) -> Emulated | None:
    """``model`` under both architectures at each N of ``workers`` (1 always), each run a cluster
    on emulated nodes whose links carry ``link`` each way (``labkit.distributed.launchers.netns``): the PS
    puts the ps and the chief on node0 and worker i on node i+1, so every pull and push crosses
    the ps's link; the ring puts worker i on node i. ``cpus_per_node``: each node's CPU quota
    (``node_quota``; "auto": the cores split over the largest cluster's N + 1 nodes), so a node
    computes as fast at every N; None (the default until the labs' runs are measured with it):
    the nodes share this machine's cores, as tasks on 127.0.0.1 do (the cost model knows: ``cores``). The link's alpha and B are measured
    apart, by its micro-benchmark. Where links cannot be emulated here, ``log`` says why and
    this returns None."""
    from labkit.infra import netem
    from labkit.distributed.launchers.netns import cluster_args

    if not netem.usable(link, log=log or (lambda _m: None)):
        return None
    ns = sorted(set(positive_ints("workers", workers)) | {1})
    cpus, quota_note = node_quota(cpus_per_node, max(ns) + 1, log)
    if log:
        log(quota_note)
    plan = [(arch, n) for n in ns for arch in ("ring", "ps")]
    base = paths.run_name("emulated")
    runs = []
    with tqdm(total=len(plan), desc=f"emulated {link}", unit="run", disable=not progress) as bar:
        for arch, n in plan:
            run = run_one(
                arch,
                model,
                n,
                batch_size=batch_size,
                steps=steps,
                epochs=epochs,
                test_limit=test_limit,
                timeout=timeout,
                run=f"{base}/{model}-{arch}-w{n}",
                **cluster_args(link, n + 1, cpus),
            )
            runs.append(run)
            bar.update()
            if log:
                log(f"{run.label:<24} {run.train['images_per_s']:8.1f} img/s  {run.result.wall_s:.0f} s")
    sweep = Scaling(
        runs,
        settings={
            "link": link,
            "model": model,
            "workers": ns,
            "steps": steps,
            "batch_size": batch_size,
            "cores": None if cpus else usable_cores(),
            "cpus_per_node": cpus,
            "quota_note": quota_note,
        },
    )
    return Emulated(sweep, netem.measure_link(link), str(link))


@dataclass
class FrozenSweep:
    """An emulated sweep as the kit recorded it (``recorded_emulated``): the frames its methods
    read (``table``, ``cost_runs``, per-node bytes) instead of the runs' files, so the cost model
    can be set beside it with any ``terms`` and ``host``."""

    frames: dict
    settings: dict

    @property
    def cores(self):
        return self.settings.get("cores")

    def table(self):
        return self.frames["table"].copy()

    def cost_runs(self):
        runs = self.frames["cost_runs"].copy()
        runs["shards"] = [tuple(x) if isinstance(x, list) else None for x in runs["shards"]]
        return runs

    def predict(self, link: costmodel.Link, host: costmodel.HostCost | None = None, terms=None):
        """:meth:`Scaling.predict` of the recorded runs."""
        return _predicted(self.cost_runs(), self.cores, link, host, terms)


class RecordedEmulated(Emulated):
    """Section 10's runs as the kit recorded them on its own machine (``recorded_emulated``)."""

    def __init__(self, data: dict):
        import pandas as pd

        frames = {k: pd.DataFrame(v) for k, v in data["frames"].items()}
        super().__init__(FrozenSweep(frames, data["settings"]), costmodel.Link(**data["link"]), data["link_name"])
        self.provenance = data["provenance"]

    def nodes(self):
        return self.sweep.frames["nodes"].copy()


def emulated_recording(e: Emulated, provenance: dict) -> dict:
    """What ``recorded_emulated`` reads back: ``e``'s frames, settings and link, with ``provenance``."""
    import json

    def frame(df):
        return json.loads(df.to_json(orient="records"))

    cost = e.sweep.cost_runs()
    cost["shards"] = [list(x) if isinstance(x, (list, tuple)) else None for x in cost["shards"]]
    return {
        "provenance": provenance,
        "link_name": e.link_name,
        "link": {"alpha_s": e.link.alpha_s, "bandwidth": e.link.bandwidth, "source": e.link.source},
        "settings": {k: v for k, v in e.sweep.settings.items()},
        "frames": {"table": frame(e.sweep.table()), "cost_runs": frame(cost), "nodes": frame(e.nodes())},
    }


def recorded_emulated() -> RecordedEmulated:
    """Section 10's runs as the kit recorded them (``traces/emulated.json`` of this lab: report
    003's CNN at N = 1-3 under both architectures on emulated 100 Mbit/s links, each node under
    its CPU quota), with their ``provenance``: where links cannot be emulated, or in the
    grader's run, the section reads these."""
    return RecordedEmulated(traces.load(f"{LAB}_emulated"))


# ------------------------------------------------------------------------------ PS under failure


def ps_failure(
    workers: int = 3,
    model: str = "lenet5",
    *,
    batch_size: int = 64,
    kill_worker_after: int = 15,
    kill_ps_after: int = 15,
    worker: int = 1,
    hosts=None,
    timeout: float = 300,
    progress: bool = True,
    log=print,
    **kwargs,
) -> dict:
    """Synchronous PS on ``workers`` workers: kill ``worker:<worker>`` (SIGKILL) once the chief has
    made step ``kill_worker_after``, then the ps ``kill_ps_after`` steps later, and trace what
    ``ClusterCoordinator`` does (``labkit.wire.faults``): the steps, which worker ran each slice,
    every error the coordinator logged, and the chief's own failure. The launcher treats both
    kills as the experiment's: the cluster runs on until TensorFlow stops it.

    Returns a JSON-able dict: ``summary`` (one row per kill: ``Trace.summary``), ``steps`` and
    ``events`` (times ``t_s`` from the first traced step), ``kills``, ``failure`` (the task that
    failed, its error class and message), ``run_dir``."""
    if workers < 2:
        raise ValueError(f"workers={workers}: a worker's loss can only be survived with at least 2")
    if not 0 <= worker < workers:
        raise ValueError(f"worker={worker} is not a worker of {workers}; give 0..{workers - 1}")
    steps = kill_worker_after + kill_ps_after + 400  # enough to outlast both kills; the ps kill ends it
    c = make_cluster(
        "ps",
        model,
        workers,
        batch_size=batch_size,
        steps=steps,
        epochs=1,
        hosts=hosts,
        timeout=timeout,
        trace_steps=True,
        run=paths.run_name("ps-failure"),
        **kwargs,
    )
    kills = [(kill_worker_after, f"worker:{worker}"), (kill_worker_after + kill_ps_after, "ps:0")]
    with live.watch(c, static=False), c:
        trace = faults.inject(c, kills)
    if log:
        for row in trace.summary():
            log(
                f"killed {row['task']} after step {row['after_step']}: coordinator error "
                f"{_s(row['error_s'])} later; {row['steps_after']} steps after it"
                + (f"; {row['run_failed']} {_s(row['run_failed_s'])} after the kill" if row["run_failed"] else "")
            )
    t0 = trace.steps[0]["t"] if trace.steps else (trace.kills[0]["t"] if trace.kills else time.time())
    rel = lambda rows: [{**{k: v for k, v in r.items() if k != "t"}, "t_s": r["t"] - t0} for r in rows]  # noqa: E731
    failure = None
    if trace.failure is not None:
        failure = {k: trace.failure[k] for k in ("task", "returncode", "error", "message")}
        failure["t_s"] = trace.failure["t"] - t0
        failure["log_tail"] = "\n".join((trace.failure["log_tail"] or "").splitlines()[-12:])
    return {
        "model": model,
        "workers": workers,
        "batch_size": batch_size,
        "summary": trace.summary(),
        "steps": rel(trace.steps),
        "kills": rel(trace.kills),
        "events": rel(trace.events),
        "failure": failure,
        "run_dir": str(c.run_dir),
    }


def recorded_failure() -> dict:
    """The ``ps_failure`` trace the kit ships (``traces/ps_failure.json`` of this lab): what
    :func:`ps_failure` returns (``summary``, ``steps``, ``kills``, ``events``, ``failure``; no
    ``run_dir``), recorded by the kit's own run, with its ``provenance`` (the call, labkit's
    commit, TensorFlow's version, the cores and the load). Section 11 reads it where it does not
    kill tasks itself (the grader's runs)."""
    return traces.load(f"{LAB}_ps_failure")


def _s(seconds) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


# ------------------------------------------------------------------------------ report 003


def report_003(workers=range(1, 7), terms=None):
    """Report 003's models on 1 and 10 Gb/s: predicted curves (:func:`costmodel.report_003_curves`),
    the crossover grid over model size x N, and the crossover records. ``terms``: Lab 5's
    ``comm_terms`` (default the kit's reference)."""
    import numpy as np

    workers = list(workers)
    curves = costmodel.report_003_curves(workers, terms=terms)
    nets = list(costmodel.NETWORKS.values())
    grid = costmodel.crossover_map(np.logspace(3, 9.5, 60), [n for n in workers if n >= 2], nets, terms=terms)
    marks = {m.name: m.model_bytes for m in costmodel.REPORT_003_MODELS.values()}
    crossover = {
        net.source: {str(n): costmodel.crossover_model_bytes(n, net, terms=terms) for n in workers if n >= 2}
        for net in nets
    }
    at_max = (
        curves[curves["workers"] == max(workers)]
        .pivot_table(index=["model", "network"], columns="arch", values="speedup")
        .add_suffix("_speedup")
    )
    return {
        "curves": curves,
        "grid": grid,
        "marks": marks,
        "crossover_model_bytes": crossover,
        "speedup_at_max": at_max.reset_index(),
    }


# ------------------------------------------------------------------------------ the grader's calibration


def load_sweep(folder, cores: int | None = None) -> Scaling:
    """A finished sweep read back from its folder (``runs/lab5/scaling-<time>``): one ``Run`` per
    ``<model>-<arch>-w<N>`` folder with a ``cluster.json`` (the configurations' own folders; the
    clusters' ``cluster-<arch>-w<N>`` folders hold their processes, not a run)."""
    import re

    runs = []
    for sub in sorted(Path(folder).iterdir()):
        m = re.fullmatch(r"(.+)-(ps|ring)-w(\d+)", sub.name)
        if m and m.group(1) != "cluster" and (sub / "cluster.json").is_file():  # cluster-<arch>-w<N>: the tasks
            result = ClusterResult.load(sub)
            arch = m.group(2)
            n_ps = sum(1 for t in result if t.name.startswith("ps:")) if arch == "ps" else 0
            runs.append(Run(arch, m.group(1), int(m.group(3)), n_ps, result))
    if not runs:
        raise ValueError(f"{folder} holds no run of a sweep (<model>-<arch>-w<N>/cluster.json)")
    workers = sorted({r.workers for r in runs})
    return Scaling(runs, settings={"workers": workers, "models": sorted({r.model for r in runs}), "cores": cores})


def reference_held_out_error(sweep: Scaling, loopback: costmodel.Link, held_out: int | None = None) -> float | None:
    """The kit's own cost model (the reference critical path), fitted to ``sweep``'s runs below
    ``held_out`` (default its largest N) and predicting those at it: the median |predicted /
    measured step time - 1| there. What any answer's held-out error is judged against: it
    carries the load these very runs met, which no fixed bound can."""
    n = held_out or max(sweep.settings["workers"])
    fit_on = [w for w in sweep.settings["workers"] if w < n]
    return sweep.calibrate(loopback=loopback, fit_workers=fit_on).fit_error()["held_out_median_abs_error"]


# ------------------------------------------------------------------------------ the traces it ships


def record_emulated() -> dict:
    """Section 10's runs, recorded again (``traces/emulated.json``)."""
    from labkit.experiments.traces import recorder

    e = emulated("100mbit", "cifar_cnn", (1, 2, 3), steps=12, cpus_per_node="auto", progress=False)
    if e is None:
        raise RuntimeError("links cannot be emulated here (see above); nothing recorded")
    call = f"{__package__}.experiment.emulated('100mbit', 'cifar_cnn', (1, 2, 3), steps=12, cpus_per_node='auto')"
    return emulated_recording(e, recorder.provenance(call))


def record_ps_failure() -> dict:
    """Section 11's failure demo, recorded again (``traces/ps_failure.json``)."""
    from labkit.experiments.traces import recorder

    out = ps_failure(3, "lenet5", progress=False)
    keep = ("model", "workers", "batch_size", "summary", "steps", "kills", "events", "failure")
    return {
        "provenance": recorder.provenance(f"{__package__}.experiment.ps_failure(3, 'lenet5')"),
        **{k: out[k] for k in keep},
        "_run_dir": out["run_dir"],
    }


RECORDERS = {"emulated": record_emulated, "ps_failure": record_ps_failure}  # python -m labkit.labs.lab5.experiment NAME

if __name__ == "__main__":
    import sys

    from labkit.experiments.traces import recorder

    sys.exit(recorder.main(LAB, RECORDERS))
