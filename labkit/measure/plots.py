"""Every figure of the labs, with one look: a seaborn theme, bytes as B/KB/MB/GB, time in s.

Conventions for every function here (lab helpers: add yours in a section of its own
below, and build figures with ``subplots`` so they share the look):

- A function returns a ``matplotlib.figure.Figure`` that pyplot does not manage: a
  notebook shows it when it is the cell's value (or via ``display(fig)``), exactly once;
  scripts save it with ``fig.savefig(path)``. No GUI backend is needed, so headless
  runs (papermill, the CLI, CI) never touch a display, and loops of figures leak nothing.
- Bytes use decimal units (1 KB = 1000 B), as the course reports did (``labkit.measure.units``).
- Plots read the frames' columns; labkit modules are imported lazily, inside functions.
"""

from __future__ import annotations

import sys

from labkit.measure.units import fmt_bytes

# ---------------------------------------------------------------------------------------
# Look and units
# ---------------------------------------------------------------------------------------

_themed = False


def bytes_axis(ax, axis: str = "y", per_second: bool = False) -> None:
    """Label an axis's ticks as bytes (``1.5 MB``), or as a rate (``1.5 MB/s``)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    suffix = "/s" if per_second else ""
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(FuncFormatter(lambda v, _pos: fmt_bytes(v).replace(".0 ", " ") + suffix))
    target.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))


def skipped(ax, why: str) -> None:
    """An empty panel that says why it is empty (a section that did not run here, say)."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, wrap=True)


def use_theme() -> None:
    """Apply the labs' seaborn theme (once)."""
    global _themed
    if not _themed:
        import seaborn as sns

        sns.set_theme(
            style="whitegrid",
            context="notebook",
            palette="colorblind",
            rc={"figure.dpi": 100, "savefig.dpi": 120, "savefig.bbox": "tight", "legend.fontsize": "small"},
        )
        _themed = True


def subplots(nrows: int = 1, ncols: int = 1, **kwargs):
    """``(fig, axes)`` like ``plt.subplots``, themed, as a Figure pyplot does not manage."""
    from matplotlib.figure import Figure

    use_theme()
    _show_figures_in_ipython()
    kwargs.setdefault("layout", "constrained")
    fig = Figure(figsize=kwargs.pop("figsize", (9, 2.4 * nrows + 0.6)), layout=kwargs.pop("layout"))
    axes = fig.subplots(nrows, ncols, **kwargs)
    return fig, axes


def _show_figures_in_ipython() -> None:
    """Let IPython display a Figure that pyplot does not manage (as PNG), unless a
    formatter (matplotlib's inline backend) is already registered."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    if shell is None:
        return
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    png = shell.display_formatter.formatters["image/png"]
    try:
        png.lookup_by_type(Figure)
    except KeyError:
        png.for_type(Figure, lambda fig: print_figure(fig, "png", bbox_inches="tight"))


def palette(n: int) -> list:
    import seaborn as sns

    return sns.color_palette("colorblind", max(n, 1))


def draw_marks(axes, marks, colors: dict | None = None) -> None:
    """Vertical lines at each mark (dicts or objects with ``t``, ``label`` and optionally
    ``task``), labelled on the first axis."""
    colors = colors or {}
    for i, ax in enumerate(axes):
        for m in marks:
            t, label, task = _field(m, "t"), _field(m, "label"), _field(m, "task")
            color = colors.get(task, "0.35")
            ax.axvline(t, color=color, ls=":", lw=1.2, zorder=1)
            if i == 0:
                ax.annotate(
                    label,
                    xy=(t, 1),
                    xycoords=("data", "axes fraction"),
                    xytext=(2, -2),
                    textcoords="offset points",
                    rotation=90,
                    va="top",
                    ha="left",
                    fontsize="x-small",
                    color=color,
                )


def _need_columns(frame, columns, who: str, where: str = "") -> None:
    """A clear error, naming the function and the frame's columns, when one is missing."""
    for c in columns:
        if c not in frame.columns:
            raise ValueError(f"{who}(): no column {c!r}{where} (columns: {list(frame.columns)})")


def _legend_outside(fig, axes) -> None:
    """One legend for the figure, right of the panels: each label once, from the first of
    ``axes`` that draws it (panels share colours, so one entry explains them all)."""
    handles = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize="small")


def _field(m, key):
    if isinstance(m, dict):
        return m.get(key)
    if isinstance(m, (tuple, list)):  # (label, t)
        return {"label": m[0], "t": m[1]}.get(key)
    return getattr(m, key, None)


# ---------------------------------------------------------------------------------------
# Resource timelines (frames of labkit.measure.monitor)
# ---------------------------------------------------------------------------------------


