"""dstat's CSV layout (``dstat -tcmdn --output``, dstat 0.7.2), written and read.

The course's reports measured with dstat; ``write_dstat_csv`` writes the kit's samples in
that layout so existing scripts keep working, and ``read_dstat_csv`` reads a real dstat file
(or ours) into the sampler's columns, so old measurements get the same summaries and plots.
"""

from __future__ import annotations

import csv
import getpass
import math
import re
import socket
import time
from pathlib import Path

from labkit.measure.summaries import BASE_COLUMNS, NIC_PREFIXES

DSTAT_VERSION = "0.7.2"
DSTAT_AUTHOR = "labkit.measure.monitor (psutil)"
_DSTAT_CPU = [
    ("usr", "cpu_user"),
    ("sys", "cpu_system"),
    ("idl", "cpu_idle"),
    ("wai", "cpu_iowait"),
    ("hiq", "cpu_irq"),
    ("siq", "cpu_softirq"),
]
_DSTAT_MEM = [("used", "mem_used"), ("buff", "mem_buff"), ("cach", "mem_cach"), ("free", "mem_free")]


def write_dstat_csv(frame, path, per_nic: bool = False) -> Path:
    """Write one host's samples in the layout of ``dstat -tcmdn --output`` (dstat 0.7.2):
    four header lines and a blank line, the group row ("system", "total cpu usage",
    "memory usage", "dsk/total", "net/total"), the column row ("time", "usr", "sys",
    ...), then one row per sample. As in dstat, disk and network are bytes per second.
    Unlike dstat, "net/total" is the sum of the sampler's NICs, ``lo`` included (sample
    with ``nics=[...]`` for another choice). ``per_nic=True`` adds one "net/<nic>" group
    per interface after the total, as ``dstat -N total,lo,eth0`` does. Existing dstat
    scripts (``pd.read_csv(path, skiprows=6)``, fixed line skips, ``df["recv"]``) work."""
    if "task" in frame.columns and frame["task"].nunique() > 1:
        raise ValueError("dstat's CSV holds one host's samples; write each task's frame on its own")
    path = Path(path)
    nics = [c[len("net_recv_") :] for c in frame.columns if c.startswith("net_recv_")] if per_nic else []
    groups = [
        ("system", [("time", None)]),
        ("total cpu usage", _DSTAT_CPU),
        ("memory usage", _DSTAT_MEM),
        ("dsk/total", [("read", "disk_read"), ("writ", "disk_write")]),
        ("net/total", [("recv", "net_recv"), ("send", "net_sent")]),
    ]
    groups += [(f"net/{n}", [("recv", f"net_recv_{n}"), ("send", f"net_sent_{n}")]) for n in nics]
    start = frame.attrs.get("start_epoch") or time.time()
    interval = frame.attrs.get("interval") or (float(frame["dt"].median()) if len(frame) else 1.0)
    host = frame.attrs.get("host") or socket.gethostname()
    nic_opt = f"-N {','.join(['total'] + nics)} " if nics else ""
    cmdline = f"dstat -tcmdn {nic_opt}--output {path.name} {interval:g}"
    date = time.strftime("%d %b %Y %H:%M:%S %Z", time.localtime(start))
    lines = [
        f'"Dstat {DSTAT_VERSION} CSV output"',
        f'"Author:","{DSTAT_AUTHOR}",,,,"URL:","https://github.com/dstat-real/dstat"',
        f'"Host:","{host}",,,,"User:","{_user()}"',
        f'"Cmdline:","{cmdline}",,,,"Date:","{date}"',
        "",
        ",".join(f'"{g}"' + "," * (len(cols) - 1) for g, cols in groups),
        ",".join(f'"{c}"' for _, cols in groups for c, _ in cols),
    ]
    rate_cols = {"disk_read", "disk_write", "net_recv", "net_sent"} | {
        c for c in frame.columns if c.startswith(NIC_PREFIXES)
    }
    for row in frame.to_dict(orient="records"):
        epoch = row["epoch"] if row.get("epoch") == row.get("epoch") else start + row["t"]
        cells = [time.strftime("%d-%m %H:%M:%S", time.localtime(epoch))]
        for _, cols in groups[1:]:
            for _, col in cols:
                v = float(row[col])
                cells.append(_dstat_number(v / row["dt"] if col in rate_cols and row["dt"] > 0 else v))
        lines.append(",".join(cells))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _dstat_number(v: float) -> str:
    if not math.isfinite(v):
        return ""
    return f"{v:.1f}" if v == int(v) else f"{v:.3f}"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "?"


