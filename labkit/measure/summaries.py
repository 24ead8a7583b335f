"""Sample frames and what they add up to: the reports' table columns over a window, per task.

A ``labkit.measure.monitor.ResourceSampler`` takes the samples; this module reads them, whether
they come from a live sampler, a task's result file (``to_dict()``) or several tasks at once:

- ``frame(rows, ...)``, ``frame_from_dict(d)``: the samples as a DataFrame, one row per interval
  (its columns: docs/internals.md, section labkit.measure), with ``marks``, ``host``,
  ``start_epoch`` and ``interval`` in ``attrs``;
- ``summarize(frame, start, end)``: the reports' columns over a window that marks or seconds
  bound; ``summarize_tasks``: one row per task of a merged frame;
- ``merge_frames({task: samples})``: several tasks on one time axis, with ``task`` and ``host``;
- ``node_rates(merged, nodes)``: each node's bytes/s on its NICs (on emulated links its own
  ``lan0``); ``link_use(merged, nodes, bytes_per_s)``: the same as shares of a link's rate.

Imports nothing of labkit, so plots, the launcher's results and the dstat CSV can use it.
"""

from __future__ import annotations

import math
import numbers
from typing import Mapping

FORMAT = "labkit.measure.monitor/1"
CPU_FIELDS = ("user", "system", "idle", "iowait", "irq", "softirq", "steal")
BASE_COLUMNS = (
    ["t", "dt", "epoch"]
    + [f"cpu_{f}" for f in CPU_FIELDS]
    + [
        "mem_used",
        "mem_buff",
        "mem_cach",
        "mem_free",
        "proc_cpu",
        "proc_rss",
        "nprocs",
        "net_recv",
        "net_sent",
        "disk_read",
        "disk_write",
    ]
)
NIC_PREFIXES = ("net_recv_", "net_sent_")


# ---------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------


def frame(rows: list[dict], marks: list[dict], host: str, start_epoch: float | None, interval: float):
    """The samples ``rows`` as a DataFrame: the base columns, then one pair per NIC (missing
    values 0); ``attrs`` carry ``marks``, ``host``, ``start_epoch`` and ``interval``."""
    import pandas as pd

    nic_cols = sorted({k for r in rows for k in r if k.startswith(NIC_PREFIXES)}, key=lambda c: (c.split("_", 2)[2], c))
    out = pd.DataFrame(rows, columns=BASE_COLUMNS + nic_cols)
    out[nic_cols] = out[nic_cols].fillna(0)
    out.attrs.update(marks=marks, host=host, start_epoch=start_epoch, interval=interval)
    return out


def check_format(d) -> None:
    """A ValueError unless ``d`` is what ``ResourceSampler.to_dict()`` returned."""
    if not isinstance(d, Mapping) or d.get("format") != FORMAT:
        found = d.get("format") if isinstance(d, Mapping) else type(d).__name__
        raise ValueError(
            f"not a ResourceSampler dict (format {found!r}, expected {FORMAT!r}); "
            "pass the value that ResourceSampler.to_dict() returned"
        )


def rows_from_dict(d: Mapping) -> list[dict]:
    """The sample rows of a ``to_dict()`` dict (JSON's nulls back to NaN)."""
    check_format(d)
    cols = d["columns"]
    n = len(next(iter(cols.values()), []))
    return [{c: (math.nan if v[i] is None else v[i]) for c, v in cols.items()} for i in range(n)]


def frame_from_dict(d: Mapping):
    """The DataFrame of a ``to_dict()`` dict, as read back from a task's result file."""
    return frame(rows_from_dict(d), list(d["marks"]), d["host"], d["start_epoch"], d["interval"])


# ---------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------

SUMMARY_KEYS = (
    "duration_s",
    "samples",
    "cpu_user_pct",
    "cpu_system_pct",
    "cpu_idle_pct",
    "mem_used_bytes",
    "mem_used_peak_bytes",
    "proc_cpu_pct",
    "proc_rss_bytes",
    "proc_rss_peak_bytes",
    "net_recv_bytes",
    "net_sent_bytes",
    "net_recv_bytes_per_s",
    "net_sent_bytes_per_s",
    "disk_read_bytes",
    "disk_write_bytes",
)