def resource_timeline(data, marks=None, title: str | None = None, layout: str = "overlay"):
    """CPU, memory and network over time, with the marks as vertical lines.

    ``data``: one sampler frame; a merged frame with a ``task`` column; or a dict
    ``{task: frame}`` (or of samplers). Several tasks get one colour each: solid lines
    are the tasks' processes (CPU %, 100 = one core; RSS), grey dashed lines the host
    (busy CPU % of all cores, memory used), drawn once per host. The network panel is
    host-wide per interface selection: received solid, sent dashed, in bytes per second.
    ``layout="rows"`` gives each task its own row of the three panels instead.
    ``marks``: default the frames' ``attrs["marks"]``.
    """
    if layout not in ("overlay", "rows"):
        raise ValueError(f"layout={layout!r}: use 'overlay' (tasks share panels) or 'rows' (one row per task)")
    frame = _one_frame(data)
    frames = {str(k): g for k, g in frame.groupby("task", sort=False)} if "task" in frame.columns else {"": frame}
    if marks is None:
        marks = frame.attrs.get("marks", [])
    colors = dict(zip(frames, palette(len(frames))))
    if layout == "overlay" or len(frames) == 1:
        fig, axes = subplots(3, 1, sharex=True, figsize=(9, 7))
        _resource_panels(axes, frames, colors, legend="right")
        draw_marks(axes, marks, colors)
    else:
        fig, grid = subplots(len(frames), 3, sharex=True, figsize=(14, 2.4 * len(frames) + 0.8), squeeze=False)
        for i, (row, name) in enumerate(zip(grid, frames)):
            _resource_panels(row, {name: frames[name]}, colors, legend="inside" if i == 0 else None)
            draw_marks(row, [m for m in marks if _field(m, "task") in (None, name)], colors)
            row[0].set_title(name, loc="left", fontsize="medium")
            if i < len(frames) - 1:
                row[2].set_xlabel("")
    if title:
        fig.suptitle(title)
    return fig


def _resource_panels(axes, frames: dict, colors: dict, legend: str | None) -> None:
    """CPU, memory and network panels. Rates hold over each sample's interval, so they
    are drawn as steps; host memory gets its own (right, grey) axis, since it dwarfs RSS."""
    cpu, mem, net = axes
    host_mem = mem.twinx()
    host_mem.grid(False)
    several = len(frames) > 1
    hosts_done = set()
    for name, f in frames.items():
        color = colors[name]
        label = name if several else "process"
        cpu.plot(f["t"], f["proc_cpu"], color=color, lw=1.6, drawstyle="steps-pre", label=f"{label} (100 = 1 core)")
        mem.plot(f["t"], f["proc_rss"], color=color, lw=1.6, label=f"{label} RSS")
        host = f["host"].iloc[0] if "host" in f.columns and len(f) else f.attrs.get("host")
        if host in hosts_done:
            continue
        hosts_done.add(host)
        tag = f"host {host}" if several and host else "host"
        cpu.plot(
            f["t"],
            f["cpu_user"] + f["cpu_system"],
            color="0.45",
            ls="--",
            lw=1,
            drawstyle="steps-pre",
            label=f"{tag} busy (% of all cores)" if not several else f"{tag} busy",
        )
        host_mem.plot(f["t"], f["mem_used"], color="0.45", ls="--", lw=1, label=f"{tag} used (right)")
        dt = f["dt"].where(f["dt"] > 0)
        net_color = color if several else "C0"
        net.plot(f["t"], f["net_recv"] / dt, color=net_color, lw=1.4, drawstyle="steps-pre", label=f"{tag} recv")
        net.plot(
            f["t"], f["net_sent"] / dt, color=net_color, lw=1.2, ls="--", drawstyle="steps-pre", label=f"{tag} sent"
        )
    cpu.set_ylabel("CPU (%)")
    mem.set_ylabel("process memory")
    host_mem.set_ylabel("host memory", color="0.35")
    net.set_ylabel("network")
    for ax in (cpu, mem, host_mem, net):
        ax.set_ylim(bottom=0)
    net.set_ylim(top=max(net.get_ylim()[1], 1000))  # an idle network still gets readable ticks
    for ax in (mem, host_mem):
        bytes_axis(ax)
    bytes_axis(net, per_second=True)
    net.set_xlabel("time (s)")
    if legend:
        outside = legend == "right"
        style = dict(fontsize="x-small", loc="upper left" if outside else "best", frameon=not outside, framealpha=0.8)
        h, lab = mem.get_legend_handles_labels()
        h2, lab2 = host_mem.get_legend_handles_labels()
        for ax, anchor, (hs, ls) in (
            (cpu, 1.02, cpu.get_legend_handles_labels()),
            (mem, 1.16, (h + h2, lab + lab2)),
            (net, 1.02, net.get_legend_handles_labels()),
        ):
            (host_mem if ax is mem else ax).legend(
                hs, ls, **style, **({"bbox_to_anchor": (anchor, 1.0), "borderaxespad": 0} if outside else {})
            )


def _one_frame(data):
    """A sampler frame, a merged frame, or a dict of frames/samplers/dicts (merged here,
    which lines up their clocks) -> one frame."""
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return data
    if hasattr(data, "to_frame"):
        return data.to_frame()
    if isinstance(data, dict) and data:
        from labkit.measure.summaries import merge_frames

        return merge_frames(data)
    raise ValueError(
        f"resource_timeline() needs a sampler frame, a merged frame or a dict of them, got {type(data).__name__}"
    )


# ---------------------------------------------------------------------------------------
# Lab 5: scaling curves, crossover map, bytes per task, report 003 measured, a fault trace (Labs 2-4 share some)
# ---------------------------------------------------------------------------------------

_ARCH_NAMES = {"ps": "parameter server", "ring": "ring all-reduce"}
_METRIC_NAMES = {"images_per_s": "images/s", "speedup": "speed-up", "step_s": "time per step (s)"}


