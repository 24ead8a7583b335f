"""Resource sampling with psutil: the kit's replacement for dstat, top and iftop.

A ``ResourceSampler`` runs on a daemon thread and takes one sample per ``interval``; each row of
``to_frame()`` covers the interval since the previous one: host CPU, memory, network and disk,
and the CPU and memory of the watched processes (and, with ``children=True``, their descendants).
Host columns are the same for every sampler on a host: compare nodes, do not add tasks up. The
sampler never raises into the program it watches; errors are kept in ``errors`` and warned once.

It only samples: ``labkit.measure.summaries`` reads its frames, ``labkit.measure.dstat`` writes
dstat's CSV layout, ``plots.resource_timeline`` draws them. ``python -m labkit monitor``
(``monitor_command``) samples a command or pid.

More in docs/internals.md, section labkit.measure (every column, and what the numbers mean).
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
import traceback
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import psutil

from labkit.core.lifetime import StartStop
from labkit.measure import summaries
from labkit.measure.sockets import nic_counters
from labkit.measure.summaries import CPU_FIELDS, FORMAT
from labkit.measure.units import fmt_bytes

MIN_INTERVAL = 0.05
_MAX_ERRORS = 100  # kept in ``errors``; later ones are dropped (each kind was warned about once)


@dataclass(frozen=True)
class Mark:
    """A labelled moment: ``t`` seconds since the sampler started, ``epoch`` wall clock."""

    label: str
    t: float
    epoch: float


# ---------------------------------------------------------------------------------------
# The sampler
# ---------------------------------------------------------------------------------------


class ResourceSampler(StartStop):
    """Sample host and process resources every ``interval`` seconds on a daemon thread.

    ``pids``: processes to watch (default: the current one; ``[]`` watches none, for a
    host-only view). ``children``: also watch their descendants. ``nics``: interfaces to
    count (default: every interface, ``lo`` included, and any that appear later).
    ``netns_pid``: count the interfaces of the network namespace that process is in (an
    emulated node's, ``labkit.infra.netem``), not this process's.
    ``on_sample(row)`` is called from the sampler thread after each sample (live views);
    ``latest()`` is the cheap alternative for polling. Use as a context manager::

        with ResourceSampler() as s:
            s.mark("training started")
            train()
        s.summary(), s.plot()
    """

    def __init__(
        self,
        interval: float = 0.5,
        pids: Iterable[int] | None = None,
        children: bool = True,
        nics: Iterable[str] | None = None,
        on_sample: Callable[[dict], None] | None = None,
        netns_pid: int | None = None,
    ):
        if not isinstance(interval, (int, float)) or not interval >= MIN_INTERVAL:
            raise ValueError(
                f"interval={interval!r}: give the sampling interval in seconds, "
                f">= {MIN_INTERVAL} (0.5 is a good default)"
            )
        self.interval = float(interval)
        self.children = bool(children)
        self.on_sample = on_sample
        self.host = socket.gethostname()
        self.nics = None if nics is None else [str(n) for n in nics]
        self.netns_pid = None if netns_pid is None else _process(netns_pid).pid
        if self.nics is not None:
            known = nic_counters(pid=self.netns_pid)
            missing = [n for n in self.nics if n not in known]
            if missing:
                where = f"in the network namespace of pid {self.netns_pid}" if self.netns_pid else f"on {self.host}"
                raise ValueError(
                    f"nics={self.nics}: no interface named {missing} {where}; "
                    f"choose from {sorted(known)} or pass nics=None for all"
                )
        roots = [_process(p) for p in pids] if pids is not None else [psutil.Process()]  # ValueError if gone
        self._roots = {p.pid: p for p in roots}
        self.pids = list(self._roots)
        self.marks: list[Mark] = []
        self.errors: list[str] = []
        self.exited: list[dict] = []  # {"pid", "name", "t"} of watched processes that ended
        self.start_epoch: float | None = None
        self._rows: list[dict] = []
        self._lock = threading.Lock()
        self._sampling = threading.Lock()  # one sample at a time: the thread's, or sample_now's
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = "new"
        self._pending: list[psutil.Process] = []  # roots added while running, watched by the thread
        self._warned: set[str] = set()

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> "ResourceSampler":
        if self._state != "new":
            raise RuntimeError(f"this sampler is {self._state}; create a new ResourceSampler to sample again")
        self._state = "running"
        self._t0 = time.monotonic()
        self.start_epoch = time.time()
        self._last_t = self._t0
        self._last_epoch = self.start_epoch
        self._last_cpu = psutil.cpu_times()
        self._last_net = _net_counters(self.nics, self.netns_pid)
        self._last_disk = _disk_counters()
        self._procs: dict[int, psutil.Process] = {}
        self._proc_cpu: dict[int, float] = {}
        self._names: dict[int, str] = {}
        self._watch_tree(list(self._roots.values()))
        self._thread = threading.Thread(target=self._loop, name="labkit-ResourceSampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> "ResourceSampler":
        """Stop sampling, after one last sample covering the time since the previous one."""
        if self._state != "running":
            return self
        self._stop.set()
        self._thread.join(timeout=max(5.0, 4 * self.interval))
        if self._thread.is_alive():
            self._error("sampler thread did not stop within its timeout; samples may be incomplete")
        elif time.monotonic() - self._last_t >= 0.02:
            self._sample_safely()
        self._state = "stopped"
        return self

    def __del__(self):
        if hasattr(self, "_stop"):
            self._stop.set()

    @property
    def running(self) -> bool:
        return self._state == "running"

    def add_process(self, pid: int) -> None:
        """Watch one more process (and, with ``children``, its descendants) from now on."""
        proc = _process(pid)
        with self._lock:
            if proc.pid in self._roots:
                return
            self._roots[proc.pid] = proc
            self.pids.append(proc.pid)
            if self._state == "running":
                self._pending.append(proc)

    def mark(self, label: str) -> Mark:
        """Label this moment (for example "training started"); plots draw it, and
        ``summarize(frame, start=label)`` cuts a window at it."""
        now = time.monotonic()
        t0 = self._t0 if self._state != "new" else now
        m = Mark(str(label), now - t0, time.time())
        with self._lock:
            self.marks.append(m)
        return m

    # -- sampling (runs on the sampler thread) -----------------------------------------

    def _loop(self) -> None:
        k, failures = 1, 0
        while True:
            delay = self._t0 + k * self.interval - time.monotonic()
            if delay < 0:  # fell behind (a loaded machine): skip the missed slots
                k += int(-delay // self.interval) + 1
                continue
            if self._stop.wait(delay):
                return
            k += 1
            failures = 0 if self._sample_safely() else failures + 1
            if failures >= 10:
                self._error("sampler stopped after 10 failed samples in a row (see the errors before this one)")
                return

    def sample_now(self) -> None:
        """Take a sample at once, covering the time since the previous one: a window that ends
        now (a configuration of a shared cluster) then has its last interval, however short."""
        if self._state == "running" and time.monotonic() - self._last_t >= 0.02:
            self._sample_safely()

    def _sample_safely(self) -> bool:
        try:
            with self._sampling:
                row = self._sample()
        except Exception:  # keep the watched program alive; surface the error instead
            self._error("sample failed:\n" + traceback.format_exc(limit=4))
            return False
        with self._lock:
            self._rows.append(row)
        if self.on_sample is not None:
            try:
                self.on_sample(dict(row))
            except Exception:
                self._error("on_sample callback failed:\n" + traceback.format_exc(limit=4))
        return True

    def _error(self, message: str) -> None:
        if len(self.errors) < _MAX_ERRORS:
            self.errors.append(message)
        key = message.splitlines()[0]
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"labkit.measure.monitor: {message}", RuntimeWarning, stacklevel=2)

    def _sample(self) -> dict:
        now, epoch = time.monotonic(), time.time()
        dt = now - self._last_t
        row = {"t": now - self._t0, "dt": dt, "epoch": epoch}

        cpu = psutil.cpu_times()
        row.update(_cpu_percentages(self._last_cpu, cpu))
        self._last_cpu = cpu

        mem = psutil.virtual_memory()
        row.update(
            mem_used=mem.used,
            mem_buff=getattr(mem, "buffers", 0),
            mem_cach=getattr(mem, "cached", 0),
            mem_free=mem.free,
        )

        row.update(self._sample_processes(epoch, dt))

        net = _net_counters(self.nics, self.netns_pid)
        recv = sent = 0
        for nic, (r, s) in net.items():
            r0, s0 = self._last_net.get(nic, (r, s))  # a NIC that just appeared starts at 0
            dr, ds = max(0, r - r0), max(0, s - s0)
            row[f"net_recv_{nic}"], row[f"net_sent_{nic}"] = dr, ds
            recv, sent = recv + dr, sent + ds
        row.update(net_recv=recv, net_sent=sent)
        self._last_net = net

        disk = _disk_counters()
        if disk is None or self._last_disk is None:
            row.update(disk_read=math.nan, disk_write=math.nan)
        else:
            row.update(disk_read=max(0, disk[0] - self._last_disk[0]), disk_write=max(0, disk[1] - self._last_disk[1]))
        self._last_disk = disk

        self._last_t, self._last_epoch = now, epoch
        return row

    def _watch(self, proc: psutil.Process, born_in_interval: bool) -> None:
        """Start tracking ``proc``. Its CPU counts from now, or from its birth when it was
        born during the current interval (a descendant found by a sample)."""
        try:
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:  # exited, not yet reaped: nothing to watch
                    return
                total = sum(proc.cpu_times()[:2])
                self._names[proc.pid] = proc.name()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return
        self._procs[proc.pid] = proc
        self._proc_cpu[proc.pid] = 0.0 if born_in_interval else total

    def _watch_tree(self, roots: list[psutil.Process]) -> None:
        """Watch new roots and the descendants they already have, counting CPU from now;
        every descendant found later was born since the previous sample."""
        for p in roots + (_descendants({p.pid: p for p in roots}) if self.children else []):
            self._watch(p, born_in_interval=False)

    def _sample_processes(self, epoch: float, dt: float) -> dict:
        with self._lock:
            pending, self._pending = self._pending, []
        self._watch_tree(pending)
        if self.children and self._procs:
            for child in _descendants(self._procs):
                known = self._procs.get(child.pid)
                if known is None or known != child:  # new, or a recycled pid
                    self._watch(child, born_in_interval=True)
        cpu_s = rss = 0.0
        alive = 0
        for pid, proc in list(self._procs.items()):
            try:
                with proc.oneshot():
                    total = sum(proc.cpu_times()[:2])
                    mem = proc.memory_info().rss
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        raise psutil.ZombieProcess(pid)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                del self._procs[pid]
                self._proc_cpu.pop(pid, None)
                self.exited.append({"pid": pid, "name": self._names.pop(pid, "?"), "t": epoch - self.start_epoch})
                continue
            except psutil.AccessDenied:
                self._error(
                    f"access denied reading process {pid} ({self._names.get(pid, '?')}); "
                    "it is no longer watched (watch your own processes, or run as its user)"
                )
                del self._procs[pid]
                self._proc_cpu.pop(pid, None)
                continue
            cpu_s += max(0.0, total - self._proc_cpu.get(pid, total))
            self._proc_cpu[pid] = total
            rss += mem
            alive += 1
        return {"proc_cpu": 100.0 * cpu_s / dt if dt > 0 else math.nan, "proc_rss": rss, "nprocs": alive}

    # -- results --------------------------------------------------------------------

    def latest(self) -> dict | None:
        """The most recent sample as a dict (None before the first), cheap to poll."""
        with self._lock:
            return dict(self._rows[-1]) if self._rows else None

    def to_frame(self):
        """The samples as a pandas DataFrame (columns: see the module docstring); its
        ``attrs`` carry ``marks``, ``host``, ``start_epoch`` and ``interval``."""
        with self._lock:
            rows = list(self._rows)
            marks = [asdict(m) for m in self.marks]
        return summaries.frame(rows, marks, self.host, self.start_epoch, self.interval)

    def summary(self, start: float | str | None = None, end: float | str | None = None) -> dict:
        """``summaries.summarize(self.to_frame(), start, end)``: the reports' table columns."""
        return summaries.summarize(self.to_frame(), start, end)

    def to_csv(self, path, dstat: bool = False, per_nic: bool = False) -> Path:
        """Write the samples as CSV: our columns, or with ``dstat=True`` dstat's ``--output``
        layout (see ``labkit.measure.dstat.write_dstat_csv``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if dstat:
            from labkit.measure.dstat import write_dstat_csv

            return write_dstat_csv(self.to_frame(), path, per_nic=per_nic)
        self.to_frame().to_csv(path, index=False)
        return path

    def plot(self, **kwargs):
        """A CPU / memory / network figure with the marks (``plots.resource_timeline``)."""
        from labkit.measure import plots

        return plots.resource_timeline(self.to_frame(), **kwargs)

    def to_dict(self) -> dict:
        """A JSON-able dict of everything sampled; ``from_dict`` restores it."""
        frame = self.to_frame()
        columns = {c: [_jsonable(v) for v in frame[c].tolist()] for c in frame.columns}
        return {
            "format": FORMAT,
            "host": self.host,
            "interval": self.interval,
            "pids": list(self.pids),
            "children": self.children,
            "nics": self.nics,
            "netns_pid": self.netns_pid,
            "start_epoch": self.start_epoch,
            "marks": frame.attrs["marks"],
            "errors": list(self.errors),
            "exited": list(self.exited),
            "columns": columns,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "ResourceSampler":
        """A stopped sampler holding the samples of ``to_dict()`` (e.g. read back from a
        task's result JSON): ``to_frame``, ``summary``, ``plot`` and ``to_csv`` work."""
        rows = summaries.rows_from_dict(d)  # ValueError unless it is one
        self = cls.__new__(cls)
        self.interval, self.children, self.nics = d["interval"], d["children"], d["nics"]
        self.netns_pid = d.get("netns_pid")
        self.host, self.pids, self.start_epoch = d["host"], list(d["pids"]), d["start_epoch"]
        self.on_sample, self._roots, self._state = None, {}, "stopped"
        self.marks = [Mark(**m) for m in d["marks"]]
        self.errors, self.exited = list(d["errors"]), list(d["exited"])
        self._lock, self._sampling, self._stop, self._thread = (
            threading.Lock(),
            threading.Lock(),
            threading.Event(),
            None,
        )
        self._warned = set()
        self._rows = rows
        return self

    def __repr__(self) -> str:
        return (
            f"ResourceSampler(interval={self.interval}, pids={self.pids}, children={self.children}, "
            f"nics={self.nics}, {self._state}, {len(self._rows)} samples, {len(self.errors)} errors)"
        )


def _process(pid) -> psutil.Process:
    try:
        return psutil.Process(int(pid))
    except (psutil.NoSuchProcess, ValueError, TypeError):
        raise ValueError(
            f"pid {pid!r}: no such process; pass the pid of a running process (or pids=[] to sample the host only)"
        ) from None


def _descendants(procs: Mapping[int, psutil.Process]) -> list[psutil.Process]:
    """Descendants of ``procs`` from one scan of the process table (cheaper than
    ``children(recursive=True)`` per process)."""
    kids: dict[int, list[int]] = {}
    for pid, ppid in _ppid_map().items():
        kids.setdefault(ppid, []).append(pid)
    found, todo = [], list(procs)
    seen = set(procs)
    while todo:
        for pid in kids.get(todo.pop(), []):
            if pid not in seen:
                seen.add(pid)
                todo.append(pid)
                try:
                    found.append(psutil.Process(pid))
                except psutil.NoSuchProcess:
                    pass
    return found


def _ppid_map() -> dict[int, int]:
    """{pid: parent pid} for every process. psutil's own platform scan (what
    ``Process.children`` uses) costs a quarter of ``process_iter``; it is private, so
    fall back to the public API where it is missing."""
    fast = getattr(getattr(psutil, "_psplatform", None), "ppid_map", None)
    if fast is not None:
        return fast()
    return {p.pid: p.info["ppid"] for p in psutil.process_iter(["ppid"])}


def _cpu_percentages(before, after) -> dict:
    """Each CPU field's share of the interval, in %. A counter the kernel moved backwards (iowait
    can) counts 0, and the shares are of the fields' clamped sum, so they always add up to 100."""

    def parts(c):
        d = c._asdict()  # guest and guest_nice are inside user and nice: left out
        return {"user": d["user"] + d.get("nice", 0), **{f: d.get(f, 0.0) for f in CPU_FIELDS[1:]}}

    p0, p1 = parts(before), parts(after)
    delta = {f: max(0.0, p1[f] - p0[f]) for f in CPU_FIELDS}
    span = sum(delta.values())
    if span <= 0:
        return {f"cpu_{f}": math.nan for f in CPU_FIELDS}
    return {f"cpu_{f}": 100.0 * delta[f] / span for f in CPU_FIELDS}


def _net_counters(nics, pid: int | None = None) -> dict[str, tuple[int, int]]:
    """{nic: (bytes received, bytes sent)}, the order of the sampler's columns."""
    return {n: (recv, sent) for n, (sent, recv) in nic_counters(nics, pid).items()}


def _disk_counters() -> tuple[int, int] | None:
    try:
        d = psutil.disk_io_counters(perdisk=False, nowrap=True)
    except (RuntimeError, OSError):
        return None
    return None if d is None else (d.read_bytes, d.write_bytes)


def _jsonable(v):
    if hasattr(v, "item"):
        v = v.item()
    return None if isinstance(v, float) and not math.isfinite(v) else v


def idle_baseline(seconds: float = 3, interval: float = 0.5) -> dict:
    """Summary of the host with none of our processes watched (the reports' "Idle" row).

    Run it before starting any task: host CPU, memory and network then show what the
    machine does without us, the baseline to subtract when reading other rows."""
    if not seconds > 0:
        raise ValueError(f"seconds={seconds!r}: give a positive number of seconds to sample")
    with ResourceSampler(interval=interval, pids=[]) as s:
        time.sleep(seconds)
    return s.summary()


# ---------------------------------------------------------------------------------------
# `python -m labkit monitor`
# ---------------------------------------------------------------------------------------


def monitor_command(
    cmd=None,
    pid: int | None = None,
    interval: float = 0.5,
    out="out/monitor",
    duration: float | None = None,
    timeout: float | None = 3600,
    dstat: bool = False,
    log=print,
) -> int:
    """Sample a command run as an owned child (with its descendants), or a running
    ``pid`` until it exits or ``duration`` passes; write ``monitor.csv`` (dstat's layout
    with ``dstat=True``), ``monitor.json`` and ``monitor.png`` into ``out``. Returns the
    command's exit status (124 on timeout, 130 on Ctrl-C), or 0 for ``pid``."""
    import subprocess

    from labkit.core.proc import OwnedProcess

    if bool(cmd) == (pid is not None):
        raise ValueError("give either a command (after --) or --pid PID, not both or neither")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rc = 0
    if cmd:
        sampler = ResourceSampler(interval, pids=[]).start()
        try:
            with OwnedProcess(cmd, out / "command.log", timeout=timeout) as child:
                sampler.mark("command started")
                try:
                    sampler.add_process(child.pid)
                except ValueError:
                    log(f"note: {cmd[0]} exited before sampling began; only the host was sampled")
                try:
                    rc = child.wait()
                except subprocess.TimeoutExpired:
                    rc = 124
                    log(f"error: command still running after {timeout} s; stopped it (see {out / 'command.log'})")
                sampler.mark("command ended")
        except KeyboardInterrupt:
            rc = 130
        finally:
            sampler.stop()
    else:
        sampler = ResourceSampler(interval, pids=[pid]).start()
        t0 = time.monotonic()
        try:
            while duration is None or time.monotonic() - t0 < duration:
                last = sampler.latest()
                if last is not None and last["nprocs"] == 0:
                    break
                time.sleep(min(interval, 0.25))
        except KeyboardInterrupt:
            pass
        finally:
            sampler.stop()
    csv_path = sampler.to_csv(out / "monitor.csv", dstat=dstat)
    (out / "monitor.json").write_text(json.dumps(sampler.to_dict()))
    what = " ".join(" ".join(map(str, cmd)).split()) if cmd else f"pid {pid}"
    fig = sampler.plot(title=what if len(what) < 80 else what[:77] + "...")
    fig.savefig(out / "monitor.png")
    s = sampler.summary()
    log(
        f"{what}: {s['duration_s']:.1f} s, {s['samples']} samples; host user CPU {s['cpu_user_pct']:.1f} %, "
        f"memory used {fmt_bytes(s['mem_used_bytes'])}; process CPU {s['proc_cpu_pct']:.1f} %, "
        f"peak RSS {fmt_bytes(s['proc_rss_peak_bytes'])}; network recv {fmt_bytes(s['net_recv_bytes'])}, "
        f"sent {fmt_bytes(s['net_sent_bytes'])}"
    )
    log(f"wrote {csv_path}, {out / 'monitor.json'}, {out / 'monitor.png'}")
    for e in sampler.errors:
        log(f"sampler error: {e}")
    return rc
