"""What a finished cluster run left behind, read the same way by every lab.

``labkit.distributed.launch.Cluster`` gathers a ``ClusterResult``: the launcher's view of each task
(how it ended, its log) and the result file the task wrote. The experiments read it through the
accessors here, never through the raw dicts, so "which task is the chief" and "resources over
the training window, else the whole run" are written once::

    result.chief().training             # train_loop.train's dict (strategy_train tasks)
    result["worker:1"].resources()      # resource summary over its training window
    ClusterResult.load(run_dir)         # the same object, read back from the files

Each configuration of a shared cluster gets a folder that reads like a cluster's. Imports no
TensorFlow and nothing of the launcher: the grader and the notebooks read runs with it.
More in docs/internals.md, section labkit.wire (the accessors, shared clusters' folders).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from labkit.core.proc import tail
from labkit.wire.protocol import chief_of, task_file

WINDOWS = ("train", "all")
# The resource columns of ClusterResult.table(): host CPU and memory, the task's process, the host's network.
RESOURCE_COLUMNS = (
    "cpu_user_pct",
    "mem_used_bytes",
    "proc_cpu_pct",
    "proc_rss_bytes",
    "net_recv_bytes",
    "net_sent_bytes",
)


def read_json(path: Path) -> dict | None:
    """A task's JSON file, None if it wrote none; a half-written file is a ValueError that says so."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); the task may have died while writing it") from None


def configuration_file(name: str, task_type: str, index: int) -> str:
    """The file a task of a shared cluster writes, in the cluster's folder, when it has finished
    configuration ``name``: ``w2-b50.worker-1.json`` (flat, so a remote node's files come back
    with the others'); the experiment then moves it to ``<name>/worker-1.json``."""
    return f"{name}.{task_file(task_type, index, '.json')}"


def configuration_part(samples: dict, start_epoch: float, end_epoch: float, prefix: str = "") -> dict:
    """A task's resources over one configuration's window, from its samples
    (``ResourceSampler.to_dict()``): ``samples`` (those whose intervals overlap the window, on a
    time axis that starts at the window: t = 0), ``resources`` (``summaries.summarize`` over the
    window), ``resources_train`` (over its ``train start``/``train end`` marks, where it set them)
    and ``baseline`` (what the process held when the window opened, ``baseline``).

    ``prefix``: the configuration's marks are named ``prefix + label`` in the process's samples
    (``"w2-b50: train start"``); the window keeps those, as ``label``, and drops the others'."""
    from labkit.measure.summaries import frame_from_dict, summarize

    cols = samples["columns"]
    keep = [
        i
        for i, (e, dt) in enumerate(zip(cols["epoch"], cols["dt"]))
        if e is not None and e > start_epoch and e - (dt or 0.0) < end_epoch
    ]
    shift = start_epoch - (samples.get("start_epoch") or start_epoch)
    columns = {c: [v[i] for i in keep] for c, v in cols.items()}
    columns["t"] = [t - shift for t in columns["t"]]
    marks = []
    for m in samples.get("marks", []):
        label = m["label"]
        if prefix and not label.startswith(prefix):
            continue
        if start_epoch - 1e-3 <= m["epoch"] <= end_epoch + 1e-3:
            marks.append({**m, "label": label[len(prefix) :], "t": m["t"] - shift})
    part = {**samples, "start_epoch": start_epoch, "columns": columns, "marks": marks}
    frame = frame_from_dict(part)
    out = {
        "samples": part,
        "resources": summarize(frame, 0.0, end_epoch - start_epoch),
        "baseline": baseline(samples, start_epoch),
    }
    if {"train start", "train end"} <= {m["label"] for m in marks}:
        out["resources_train"] = summarize(frame, "train start", "train end")
    return out


def baseline(samples: dict, start_epoch: float) -> dict:
    """What the process and its host held when a configuration began (the last sample at or
    before ``start_epoch``; the first one if none came before): the process's RSS (TensorFlow's
    runtime, and whatever the configurations before this one left), the host's memory in use,
    and the process's CPU (100 = one core) over that sample's interval. A configuration's own
    memory is its RSS minus ``proc_rss_bytes`` here."""
    cols = samples["columns"]
    epochs = [e for e in cols["epoch"] if e is not None]
    if not epochs:
        return {}
    before = [i for i, e in enumerate(cols["epoch"]) if e is not None and e <= start_epoch]
    i = before[-1] if before else 0
    return {
        "proc_rss_bytes": cols["proc_rss"][i],
        "mem_used_bytes": cols["mem_used"][i],
        "proc_cpu_pct": cols["proc_cpu"][i],
        "sampled_s_before": start_epoch - cols["epoch"][i],
    }


