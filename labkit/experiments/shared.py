"""Several configurations in one cluster: TensorFlow's start-up paid once per cluster shape.

A sweep's configurations that need the same tasks on the same hosts run one after the other in
one cluster, each trained from scratch (the task programs' ``--configs``)::

    configs = [Config("w2-b50", "2 x 50", {"batch_size": 50}), Config("w2-b100", "2 x 100", {"batch_size": 100})]
    results = shared.run(lambda **kw: make_cluster(2, 50, run=f"{sweep}/cluster-w2", **kw), configs,
                         timeout=900, bar=bar)      # one ClusterResult per configuration, in order

Each configuration gets a folder beside the cluster's that reads like a cluster's own
(``ClusterResult.load``). Timeouts, failures (with the results of the configurations that
finished) and progress are per configuration, as with a cluster each. More in
docs/internals.md, "Several configurations in one cluster".
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from labkit.wire import events
from labkit.distributed.launch import Cluster, ClusterTimeout, TaskFailed
from labkit.wire.protocol import task_file
from labkit.wire.results import ClusterResult, TaskOutcome, configuration_file, configuration_part, read_json
from labkit.tasks.files import IDENTITY_KEYS, write_json

START_ALLOWANCE_S = 300  # the cluster's own deadline: its start-up, on top of every configuration's timeout


@dataclass(frozen=True)
class Config:
    """One configuration of a shared cluster: ``name`` is its folder (beside the cluster's) and its
    name in the task logs, ``label`` how the lab shows it, ``args`` the task arguments it sets."""

    name: str
    label: str
    args: dict = field(default_factory=dict)


def groups(items, shape) -> list[list]:
    """``items`` grouped by ``shape(item)`` (the cluster each needs), groups in order of first
    appearance, items in their order."""
    out: dict = {}
    for item in items:
        out.setdefault(shape(item), []).append(item)
    return list(out.values())


class _Follower:
    """Follows the chief's configuration events: the running configuration, its deadline, the bar
    and the view's title; passes every event on to ``on_event(config, event)``."""

    def __init__(self, cluster: Cluster, configs: list[Config], timeout: float, on_event, bar, view, t0: float):
        self.cluster, self.configs, self.timeout = cluster, configs, float(timeout)
        self.on_event, self.bar, self.view = on_event, bar, view
        self.title = view.title
        self.by_name = {k.name: k for k in configs}
        self.current: Config | None = None
        self.finished: list[str] = []
        self.deadline = t0 + self.timeout  # the first configuration's: from the servers' start

    def event(self, e: events.Event) -> None:
        if e.task == self.cluster.chief and isinstance(e, events.ConfigStarted):
            self.current = self.by_name.get(e.name)
            if self.finished:
                self.deadline = time.monotonic() + self.timeout
            label = self.current.label if self.current else e.name
            self.view.title = f"{self.title}: {label} ({e.index + 1}/{e.count})"
            if self.bar is not None:
                self.bar.set_postfix_str(label)
        elif e.task == self.cluster.chief and isinstance(e, events.ConfigDone) and e.status == "ok":
            self.finished.append(e.name)
            if self.bar is not None:
                self.bar.update()
        if self.on_event is not None:
            self.on_event(self.by_name.get(e.config), e)

    def overdue(self) -> bool:
        return time.monotonic() > self.deadline

    def running(self) -> Config | None:
        """The configuration under way: the last one started, if not done, else the next (being
        set up); None before the first started."""
        if self.current is None:
            return None
        if self.current.name not in self.finished:
            return self.current
        return next((k for k in self.configs if k.name not in self.finished), None)

    def what(self) -> str:
        running = self.running()
        return f"finish configuration {running.label}" if running else f"start {self.configs[0].label}"

    def note(self) -> str:
        where = f"in the cluster of {self.cluster.run_dir}"
        running = self.running()
        if running is None:
            return f"before its first configuration ({self.configs[0].label}) started, {where}"
        done = [k.label for k in self.configs if k.name in self.finished]
        kept = (
            f"; {len(done)} finished before it ({', '.join(done)}), their results are in their folders (e.completed)"
            if done
            else ""
        )
        number = self.configs.index(running) + 1
        return f"while configuration {running.label} ({number} of {len(self.configs)}) ran {where}{kept}"


def run(
    make_cluster, configs: list[Config], *, timeout: float, on_event=None, bar=None, static: bool = True
) -> list[ClusterResult]:
    """Run ``configs`` one after the other in one cluster, ``make_cluster(configs=..., timeout=...)``,
    under a live view (``static``: its final figure, as ``live.watch``); return one
    ``ClusterResult`` per configuration, in order (see the module docstring)."""
    from labkit.distributed import live

    names = [k.name for k in configs]
    if not configs or len(set(names)) != len(names):
        raise ValueError(f"configurations need names of their own, got {names}")
    c = make_cluster(
        configs=json.dumps([{"name": k.name, **k.args} for k in configs]),
        timeout=START_ALLOWANCE_S + timeout * len(configs),
    )
    follower = None
    try:
        with live.watch(c, static=static) as view, c:  # returns once every server is up
            follower = _Follower(c, configs, timeout, on_event, bar, view, time.monotonic())
            result = c.follow(follower.event, until=follower.overdue)
            if result is None:
                running = [name for name, state in c.status().items() if state == "running"]
                raise ClusterTimeout(timeout, running, what=follower.what())
    except (TaskFailed, ClusterTimeout) as e:
        e.completed = [
            collect(c.result, k, configs)
            for k in configs
            if follower is not None and k.name in follower.finished and c.result is not None
        ]
        e.add_note(follower.note() if follower is not None else f"in the cluster of {c.run_dir}")
        raise
    return [collect(result, k, configs) for k in configs]


def collect(cluster: ClusterResult, config: Config, configs: list[Config]) -> ClusterResult:
    """Configuration ``config``'s folder, beside the cluster's: each task's file of it, moved there
    (or, for a task that kept none, its process's samples over the chief's window), and a
    ``cluster.json``; returns its ``ClusterResult``."""
    folder = cluster.run_dir.parent / config.name
    folder.mkdir(parents=True, exist_ok=True)
    index = configs.index(config)
    described = {"index": index, "count": len(configs), "name": config.name, "label": config.label}
    own = {t.name: _take(cluster.run_dir, folder, config.name, t) for t in cluster}
    chief = own.get(cluster.chief().name) or {}
    start, end = chief.get("configuration_started_epoch"), chief.get("ended_epoch")
    tasks = []
    for t in cluster:
        mine = own[t.name]
        if mine is None and t.result and t.result.get("samples") and start and end:
            mine = _derived(t.result, start, end, described)
            write_json(folder / task_file(t.type, t.index, ".json"), mine)
        done = bool(mine) and mine.get("status") == "ok"
        tasks.append(
            TaskOutcome(
                t.name,
                t.type,
                t.index,
                t.host,
                "finished" if done else t.ended,
                None if done else t.returncode,
                (mine or {}).get("timings", {}).get("total_s"),
                t.log_path,
                mine,
            )
        )
    notes = [
        f"configuration {index + 1} of {len(configs)} of the cluster in {cluster.run_dir.name}: its tasks "
        f"started once for all of them (startup_s is the cluster's)"
    ]
    return ClusterResult(
        cluster.program,
        folder,
        cluster.spec,
        tasks,
        cluster.startup_s,
        None,
        end - start if start and end else None,
        notes,
        cluster.run_dir,
        described,
    ).save()


def _take(cluster_dir: Path, folder: Path, name: str, task: TaskOutcome) -> dict | None:
    """The task's file of configuration ``name``, moved into its folder (read there if it was already)."""
    src, dst = (
        cluster_dir / configuration_file(name, task.type, task.index),
        folder / task_file(task.type, task.index, ".json"),
    )
    if src.exists():
        os.replace(src, dst)
    return read_json(dst)


def _derived(result: dict, start: float, end: float, described: dict) -> dict:
    """A configuration's result for a task that kept none: its process's identity and args, and
    its samples over the chief's window of the configuration."""
    out = {k: result[k] for k in (*IDENTITY_KEYS, "args") if k in result}
    out.update(
        configuration=described,
        status="ok",
        shutdown="finished",
        metrics={},
        steps={},
        timings={"total_s": end - start},
        series={},
        configuration_started_epoch=start,
        ended_epoch=end,
        derived="this task keeps no configurations of its own (it serves the chief): its process's "
        "samples over the chief's window of this configuration",
    )
    out.update(configuration_part(result["samples"], start, end))
    return out
