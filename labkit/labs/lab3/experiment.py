"""Lab 3: sparse logistic regression at click-through scale, profiled, on a PS cluster, swept.

    prof = profile_ops(features=(10_000, 1_000_000, 33_762_578), batches=(10, 100))
    speedups(prof); trace_summary("dense_per_example", 1_000_000, 10)
    exp = train(["sync:100", "async:100"], workers=2, samples=200_000)
    exp.summary(); exp.curves(); exp.bottlenecks(); exp.verdicts(); exp.links("sync b100")
    exp.record(profile=prof, sweep=sweep, artifacts=exp.save_weights("artifacts"))

``train`` starts one cluster of ``labkit.tasks.ps_sparse_lr`` processes (1 ps + N workers) that
does the listed runs one after the other, from zero weights each time, and returns an
``Experiment`` (a ``labkit.experiments.Sweep``). More in docs/internals.md, "Lab 3's experiment".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from labkit.wire import spec as cluster, events
from labkit import experiments
from labkit.distributed import live
from labkit.measure import scalars
from labkit.experiments import function_source, positive_ints
from labkit.experiments.sync_rounds import round_source
from labkit.distributed.launch import Cluster
from labkit.measure.progress import tqdm
from labkit.wire.results import ClusterResult
from labkit.measure.sockets import step_bytes

LAB = "lab3"
PROGRAM = "sparse_lr"
METHODS = ("sparse", "dense", "dense_per_example")


# ------------------------------------------------------------------------------ 1. op profile


def _batch(num_features: int, batch: int, seed: int):
    from labkit.datasets import clickdata as cd
    from labkit.learning import sparse

    return sparse.csr_to_sparse(cd.generate(cd.ClickSpec(num_features=int(num_features), seed=seed), batch).data)


def profile_ops(
    features=(10_000, 1_000_000, 33_762_578),
    batches=(10, 100),
    methods=METHODS,
    *,
    gradient=None,
    per_example_limit: float = 5e7,
    seed: int = 0,
    threads: int = 1,
    progress: bool = True,
):
    """Step time and memory of one SGD step, dense vs sparse gradient, on the same click batch.

    One row per (num_features, batch, method): ``step_ms`` (median of untraced
    ``Session.run`` calls), ``alloc_bytes`` (bytes the step's ops allocate, from TF's
    trace), ``nnz``, ``unique`` features, ``weights_bytes``. ``dense_per_example`` (report
    001 Table 1: a [num_features, batch] matrix first) runs only where that matrix is at
    most ``per_example_limit`` bytes. ``gradient``: a ``(w, x, y) -> (loss, IndexedSlices)``
    function for the sparse step (the one you wrote); default ``labkit.learning.sparse``'s."""
    import numpy as np
    import pandas as pd

    from labkit.learning import sparse

    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"methods {bad} unknown; choose from {METHODS}")
    features = positive_ints("features", features, "[10_000, 1_000_000]")
    batches = positive_ints("batches", batches, "[10, 100]")
    plan = [
        (f, b, m)
        for f in features
        for b in batches
        for m in methods
        if m != "dense_per_example" or f * b * 4 <= per_example_limit
    ]
    rows = []
    with tqdm(plan, desc="op profile", unit="config", disable=not progress) as bar:
        for f, b, m in bar:
            bar.set_postfix_str(f"{m}, {f:,} features, batch {b}")
            x, y = _batch(f, b, seed)
            sparse_step = m == "sparse"
            runs = 30 if sparse_step else max(3, min(20, int(2e8 // (4 * f * (b if m == "dense_per_example" else 1)))))
            r = sparse.step_cost(
                m,
                f,
                x,
                y,
                runs=runs,
                warmup=1 if f > 5_000_000 else 2,
                threads=threads,
                gradient=gradient if sparse_step else None,
            )
            rows.append(
                {
                    "num_features": f,
                    "batch": b,
                    "method": m,
                    "nnz": r["nnz"],
                    "unique": int(np.unique(x.indices.numpy()[:, 1]).size),
                    "step_ms": r["step_ms"],
                    "alloc_bytes": r["alloc_bytes"],
                    "weights_bytes": 4 * f,
                    "runs": runs,
                }
            )
    return pd.DataFrame(rows)


def speedups(profile):
    """Per (num_features, batch): dense and sparse step time and memory, and their ratios."""
    wide = profile.pivot_table(index=["num_features", "batch"], columns="method", values=["step_ms", "alloc_bytes"])
    out = wide["step_ms"].rename(columns=lambda m: f"{m}_ms")
    out = out.join(wide["alloc_bytes"].rename(columns=lambda m: f"{m}_alloc_bytes"))
    out["speedup"] = out["dense_ms"] / out["sparse_ms"]
    out["memory_ratio"] = out["dense_alloc_bytes"] / out["sparse_alloc_bytes"]
    return out


def trace_summary(
    method: str,
    num_features: int,
    batch: int,
    *,
    top: int = 10,
    trace_path=None,
    gradient=None,
    seed: int = 0,
    threads: int = 1,
):
    """The per-op profile of one step (report 001 Table 1): the ``top`` ops by time, with
    their output shapes and bytes allocated; ``trace_path`` also writes a Chrome trace."""
    from labkit.learning import sparse

    x, y = _batch(num_features, batch, seed)
    if trace_path is not None:
        Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
    frame = sparse.op_profile(
        method,
        int(num_features),
        x,
        y,
        runs=3,
        threads=threads,
        trace_path=trace_path,
        gradient=gradient if method == "sparse" else None,
    )
    frame = frame.drop(columns=["method", "num_features"])
    frame["share"] = frame["ms"] / frame["ms"].sum()
    return frame.sort_values("ms", ascending=False).head(top).reset_index(drop=True)


# ------------------------------------------------------------------------------ 2-4. cluster runs


def parse_runs(runs) -> list[tuple[str, int]]:
    """``["sync:100", ...]`` -> ``[("sync", 100), ...]``, checked before any process starts."""
    from labkit.tasks.ps_sparse_lr import parse_runs as parse

    runs = [runs] if isinstance(runs, str) else list(runs)
    return [(r.mode, r.batch_size) for r in parse(runs)]


def make_cluster(
    runs,
    *,
    workers: int = 2,
    hosts=None,
    data: str = "click",
    num_features: int = 1_000_000,
    train_rows: int = 200_000,
    test_rows: int = 10_000,
    samples: int = 200_000,
    learning_rate: float = 0.5,
    eval_every: int = 20_000,
    seed: int = 0,
    click_seed: int = 0,
    save_weights: bool = True,
    run: str | None = None,
    timeout: float = 1800,
    sample_interval: float = 0.25,
    gradient=None,
    sync_round=None,
    **cluster_kwargs,
) -> Cluster:
    """A (not yet started) cluster of 1 ps + ``workers`` doing ``runs`` in order.

    ``hosts``: a hosts file (or list of hosts); empty or None: 127.0.0.1. ``gradient``: the
    notebook's ``sparse_lr_gradient``, which the workers train with, and ``sync_round``, Lab 2's
    round, which builds the sync runs' round (defaults: the kit's references, which the student
    kit does not have). ``cluster_kwargs`` go to the ``Cluster``
    (e.g. ``labkit.distributed.launchers.netns.cluster_args(link, nodes)``: emulated links)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    plan = parse_runs(runs)
    spec = cluster.build(hosts=hosts or None, ps=1, workers=workers)
    return experiments.make_cluster(
        LAB,
        PROGRAM,
        spec,
        name=PROGRAM,
        run=run,
        timeout=timeout,
        runs=[f"{m}:{b}" for m, b in plan],
        data=data,
        num_features=num_features,
        train_rows=train_rows,
        test_rows=test_rows,
        samples=samples,
        learning_rate=learning_rate,
        eval_every=eval_every,
        seed=seed,
        click_seed=click_seed,
        save_weights=save_weights,
        sample_interval=sample_interval,
        gradient_source=gradient_source(gradient) if gradient is not None else None,
        round_source=round_source(sync_round) if sync_round is not None else None,
        **cluster_kwargs,
    )


def gradient_source(fn) -> str:
    """The source of the notebook's ``sparse_lr_gradient(w, x, y)``, for the tasks' ``--gradient-source``."""
    from labkit.tasks.ps_sparse_lr import load_gradient

    source = function_source(fn, "sparse_lr_gradient", "(w, x, y)", "gradient")
    load_gradient(source)  # what the tasks will do with it: define sparse_lr_gradient, nothing else
    return source


def train(runs, *, workers: int = 2, hosts=None, progress: bool = True, **kwargs) -> "Experiment":
    """Start the cluster under a live view, follow the chief's progress (a bar over training
    samples, moved by its ``eval`` and ``done`` events), write its TensorBoard scalars, return
    the finished ``Experiment``.

    Keyword arguments are ``make_cluster``'s. A failed task raises ``TaskFailed`` with its
    log tail; every task is stopped on the way out (also on KeyboardInterrupt)."""
    plan = parse_runs(runs)
    c = make_cluster(runs, workers=workers, hosts=hosts, **kwargs)
    samples = int(kwargs.get("samples", 200_000))
    finished: list[str] = []

    def on_event(e: events.Event) -> None:
        if not e.chief:
            return
        if isinstance(e, events.Eval):
            bar.n = min(len(finished) * samples + e.samples, bar.total)
            bar.set_postfix_str(f"{e.run}: test error {e.metrics['test_error']:.3f}")
            bar.refresh()
        elif isinstance(e, events.Done):
            finished.append(e.run)
            bar.n = min(len(finished) * samples, bar.total)
            bar.refresh()

    with (
        tqdm(total=len(plan) * samples, desc=f"{len(plan)} run(s)", unit="sample", disable=not progress) as bar,
        live.watch(c, static=False),
        c,
    ):  # the lab draws its own timeline of the tasks
        result = c.follow(on_event)
    settings = {
        "runs": [f"{m}:{b}" for m, b in plan],
        "workers": workers,
        "hosts": str(hosts) if hosts else None,
        **{k: v for k, v in kwargs.items() if k not in ("gradient", "sync_round")},  # JSON-able: functions are not
        "gradient": "notebook's sparse_lr_gradient" if kwargs.get("gradient") else "the kit's reference",
        "sync_round": "notebook's sync_round" if kwargs.get("sync_round") else "the kit's reference",
    }
    experiment = Experiment([Run(m, b, result) for m, b in plan], settings)
    experiment.write_scalars()
    return experiment


EMULATED_COLUMNS = (
    "link",
    "run",
    "local_steps",
    "s_per_1k_iterations",
    "bytes_per_step",
    "link_s_per_step",
    "link_share",
    "ps_link_in",
    "ps_link_out",
    "ps_link_busy",
    "busiest_link",
    "network_utilisation",
    "cpu_utilisation",
    "verdict",
    "detail",
)


def emulated_dense(links, *, batch_size: int = 100, samples: int = 4_000, workers: int = 2, **kwargs):
    """Report 001's dense step (``labkit.labs.lab3.dense_lr_step``), sync then async, in one
    cluster per emulated link of ``links`` (``labkit.infra.netem``, ``labkit.distributed.launchers.netns``): the
    ps and worker 0 on node0, each other worker on a node of its own.

    One row per (link, run): steps per worker, seconds per 1k iterations, bytes per worker step
    and the seconds they take at the link's rate (``link_s_per_step``; over the time per sync
    round, ``link_share``), the ps's link in each direction and busy (``Experiment.links``), and
    the kit's verdict at the run's own link (``Experiment.verdicts``). ``kwargs`` are
    ``make_cluster``'s (data, num_features, ...; ``hosts`` is the emulated nodes'). An empty
    frame where links cannot be emulated here: ``netem.usable`` says why."""
    import pandas as pd

    from labkit.infra import netem
    from labkit.labs.lab3.dense_lr_step import sparse_lr_gradient as dense
    from labkit.distributed.launchers.netns import cluster_args

    rows = []
    if netem.usable(links):
        settings = {k: v for k, v in kwargs.items() if k != "hosts"}
        for link in links:
            exp = train(
                [f"sync:{batch_size}", f"async:{batch_size}"],
                samples=samples,
                eval_every=0,
                save_weights=False,
                gradient=dense,
                progress=False,
                workers=workers,
                **settings,
                **cluster_args(link, workers),
            )
            rows += _emulated_rows(link, exp)
    return pd.DataFrame(rows, columns=list(EMULATED_COLUMNS))


def _emulated_rows(link: str, exp: "Experiment") -> list[dict]:
    """``emulated_dense``'s rows for one link's cluster."""
    from labkit.infra import netem
    from labkit.distributed.launchers.netns import task_nodes

    rate = netem.parse_link(link).bytes_per_s
    table, verdicts, frame = exp.summary(), exp.verdicts(), exp.samples()  # verdicts: the run's own link rate
    ps_node = task_nodes(exp.result)["ps:0"]
    rows = []
    for label in exp.labels:
        ps_link = exp.links(label, frame).loc[ps_node]
        row, verdict = table.loc[label], verdicts.loc[label]
        link_s = row["bytes_per_step"] / rate
        rows.append(
            {
                "link": link,
                "run": label,
                "local_steps": row["local_steps"],
                "s_per_1k_iterations": row["s_per_1k_iterations"],
                "bytes_per_step": row["bytes_per_step"],
                "link_s_per_step": link_s,
                "link_share": link_s / (row["s_per_1k_iterations"] / 1e3) if label.startswith("sync") else math.nan,
                "ps_link_in": ps_link["in_share"],
                "ps_link_out": ps_link["out_share"],
                "ps_link_busy": ps_link["busy_share"],
                "busiest_link": verdict["busiest_link"],
                "network_utilisation": verdict["network_utilisation"],
                "cpu_utilisation": verdict["cpu_utilisation"],
                "verdict": verdict["verdict"],
                "detail": verdict["detail"],
            }
        )
    return rows


@dataclass
class Run(experiments.Run):
    """One configuration of the cluster's plan: mode and batch size. Every run of an
    ``Experiment`` shares its cluster's ``result``; each task's result file holds one entry
    per run (``runs``), labelled ``"<mode> b<batch>"``."""

    mode: str
    batch_size: int
    result: ClusterResult

    @property
    def label(self) -> str:
        return f"{self.mode} b{self.batch_size}"

    def entries(self) -> dict[str, dict]:
        """task -> that task's result entry for this run."""
        return {t.name: e for t in self.result for e in (t.result or {}).get("runs", []) if e["label"] == self.label}