def summarize(frame, start: float | str | None = None, end: float | str | None = None, marks=None) -> dict:
    """The reports' table columns for the samples of one task, between ``start`` and ``end``.

    ``start``/``end`` are seconds on the frame's ``t`` axis or mark labels (looked up in
    ``marks``, default ``frame.attrs["marks"]``). Each sample stands for its interval at
    a constant rate, so a window cuts samples pro rata. Returns:

    - ``duration_s``: time covered; ``samples``: samples touching the window;
    - ``cpu_user_pct``/``cpu_system_pct``/``cpu_idle_pct``: host CPU, time-weighted
      average (the reports' "Average User CPU Usage");
    - ``mem_used_bytes``: host memory used, time-weighted average ("Average Memory
      Usage"); ``mem_used_peak_bytes``: its maximum;
    - ``proc_cpu_pct`` (100 = one core), ``proc_rss_bytes``: the watched processes,
      time-weighted averages; ``proc_rss_peak_bytes``: peak RSS;
    - ``net_recv_bytes``/``net_sent_bytes``: totals over the window on the selected NICs;
      ``net_*_bytes_per_s``: the same per second, which is what the reports' "Average
      Network Receive/Send" held (the mean of dstat's per-second column);
    - ``disk_read_bytes``/``disk_write_bytes``: totals.
    """
    if "task" in frame.columns and frame["task"].nunique() > 1:
        raise ValueError(
            f"this frame holds {frame['task'].nunique()} tasks; use summarize_tasks(frame) for one "
            "row per task, or select one: frame[frame.task == NAME]"
        )
    lo, hi = _window(start, end, frame.attrs.get("marks", []) if marks is None else marks)
    import numpy as np

    w, frac = _overlap(frame, lo, hi)
    touched = w > 0

    def mean(col):
        x = frame[col].to_numpy(float)
        ok = touched & np.isfinite(x)
        return float(np.average(x[ok], weights=w[ok])) if ok.any() else math.nan

    def total(col):
        x = frame[col].to_numpy(float)
        return float(np.sum(x[touched] * frac[touched])) if touched.any() else 0.0

    def peak(col):
        x = frame[col].to_numpy(float)[touched]
        return float(np.nanmax(x)) if x.size and np.isfinite(x).any() else math.nan

    duration = float(w.sum())
    out = {
        "duration_s": duration,
        "samples": int(touched.sum()),
        "cpu_user_pct": mean("cpu_user"),
        "cpu_system_pct": mean("cpu_system"),
        "cpu_idle_pct": mean("cpu_idle"),
        "mem_used_bytes": mean("mem_used"),
        "mem_used_peak_bytes": peak("mem_used"),
        "proc_cpu_pct": mean("proc_cpu"),
        "proc_rss_bytes": mean("proc_rss"),
        "proc_rss_peak_bytes": peak("proc_rss"),
        "net_recv_bytes": total("net_recv"),
        "net_sent_bytes": total("net_sent"),
        "disk_read_bytes": total("disk_read") if frame["disk_read"].notna().any() else math.nan,
        "disk_write_bytes": total("disk_write") if frame["disk_write"].notna().any() else math.nan,
    }
    out["net_recv_bytes_per_s"] = out["net_recv_bytes"] / duration if duration > 0 else math.nan
    out["net_sent_bytes_per_s"] = out["net_sent_bytes"] / duration if duration > 0 else math.nan
    return {k: out[k] for k in SUMMARY_KEYS}


def _overlap(frame, lo: float, hi: float):
    """Each sample's seconds inside the window [lo, hi], and that as a share of its interval."""
    import numpy as np

    t, dt = frame["t"].to_numpy(float), frame["dt"].to_numpy(float)
    w = np.clip(np.minimum(t, hi) - np.maximum(t - dt, lo), 0, None)
    return w, np.divide(w, dt, out=np.zeros_like(w), where=dt > 0)


def _window(start, end, marks) -> tuple[float, float]:
    lo = _resolve(start, marks, "start", after=-math.inf)
    hi = _resolve(end, marks, "end", after=-math.inf if lo is None else lo)
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    if hi < lo:
        raise ValueError(f"end ({end!r} at {hi:.2f} s) comes before start ({start!r} at {lo:.2f} s)")
    return lo, hi


