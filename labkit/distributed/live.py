"""Live views of a running cluster in JupyterLab, and what a headless run shows instead.

    c = Cluster(spec, "ps_sgd", lab="lab2")
    with live.watch(c), c:                # the view first: it also shows the tasks starting
        result = c.wait()                 # or c.follow(on_event), any wait

In JupyterLab the cell shows, refreshed in place, a table of every task (state, latest event,
CPU, memory, network) and a resource figure, through ``display_id`` outputs (not widgets), so a
saved notebook keeps the last ones. Headless (papermill, ``make grade``) nothing is redrawn; one
static figure of the tasks' own samples is shown at the end. When a run fails, the notebook also
shows the end of the task logs that explain it. ``log_tail(c, "worker:0")`` shows the end of a
task's log (also for a ``ClusterResult`` or a ``TaskFailed``).

More in docs/internals.md, section labkit.distributed (where the numbers come from, sweeps,
what leaving the block stops).
"""

from __future__ import annotations

import functools
import io
import threading
import time
import traceback
import warnings
from pathlib import Path

from labkit.measure.progress import _kernel_shell, is_live

DEFAULT_REFRESH_S = 3.0
DEFAULT_WINDOW_S = 120.0
FAILURE_TAIL_LINES = 15  # lines per task shown when a run fails
TEMPLATES = Path(__file__).parent / "templates"  # the views' HTML (Jinja, autoescaped)
_shown: dict = {}  # the running cell's execution count -> its (table, figure) display handles