def task_log_tail(path, lines: int = 30) -> str:
    """The end of a task's log, without the ``# cd ... env ...`` command line the launcher
    writes first (it stays in the file, to rerun the task by hand): in a short log that one
    long line would crowd out the lines that say what went wrong."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            header = f.readline().rstrip("\n")
    except FileNotFoundError:
        return ""
    rows = tail(path, lines + 1).split("\n")
    if header.startswith("# ") and rows[0] == header:
        rows = rows[1:]
    return "\n".join(rows[-lines:])


class _Section:
    """A read-only attribute of a ``TaskOutcome``: the section of its result JSON of the same
    name, {} where the task wrote no result or no such section."""

    def __init__(self, doc: str):
        self.__doc__ = doc

    def __set_name__(self, owner, name: str) -> None:
        self.key = name

    def __get__(self, task, owner=None) -> dict:
        if task is None:
            return self
        return (task.result or {}).get(self.key) or {}


@dataclass
class TaskOutcome:
    """How one task ended, and what it reported (``result``: its result file, None if it wrote none)."""

    name: str
    type: str
    index: int
    host: str
    ended: str | None  # exited | done-queue | chief-port-closed | failed | terminated | killed | None;
    #                            finished: a configuration of a shared cluster, done (the process went on)
    returncode: int | None  # None for a configuration of a shared cluster (its process: see cluster_dir)
    wall_s: float | None  # from start to exit, as the launcher saw it; a configuration's own seconds
    log_path: Path
    result: dict | None  # the task's result JSON (None if it wrote none)

    steps = _Section("Step counters: ``local``, ``local_per_s``, and per program ``global_final`` ...")
    metrics = _Section("The task's headline numbers (accuracy, loss, images/s ...).")
    timings = _Section("Seconds per phase: ``train_s``, ``server_up_s``, ``import_tf_s``, ``total_s`` ...")
    series = _Section("Named lists of rows the task logged while it ran (``train``, ``eval``, ``history``).")
    traffic = _Section(
        "What the task's bytes meter read over its training (``labkit.measure.sockets.traffic``: its own "
        "sockets, its node's NICs, the local tasks' sockets, each also per step), under the same names "
        "whichever program measured it."
    )
    baseline = _Section(
        "A configuration of a shared cluster: what the process held when it began (RSS, host memory in "
        "use; ``results.baseline``); {} for a task that ran one configuration."
    )

    @property
    def training(self) -> dict:
        """``labkit.learning.train_loop.train``'s result on this task (a ``strategy_train`` task's ``train``
        entry): history, throughput, bytes per step, weight checksums. A ValueError naming the log
        if the task wrote none."""
        r = self.result or {}
        if "train" not in r:
            raise ValueError(f"{self.name} wrote no training result (ended: {self.ended}); see {self.log_path}")
        return r["train"]

    def resources(self, window: str = "train") -> dict:
        """The task's resource summary (``summaries.summarize``'s keys): ``window="train"`` over
        its ``train start``/``train end`` marks where it set them, else over its whole run;
        ``"all"``: its whole run. {} if it sampled nothing."""
        if window not in WINDOWS:
            raise ValueError(f"window={window!r}: choose 'train' (the training phase) or 'all' (the whole run)")
        r = self.result or {}
        return (r.get("resources_train") if window == "train" else None) or r.get("resources") or {}

    @property
    def is_trainer(self) -> bool:
        return self.type != "ps"

    def log_tail(self, lines: int = 30) -> str:
        return task_log_tail(self.log_path, lines)


@dataclass
class ClusterResult:
    """Every task's outcome, plus the launcher's timings (``startup_s``: ``start()`` until
    every server was up; ``teardown_s``: the last trainer's exit until no task was left).

    One configuration of a shared cluster (see the module docstring): ``cluster_dir`` is the
    cluster's folder, ``configuration`` says which (index, count, name, label), ``wall_s`` is
    the configuration's own seconds on the chief, ``startup_s`` the cluster's, paid once."""

    program: str
    run_dir: Path
    spec: dict
    tasks: list[TaskOutcome]
    startup_s: float | None = None
    teardown_s: float | None = None
    wall_s: float | None = None
    notes: list[str] = field(default_factory=list)
    cluster_dir: Path | None = None
    configuration: dict | None = None

    def __getitem__(self, name: str) -> TaskOutcome:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"no task {name!r}; tasks are {[t.name for t in self.tasks]}")

    def __iter__(self):
        return iter(self.tasks)

    def trainers(self) -> list[TaskOutcome]:
        """The tasks that train (chief and workers), in start order."""
        return [t for t in self.tasks if t.is_trainer]

    def chief(self) -> TaskOutcome:
        """The task that leads training and measures it (``protocol.chief_of``)."""
        name = chief_of({t.type for t in self.tasks})
        for t in self.tasks:
            if t.name == name:
                return t
        raise ValueError(f"{self.run_dir} has no chief and no worker 0; tasks are {[t.name for t in self.tasks]}")

    def table(self, window: str = "all"):
        """One row per task (a DataFrame indexed by task): host, how it ended, steps, metrics and
        resource averages (``window="train"``: the training phase where a task marked one); for a
        configuration of a shared cluster, also the process's RSS when it began."""
        import pandas as pd

        rows = []
        for t in self.tasks:
            res, steps = t.resources(window), t.steps
            row = {
                "task": t.name,
                "host": t.host,
                "ended": t.ended,
                "returncode": t.returncode,
                "wall_s": t.wall_s,
                "local_steps": steps.get("local"),
                "global_step": steps.get("global_final", steps.get("global_at_exit")),
                "steps_per_s": steps.get("local_per_s"),
            }
            row.update({k: v for k, v in t.metrics.items() if isinstance(v, (int, float, str, type(None)))})
            row.update({k: res.get(k) for k in RESOURCE_COLUMNS})
            if t.baseline:
                row["proc_rss_baseline_bytes"] = t.baseline.get("proc_rss_bytes")
            rows.append(row)
        return pd.DataFrame(rows).set_index("task")

    def samples(self):
        """All tasks' resource samples in one DataFrame (``task`` and ``host`` columns, one
        time axis), for ``plots.resource_timeline`` and ``summaries.summarize_tasks``."""
        from labkit.measure.summaries import merge_frames

        have = {t.name: t.result["samples"] for t in self.tasks if t.result and t.result.get("samples")}
        if not have:
            raise ValueError(f"no task of {self.run_dir} wrote resource samples; see the task logs")
        return merge_frames(have)

    def to_dict(self) -> dict:
        """The launcher's view (the task results stay in their own files); paths relative to
        ``run_dir`` (a configuration's logs are its cluster's)."""
        out = {
            "program": self.program,
            "run_dir": str(self.run_dir),
            "spec": self.spec,
            "startup_s": self.startup_s,
            "teardown_s": self.teardown_s,
            "wall_s": self.wall_s,
            "notes": self.notes,
            "tasks": [
                {
                    "name": t.name,
                    "type": t.type,
                    "index": t.index,
                    "host": t.host,
                    "ended": t.ended,
                    "returncode": t.returncode,
                    "wall_s": t.wall_s,
                    "log": os.path.relpath(t.log_path, self.run_dir),
                }
                for t in self.tasks
            ],
        }
        if self.cluster_dir is not None:
            out.update(cluster_dir=os.path.relpath(self.cluster_dir, self.run_dir), configuration=self.configuration)
        return out

    def save(self) -> "ClusterResult":
        (self.run_dir / "cluster.json").write_text(json.dumps(self.to_dict(), indent=1))
        return self

    @classmethod
    def load(cls, run_dir) -> "ClusterResult":
        """Read a finished run back from its directory (``cluster.json`` + task files)."""
        run_dir = Path(run_dir)
        meta = json.loads((run_dir / "cluster.json").read_text())
        tasks = []
        for t in meta["tasks"]:
            path = run_dir / task_file(t["type"], t["index"], ".json")
            tasks.append(
                TaskOutcome(
                    t["name"],
                    t["type"],
                    t["index"],
                    t["host"],
                    t["ended"],
                    t["returncode"],
                    t["wall_s"],
                    run_dir / t["log"],
                    read_json(path),
                )
            )
        cluster_dir = run_dir / meta["cluster_dir"] if meta.get("cluster_dir") else None
        return cls(
            meta["program"],
            run_dir,
            meta["spec"],
            tasks,
            meta["startup_s"],
            meta["teardown_s"],
            meta["wall_s"],
            meta.get("notes", []),
            cluster_dir,
            meta.get("configuration"),
        )

    def __repr__(self) -> str:
        ends = ", ".join(f"{t.name}={t.ended}" for t in self.tasks)
        return f"ClusterResult({self.program}, {self.run_dir}, {ends})"