def log_bytes_axis(ax, axis: str = "x") -> None:
    """A log-scaled axis whose ticks read as bytes (1 KB, 1 MB, ...)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(LogLocator(base=1000))
    target.set_major_formatter(FuncFormatter(lambda v, _pos: fmt_bytes(v, 0)))


def scaling_curves(
    predicted,
    measured=None,
    metrics=("images_per_s", "speedup"),
    col: str = "arch",
    hue: str = "model",
    title: str | None = None,
):
    """Images/s and speed-up against workers: one row per metric, one column per ``col``
    value (by default the architecture, as report 003's Figures 4.1-4.4), one colour per
    ``hue`` value. ``predicted`` (lines) and ``measured`` (points) are frames with
    ``workers``, the metrics and those columns; either may be None. Rows share their y
    axis; speed-up panels show the ideal N dotted; images/s spanning over 30x goes log."""
    import pandas as pd
    from matplotlib.ticker import FuncFormatter

    frames = [f for f in (predicted, measured) if f is not None]
    if not frames:
        raise ValueError("scaling_curves() needs a predicted or a measured frame")
    both = pd.concat(frames, ignore_index=True)
    _need_columns(both, ("workers", col, hue, *metrics), "scaling_curves", where=" in the frames")
    cols = list(dict.fromkeys(both[col]))
    hues = list(dict.fromkeys(both[hue]))
    colors = dict(zip(hues, palette(len(hues))))
    fig, axes = subplots(
        len(metrics),
        len(cols),
        sharex=True,
        sharey="row",
        squeeze=False,
        figsize=(4.5 * len(cols) + 1.5, 3.1 * len(metrics)),
    )
    for j, c in enumerate(cols):
        for i, metric in enumerate(metrics):
            ax = axes[i][j]
            for h in hues:
                if predicted is not None:
                    p = predicted[(predicted[col] == c) & (predicted[hue] == h)].sort_values("workers")
                    if len(p):
                        ax.plot(p["workers"], p[metric], color=colors[h], lw=1.8, label=f"{h}")
                if measured is not None:
                    m = measured[(measured[col] == c) & (measured[hue] == h)]
                    if len(m):
                        ax.plot(
                            m["workers"], m[metric], "o", color=colors[h], ms=6, mec="white", label=f"{h} (measured)"
                        )
            if metric == "speedup":
                n = sorted(both["workers"].unique())
                ax.plot(n, n, ":", color="0.4", lw=1, label="ideal (N)")
            ax.set_ylabel(_METRIC_NAMES.get(metric, metric))
            if i == 0:
                ax.set_title(_ARCH_NAMES.get(c, str(c)))
            if i == len(metrics) - 1:
                ax.set_xlabel("workers (N)")
            ax.xaxis.get_major_locator().set_params(integer=True)
    for i, metric in enumerate(metrics):  # scale each row once all its panels are drawn (they share y)
        values = both[metric].dropna()
        if metric != "speedup" and len(values) and (values > 0).all() and values.max() > 30 * values.min():
            axes[i][0].set_yscale("log")
            axes[i][0].yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        else:
            top = max(values.max() if len(values) else 1.0, both["workers"].max() if metric == "speedup" else 0)
            axes[i][0].set_ylim(0, 1.08 * top)
    _legend_outside(fig, [axes[0][-1], *(a for row in axes for a in row)])
    if title:
        fig.suptitle(title)
    return fig


def crossover_map(grid, marks: dict | None = None, title: str | None = None):
    """Where the ring beats PS: colour = log2(t_ps / t_ring) over model size x workers,
    one panel per network (rows of :func:`labkit.learning.costmodel.crossover_map`). Blue: the ring
    is faster; the black line is the crossover. ``marks``: {name: model bytes} drawn as
    dotted lines (e.g. report 003's models)."""
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    networks = list(dict.fromkeys(grid["network"]))
    fig, axes = subplots(1, len(networks), sharey=True, squeeze=False, figsize=(5 * len(networks) + 1, 3.8))
    z_all = np.log2(grid["ring_speedup"].clip(lower=1e-6))
    lim = max(1.0, float(np.nanmax(np.abs(z_all))))
    norm = TwoSlopeNorm(vcenter=0, vmin=-lim, vmax=lim)
    mesh = None
    for ax, net in zip(axes[0], networks):
        g = grid[grid["network"] == net].pivot_table(index="workers", columns="model_bytes", values="ring_speedup")
        x, y, z = g.columns.values, g.index.values, np.log2(g.values.clip(1e-6))
        mesh = ax.pcolormesh(x, y, z, cmap="RdBu", norm=norm, shading="nearest")
        if z.min() < 0 < z.max():
            ax.contour(x, y, z, levels=[0], colors="black", linewidths=1.5)
        for b, names in _merge_close(marks or {}):
            ax.axvline(b, color="0.2", ls=":", lw=1)
            ax.annotate(
                ", ".join(names),
                xy=(b, 0),
                xycoords=("data", "axes fraction"),
                xytext=(-3, 3),
                textcoords="offset points",
                rotation=90,
                ha="right",
                va="bottom",
                fontsize="x-small",
            )
        log_bytes_axis(ax, "x")
        ax.set_title(str(net))
        ax.set_xlabel("model size (M)")
        ax.grid(False)
    axes[0][0].set_ylabel("workers (N)")
    axes[0][0].yaxis.get_major_locator().set_params(integer=True)
    cbar = fig.colorbar(mesh, ax=axes[0].tolist(), shrink=0.9)
    cbar.set_label("log2(t_ps / t_ring); > 0: ring faster")
    if title:
        fig.suptitle(title)
    return fig


def _merge_close(marks: dict, within: float = 0.1) -> list:
    """[(position, [names])], names whose positions lie within ``within`` (relative) merged."""
    merged = []
    for name, b in sorted(marks.items(), key=lambda kv: kv[1]):
        if merged and b <= merged[-1][0] * (1 + within):
            merged[-1][1].append(name)
        else:
            merged.append((b, [name]))
    return merged


def bytes_vs_analytic(frame, label: str = "run", tolerance: float = 0.25, title: str | None = None):
    """Measured and analytic bytes per step side by side, one pair of bars per ``label``
    value; bars off by more than ``tolerance`` (relative) are flagged with their deviation.
    ``frame`` needs columns ``label``, ``measured`` and ``analytic`` (bytes)."""
    import numpy as np

    _need_columns(frame, (label, "measured", "analytic"), "bytes_vs_analytic")
    fig, ax = subplots(1, 1, figsize=(max(5.0, 1.1 * len(frame) + 2), 3.4))
    x = np.arange(len(frame))
    c_meas, c_ana = palette(2)
    ax.bar(x - 0.2, frame["analytic"], 0.4, color=c_ana, label="analytic")
    ax.bar(x + 0.2, frame["measured"], 0.4, color=c_meas, label="measured")
    for xi, (m, a) in zip(x, zip(frame["measured"], frame["analytic"])):
        dev = m / a - 1 if a else float("inf")
        flag = abs(dev) > tolerance
        ax.annotate(
            f"{dev:+.0%}" + (" !" if flag else ""),
            xy=(xi + 0.2, m),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            fontsize="x-small",
            color="red" if flag else "0.2",
            fontweight="bold" if flag else "normal",
        )
    ax.set_xticks(x, [str(v) for v in frame[label]], rotation=20, ha="right")
    ax.set_ylabel("bytes per step")
    bytes_axis(ax)
    ax.legend(loc="upper left")
    if title:
        ax.set_title(title)
    return fig


def task_bytes(frame, title: str | None = None):
    """Bytes each task sent and received per step, as multiples of the model's bytes M: one
    pair of bars per (run, task). ``frame``: ``ring_vs_ps.Scaling.task_bytes()`` (columns
    ``run``, ``task``, ``sent_over_model``, ``recv_over_model``); ``total`` rows are left out."""
    import numpy as np

    _need_columns(frame, ("run", "task", "sent_over_model", "recv_over_model"), "task_bytes")
    frame = frame[frame["task"] != "total"]
    fig, ax = subplots(1, 1, figsize=(max(5.0, 0.8 * len(frame) + 2), 3.4))
    x = np.arange(len(frame))
    c_sent, c_recv = palette(2)
    ax.bar(x - 0.2, frame["sent_over_model"], 0.4, color=c_sent, label="sent")
    ax.bar(x + 0.2, frame["recv_over_model"], 0.4, color=c_recv, label="received")
    ax.set_xticks(
        x, [f"{r} {t}" for r, t in zip(frame["run"], frame["task"])], rotation=30, ha="right", fontsize="x-small"
    )
    ax.set_ylabel("bytes per step / M")
    ax.legend(loc="upper left")
    if title:
        ax.set_title(title)
    return fig


def emulated_scaling(measured, predicted, nodes, title: str | None = None):
    """Report 003's Figures 4.1-4.4, measured on emulated links: images/s and speed-up against N
    per architecture (points: ``measured``, ``ring_vs_ps.Emulated.table()``; lines: the cost
    model's ``predicted``, ``Emulated.curves()``: solid on these nodes, dashed on nodes with a
    core each), and the bytes per step through each node's NIC (``nodes``, ``Emulated.nodes()``)."""
    _need_columns(measured, ("arch", "workers", "images_per_s", "speedup"), "emulated_scaling")
    _need_columns(predicted, ("arch", "workers", "images_per_s", "speedup", "where"), "emulated_scaling")
    fig, axes = subplots(1, 3, figsize=(13, 3.5))
    colors = dict(zip(("ps", "ring"), palette(2)))
    for arch, color in colors.items():
        m = measured[measured["arch"] == arch]
        for ax, metric in zip(axes[:2], ("images_per_s", "speedup")):
            ax.plot(m["workers"], m[metric], "o", color=color, ms=7, mec="white", label=f"{arch} measured")
            for where, style in (("these nodes", "-"), ("a core per node", "--")):
                p = predicted[(predicted["arch"] == arch) & (predicted["where"] == where)]
                ax.plot(p["workers"], p[metric], style, color=color, lw=1.4, label=f"{arch} cost model, {where}")
        n = nodes[nodes["arch"] == arch]
        if len(n):
            busiest = n.groupby("workers")["bytes_per_step"].max()
            axes[2].plot(busiest.index, busiest.values, "o-", color=color, label=f"{arch}: busiest node")
            if arch == "ps":
                others = n[~n["tasks"].str.contains("ps:")].groupby("workers")["bytes_per_step"].mean()
                axes[2].plot(others.index, others.values, "s:", color=color, mfc="none", label="ps: a worker's node")
    axes[0].set(xlabel="workers (N)", ylabel="images/s", title="images/s (Figs 4.1, 4.2)")
    axes[1].set(xlabel="workers (N)", ylabel="speed-up over N = 1", title="speed-up (Figs 4.3, 4.4)")
    axes[2].set(xlabel="workers (N)", ylabel="bytes per step through the NIC", title="per-node traffic")
    bytes_axis(axes[2])
    for ax in axes:
        ax.xaxis.get_major_locator().set_params(integer=True)
    _legend_outside(fig, axes)
    if title:
        fig.suptitle(title)
    return fig


def fault_trace(steps, kills, title: str | None = None):
    """A traced PS run (``ring_vs_ps.ps_failure``): per step, its time (top) and the worker
    that ran each slice of its global batch (bottom); the kills as vertical lines."""
    import numpy as np

    fig, (top, bottom) = subplots(2, 1, sharex=True, figsize=(9, 4.6))
    if not steps:
        skipped(top, "no step was traced")
        return fig
    x = [s["step"] for s in steps]
    top.plot(x, [s["seconds"] for s in steps], ".-", lw=1)
    top.set_ylabel("seconds per step")
    width = max(len(s["slices_on"]) for s in steps)
    grid = np.full((width, len(steps)), np.nan)
    for j, s in enumerate(steps):
        grid[: len(s["slices_on"]), j] = s["slices_on"]
    workers = int(np.nanmax(grid)) + 1
    cmap = _discrete_cmap(workers)
    bottom.pcolormesh(
        np.arange(len(x) + 1) + x[0] - 0.5,
        np.arange(width + 1) - 0.5,
        grid,
        cmap=cmap,
        vmin=-0.5,
        vmax=workers - 0.5,
        shading="flat",
    )
    bottom.set(ylabel="slice of the batch", xlabel="step", yticks=range(width))
    bottom.grid(False)
    for w in range(workers):
        bottom.plot([], [], "s", color=cmap(w), label=f"worker {w}")
    for k in kills:
        for ax in (top, bottom):
            ax.axvline(k["after_step"] + 0.5, color="red", lw=1.2, ls="--")
        top.annotate(
            f"{k['task']} killed",
            xy=(k["after_step"] + 0.5, 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            color="red",
            fontsize="small",
        )
    bottom.legend(loc="upper left", fontsize="x-small", ncol=workers)
    if title:
        fig.suptitle(title)
    return fig


def _discrete_cmap(n: int):
    from matplotlib.colors import ListedColormap

    return ListedColormap(palette(n))


# ---------------------------------------------------------------------------------------
# Learning curves (per-epoch histories, e.g. labkit.learning.lr)
# ---------------------------------------------------------------------------------------


def learning_curves(
    history, metrics=("test_accuracy", "test_loss"), x: str = "epoch", hue: str = "version", title: str | None = None
):
    """One panel per metric against ``x``, one line per ``hue`` value (a long frame, such as
    ``labkit.learning.lr.histories(core, keras)``)."""
    _need_columns(history, (x, hue, *metrics), "learning_curves")
    hues = list(dict.fromkeys(history[hue]))
    colors = dict(zip(hues, palette(len(hues))))
    fig, axes = subplots(1, len(metrics), squeeze=False, figsize=(4.5 * len(metrics), 3.2))
    for ax, metric in zip(axes[0], metrics):
        for h in hues:
            part = history[history[hue] == h].sort_values(x)
            ax.plot(part[x], part[metric], "o-", ms=3, color=colors[h], label=str(h))
        ax.set_xlabel(x.replace("_", " "))
        ax.set_ylabel(metric.replace("_", " "))
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0][-1].legend(loc="best")
    if title:
        fig.suptitle(title)
    return fig


def best_readings(readings, levels=(0.94, 0.97), title: str | None = None):
    """Small-batch accuracy readings (trials or curves x readings: ``labkit.learning.lr.batch_readings``, ``lr.epoch_readings``): the
    distribution of one reading (left) and of the best of each trial's readings (right), with
    dotted lines at ``levels`` (the accuracies a report gave) and the share of each that reaches
    them in the legend."""
    import numpy as np

    readings = np.asarray(readings, float)
    if readings.ndim != 2 or not readings.size:
        raise ValueError(f"best_readings needs a (trials, readings) array, got shape {readings.shape}")
    best = readings.max(axis=1)
    seen = np.unique(readings)
    step = float(np.min(np.diff(seen))) if len(seen) > 1 else 0.02  # one image's worth of accuracy
    fig, axes = subplots(1, 2, figsize=(10, 3.2), sharex=True)
    for ax, values, what, color in (
        (axes[0], readings.ravel(), "one reading", palette(2)[0]),
        (axes[1], best, f"the best of {readings.shape[1]} readings", palette(2)[1]),
    ):
        edges = np.arange(values.min() - step / 2, values.max() + step, step)
        ax.hist(values, bins=edges, color=color, weights=np.full(len(values), 1 / len(values)))
        for level, style in zip(levels, (":", "--", "-.")):
            label = f">= {100 * level:g}%: {np.mean(values >= level):.1%}"  # 0.965 shows as 96.5%, not 96% or 97%
            ax.axvline(level, color="0.2", ls=style, lw=1.2, label=label)
        ax.set_xlabel(f"accuracy, {what}")
        ax.legend(loc="upper left")
    axes[0].set_ylabel("share of readings")
    axes[1].set_ylabel(f"share of the {len(best):,} trials")
    if title:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------
# Lab 4: the LeNet sweep (labkit.labs.lab4.experiment)
# ---------------------------------------------------------------------------------------


def sweep_curves(curves, title: str | None = None):
    """Report 000 Table 2.1.2 as a seaborn facet grid: validation accuracy and loss per epoch,
    rows = workers, columns = per-worker batch size (``Sweep.curves()``'s long frame)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    _need_columns(curves, ("workers", "batch_size", "epoch", "metric", "value"), "sweep_curves")
    use_theme()
    _show_figures_in_ipython()
    grid = sns.relplot(
        data=curves,
        x="epoch",
        y="value",
        hue="metric",
        row="workers",
        col="batch_size",
        kind="line",
        marker="o",
        height=2.1,
        aspect=1.35,
        palette=palette(2),
        facet_kws={"margin_titles": True},
    )
    grid.set_titles(row_template="{row_name} worker(s)", col_template="batch {col_name} per worker")
    grid.set_axis_labels("epoch", "")
    for ax in grid.axes.flat:
        ax.xaxis.get_major_locator().set_params(integer=True)
    if title:
        grid.figure.suptitle(title, y=1.02)
    plt.close(grid.figure)  # returned, not left to pyplot: shown once, as the cell's value
    return grid.figure


def sweep_throughput(frame, title: str | None = None):
    """Images/s per configuration, bars grouped by per-worker batch size and coloured by
    workers (``Sweep.throughput()``)."""
    import numpy as np

    _need_columns(frame, ("workers", "batch_size", "images_per_s"), "sweep_throughput")
    batches = sorted(frame["batch_size"].unique())
    workers = sorted(frame["workers"].unique())
    colors = dict(zip(workers, palette(len(workers))))
    fig, ax = subplots(1, 1, figsize=(max(5.0, 1.6 * len(batches) + 2), 3.2))
    width = 0.8 / len(workers)
    for i, w in enumerate(workers):
        part = frame[frame["workers"] == w].set_index("batch_size").reindex(batches)
        x = np.arange(len(batches)) + (i - (len(workers) - 1) / 2) * width
        ax.bar(x, part["images_per_s"], width, color=colors[w], label=f"{w} worker(s)")
    ax.set_xticks(np.arange(len(batches)), [f"batch {b}" for b in batches])
    ax.set_ylabel("images/s (whole cluster)")
    ax.legend(loc="best")
    if title:
        ax.set_title(title)
    return fig


# ---------------------------------------------------------------------------------------
# Lab 3: sparse logistic regression (labkit.labs.lab3.experiment)
# ---------------------------------------------------------------------------------------

_METHOD_NAMES = {
    "sparse": "sparse (unique + segment sum)",
    "dense": "dense (report 001)",
    "dense_per_example": "dense, per-example matrix (Table 1)",
}


def op_profile(profile, title: str | None = None):
    """Step time and bytes allocated per step against num_features (both log scales), one
    line per method, one column per batch size (``sparse_lr.profile_ops``'s frame)."""
    from matplotlib.ticker import FuncFormatter

    _need_columns(profile, ("num_features", "batch", "method", "step_ms", "alloc_bytes"), "op_profile")
    batches = sorted(profile["batch"].unique())
    methods = list(dict.fromkeys(profile["method"]))
    colors = dict(zip(methods, palette(len(methods))))
    fig, axes = subplots(
        2, len(batches), sharex=True, sharey="row", squeeze=False, figsize=(max(4.5 * len(batches), 7), 6.5)
    )
    for j, b in enumerate(batches):
        for m in methods:
            part = profile[(profile["batch"] == b) & (profile["method"] == m)].sort_values("num_features")
            if len(part):
                axes[0][j].plot(
                    part["num_features"], part["step_ms"], "o-", color=colors[m], label=_METHOD_NAMES.get(m, m)
                )
                axes[1][j].plot(part["num_features"], part["alloc_bytes"], "o-", color=colors[m])
        axes[0][j].set_title(f"batch {b}")
        axes[1][j].set_xlabel("num_features")
        for ax in (axes[0][j], axes[1][j]):
            ax.set_xscale("log")
            ax.set_yscale("log")
    axes[0][0].set_ylabel("step time (ms)")
    axes[0][0].yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axes[1][0].set_ylabel("bytes allocated per step")
    log_bytes_axis(axes[1][0], "y")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def error_curves(curves, optimum: dict | None = None, x: str = "samples", title: str | None = None):
    """Test error (left) and log-loss (right) against training samples, one line per run
    (``Experiment.curves()``). ``optimum`` (``clickdata.optimum``) adds the best achievable
    and the majority-class levels as dotted lines."""
    from matplotlib.ticker import FuncFormatter

    _need_columns(curves, (x, "run", "test_error", "test_logloss"), "error_curves")
    runs = list(dict.fromkeys(curves["run"]))
    colors = dict(zip(runs, palette(len(runs))))
    fig, axes = subplots(1, 2, figsize=(11, 3.4))
    for r in runs:
        part = curves[curves["run"] == r].sort_values(x)
        for ax, metric in zip(axes, ("test_error", "test_logloss")):
            ax.plot(part[x], part[metric], "o-", ms=3, color=colors[r], label=r)
    if optimum:
        for ax, best, floor in (
            (axes[0], 1 - optimum["bayes_accuracy"], 1 - optimum["majority_accuracy"]),
            (axes[1], optimum["bayes_logloss"], optimum["majority_logloss"]),
        ):
            ax.axhline(best, color="0.2", ls=":", lw=1.2, label="best achievable (true model)")
            ax.axhline(floor, color="0.6", ls="--", lw=1, label="majority class")
    for ax, name in zip(axes, ("test error", "test log-loss")):
        ax.set_xlabel(x.replace("_", " "))
        ax.set_ylabel(name)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}"))
    axes[1].legend(loc="upper right", fontsize="x-small")
    if title:
        fig.suptitle(title)
    return fig


def minibatch_sweep(summary, title: str | None = None):
    """Report 004 Table 3 as a figure: training time for a fixed number of examples (left)
    and final test accuracy (right) against batch size, one line per mode
    (``Experiment.summary()`` of a sweep)."""
    from matplotlib.ticker import FuncFormatter

    _need_columns(summary, ("mode", "batch", "train_s", "test_accuracy"), "minibatch_sweep")
    modes = list(dict.fromkeys(summary["mode"]))
    colors = dict(zip(modes, palette(len(modes))))
    fig, axes = subplots(1, 2, figsize=(10, 3.3))
    for m in modes:
        part = summary[summary["mode"] == m].sort_values("batch")
        axes[0].plot(part["batch"], part["train_s"], "o-", color=colors[m], label=m)
        axes[1].plot(part["batch"], part["test_accuracy"], "o-", color=colors[m], label=m)
    for ax in axes:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set_xlabel("batch size per worker")
    axes[0].set_yscale("log")
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axes[0].set_ylabel("training time (s)")
    axes[1].set_ylabel("test accuracy")
    axes[0].legend(loc="best")
    if title:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------
# Lab 2: sync vs async SGD on a parameter server (labkit.labs.lab2.experiment)
# ---------------------------------------------------------------------------------------


def iterations_bars(frame, title: str | None = None):
    """Report 002 Tables 4 and 6 as bars: iterations per worker for every deploy mode and
    batch size, one panel per mode (``Study.iterations()``'s frame); a black tick marks each
    run's global step (sync: every worker's count; async: the sum of theirs)."""
    import numpy as np

    _need_columns(frame, ("mode", "deploy", "batch_size", "worker", "iterations", "global_step"), "iterations_bars")
    modes = list(dict.fromkeys(frame["mode"]))
    configs = list(dict.fromkeys(zip(frame["deploy"], frame["batch_size"])))
    workers = sorted(frame["worker"].unique(), key=lambda w: (w.split(":")[0] != "chief", int(w.split(":")[1])))
    colors = dict(zip(workers, palette(len(workers))))
    fig, axes = subplots(
        1, len(modes), squeeze=False, sharey=True, figsize=(max(5.0, 1.3 * len(configs) + 2) * len(modes), 3.6)
    )
    width = 0.8 / len(workers)
    for ax, mode in zip(axes[0], modes):
        part = frame[frame["mode"] == mode]
        for i, w in enumerate(workers):
            xs, ys = [], []
            for j, (d, b) in enumerate(configs):
                row = part[(part["deploy"] == d) & (part["batch_size"] == b) & (part["worker"] == w)]
                if len(row):
                    xs.append(j + (i - (len(workers) - 1) / 2) * width)
                    ys.append(row["iterations"].iloc[0])
            ax.bar(xs, ys, width, color=colors[w], label=w)
        for j, (d, b) in enumerate(configs):
            g = part[(part["deploy"] == d) & (part["batch_size"] == b)]["global_step"]
            if len(g):
                ax.hlines(g.iloc[0], j - 0.45, j + 0.45, color="black", lw=1.5, label="global step" if j == 0 else None)
        ax.set_xticks(np.arange(len(configs)), [f"{d}\nbatch {b}" for d, b in configs])
        ax.set_title(mode)
    axes[0][0].set_ylabel("iterations (local steps)")
    _legend_outside(fig, axes[0])
    if title:
        fig.suptitle(title)
    return fig


def sync_async_curves(curves, target_loss: float | None = None, title: str | None = None):
    """Test accuracy and loss against wall time (s since training started) and against the
    global step, one line per mode (``Study.curves()``'s frame): a 2 x 2 grid; a dotted line
    at ``target_loss``, the stopping criterion."""
    _need_columns(curves, ("mode", "t", "global_step", "test_loss", "test_accuracy"), "sync_async_curves")
    modes = list(dict.fromkeys(curves["mode"]))
    colors = dict(zip(modes, palette(len(modes))))
    fig, axes = subplots(2, 2, sharey="row", figsize=(10, 6))
    for j, (x, label) in enumerate((("t", "time since training started (s)"), ("global_step", "global step"))):
        for i, metric in enumerate(("test_accuracy", "test_loss")):
            ax = axes[i][j]
            for m in modes:
                part = curves[curves["mode"] == m].sort_values(x)
                ax.plot(part[x], part[metric], "o-", ms=3, color=colors[m], label=m)
            if i == 1:
                ax.set_xlabel(label)
                if target_loss is not None:
                    ax.axhline(target_loss, color="0.3", ls=":", lw=1.2, label=f"target {target_loss:g}")
            if j == 0:
                ax.set_ylabel(metric.replace("_", " "))
    axes[0][0].legend(loc="lower right")
    if target_loss is not None:
        axes[1][0].legend(loc="upper right")
    if title:
        fig.suptitle(title)
    return fig


def worker_shares(frame, title: str | None = None):
    """Each worker's share of the global steps, one group of bars per link (the frame of
    ``sync_async.emulated_shares``: link, worker, share), with a dotted line at an even share;
    an empty frame (links not emulated here) gives a panel that says so."""
    fig, ax = subplots(1, 1, figsize=(7, 3.2))
    if frame is None or not len(frame):
        skipped(ax, "emulated links: skipped (see above)")
        return fig
    _need_columns(frame, ("link", "worker", "share"), "worker_shares")
    shares = frame.pivot(index="link", columns="worker", values="share").loc[list(dict.fromkeys(frame["link"]))]
    shares.plot.bar(ax=ax, rot=0, color=palette(shares.shape[1]))
    ax.axhline(1 / shares.shape[1], color="grey", lw=0.8, ls=":", label="an even share")
    ax.set_ylabel("share of the global steps")
    ax.legend(loc="upper right")
    if title:
        ax.set_title(title)
    return fig


# ---------------------------------------------------------------------------------------
# Lab 3: report 001's dense step on emulated links
# ---------------------------------------------------------------------------------------


def emulated_dense(frame, title: str | None = None):
    """Per (link, run) of ``labs.lab3.experiment.emulated_dense``: the measured time per 1k
    iterations against one step's bytes at the link's rate (left); the ps's link, the shares of
    the window it spent receiving and sending, and their sum, the verdict's busy share (right).
    An empty frame (no links emulated here) gives two panels that say so."""
    fig, axes = subplots(1, 2, figsize=(10, 3.2))
    if len(frame) == 0:
        skipped(axes[0], "emulated links: skipped (see above)")
        skipped(axes[1], "")
        return fig
    _need_columns(
        frame,
        ("link", "run", "s_per_1k_iterations", "link_s_per_step", "ps_link_in", "ps_link_out", "ps_link_busy"),
        "emulated_dense",
    )
    labels = [f"{link}\n{run}" for link, run in zip(frame["link"], frame["run"])]
    c_meas, c_in = palette(2)
    axes[0].bar(labels, frame["s_per_1k_iterations"], color=c_meas, label="measured")
    axes[0].bar(
        labels,
        1e3 * frame["link_s_per_step"],
        color="none",
        edgecolor="black",
        hatch="//",
        label="one step's bytes at the link's rate",
    )
    axes[0].set_ylabel("s per 1k iterations")
    axes[0].legend(fontsize=8)
    axes[1].bar(labels, frame["ps_link_in"], color=c_in, label="into the ps's node")
    axes[1].bar(
        labels, frame["ps_link_out"], bottom=frame["ps_link_in"], color="none", edgecolor="black", label="out of it"
    )
    axes[1].scatter(
        labels, frame["ps_link_busy"], color="black", marker="_", s=400, zorder=3, label="busy share (the verdict's)"
    )
    axes[1].axhline(0.5, color="grey", ls="--", lw=0.8)
    axes[1].axhline(1, color="grey", ls=":", lw=0.8)
    axes[1].set_ylabel("share of the window at the link's rate")
    axes[1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------
# Grading statistics (summary.html, labkit.grading.pages.stats)
# ---------------------------------------------------------------------------------------


def score_histogram(totals, most: float, title: str | None = None):
    """How a lab's total scores spread over 0..``most``, one bar per point (or per ``most``/20)."""
    import numpy as np

    fig, ax = subplots(figsize=(6, 2.8))
    step = max(1.0, most / 20)
    edges = np.arange(0, most + step, step)
    ax.hist(list(totals), bins=edges if len(edges) > 1 else 1, color=palette(1)[0], edgecolor="white")
    ax.set_xlim(0, max(most, step))
    ax.set_xlabel(f"lab total (of {most:g} points)")
    ax.set_ylabel("students")
    ax.yaxis.get_major_locator().set_params(integer=True)
    if title:
        ax.set_title(title)
    return fig


def check_pass_rates(frame, title: str | None = None):
    """Per check, the share of students who passed it (and who got part of it): ``frame`` has
    columns ``check``, ``pass`` and ``partial`` (shares, 0..1), in the rubric's order; analysis
    answers give ``mean`` (their TA scores' mean share) instead, in another colour."""
    _need_columns(frame, ("check", "pass", "partial", "mean"), "check_pass_rates")
    colors = palette(3)
    fig, ax = subplots(figsize=(7, 0.35 * len(frame) + 1.2))
    ys = list(range(len(frame)))[::-1]
    answer = frame["mean"].notna()
    ax.barh([y for y, a in zip(ys, answer) if not a], frame.loc[~answer, "pass"], color=colors[0], label="passed")
    ax.barh(
        [y for y, a in zip(ys, answer) if not a],
        frame.loc[~answer, "partial"],
        left=frame.loc[~answer, "pass"],
        color=colors[1],
        label="partial credit",
    )
    ax.barh(
        [y for y, a in zip(ys, answer) if a], frame.loc[answer, "mean"], color=colors[2], label="answer: mean TA score"
    )
    ax.set_yticks(ys, list(frame["check"]))
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:.0%}")
    ax.set_xlabel("share of students (answers: share of the points)")
    fig.legend(loc="outside lower center", ncols=3, fontsize="x-small")
    if title:
        ax.set_title(title)
    return fig