class LiveView:
    """A per-task resource view of one ``labkit.distributed.launch.Cluster`` (see the module docstring).

    ``refresh``: seconds between redraws; ``interval``: sampling interval; ``window``: seconds
    of history in the live figure; ``static``: show the final figure when headless;
    ``live``: force live (True) or headless (False) instead of ``is_live()``.
    """

    def __init__(
        self,
        cluster,
        refresh: float = DEFAULT_REFRESH_S,
        interval: float = 0.5,
        window: float = DEFAULT_WINDOW_S,
        static: bool = True,
        title: str | None = None,
        live: bool | None = None,
    ):
        for name, value, low in (("refresh", refresh, 0.2), ("interval", interval, 0.05), ("window", window, 1.0)):
            if not isinstance(value, (int, float)) or not value >= low:
                raise ValueError(f"{name}={value!r}: give seconds >= {low}")
        if not hasattr(cluster, "local_pids") or not hasattr(cluster, "status"):
            raise ValueError(f"LiveView watches a labkit.distributed.launch.Cluster, got {type(cluster).__name__}")
        self.cluster = cluster
        self.refresh, self.interval, self.window = float(refresh), float(interval), float(window)
        self.static = static
        self.title = title or f"{cluster.module.rsplit('.', 1)[-1]}: {cluster.run_dir.name}"
        # live needs a kernel to display into; outside one (a script) there is only the end
        self.live = (is_live() if live is None else bool(live)) and _kernel_shell() is not None
        self.updates = 0  # redraws done (live)
        self.figures = 0  # of which drew the figure (once the first samples are in)
        self.errors: list[str] = []  # a redraw that failed stops the live updates, never the run
        self._samplers: dict[str, object] = {}  # task -> ResourceSampler of its local pid
        self._pids: dict[str, int] = {}
        self._netns: dict[str, tuple | None] = {}  # task -> the network namespace its sampler counts
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._table = self._figure = None  # IPython DisplayHandles (live)
        self._t0 = None
        self._progress: dict[str, str] = {}  # task -> where it is, from its latest event
        self._unsubscribe = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LiveView":
        if self._thread is not None:
            raise RuntimeError("this LiveView has started already; make a new one per cluster run")
        self._t0 = time.monotonic()
        if hasattr(self.cluster, "subscribe"):
            self._unsubscribe = self.cluster.subscribe(self._on_event)
        if self.live:
            from IPython.display import HTML, display

            waiting = HTML("<i>resource view: waiting for the tasks to start</i>")
            cell = _kernel_shell().execution_count
            if cell in _shown:  # an earlier run of this cell's sweep: redraw its outputs
                self._table, self._figure = _shown[cell]
                self._table.update(HTML(self._table_html()))
                self._figure.update(waiting)
            else:  # shown from the cell's own thread, so the outputs belong to the running cell
                self._table = display(HTML(self._table_html()), display_id=True)
                self._figure = display(waiting, display_id=True)
                _shown.clear()
                _shown[cell] = (self._table, self._figure)
            self._thread = threading.Thread(target=self._loop, name="labkit-LiveView", daemon=True)
            self._thread.start()
        return self

    def stop(self, final: bool = True) -> None:
        """Stop the thread and the samplers; with ``final``, show the whole run once
        (live: the last update; headless: the static figure)."""
        self._stop.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        for s in self._samplers.values():
            s.stop()
        if not final:
            return
        try:
            if self.live:
                self._table.update(_html(self._table_html()))
                fig = self.final_figure()
                if fig is not None:
                    self._figure.update(_png(fig))
            elif self.static and _kernel_shell() is not None:  # a notebook, not a script
                fig = self.final_figure()
                if fig is not None:
                    from IPython.display import display

                    display(fig)
        except Exception:  # a view must never turn a finished run into an error
            self._error("final view failed:\n" + traceback.format_exc(limit=4))

    def __enter__(self) -> "LiveView":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.stop(final=exc_type is None)
        if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):
            self.show_failure(exc)
        return False

    def show_failure(self, exc: BaseException) -> None:
        """In a notebook, the log tails that explain ``exc`` (see the module docstring)."""
        if _kernel_shell() is None:  # a script or a test: the exception says enough
            return
        from labkit.distributed.launch import ClusterTimeout, TaskFailed

        try:
            names = [t.name for t in self.cluster.spec.tasks()]
            if isinstance(exc, TaskFailed):  # its own tail is in its message
                shown = [n for n in names if n != exc.task]
            elif isinstance(exc, ClusterTimeout):
                shown = [n for n in exc.running if n in names] or names
            else:
                shown = names
            if shown:
                from IPython.display import display

                display(log_tail(self.cluster, shown, lines=FAILURE_TAIL_LINES))
        except Exception:  # the run's own error is what matters; never mask it
            self._error("could not show the task logs:\n" + traceback.format_exc(limit=4))

    # ------------------------------------------------------------------ data
    def _on_event(self, e) -> None:
        """A task's event (``labkit.wire.events``): where it is now, for the table's ``progress``."""
        text = _progress(e)
        if text is not None:
            self._progress[e.task] = text

    def _watch_new_tasks(self) -> None:
        """A sampler for every local task pid not yet watched (tasks restarted on other
        ports after a port race get new pids), and a new one for a task that has since
        entered its emulated node's network namespace (``nsenter`` runs it there)."""
        from labkit.measure.monitor import ResourceSampler
        from labkit.measure.sockets import netns_id

        for name, pid in self.cluster.local_pids().items():
            ns = netns_id(pid)
            if self._pids.get(name) == pid and (ns is None or self._netns.get(name) == ns):
                continue
            old = self._samplers.pop(name, None)
            if old is not None:
                old.stop()
            self._pids[name], self._netns[name] = pid, ns
            try:
                self._samplers[name] = ResourceSampler(interval=self.interval, pids=[pid], **_node_nics(pid)).start()
            except ValueError:  # exited before we looked: nothing to watch
                pass

    def frame(self, window: float | None = None):
        """The driver's samples of the local tasks, merged (``summaries.merge_frames``),
        cut to the last ``window`` seconds; None before the first sample."""
        from labkit.measure.summaries import merge_frames

        have = {name: s for name, s in self._samplers.items() if s.latest() is not None}
        if not have:
            return None
        frame = merge_frames(have)
        if window is not None and len(frame):
            frame = frame[frame["t"] >= frame["t"].max() - window]
        return frame

    def table(self):
        """One row per task: state, host and its latest sample (driver-side, local tasks)."""
        import pandas as pd

        rows = []
        status = self.cluster.status()
        for t in self.cluster.spec.tasks():
            s = self._samplers.get(t.name)
            last = s.latest() if s is not None else None
            dt = (last or {}).get("dt") or float("nan")
            nics = "-" if s is None else ", ".join(s.nics) if s.nics is not None else "all, lo included"
            rows.append(
                {
                    "task": t.name,
                    "host": t.host,
                    "state": status.get(t.name, "new"),
                    "progress": self._progress.get(t.name, ""),
                    "nics": nics,
                    "cpu_pct": (last or {}).get("proc_cpu"),
                    "rss_bytes": (last or {}).get("proc_rss"),
                    "host_cpu_pct": None if last is None else last["cpu_user"] + last["cpu_system"],
                    "net_recv_per_s": None if last is None else last["net_recv"] / dt,
                    "net_sent_per_s": None if last is None else last["net_sent"] / dt,
                }
            )
        return pd.DataFrame(rows).set_index("task")

    def live_figure(self):
        """CPU, memory and network of the last ``window`` seconds (None before any sample)."""
        from labkit.measure import plots

        frame = self.frame(self.window)
        if frame is None or not len(frame):
            return None
        return plots.resource_timeline(frame, title=f"{self.title} (live, last {self.window:.0f} s)")

    def final_figure(self):
        """The whole run: the tasks' own samples from their result files (every node) when
        the cluster has gathered them, else the driver's samples; None if neither exists."""
        from labkit.measure import plots

        result = getattr(self.cluster, "result", None)
        if result is not None:
            try:
                return plots.resource_timeline(result.samples(), title=f"{self.title}: resources per task")
            except ValueError:  # no task wrote samples (e.g. stopped before they started)
                pass
        frame = self.frame()
        if frame is None or not len(frame):
            return None
        return plots.resource_timeline(frame, title=f"{self.title}: resources per task (driver's samples)")

    # ------------------------------------------------------------------ live updates
    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                self._watch_new_tasks()
                self._table.update(_html(self._table_html()))
                fig = self.live_figure()
                if fig is not None:
                    self._figure.update(_png(fig))
                    self.figures += 1
                self.updates += 1
            except Exception:
                self._error("live view stopped updating:\n" + traceback.format_exc(limit=4))
                return
            self._stop.wait(max(0.2, self.refresh - (time.monotonic() - t)))

    def _table_html(self) -> str:
        from labkit.measure.plots import fmt_bytes

        elapsed = time.monotonic() - self._t0 if self._t0 else 0.0
        t = self.table()

        def fmt(col, value):
            if col in ("host", "state", "progress", "nics"):
                return str(value)
            if value is None or value != value:
                return "-"
            if col == "rss_bytes":
                return fmt_bytes(value)
            if col.startswith("net_"):
                return fmt_bytes(value) + "/s"
            return f"{value:.0f}"

        return _template("live_table.html.j2").render(
            title=self.title,
            elapsed=elapsed,
            columns=["task", *t.columns],
            rows=[(name, [fmt(c, row[c]) for c in t.columns]) for name, row in t.iterrows()],
        )

    def _error(self, message: str) -> None:
        self.errors.append(message)
        warnings.warn(f"labkit.distributed.live: {message}", RuntimeWarning, stacklevel=2)


