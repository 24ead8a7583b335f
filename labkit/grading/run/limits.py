"""Hard limits on a graded run, and a way to end every process in it: a control group.

Each graded process (a notebook's runner, a hidden check, a verifier) starts inside a fresh
cgroup of its own, with a memory limit and a cap on its tasks, which the kernel enforces and a
process inside cannot raise (the sandbox hides the cgroup file system; no capabilities).
``Group.kill`` ends every process in the group, however it forked, and ``Group.close`` removes
it. Backends are tried in order (``BACKENDS``): ``cgroup2``, ``cgroup1``, and ``rlimit`` where
no cgroup is available (hard data and process limits, plus the grader polling the tree's memory).

``open_group(name, memory_bytes, tasks)`` picks the first backend that works here.
``bounded(fn, ...)`` runs the grader's own work on one student's file (reading, cleaning,
examining it) in a forked child with a data, CPU and wall-clock limit: ``OverBudget`` says which.
More in docs/internals.md, section labkit.grading (each backend).
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from labkit.core import cgroups, sweep
from labkit.core.cgroups import PREFIX
from labkit.core.cgroups import read as _read


def _counter(text: str, key: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


@dataclass
class Group:
    """One run's cgroup(s): ``procs`` are the ``cgroup.procs`` files a process joins by writing its pid."""

    backend: str
    dirs: list[Path] = field(default_factory=list)
    memory_bytes: int = 0
    tasks: int = 0

    @property
    def procs(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def enter_command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the group from its first instruction (``cgroups.enter_command``)."""
        return cgroups.enter_command(self.dirs, argv)

    def pids(self) -> list[int]:
        return cgroups.pids(self.dirs)

    def kill(self, timeout: float = 10.0) -> list[int]:
        """SIGKILL every process in the group until it is empty; returns the pids it killed."""
        return cgroups.kill(self.dirs, timeout)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the group's memory limit."""
        if self.backend == "cgroup2":
            return _counter(_read(self.dirs[0] / "memory.events"), "oom_kill")
        if self.backend == "cgroup1":
            return sum(_counter(_read(d / "memory.oom_control"), "oom_kill") for d in self.dirs)
        return 0

    def task_limit_hits(self) -> int:
        """How many times a fork failed at the group's task cap."""
        for d in self.dirs:
            if (d / "pids.events").exists():
                return _counter(_read(d / "pids.events"), "max")
        return 0

    def close(self) -> None:
        """Kill what is left and remove the group's directories."""
        self.kill()
        for d in self.dirs:
            cgroups.remove(d, timeout=1.0)


# ---------------------------------------------------------------------------------------------
# Backends


def _cgroup2(name: str, memory_bytes: int, tasks: int) -> Group:
    parent = cgroups.v2_dir()
    if parent is None:
        raise OSError("no cgroup2 hierarchy holds this process")
    cgroups.enable(parent, {"memory", "pids"})
    settings = {"memory.max": str(memory_bytes), "memory.swap.max": "0", "pids.max": str(tasks)}
    d = cgroups.make(parent, name, settings, optional=("memory.swap.max",))
    return Group("cgroup2", [d], memory_bytes, tasks)


def _cgroup1(name: str, memory_bytes: int, tasks: int) -> Group:
    parents = {c: cgroups.v1_dir(c) for c in ("memory", "pids")}
    missing = [c for c, p in parents.items() if p is None or not p.is_dir()]
    if missing:
        raise OSError(f"no cgroup v1 hierarchy for {', '.join(missing)}")
    memsw = "memory.memsw.limit_in_bytes"  # no swapping past the limit either
    mem = cgroups.make(
        parents["memory"], name, {"memory.limit_in_bytes": str(memory_bytes), memsw: str(memory_bytes)}, (memsw,)
    )
    try:
        pids = cgroups.make(parents["pids"], name, {"pids.max": str(tasks)})
    except OSError:
        mem.rmdir()
        raise
    return Group("cgroup1", [mem, pids], memory_bytes, tasks)


def _rlimit(name: str, memory_bytes: int, tasks: int) -> Group:
    return Group("rlimit", [], memory_bytes, tasks)


BACKENDS = {"cgroup2": _cgroup2, "cgroup1": _cgroup1, "rlimit": _rlimit}


def open_group(name: str, memory_bytes: int, tasks: int, backends=None) -> Group:
    """A fresh group ``labkit-<pid>-<name>`` (``pid``: this process, its maker) from the first
    backend that works on this machine."""
    errors = []
    for backend in backends or BACKENDS:
        try:
            return BACKENDS[backend](f"{PREFIX}{os.getpid()}-{name}", int(memory_bytes), int(tasks))
        except (OSError, ValueError) as e:
            errors.append(f"{backend}: {e}")
    raise OSError("no way to limit a run here: " + "; ".join(errors))


def shared(backend: str) -> str:
    """Why runs under ``backend`` would share their limits ('' when each has its own). Without a
    cgroup, a grader that is not root runs every notebook as its own uid: ``RLIMIT_NPROC`` counts
    the processes of all of them together (one run's threads stop another's forks). (Memory is
    each run's own even so: the runner polls its tree's RSS and memfds, and its /tmp, /dev/shm and
    disk are tmpfs of fixed sizes.) Root gives each run a uid of
    its own (``sandbox.lease_account``). The ways to give each run limits of its own here are a
    cgroup delegated to this user (systemd's user manager: ``systemd-run --user --scope -p
    Delegate=yes``, then the ``cgroup2`` backend) or running the grader as root."""
    if backend != "rlimit" or os.geteuid() == 0:
        return ""
    return (
        f"as user {os.geteuid()} with no cgroup of its own (no delegated cgroup2 or cgroup v1 hierarchy it may "
        f"write; systemd-run --user gives one where a systemd user manager runs), the runs would share one "
        f"process count (RLIMIT_NPROC counts every process of this uid): one run's threads would stop "
        f"another's forks"
    )


def best_backend() -> str:
    """The backend ``open_group`` uses here (tried with a throwaway group)."""
    g = open_group(f"probe-{os.getpid()}", 2**30, 64)
    g.close()
    return g.backend


def _parents() -> list[Path]:
    """Where this process's runs' groups are made: its own groups, v2 and v1."""
    return [p for p in [cgroups.v2_dir()] + [cgroups.v1_dir(c) for c in ("memory", "pids")] if p is not None]


# An empty labkit group whose name carries no pid is taken for a dead grader's too (open_group names none so).
STALE = sweep.register(cgroups.sweeper("grading-cgroups", _parents, unnamed=True))


def remove_stale() -> list[Path]:
    """Remove the empty labkit groups that killed graders left behind (under this process's
    cgroups), and no group of a grader still running beside this one (``labkit.core.sweep``)."""
    return STALE.sweep()


# ---------------------------------------------------------------------------------------------
# Inside the limited process


def limit_cpu(seconds: float) -> None:
    """At ``seconds`` of CPU time the kernel ends this process with SIGXCPU, and a second later
    with SIGKILL (whatever the code does with SIGXCPU); no core file is written."""
    soft = max(1, int(seconds + 0.999))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


def limit_self(memory_bytes: int, processes: int | None = None) -> None:
    """Lower this process's soft *and hard* data-segment limit (and, not as root, its process
    count), so nothing it starts can raise them again. ``RLIMIT_DATA`` rather than
    ``RLIMIT_AS``: TensorFlow reserves address space it never touches."""
    _lower(resource.RLIMIT_DATA, int(memory_bytes))
    if processes and os.getuid() != 0:
        _lower(resource.RLIMIT_NPROC, int(processes))


def _lower(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


# ---------------------------------------------------------------------------------------------
# The grader's own work on one student's file, in a child of its own


class OverBudget(RuntimeError):
    """The grader's work on one student's file went past its limits; the message says which."""


def bounded(fn, *args, cpu_s: float, memory_mb: float, wall_s: float):
    """``fn(*args)`` in a child forked from this process, so what a student's file makes the
    grader parse is counted against that file: ``memory_mb`` more than this process holds
    (``RLIMIT_DATA``), ``cpu_s`` of CPU time (``limit_cpu``) and ``wall_s`` of wall-clock time.
    Returns its value (pickled back: the child runs only the grader's code), raises what it
    raised, or ``OverBudget`` saying which limit ended it. ``fn`` starts no process."""
    import pickle

    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: its pipe and its exit code are what the parent reads
        os.close(read)
        _child(write, parent, fn, args, memory_mb, cpu_s)
    os.close(write)
    data = None
    try:
        data = _drain(read, wall_s)
    finally:
        if data is None:  # past its time, or this process is being stopped (Ctrl-C): the child goes too
            os.kill(pid, signal.SIGKILL)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if data is None:
        raise OverBudget(f"took longer than {wall_s:g} s")
    kind, value = pickle.loads(data) if data else ("died", code)
    if kind == "ok":
        return value
    if kind == "raised":
        raise value
    if kind == "memory":
        raise OverBudget(f"needed more than {memory_mb:g} MB")
    if value in (-signal.SIGXCPU, -signal.SIGKILL):  # RLIMIT_CPU's soft signal, then its hard one
        raise OverBudget(f"needed more than {cpu_s:g} s of CPU time")
    raise OverBudget(f"ended with exit code {value}")


def _child(write: int, parent: int, fn, args, memory_mb: float, cpu_s: float) -> None:
    """The forked child of ``bounded``: limits first, then ``fn``; its outcome pickled into ``write``."""
    import pickle

    from labkit.core.proc import die_with_parent

    code = 1
    try:
        # What this process held before the fork is not the child's to collect: a finalizer of an
        # object of a library with threads of its own (TensorFlow's, in a test process) would run
        # here, where those threads are gone, and crash the child.
        gc.freeze()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        die_with_parent(signal.SIGKILL, parent)
        limit_self(_data_bytes() + int(memory_mb * 2**20))
        limit_cpu(cpu_s)
        try:
            outcome = ("ok", fn(*args))
        except MemoryError:
            outcome = ("memory", None)
        except Exception as e:  # noqa: BLE001 - raised again in the parent, as it was
            outcome = ("raised", e)
        try:
            data = pickle.dumps(outcome)
            if outcome[0] == "raised":  # an exception whose arguments do not remake it, say
                pickle.loads(data)
        except Exception:  # noqa: BLE001 - a value or exception that does not pickle: its text
            data = pickle.dumps(("raised", RuntimeError(f"{type(outcome[1]).__name__}: {outcome[1]}")))
        with os.fdopen(write, "wb") as f:
            f.write(data)
        code = 0
    finally:
        os._exit(code)


def _data_bytes() -> int:
    """This process's data segment (``VmData``): what a forked child holds before it does anything."""
    for line in _read(Path("/proc/self/status")).splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    return 0


def _drain(fd: int, wall_s: float) -> bytes | None:
    """Everything written to ``fd`` until its writer closes it; None past ``wall_s`` seconds."""
    import select

    chunks, deadline = [], time.monotonic() + wall_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)
