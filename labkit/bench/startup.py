"""TensorFlow's start-up as a share of each lab's wall time: every lab notebook at its defaults.

A student waits for a whole lab notebook; so does the grader, once per student. Each cluster a
lab starts pays TensorFlow's start-up (imports, gRPC servers, collectives) before its first
step. This benchmark runs every lab notebook of ``notebooks/rubric.toml`` headlessly at its
defaults and reports, per lab, the wall time, the start-up summed over its clusters (first
process start to the chief's first step, plus each fork server's own start-up) and their
ratio. Goal: at most 0.3 for every lab. The machine's load is reported with each lab.

``--quick``: only Lab 4, at the rubric's parameters.
More in docs/internals.md, section labkit.bench (how each figure is measured).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path

from labkit.bench import entry, ratio

REPO = Path(__file__).resolve().parents[2]
GOAL = "<= 0.3"


def first_step_epoch(result: dict) -> float | None:
    """When a task began its first training step (wall clock), from its result file."""
    if result.get("first_step_epoch"):
        return float(result["first_step_epoch"])
    marks = (result.get("samples") or {}).get("marks", [])
    opens = [m["epoch"] for m in marks if m["label"].endswith(" start") and m["label"] != "start"]
    return min(opens) if opens else None


def cluster_startups(runs: Path) -> list[dict]:
    """One row per cluster under ``runs``: its directory, tasks, start-up seconds (None if it
    never reached a training step) and wall seconds; and one per fork server its tasks came from."""
    from labkit.wire.results import ClusterResult

    rows, servers = [], {}
    for meta in sorted(runs.rglob("cluster.json")):
        if json.loads(meta.read_text()).get("cluster_dir"):  # a configuration's view of a shared cluster
            continue
        result = ClusterResult.load(meta.parent)
        started = [t.result["started_epoch"] for t in result if t.result and t.result.get("started_epoch")]
        try:
            chief = result.chief().result or {}
        except ValueError:
            chief = {}
        first = first_step_epoch(chief)
        rows.append(
            {
                "cluster": meta.parent.relative_to(runs).as_posix(),
                "tasks": len(result.tasks),
                "startup_s": first - min(started) if first and started else None,
                "wall_s": result.wall_s,
            }
        )
        for t in result:
            server = (t.result or {}).get("forkserver")
            if server:
                servers[server["pid"]] = server
    for pid, server in servers.items():
        rows.append(
            {
                "cluster": f"fork server {pid}",
                "tasks": 0,
                "startup_s": server["ready_epoch"] - server["started_epoch"],
                "wall_s": None,
            }
        )
    return rows


def _cell_span(executed: Path) -> float:
    """Seconds from the first cell's start to the last cell's end, from papermill's metadata."""
    import nbformat

    nb = nbformat.read(str(executed), as_version=4)
    times = [c.metadata.get("papermill", {}) for c in nb.cells]
    starts = [datetime.fromisoformat(t["start_time"]) for t in times if t.get("start_time")]
    ends = [datetime.fromisoformat(t["end_time"]) for t in times if t.get("end_time")]
    return (max(ends) - min(starts)).total_seconds()


def run_lab(name: str, notebook: Path, parameters: dict, timeout: float = 1800) -> dict:
    """Run one lab notebook in a fresh folder; its wall time, its clusters' start-up, the load."""
    import papermill as pm

    with tempfile.TemporaryDirectory(prefix=f"labkit-bench-startup-{name}-") as tmp:
        tmp = Path(tmp)
        os.environ["LABKIT_RUNS"] = str(tmp / "runs")  # the kernel, and the clusters it starts, inherit it
        load0 = os.getloadavg()[0]
        t0 = time.monotonic()
        pm.execute_notebook(
            str(notebook),
            str(tmp / "executed.ipynb"),
            parameters=parameters,
            cwd=str(tmp),
            kernel_name="python3",
            progress_bar=False,
            log_output=False,
            execution_timeout=timeout,
        )
        total = time.monotonic() - t0
        wall = _cell_span(tmp / "executed.ipynb")
        clusters = cluster_startups(tmp / "runs") if (tmp / "runs").exists() else []
    startup = sum(c["startup_s"] or 0.0 for c in clusters)
    return {
        "lab": name,
        "notebook_s": total,
        "wall_s": wall,
        "clusters": sum(1 for c in clusters if c["tasks"]),
        "startup_s": startup,
        "startup_share": startup / wall,
        "load_1min": f"{load0:.1f} -> {os.getloadavg()[0]:.1f}",
        "per_cluster": clusters,
    }


def run(quick: bool = False) -> dict:
    from labkit.grading.judge.rubric import load_rubric

    labs = load_rubric(REPO / "notebooks" / "rubric.toml").labs
    chosen = {"lab4": labs["lab4"]} if quick else labs
    rows, ratios, notes = [], [], []
    for name, lab in chosen.items():
        got = run_lab(name, lab.reference(REPO / "notebooks"), dict(lab.parameters) if quick else {})
        per = got.pop("per_cluster")
        rows.append(got)
        ratios.append(ratio(f"{name}: TensorFlow start-up / wall time", got["startup_share"], GOAL))
        if per:
            notes.append(
                f"{name}: "
                + ", ".join(
                    f"{c['cluster']} {c['startup_s']:.1f} s"
                    if c["startup_s"] is not None
                    else f"{c['cluster']} (no training step)"
                    for c in per
                )
            )
    notes.append(
        f"{os.cpu_count()} cores; load_1min: the machine's 1-minute load average at the lab's start and end "
        f"(other programs share the cores)"
    )
    notes.append(
        "start-up per cluster: first process start (interpreter included) to the chief's first training "
        "step; wall time: first cell's start to last cell's end (kernel start left out)"
    )
    return {
        "title": "TensorFlow start-up per lab (notebook defaults"
        + (", Lab 4 at the rubric's parameters)" if quick else ")"),
        "rows": rows,
        "ratios": ratios,
        "notes": notes,
    }


if __name__ == "__main__":
    entry(run)