@dataclass
class Experiment(experiments.Sweep):
    """One cluster's runs (``find(mode, batch_size)``), with the lab's tables."""

    _optimum: dict | None = field(default=None, repr=False)

    @property
    def result(self) -> ClusterResult:
        """The cluster's result, which every run shares."""
        return self.runs[0].result

    @property
    def run_dir(self) -> Path:
        return self.result.run_dir

    @property
    def plan(self) -> list[tuple[str, int]]:
        return [(r.mode, r.batch_size) for r in self.runs]

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.runs]

    def entries(self, label: str) -> dict[str, dict]:
        """task -> that task's result entry for run ``label``."""
        out = next((r.entries() for r in self.runs if r.label == label), {})
        if not out:
            raise KeyError(f"no run {label!r} in {self.run_dir}; runs are {self.labels}")
        return out

    def trainers(self, label: str) -> dict[str, dict]:
        return {k: v for k, v in self.entries(label).items() if not k.startswith("ps:")}

    def chief(self, label: str) -> dict:
        """The chief's result entry for run ``label``."""
        name = self.result.chief().name
        e = self.entries(label).get(name)
        if not e or "test_accuracy" not in e.get("metrics", {}):
            raise ValueError(f"{name} of {self.run_dir} has no result for {label!r}; see its log")
        return e

    def optimum(self) -> dict | None:
        """The best achievable accuracy/log-loss on the test rows (click data), else None."""
        s = self.settings
        if s.get("data", "click") != "click":
            return None
        if self._optimum is None:
            from labkit.datasets import clickdata as cd

            spec = cd.ClickSpec(num_features=int(s.get("num_features", 1_000_000)), seed=int(s.get("click_seed", 0)))
            self._optimum = cd.optimum(spec, int(s.get("test_rows", 10_000)), "test")
        return self._optimum

    def steps(self, label: str) -> dict[str, int]:
        """Local steps of each trainer in run ``label`` (task -> steps)."""
        return {name: e["steps"]["local"] for name, e in self.trainers(label).items()}

    def summary(self):
        """One row per run: accuracy and log-loss vs the optimum, global and per-worker steps,
        seconds per 1k global steps, measured bytes per worker step vs the O(nnz) bound and
        vs the dense step."""
        import numpy as np
        import pandas as pd

        opt = self.optimum() or {}
        rows = []
        for (mode, batch), label in zip(self.plan, self.labels):
            chief, tr = self.chief(label), self.trainers(label)
            m = chief["metrics"]
            tcp = [step_bytes(e.get("traffic") or {}) for e in tr.values()]
            tcp = [v for v in tcp if v is not None]
            bound = float(np.mean([e["metrics"]["bound_bytes_per_step"] for e in tr.values()]))
            measured = float(np.mean(tcp)) if tcp else math.nan
            rows.append(
                {
                    "run": label,
                    "mode": mode,
                    "batch": batch,
                    "workers": len(tr),
                    "global_steps": max(e["steps"]["global"] for e in tr.values()),
                    "local_steps": ", ".join(str(e["steps"]["local"]) for e in tr.values()),
                    "train_s": chief["train_s"],  # the chief's evaluations left out (they stall sync)
                    "s_per_1k_iterations": m["s_per_1k_global_steps"],
                    "test_accuracy": m["test_accuracy"],
                    "test_logloss": m["test_logloss"],
                    "optimum_accuracy": opt.get("bayes_accuracy", math.nan),
                    "majority_accuracy": opt.get("majority_accuracy", math.nan),
                    "unique_per_step": float(np.mean([e["metrics"]["unique_per_step"] for e in tr.values()])),
                    "bytes_per_step": measured,
                    "bound_bytes_per_step": bound,
                    "measured_over_bound": measured / bound,
                    "dense_bytes_per_step": m["dense_bytes_per_step"],
                }
            )
        return pd.DataFrame(rows).set_index("run")

    def curves(self):
        """Test error, accuracy and log-loss every K training samples, long form: run, mode,
        batch, samples, global_step, t (s since the run started), test_*."""
        import pandas as pd

        frames = []
        for (mode, batch), label in zip(self.plan, self.labels):
            f = pd.DataFrame(self.chief(label)["series"]["eval"])
            frames.append(f.assign(run=label, mode=mode, batch=batch))
        return pd.concat(frames, ignore_index=True)

    def bytes_frame(self):
        """Measured and analytic bytes per worker step per run (for ``plots.bytes_vs_analytic``)."""
        s = self.summary()
        return s.reset_index()[["run", "bytes_per_step", "bound_bytes_per_step"]].rename(
            columns={"bytes_per_step": "measured", "bound_bytes_per_step": "analytic"}
        )

    def samples(self):
        return self.result.samples()

    def write_scalars(self) -> Path:
        """The chief's test error, accuracy and log-loss at every evaluation and its training
        loss, by training samples, as TensorBoard scalars: one TensorBoard run per run of the
        plan, ``<run dir>/tensorboard/<mode>-b<batch>``. Returns ``<run dir>/tensorboard``."""
        root = self.run_dir / "tensorboard"
        for label in self.labels:
            chief = self.chief(label)
            train = [
                {**r, "samples": r["global_step"] * chief["samples_per_step"], "train_loss": r["loss"]}
                for r in chief["series"]["train"]
            ]
            scalars.write(
                root / label.replace(" ", "-"),
                train + chief["series"]["eval"],
                step="samples",
                keys=("test_error", "test_accuracy", "test_logloss", "train_loss"),
            )
        return root

    def window(self, label: str, frame=None) -> tuple[float, float]:
        """Seconds (on the merged samples' axis) from the first trainer's start of run
        ``label`` to the last trainer's end."""
        frame = self.samples() if frame is None else frame
        marks = frame.attrs.get("marks", [])
        starts = [m["t"] for m in marks if m["label"] == f"{label} start" and not m["task"].startswith("ps")]
        ends = [m["t"] for m in marks if m["label"] == f"{label} end" and not m["task"].startswith("ps")]
        if not starts or not ends:
            raise ValueError(f"run {label!r} left no start/end marks in the samples of {self.run_dir}")
        return min(starts), max(ends)

    def bottlenecks(self):
        """Report 001 Table 3 / 004 Table 2 per task and run: average and peak CPU (the
        task's process, 100 = one core; and its host, % of all cores), network (bytes/s on
        the host's interfaces, ``lo`` included; and the task's own TCP bytes/s), disk
        (bytes/s, host) and memory (process RSS; host used share), over the run's window."""
        import numpy as np
        import pandas as pd

        from labkit.measure.summaries import summarize

        frame = self.samples()
        rows = []
        for label in self.labels:
            lo, hi = self.window(label, frame)
            moved = {name: step_bytes(e.get("traffic") or {}) for name, e in self.trainers(label).items()}
            tcp_rates = {
                name: (math.nan if moved[name] is None else moved[name]) * e["steps"]["local"] / e["train_s"]
                for name, e in self.trainers(label).items()
            }
            measured = [v for v in tcp_rates.values() if not math.isnan(v)]
            tcp_rates["ps:0"] = sum(measured) if measured else math.nan  # every worker's traffic is the ps's
            for task, part in frame.groupby("task", sort=False):
                part = part.copy()
                part.attrs = {}
                s = summarize(part, lo, hi)
                inside = part[(part["t"] > lo) & (part["t"] - part["dt"] < hi) & (part["dt"] > 0)]
                dt = inside["dt"]
                busy = inside["cpu_user"] + inside["cpu_system"]
                net = (inside["net_recv"] + inside["net_sent"]) / dt
                disk = (inside["disk_read"] + inside["disk_write"]) / dt
                total_mem = (inside["mem_used"] + inside["mem_free"] + inside["mem_buff"] + inside["mem_cach"]).max()
                duration = s["duration_s"] or math.nan
                rows.append(
                    {
                        "run": label,
                        "task": task,
                        "host": part["host"].iloc[0],
                        "proc_cpu_avg": s["proc_cpu_pct"],
                        "proc_cpu_peak": inside["proc_cpu"].max(),
                        "host_cpu_avg": s["cpu_user_pct"] + s["cpu_system_pct"],
                        "host_cpu_peak": busy.max(),
                        "net_avg_bytes_per_s": (s["net_recv_bytes"] + s["net_sent_bytes"]) / duration,
                        "net_peak_bytes_per_s": net.max(),
                        "task_tcp_bytes_per_s": tcp_rates.get(task, math.nan),
                        "disk_avg_bytes_per_s": (s["disk_read_bytes"] + s["disk_write_bytes"]) / duration,
                        "disk_peak_bytes_per_s": disk.max() if disk.notna().any() else math.nan,
                        "rss_avg_bytes": s["proc_rss_bytes"],
                        "rss_peak_bytes": s["proc_rss_peak_bytes"],
                        "mem_used_peak_share": s["mem_used_peak_bytes"] / total_mem if total_mem else math.nan,
                        "window_s": duration,
                        "samples": s["samples"],
                    }
                )
        out = pd.DataFrame(rows).set_index(["run", "task"])
        return out.replace([np.inf, -np.inf], np.nan)

    def network(self) -> dict | None:
        """The emulated network the runs had (``labkit.distributed.launchers.netns.described``), else None."""
        from labkit.distributed.launchers.netns import described

        return described(self.run_dir)

    def links(self, label: str, frame=None):
        """On emulated nodes: per node, how busy its link was over run ``label``'s window
        (``summaries.link_use`` at the run's own link rate: ``in_share``, ``out_share``,
        ``busy_share``), busiest first. A ValueError on 127.0.0.1: no link to read."""
        from labkit.distributed.launchers.netns import task_nodes
        from labkit.measure.summaries import link_use

        net = self.network()
        if net is None:
            raise ValueError(f"{self.run_dir} ran without emulated links (no network.json): its tasks shared lo")
        frame = self.samples() if frame is None else frame
        use = link_use(frame, task_nodes(self.result), net["rate_bits"] / 8, *self.window(label, frame))
        return use.sort_values("busy_share", ascending=False)

    def verdicts(
        self, link_gbit: float = 10.0, disk_bytes_per_s: float = 200e6, threshold: float = 0.8, most: float = 0.5
    ):
        """Which resource bounds each run, in words, from ``bottlenecks()`` (and, on emulated
        nodes, each node's NIC).

        Utilisation, 0-1, over each run's window: disk = host bytes/s against
        ``disk_bytes_per_s``; memory = the peak share of host memory in use. On 127.0.0.1:
        CPU = the busiest host's busy share (``host_cpu_avg``); network = the ps's TCP bytes/s
        (every worker's socket bytes, sent + received), halved (a ``link_gbit`` NIC carries
        that rate each way, and weights out and gradients in are about equal). A resource at
        or above ``threshold`` saturates; if none does, the run is latency-bound.

        On emulated nodes (the run's ``network.json``) ``link_gbit`` is not used: network =
        the busiest node's link's ``busy_share`` at the run's own rate (``links``: both
        directions' bytes one after the other, since a step's pull and push take turns), so
        traffic between tasks of one node, on its ``lo``, does not count; CPU = our tasks' CPU
        over the cores the nodes share (the host's figure holds other programs' too). There
        the phases of a step take turns, so no resource need saturate: the busiest one, busy
        more than ``most`` of the window, bounds the run (it takes most of each step)."""
        import pandas as pd

        table, net = self.bottlenecks(), self.network()
        frame = self.samples() if net else None
        rows = []
        for label in self.labels:
            t = table.loc[label]
            use = {
                "CPU": math.nan,
                "network": math.nan,
                "disk": t["disk_avg_bytes_per_s"].max() / disk_bytes_per_s,
                "memory": t["mem_used_peak_share"].max(),
            }
            if net:
                where, texts = self._emulated_use(label, t, frame, net, use)
            else:
                where, texts = self._loopback_use(t, link_gbit, use)
            texts += [
                (
                    "disk "
                    + (
                        f"{use['disk']:.1%} of {disk_bytes_per_s / 1e6:.0f} MB/s"
                        if use["disk"] == use["disk"]
                        else "not measured"
                    )
                ),
                f"memory {use['memory']:.0%} used at peak",
            ]
            rows.append(
                {
                    "run": label,
                    "verdict": _judge(use, threshold, most if net else None, where),
                    "detail": "; ".join(texts),
                    "busiest_link": where.get("node"),
                    **{f"{k.lower()}_utilisation": v for k, v in use.items()},
                }
            )
        return pd.DataFrame(rows).set_index("run")

    @staticmethod
    def _loopback_use(t, link_gbit: float, use: dict) -> tuple[dict, list[str]]:
        """CPU and network utilisation on 127.0.0.1 (see ``verdicts``), and their detail."""
        use["CPU"] = t["host_cpu_avg"].max() / 100
        use["network"] = t["task_tcp_bytes_per_s"].max() / 2 / (link_gbit * 1e9 / 8)
        link = (
            f"{use['network']:.2%} of {link_gbit:g} Gbit/s each way"
            if use["network"] == use["network"]
            else "not measured"
        )
        return {}, [
            f"host CPU {use['CPU']:.0%} busy on average (our tasks {t['proc_cpu_avg'].sum():.0f}% of one "
            f"core in total)",
            f"ps link {link}",
        ]

    def _emulated_use(self, label: str, t, frame, net: dict, use: dict) -> tuple[dict, list[str]]:
        """CPU and network utilisation on emulated nodes (see ``verdicts``), the busiest link, detail."""
        from labkit.core.proc import usable_cores

        cores = net.get("cores") or usable_cores()
        ours = t["proc_cpu_avg"].sum()
        use["CPU"] = ours / 100 / cores
        links = self.links(label, frame)
        node, top = links.index[0], links.iloc[0]
        use["network"] = top["busy_share"]
        per_node = ", ".join(
            f"{n} {r.busy_share:.0%} (in {r.in_share:.0%}, out {r.out_share:.0%})" for n, r in links.iterrows()
        )
        return (
            {"node": node, "network": f"{node}'s link ({top['tasks']}) at {net['link']}"},
            [
                f"our tasks' CPU {ours:.0f}% of one core, {use['CPU']:.0%} of the {cores} cores the nodes share "
                f"(host {t['host_cpu_avg'].max():.0f}% busy, other programs included)",
                f"links busy {per_node} of {net['link']} each way",
            ],
        )

    def sweep_table(self, value: str = "train_s"):
        """Report 004 Table 3: ``value`` (default seconds of training for the fixed number of
        examples) per mode (rows) and batch size (columns)."""
        s = self.summary()
        return s.pivot_table(index="mode", columns="batch", values=value).rename_axis(columns="batch size")

    def weights(self, label: str) -> Path:
        """The chief's saved weights of run ``label``."""
        name = self.chief(label).get("weights")
        if not name:
            raise ValueError(f"run {label!r} saved no weights; train with save_weights=True")
        return self.run_dir / name

    def _first_of_each_mode(self) -> dict[str, Run]:
        return {m: next(r for r in self.runs if r.mode == m) for m in dict.fromkeys(r.mode for r in self.runs)}

    def save_weights(self, directory) -> dict[str, str]:
        """Copy the chief's weights of each mode's first run into ``directory`` as
        ``lab3_<mode>_weights.npz`` (for the grader, which re-checks them); {"<mode>_weights": path}."""
        import shutil

        Path(directory).mkdir(parents=True, exist_ok=True)
        out = {}
        for mode, r in self._first_of_each_mode().items():
            path = Path(directory) / f"lab3_{mode}_weights.npz"
            shutil.copyfile(self.weights(r.label), path)
            out[f"{mode}_weights"] = path.as_posix()
        return out

    def records(
        self, profile=None, sweep: "Experiment | None" = None, artifacts: dict | None = None, link_gbit: float = 10.0
    ) -> dict:
        """What the notebook records for the grader: per mode (its first run) accuracy,
        log-loss, s per 1k iterations, bytes per step and their bound, global and per-worker
        steps, unique features per step; the optimum (None for a9a: unknown), the dense bytes,
        the cluster's directory; ``summary``, ``bottlenecks`` and ``verdicts`` (at
        ``link_gbit``; on emulated nodes at the run's own link), the settings; with ``profile`` (``profile_ops``)
        the sparse speed-up at its largest size and batch, the dense step's allocated bytes at its
        largest size per batch (``dense_alloc_bytes``: {"b10": ...}), and the profile; with ``sweep``
        (a second ``Experiment``) its summary; ``artifacts`` (``save_weights``) as given."""
        summary = self.summary()
        out = {}
        for mode, r in self._first_of_each_mode().items():
            row = summary.loc[r.label]
            out.update(
                {
                    f"{mode}_test_accuracy": row.test_accuracy,
                    f"{mode}_test_logloss": row.test_logloss,
                    f"{mode}_s_per_1k": row.s_per_1k_iterations,
                    f"{mode}_bytes_per_step": row.bytes_per_step,
                    f"{mode}_bound_bytes_per_step": row.bound_bytes_per_step,
                    f"{mode}_global_steps": int(row.global_steps),
                    f"{mode}_steps": self.steps(r.label),
                    f"{mode}_unique_per_step": row.unique_per_step,
                }
            )
        optimum = self.optimum() or {}
        out.update(
            optimum_accuracy=optimum.get("bayes_accuracy"),
            majority_accuracy=optimum.get("majority_accuracy"),
            dense_bytes_per_step=summary["dense_bytes_per_step"].iloc[0],
            cluster_run_dir=str(self.run_dir.resolve()),
        )
        if profile is not None:
            speed = speedups(profile)
            out["sparse_speedup"] = (
                speed.xs(speed.index.get_level_values("batch").max(), level="batch").iloc[-1].speedup
            )
            largest = speed.index.get_level_values("num_features").max()
            out["dense_alloc_bytes"] = {
                f"b{b}": float(v) for b, v in speed.xs(largest, level="num_features")["dense_alloc_bytes"].items()
            }
            out["profile"] = profile
        out.update(
            summary=summary.reset_index(),
            bottlenecks=self.bottlenecks().reset_index(),
            verdicts=self.verdicts(link_gbit=link_gbit).reset_index(),
        )
        if sweep is not None:
            out["sweep"] = sweep.summary().reset_index()[
                ["run", "mode", "batch", "global_steps", "train_s", "test_accuracy"]
            ]
        if artifacts is not None:
            out["artifacts"] = artifacts
        out["settings"] = self.settings
        return out