_DSTAT_NAMES = (
    {("total cpu usage", d): ours for d, ours in _DSTAT_CPU}
    | {("memory usage", d): ours for d, ours in _DSTAT_MEM}
    | {
        ("dsk/total", "read"): "disk_read",
        ("dsk/total", "writ"): "disk_write",
        ("net/total", "recv"): "net_recv",
        ("net/total", "send"): "net_sent",
        ("epoch", "epoch"): "epoch",
    }
)


def read_dstat_csv(path, drop_first: bool | None = None):
    """Read a dstat ``--output`` CSV (real dstat's, or ours) into the sampler's columns,
    so old measurements get the same summaries and plots. Rates become bytes per
    interval; the interval is the delay on dstat's command line (default 1 s). Real
    dstat's first row averages everything since boot, so it is dropped
    (``drop_first=None`` drops it unless labkit wrote the file)."""
    import pandas as pd

    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = {r[0].rstrip(":"): r for r in rows[:4] if r}
    starts = [
        i
        for i, r in enumerate(rows[:12])
        if r
        and i + 1 < len(rows)
        and rows[i + 1]
        and not r[0].startswith(("Dstat", "Author", "Host", "Cmdline"))
        and r[0]
    ]
    if "Cmdline" not in header or not starts:
        raise ValueError(
            f"{path}: not a dstat --output CSV (expected the 'Dstat ... CSV output' header lines, "
            "a group row and a column row)"
        )
    g, group_row, col_row = starts[0], rows[starts[0]], rows[starts[0] + 1]
    names, group = [], ""
    for i, col in enumerate(col_row):
        group = group_row[i] if i < len(group_row) and group_row[i] else group
        nic = group[4:] if group.startswith("net/") and group != "net/total" else None
        names.append(
            f"net_{'recv' if col == 'recv' else 'sent'}_{nic}"
            if nic
            else _DSTAT_NAMES.get((group, col), f"{group}/{col}")
        )
    data = pd.DataFrame([r for r in rows[g + 2 :] if r], columns=names)
    interval = 1.0
    m = re.search(r"\s(\d+(?:\.\d+)?)(?:\s+\d+)?\s*$", header["Cmdline"][1])
    if m:
        interval = float(m.group(1))
    if drop_first is None:
        drop_first = DSTAT_AUTHOR not in header.get("Author", ["", ""])[1]
    if drop_first:
        data = data.iloc[1:].reset_index(drop=True)
    for c in data.columns:
        if c not in ("system/time",):
            data[c] = pd.to_numeric(data[c], errors="coerce")
    data["dt"] = interval
    data["t"] = interval * (data.index + 1)
    for c in [c for c in data.columns if c.startswith(("net_", "disk_"))]:
        data[c] = data[c] * interval
    for c in BASE_COLUMNS:
        if c not in data.columns:
            data[c] = 0.0 if c in ("proc_cpu", "proc_rss", "nprocs") else math.nan
    nic_cols = [c for c in data.columns if c.startswith(NIC_PREFIXES)]
    frame = data[BASE_COLUMNS + nic_cols].copy()
    frame.attrs.update(marks=[], host=header.get("Host", ["", ""])[1], interval=interval, start_epoch=None)
    return frame