def _progress(e) -> str | None:
    """A few words on where a task is, from one of its events; None for an event that says nothing new."""
    what = {
        "started": lambda: "started",
        "mark": lambda: e.label,
        "config_started": lambda: f"config {e.name}",
        "resumed": lambda: f"resumed after epoch {e.start_epoch}",
        "epoch": lambda: f"epoch {e.epoch}/{e.epochs}",
        "step": lambda: f"step {e.step}",
        "eval": lambda: f"{e.run + ', ' if e.run else ''}step {e.global_step}",
        "done": lambda: f"{e.run + ' ' if e.run else ''}done",
        "peer_failure": lambda: e.error,
        "ended": lambda: e.shutdown,
    }.get(e.kind)
    return what() if what else None


def watch(cluster, **kwargs) -> LiveView:
    """``LiveView(cluster, **kwargs)``, to use as ``with live.watch(c): c.wait()``."""
    return LiveView(cluster, **kwargs)


# ---------------------------------------------------------------------------- log tails


class LogTail:
    """The last lines of one or more task logs; shows as preformatted text in a notebook."""

    def __init__(self, parts: list[tuple[str, str]]):
        self.parts = parts

    def __str__(self) -> str:
        return "\n\n".join(f"==> {title} <==\n{text or '(empty)'}" for title, text in self.parts)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return _template("log_tail.html.j2").render(parts=self.parts)


def log_tail(source, task: str | list[str] | None = None, lines: int = 30) -> LogTail:
    """The end of a task's log (of several for a list; every task's when ``task`` is None),
    for a notebook cell.

    ``source``: a running or finished ``Cluster``, a ``ClusterResult``, or a ``TaskFailed``
    (its log tail, as caught: ``except TaskFailed as e: live.log_tail(e)``)."""
    if isinstance(lines, bool) or not isinstance(lines, int) or lines < 1:
        raise ValueError(f"lines={lines!r}: give a positive number of lines")
    if hasattr(source, "log_tail") and isinstance(getattr(source, "log_tail"), str):  # TaskFailed
        where = f" ({source.log_path})" if getattr(source, "log_path", None) else ""
        return LogTail([(f"{source.task}{where}", "\n".join(source.log_tail.splitlines()[-lines:]))])
    if hasattr(source, "spec") and hasattr(source, "log_tail"):  # Cluster
        names = [t.name for t in source.spec.tasks()]
        read = lambda name: source.log_tail(name, lines)  # noqa: E731
    elif hasattr(source, "tasks") and hasattr(source, "run_dir"):  # ClusterResult
        names = [t.name for t in source.tasks]
        read = lambda name: source[name].log_tail(lines)  # noqa: E731
    else:
        raise ValueError(f"log_tail() reads a Cluster, a ClusterResult or a TaskFailed, got {type(source).__name__}")
    wanted = names if task is None else [task] if isinstance(task, str) else list(task)
    unknown = [name for name in wanted if name not in names]
    if unknown or not wanted:
        raise ValueError(f"no task {unknown[0] if unknown else task!r}; tasks are {names}")
    return LogTail([(name, read(name)) for name in wanted])


# ---------------------------------------------------------------------------- helpers


def _node_nics(pid: int) -> dict:
    """The sampler's network options for a task: on an emulated node (a network namespace other
    than ours) that node's NICs but ``lo``; else {} (the host's NICs, ``lo`` included)."""
    from labkit.measure.sockets import netns_id, nic_counters

    ns = netns_id(pid)
    if ns is None or ns == netns_id():
        return {}
    return {"netns_pid": pid, "nics": sorted(n for n in nic_counters(pid=pid) if n != "lo")}


def _png(fig):
    """A figure as an IPython PNG image (rendered here, off the cell's thread if need be)."""
    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")


def _html(text: str):
    from IPython.display import HTML

    return HTML(text)


def _template(name: str):
    """``templates/<name>``, autoescaped: a task's name, progress and log are text, never markup."""
    return _environment().get_template(name)


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=jinja2.StrictUndefined
    )