def _judge(use: dict, threshold: float, most: float | None, where: dict) -> str:
    """The verdict of ``Experiment.verdicts`` from its utilisations; ``where``: what to call a
    resource (the busiest link); ``most``: None on 127.0.0.1 (only saturation counts)."""
    known = {k: v for k, v in use.items() if v == v}
    top = max(known, key=known.get)
    what = where.get(top, top)
    if known[top] >= threshold:
        return f"{top}-bound: {what} saturates ({known[top]:.0%})"
    if most is not None and known[top] > most:
        return (
            f"{top}-bound: {what} busy {known[top]:.0%} of the run, more than any other resource "
            "(the phases of a step take turns)"
        )
    return (
        f"no resource saturates (busiest: {top}, {known[top]:.0%}): the step is latency-bound "
        "(RPC round trips and per-step overhead)"
    )


# ------------------------------------------------------------------------------ re-checking


def evaluate_weights(path) -> dict:
    """Accuracy and log-loss of a saved ``weights-*.npz`` on the test set it names (no TensorFlow)."""
    from labkit.tasks.ps_sparse_lr import evaluate_arrays, load_rows, load_weights

    w, s = load_weights(path)
    test = load_rows(s["data"], "test", num_features=s["num_features"], rows=s["test_rows"], click_seed=s["click_seed"])
    return evaluate_arrays(w, test)


# ------------------------------------------------------------------------------ the traces it ships

DENSE_RECORDED = dict(
    workers=2,
    hosts=None,
    data="click",
    num_features=1_000_000,
    train_rows=200_000,
    test_rows=10_000,
    learning_rate=0.5,
    seed=0,
    click_seed=0,
)


def record_emulated_dense() -> dict:
    """Section 9's dense step on emulated links, recorded again (``traces/emulated_dense.json``)."""
    from labkit.experiments.traces import recorder

    df = emulated_dense(["1gbit", "100mbit"], batch_size=100, samples=4_000, **DENSE_RECORDED)
    if not len(df):
        raise RuntimeError("links cannot be emulated here (see above); nothing recorded")
    call = (
        f"{__package__}.experiment.emulated_dense(['1gbit', '100mbit'], batch_size=100, samples=4000, "
        f"**{DENSE_RECORDED})"
    )
    return {"provenance": recorder.provenance(call), "frame": recorder.records(df)}


RECORDERS = {"emulated_dense": record_emulated_dense}  # python -m labkit.labs.lab3.experiment NAME

if __name__ == "__main__":
    import sys

    from labkit.experiments.traces import recorder

    sys.exit(recorder.main(LAB, RECORDERS))