def _resolve(point, marks, which: str, after: float) -> float | None:
    """A window edge: None, seconds, or the first mark with that label at or after ``after``."""
    if point is None:
        return None
    if isinstance(point, numbers.Real):
        return float(point)
    found = [m for m in marks if _get(m, "label") == point]
    later = [m for m in found if _get(m, "t") >= after]
    if not later:
        labels = sorted({_get(m, "label") for m in marks})
        where = "" if not found else f" after {after:.2f} s"
        raise ValueError(
            f"{which}={point!r}: no mark with that label{where}; marks are {labels} "
            "(add one with sampler.mark(label)) or give seconds"
        )
    return _get(later[0], "t")


def _get(mark, key):
    return mark[key] if isinstance(mark, Mapping) else getattr(mark, key)


def summarize_tasks(frame, start: float | str | None = None, end: float | str | None = None):
    """One ``summarize`` row per task of a merged frame (see ``merge_frames``), as a
    DataFrame indexed by task with a ``host`` column; marks are looked up per task."""
    import pandas as pd

    if "task" not in frame.columns:
        raise ValueError(
            "this frame has no 'task' column; merge the tasks' samples with merge_frames() first, "
            "or call summarize(frame) for one task"
        )
    marks = frame.attrs.get("marks", [])
    rows = {}
    for task, part in frame.groupby("task", sort=False):
        task_marks = [m for m in marks if m.get("task") == task]
        rows[task] = {
            "host": part["host"].iloc[0] if "host" in part else None,
            **summarize(part, start, end, marks=task_marks),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("task")


def node_rates(
    frame,
    nodes: Mapping[str, str] | None = None,
    start: float | str | None = None,
    end: float | str | None = None,
    marks=None,
):
    """One row per node of a merged frame: the bytes/s its NICs received and sent over a window.

    A node's network counters are host-wide, the same for every task on it, so each node is read
    once, from its first task. ``nodes``: task -> node (default: the frame's ``host`` column;
    emulated nodes share one host name, so pass the tasks' hosts from the cluster spec).
    ``start``/``end``: seconds on the frame's axis or mark labels (looked up in ``marks``,
    default every task's: pass one task's marks, e.g. the chief's training window).

    Columns: ``tasks`` on the node; ``nics``: the NICs counted, all but ``lo`` (on emulated links
    the node's ``lan0``: what crosses its link); ``recv_bytes_per_s``, ``sent_bytes_per_s`` and
    ``bytes_per_s`` (their sum) on them; ``lo_bytes_per_s``: traffic between tasks of the node,
    which never reaches its link (one side: on ``lo`` sent == received); ``duration_s``."""
    import numpy as np
    import pandas as pd

    if "task" not in frame.columns:
        raise ValueError(
            "node_rates reads a merged frame (merge_frames, or ClusterResult.samples()): it has no 'task' column"
        )
    lo, hi = _window(start, end, frame.attrs.get("marks", []) if marks is None else marks)
    node_of = dict(nodes) if nodes is not None else dict(zip(frame["task"], frame["host"]))
    rows = {}
    for node, (tasks, part) in _node_parts(frame, node_of).items():
        w, frac = _overlap(part, lo, hi)
        duration = float(w.sum())

        def rate(col: str) -> float:
            x = part[col].to_numpy(float) if col in part else np.zeros(len(part))
            return float(np.nansum(x * frac)) / duration if duration > 0 else math.nan

        nics = sorted({c.split("_", 2)[2] for c in part.columns if c.startswith(NIC_PREFIXES)} - {"lo"})
        nics = [n for n in nics if rate(f"net_recv_{n}") + rate(f"net_sent_{n}") > 0] or nics
        recv = sum(rate(f"net_recv_{n}") for n in nics)
        sent = sum(rate(f"net_sent_{n}") for n in nics)
        rows[node] = {
            "tasks": tasks,
            "nics": ", ".join(nics),
            "recv_bytes_per_s": recv,
            "sent_bytes_per_s": sent,
            "bytes_per_s": recv + sent,
            "lo_bytes_per_s": rate("net_recv_lo"),
            "duration_s": duration,
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("node")


def link_use(
    frame,
    nodes: Mapping[str, str],
    bytes_per_s: float,
    start: float | str | None = None,
    end: float | str | None = None,
    marks=None,
):
    """One row per node: how busy its link was over a window, against ``bytes_per_s`` each way.

    ``in_share``/``out_share``: bytes received/sent on its NICs (all but ``lo``, as
    ``node_rates``) over what the link carries each way in the window. ``busy_share``: the
    share of the window the link needs to move both directions' bytes one after the other, at
    most all of each sample's interval. A synchronous step's pull and push take turns (the
    gradient goes out only once the weights are in), so each direction's share alone
    understates how long the link was busy; where the directions do overlap within a
    sample, the cap keeps a saturated full-duplex link at 1. ``tasks`` on the node."""
    import numpy as np
    import pandas as pd

    if not bytes_per_s > 0:
        raise ValueError(f"bytes_per_s={bytes_per_s!r}: give the link's rate each way, in bytes/s")
    lo, hi = _window(start, end, frame.attrs.get("marks", []) if marks is None else marks)
    rows = {}
    for node, (tasks, part) in _node_parts(frame, nodes).items():
        w, frac = _overlap(part, lo, hi)
        duration = float(w.sum())
        got, put = _nic_bytes(part, "recv"), _nic_bytes(part, "sent")
        dt = part["dt"].to_numpy(float)
        busy = np.minimum(1.0, np.divide(got + put, bytes_per_s * dt, out=np.zeros_like(dt), where=dt > 0))
        capacity = bytes_per_s * duration
        rows[node] = {
            "tasks": tasks,
            "in_share": float(np.sum(got * frac)) / capacity if duration > 0 else math.nan,
            "out_share": float(np.sum(put * frac)) / capacity if duration > 0 else math.nan,
            "busy_share": float(np.sum(busy * w)) / duration if duration > 0 else math.nan,
            "duration_s": duration,
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("node")


def _node_parts(frame, nodes: Mapping[str, str]) -> dict:
    """node -> (its tasks, "a, b"; the samples of its first task): a node's counters are the same
    for every task on it."""
    unknown = sorted(set(frame["task"]) - set(nodes))
    if unknown:
        raise ValueError(f"nodes names no node for task(s) {unknown}; give every task of the frame its node")
    out = {}
    for task in dict.fromkeys(frame["task"]):
        node = nodes[task]
        out[node] = (f"{out[node][0]}, {task}", out[node][1]) if node in out else (task, frame[frame["task"] == task])
    return out


def _nic_bytes(part, direction: str):
    """Bytes per sample ``direction`` ("recv" or "sent") on every NIC of the samples but ``lo``."""
    import numpy as np

    cols = [c for c in part.columns if c.startswith(f"net_{direction}_") and c != f"net_{direction}_lo"]
    return np.nansum(part[cols].to_numpy(float), axis=1) if cols else np.zeros(len(part))


# ---------------------------------------------------------------------------------------
# Several tasks
# ---------------------------------------------------------------------------------------


def merge_frames(tasks: Mapping[str, object]):
    """One frame from several tasks' samples, with ``task`` and ``host`` columns.

    Values may be DataFrames from ``to_frame()``, samplers, or ``to_dict()`` dicts (as
    read from task result files). ``t`` is re-based to the earliest start so all tasks
    share one time axis (wall clocks of different nodes must agree, e.g. via NTP); the
    tasks' marks are kept in ``attrs["marks"]`` with their ``task``."""
    import pandas as pd

    if not tasks:
        raise ValueError("merge_frames() needs at least one task: {name: frame, sampler or dict}")
    frames = {name: _as_frame(v, name) for name, v in tasks.items()}
    origin = min(f.attrs.get("start_epoch") or 0.0 for f in frames.values())
    parts, marks = [], []
    for name, f in frames.items():
        shift = (f.attrs.get("start_epoch") or origin) - origin
        part = f.assign(t=f["t"] + shift, task=name, host=f.attrs.get("host"))
        parts.append(part)
        marks += [{**m, "t": m["t"] + shift, "task": name} for m in f.attrs.get("marks", [])]
    merged = pd.concat(parts, ignore_index=True)
    nic_cols = [c for c in merged.columns if c.startswith(NIC_PREFIXES)]
    merged[nic_cols] = merged[nic_cols].fillna(0)
    merged.attrs = {"marks": sorted(marks, key=lambda m: m["t"]), "start_epoch": origin}
    return merged


def _as_frame(value, name):
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        return value
    if hasattr(value, "to_frame"):  # a ResourceSampler
        return value.to_frame()
    if isinstance(value, Mapping):
        return frame_from_dict(value)
    raise ValueError(
        f"task {name!r}: expected a DataFrame, ResourceSampler or to_dict() dict, got {type(value).__name__}"
    )
