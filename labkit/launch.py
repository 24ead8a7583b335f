"""Start, watch and stop one process per TensorFlow task, locally or over ssh; gather results.

    spec = cluster.local(ps=1, workers=2)
    with Cluster(spec, "ps_sgd", lab="lab2", steps=300) as c:   # starts; returns when every server is up
        result = c.wait(timeout=300)                              # TaskFailed / ClusterTimeout, never a hang
        # or c.follow(on_line): the same wait, each new log line passed to on_line(task, line)
    result.table()      # one row per task: how it ended, steps, metrics, resources
    result.samples()    # every task's resource samples, merged, for plots

What it guarantees:
- **Ownership.** Each task is a child in its own session with its own log file under
  ``runs/<lab>/<run>/``. Leaving the ``with`` block, an exception, a KeyboardInterrupt
  in ``start()``/``wait()``, interpreter exit (``atexit``) and a global timeout all stop
  every task: SIGTERM (a task then writes its result), SIGKILL after ``term_grace``.
  If the launcher itself dies, even by SIGKILL, local tasks get SIGTERM from the kernel
  (``labkit.proc``) and remote tasks from their wrapper on the node, which sees the ssh
  session's stdin close (``remote_command``).
- **Prompt failure.** A task that exits non-zero or dies raises ``TaskFailed(task,
  returncode, log_tail)`` within a poll interval (50 ms), after the rest are stopped.
  It names the task that failed first, and lists the peers that failed because of it
  as consequences; a remote task killed by a signal is ``killed by SIGKILL on HOST``.
- **Ports.** Local tasks' ports are checked free before starting (TensorFlow listens on
  0.0.0.0:PORT). A spec from ``cluster.local()`` moves to other free ports when one is
  taken, even when another process grabs it between the check and the bind; an
  explicit spec raises ``PortInUse``.
- **Parameter servers** block for ever by design: once the trainers have finished,
  a ps gets ``ps_grace`` seconds to exit by its own shutdown pattern (the task
  runtime's done queue or port watch), then it is terminated. ``ended`` says which.
- **Versions.** Every task writes a hello with its TensorFlow/keras/labkit/Python
  versions; a cluster whose tasks disagree with each other or with the launcher is
  stopped with ``VersionSkew`` (``check_versions``).

Remote hosts (any host that is not this machine) start over ssh::

    ssh -- HOST sh -c 'cd REMOTE_DIR && mkdir -p RUN
                       env TF_CONFIG=... REMOTE_PYTHON -m labkit.tasks.NAME ... &
                       echo $! > RUN/worker-1.pid; (watch stdin) &; wait'

The task's output streams back into the local log; result files are copied back with
``ssh HOST 'tar -cf - ...'`` at the end; stopping signals the remote pid. ``ssh`` and
``remote_dir`` are arguments (defaults: ``$LABKIT_SSH`` and ``$LABKIT_REMOTE_DIR``, so a
notebook run with ``hosts_file=`` needs no code change); ``dry_run=True`` prints the exact
per-task commands. A remote task that fails because ssh failed (exit 255) or the kit is
missing on its node says so, with the fix (docs/cluster.md has the full table).
"""
from __future__ import annotations

import atexit
import io
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from labkit.cluster import LOCAL_HOSTS, ClusterSpec, Task, accepts, free_ports, port_is_free
from labkit.paths import runs_root
from labkit.proc import OwnedProcess, descendants
from labkit.results import ClusterResult, TaskOutcome, task_log_tail  # noqa: F401  (re-exported: launch.ClusterResult)
from labkit.results import read_json as _read_json
# TaskFailed and PortInUse are re-exported: notebooks and tests catch them as launch.TaskFailed
from labkit.protocol import (ENV_INTER_OP, ENV_INTRA_OP, ENV_RUN_DIR, ENV_TASK, EXIT_PORT_IN_USE,  # noqa: F401
                             VERSION_KEYS, PortInUse, TaskFailed, describe_exit, task_file, versions)

DEFAULT_SSH = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
POLL_S = 0.05
REMOTE_TERM_GRACE_S = 10  # a remote task whose launcher is gone: SIGTERM, then SIGKILL after this


class ClusterTimeout(TimeoutError):
    """The global timeout expired; ``running`` names the tasks that were still running."""

    def __init__(self, seconds: float, running: list[str], what: str = "finish"):
        self.seconds, self.running = seconds, running
        super().__init__(f"cluster did not {what} within {seconds:.0f} s; still running: {', '.join(running) or 'none'}; "
                         f"every task was stopped (raise the timeout, or see the logs for a hang)")


class VersionSkew(RuntimeError):
    """Tasks (or tasks and the launcher) run different TensorFlow/keras/labkit/Python versions."""


def default_ssh() -> list[str]:
    """``$LABKIT_SSH`` split like a shell would (e.g. ``ssh -i ~/.ssh/cloudlab -o BatchMode=yes``),
    else ``ssh -o BatchMode=yes -o ConnectTimeout=10``."""
    return shlex.split(os.environ["LABKIT_SSH"]) if os.environ.get("LABKIT_SSH", "").strip() else list(DEFAULT_SSH)


def default_remote_dir() -> str:
    """``$LABKIT_REMOTE_DIR``, else ``labkit`` (relative to the remote home)."""
    return os.environ.get("LABKIT_REMOTE_DIR", "").strip() or "labkit"


def program_module(program: str) -> str:
    """``"ps_sgd"`` -> ``"labkit.tasks.ps_sgd"``; a dotted name is used as given."""
    if not program or not all(part.isidentifier() for part in program.split(".")):
        raise ValueError(f"program {program!r} must be a module name, e.g. 'ps_sgd' (labkit.tasks.ps_sgd)")
    return program if "." in program else f"labkit.tasks.{program}"


def cli_args(args: dict) -> list[str]:
    """``{"batch_size": 50, "verbose": True}`` -> ``["--batch-size", "50", "--verbose"]``."""
    out = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out


def local_addresses() -> set[str]:
    """Names and addresses that mean this machine."""
    names = set(LOCAL_HOSTS) | {socket.gethostname(), socket.gethostname().split(".")[0], socket.getfqdn()}
    for addrs in psutil.net_if_addrs().values():
        names |= {a.address for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)}
    return names


def check_versions(hellos: dict[str, dict], reference: dict | None = None) -> None:
    """Raise ``VersionSkew`` if the tasks' hellos (task -> hello dict) disagree with each
    other or with ``reference`` (default: this process) on TensorFlow, keras, labkit or
    the Python minor version. Tasks without a hello are not checked."""
    reference = versions() if reference is None else reference

    def key(v: dict) -> tuple:
        return tuple(v.get(k) if k != "python" else ".".join(str(v.get(k, "")).split(".")[:2]) for k in VERSION_KEYS)

    want = key(reference)
    bad = {name: h for name, h in hellos.items() if key(h.get("versions", {})) != want}
    if bad:
        lines = [f"  launcher ({socket.gethostname()}): " + ", ".join(f"{k} {v}" for k, v in zip(VERSION_KEYS, want))]
        lines += [f"  {name} ({h.get('host')}): " + ", ".join(f"{k} {v}" for k, v in zip(VERSION_KEYS, key(h.get('versions', {}))))
                  for name, h in bad.items()]
        raise VersionSkew("the cluster's nodes run different versions, which makes TensorFlow fail in obscure ways:\n"
                          + "\n".join(lines) + "\ninstall the same versions everywhere (`make setup` on every node, "
                          "from the same commit), or pass check_versions=False to run anyway")


# --------------------------------------------------------------------------- processes

@dataclass
class _TaskProc:
    task: Task
    remote: bool
    argv: list[str]
    command: str              # the exact command line, for printing
    env: dict[str, str]
    log_path: Path
    proc: OwnedProcess | None = None
    t_start: float | None = None
    t_end: float | None = None
    t_end_epoch: float | None = None  # when the launcher saw the exit, on the tasks' clock
    returncode: int | None = None     # a remote task killed by signal N: -N, as for a local one
    ended: str | None = None
    signalled: bool = False           # the launcher stopped it (SIGTERM, then SIGKILL after the grace)
    injected: int | None = None       # the signal Cluster.kill() sent it

    def poll(self) -> int | None:
        if self.returncode is None and self.proc is not None:
            rc = self.proc.poll()
            if rc is not None:
                self.returncode, self.t_end, self.t_end_epoch = rc, time.monotonic(), time.time()
                if self.remote:
                    self.returncode = remote_returncode(rc)
        return self.returncode

    @property
    def running(self) -> bool:
        return self.proc is not None and self.poll() is None


_LIVE: set["Cluster"] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_live_clusters() -> None:
    """Nothing outlives the interpreter that started it."""
    for c in list(_LIVE):
        c.stop()


class Cluster:
    """Run ``program`` (``labkit.tasks.NAME`` or a dotted module) as every task of ``spec``.

    Keyword arguments that are not the launcher's own become the program's command
    line (``batch_size=50`` -> ``--batch-size 50``). The launcher's own:

    - ``lab``, ``run``, ``run_dir``: the run directory (default ``runs/<lab>/<run>``,
      ``run`` = program + time stamp);
    - ``python``: the interpreter for local tasks (default: this one);
    - ``ssh`` (argv list; default ``default_ssh()``), ``remote_dir`` (where the kit lives on
      remote hosts, relative to the remote home or absolute; default ``default_remote_dir()``),
      ``remote_python`` (relative to ``remote_dir``);
      ``local_hosts``: extra host names to treat as this machine;
    - ``env``: extra environment for every task; ``threads``: ``(intra, inter)`` op
      threads per task (default: the task picks from its host's cores);
    - ``timeout``: seconds from ``start()`` until everything must have finished;
      ``start_timeout``: until every server must be up; ``ps_grace``: how long a ps
      may take to exit after the trainers finish; ``term_grace``: SIGTERM to SIGKILL;
    - ``check_versions``: refuse a cluster with mismatched versions (``VersionSkew``);
    - ``dry_run``: ``start()`` prints the commands and starts nothing;
    - ``program_argv``: more command-line arguments for the program, as given.
    """

    def __init__(self, spec: ClusterSpec, program: str, *, lab: str = "adhoc", run: str | None = None,
                 run_dir=None, python: str | None = None, ssh=None, remote_dir: str | None = None,
                 remote_python: str = ".venv/bin/python", local_hosts=(), env: dict | None = None,
                 threads: tuple[int, int] | None = None, timeout: float = 900.0, start_timeout: float = 180.0,
                 ps_grace: float = 10.0, term_grace: float = 5.0, check_versions: bool = True,
                 dry_run: bool = False, program_argv=(), **args):
        if not isinstance(spec, ClusterSpec):
            raise ValueError(f"spec must be a labkit.cluster.ClusterSpec (e.g. cluster.local(ps=1, workers=2)), "
                             f"got {type(spec).__name__}")
        for name, value in (("timeout", timeout), ("start_timeout", start_timeout), ("ps_grace", ps_grace),
                            ("term_grace", term_grace)):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if threads is not None and (len(threads) != 2 or min(threads) < 1):
            raise ValueError(f"threads must be (intra_op, inter_op) with both >= 1, got {threads!r}")
        self.spec, self.program, self.module = spec, program, program_module(program)
        self.args, self.program_argv = dict(args), [str(a) for a in program_argv]
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.run_name = run or f"{program.rsplit('.', 1)[-1]}-{stamp}-{uuid.uuid4().hex[:4]}"
        self.run_dir = Path(run_dir) if run_dir else runs_root() / lab / self.run_name
        # on the nodes, the same path below runs/ as here: <lab>/<sweep>/<run> stays apart from
        # another sweep's <run>, whose leftover results and pid files must never be read as ours
        try:
            below = self.run_dir.absolute().relative_to(runs_root()).as_posix()
        except ValueError:  # a run_dir outside the runs root
            below = f"{lab}/{self.run_name}"
        self.remote_run = f"runs/{below}"
        self.python = python or sys.executable
        ssh = default_ssh() if ssh is None else ssh
        self.ssh = [str(s) for s in ([ssh] if isinstance(ssh, str) else ssh)]
        self.remote_dir = str(remote_dir) if remote_dir is not None else default_remote_dir()
        self.remote_python = str(remote_python)
        self.local_hosts = local_addresses() | set(local_hosts)
        self.env, self.threads = dict(env or {}), threads
        self.timeout, self.start_timeout = float(timeout), float(start_timeout)
        self.ps_grace, self.term_grace = float(ps_grace), float(term_grace)
        self.check_versions, self.dry_run = check_versions, dry_run
        self.result: ClusterResult | None = None
        self.startup_s: float | None = None
        self.teardown_s: float | None = None
        self._procs: list[_TaskProc] = []
        self._t_start: float | None = None
        self._t_trainers_done: float | None = None
        self._state = "new"
        self._build()

    # ----------------------------------------------------------------- commands
    def _is_remote(self, task: Task) -> bool:
        return task.host not in self.local_hosts

    def _task_env(self, task: Task, run_dir: str) -> dict[str, str]:
        env = {**self.spec.env(task.type, task.index), ENV_RUN_DIR: run_dir, ENV_TASK: task.name,
               "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        if self.threads:
            env[ENV_INTRA_OP], env[ENV_INTER_OP] = map(str, self.threads)
        env.update({k: str(v) for k, v in self.env.items()})
        return env

    def _build(self) -> None:
        argv_tail = ["-m", self.module, *cli_args(self.args), *self.program_argv]
        self._procs = []
        for task in self.spec.tasks():
            log = self.run_dir / task_file(task.type, task.index, ".log")
            if self._is_remote(task):
                env = self._task_env(task, self.remote_run)
                pid_file = f"{self.remote_run}/{task_file(task.type, task.index, '.pid')}"
                remote = remote_command(self.remote_dir, self.remote_run, pid_file, env,
                                        [self.remote_python, *argv_tail])
                argv = [*self.ssh, "--", task.host, remote]  # '--': a host is never read as an option
                self._procs.append(_TaskProc(task, True, argv, shlex.join(argv), env, log))
            else:
                env = self._task_env(task, str(self.run_dir.resolve()))
                argv = [self.python, *argv_tail]
                command = (f"cd {shlex.quote(os.getcwd())} && env "
                           + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(argv))
                self._procs.append(_TaskProc(task, False, argv, command, env, log))

    def commands(self) -> list[tuple[str, str]]:
        """``(task, command line)`` for every task: what ``start()`` runs, ready to paste."""
        return [(p.task.name, p.command) for p in self._procs]

    def print_commands(self, file=None) -> None:
        for name, cmd in self.commands():
            print(f"# {name}\n{cmd}", file=file or sys.stdout)

    # -------------------------------------------------------------------- start
    def start(self, wait_ready: bool = True) -> "Cluster":
        """Start every task (ps first), then wait until every server accepts connections
        (``wait_ready``). Raises ``TaskFailed``/``PortInUse``/``ClusterTimeout``/
        ``VersionSkew`` after stopping everything."""
        if self.dry_run:
            self.print_commands()
            self._state = "dry-run"
            return self
        if self._state != "new":
            raise RuntimeError(f"this cluster is {self._state}; a Cluster runs once, create a new one")
        self._state = "starting"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._t_start = time.monotonic()
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            for attempt in range(4):
                self._check_ports()
                self._spawn()
                try:
                    if wait_ready:
                        self._wait_ready()
                    break
                except PortInUse:
                    if not self.spec.auto_ports or attempt == 3:
                        raise
                    self._terminate([p for p in self._procs if p.running])  # another process won a port race
                    self._move_ports([p.task for p in self._procs])
            self.startup_s = time.monotonic() - self._t_start
            if self.check_versions and wait_ready:
                check_versions(self.hellos())
            self._state = "running"
        except BaseException:
            self.stop()
            raise
        return self

    def _check_ports(self) -> None:
        taken = [p.task for p in self._procs if not p.remote and not port_is_free(p.task.port)]
        if not taken:
            return
        if self.spec.auto_ports:
            self._move_ports(taken)
            return
        t = taken[0]
        raise PortInUse(t.name, t.address, _port_owner(t.port))

    def _move_ports(self, tasks: list[Task]) -> None:
        used = {p.task.port for p in self._procs}
        new = free_ports(len(tasks), avoid=used)
        self.spec = self.spec.with_addresses({t.name: f"{t.host}:{port}" for t, port in zip(tasks, new)})
        self._build()

    def _spawn(self) -> None:
        """Start every task. Each gets SIGTERM from the kernel if this process dies (``OwnedProcess``);
        a remote task's ssh client also gets a pipe as stdin that only this process holds: once we
        are gone, however we went, the task's wrapper on its node reads end-of-file and stops it."""
        for p in self._procs:
            p.log_path.write_text(f"# {p.command}\n")
            if p.remote:
                p.proc = OwnedProcess(p.argv, p.log_path, stdin=subprocess.PIPE).start()
                _arm(p.proc)
            else:
                p.proc = OwnedProcess(p.argv, p.log_path, env={**os.environ, **p.env}).start()
            p.t_start = time.monotonic()

    def _wait_ready(self) -> None:
        deadline = self._t_start + min(self.start_timeout, self.timeout)
        pending = list(self._procs)
        while pending:
            self._raise_on_failure()
            for p in list(pending):
                if p.poll() is not None or accepts(p.task.host, p.task.port):
                    pending.remove(p)
            if pending and time.monotonic() > deadline:
                raise ClusterTimeout(time.monotonic() - self._t_start, [p.task.name for p in pending],
                                     what="bring every server up")
            if pending:
                time.sleep(POLL_S)

    # --------------------------------------------------------------------- wait
    def wait(self, timeout: float | None = None) -> ClusterResult:
        """Wait until every trainer has finished and every ps is gone, then return the
        gathered ``ClusterResult``. ``timeout`` (seconds from now) tightens the global one."""
        if self._state == "dry-run":
            raise RuntimeError("this is a dry run: nothing was started (see print_commands())")
        if self._state == "new":
            self.start()
        if self._state == "finished":
            return self.result
        if self._state == "stopped":
            raise RuntimeError("this cluster was stopped before it finished; what its tasks wrote is in .result")
        deadline = self._t_start + self.timeout
        if timeout is not None:
            deadline = min(deadline, time.monotonic() + timeout)
        try:
            while True:
                self._raise_on_failure()
                trainers = [p for p in self._procs if p.task.type != "ps"]
                ps = [p for p in self._procs if p.task.type == "ps"]
                if all(p.poll() is not None for p in trainers):
                    if self._t_trainers_done is None:
                        self._t_trainers_done = max(p.t_end for p in trainers)
                    alive = [p for p in ps if p.running]
                    if not alive:
                        break
                    if time.monotonic() - self._t_trainers_done > self.ps_grace:
                        self._terminate(alive)
                        break
                if time.monotonic() > deadline:
                    running = [p.task.name for p in self._procs if p.running]
                    raise ClusterTimeout(time.monotonic() - self._t_start, running)
                time.sleep(POLL_S)
            self._sweep()
            gone = time.time()
            self.teardown_s = time.monotonic() - self._t_trainers_done
            self._state = "finished"
            self.result = self._gather()
            ends = [t.result.get("ended_epoch") for t in self.result.trainers() if t.result]
            if ends and len(ends) == len(self.result.trainers()) and all(ends):
                # from the moment the last trainer had written its result, not from when we
                # noticed its exit (the ps may be gone before that)
                self.teardown_s = self.result.teardown_s = gone - max(ends)
                self.result.save()
            return self.result
        except BaseException:
            self.stop()
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)

    def run(self, timeout: float | None = None) -> ClusterResult:
        """``start()`` + ``wait()``, with everything stopped on the way out."""
        with self:
            return self.wait(timeout)

    def follow(self, on_line=None, until=None, poll: float = 0.1) -> ClusterResult | None:
        """``wait()``, passing each new line of the tasks' logs to ``on_line(task, line)`` as
        it is written (a lab prints its chief's evaluations, or moves a progress bar).

        Returns ``wait()``'s result, or None as soon as ``until(seen)`` is true (``seen``:
        task -> its lines so far), leaving the cluster running (to kill a task mid-run, say).
        A failed task raises ``TaskFailed`` as ``wait`` does; starts the cluster if it is new."""
        if self._state == "new":
            self.start()
        offsets = {p.task.name: 0 for p in self._procs}
        seen: dict[str, list[str]] = {name: [] for name in offsets}

        def read() -> None:
            for p in self._procs:
                lines, offsets[p.task.name] = _new_lines(p.log_path, offsets[p.task.name])
                seen[p.task.name] += lines
                for line in lines:
                    if on_line is not None:
                        on_line(p.task.name, line)

        deadline = (self._t_start or time.monotonic()) + self.timeout
        while True:
            read()
            if until is not None and until(seen):
                return None
            if any(s != "running" for s in self.status().values()) or time.monotonic() > deadline:
                try:
                    return self.wait()  # every task done, or one failed: wait() gathers or raises
                finally:
                    read()  # the last lines, written just before the exit
            time.sleep(poll)

    def _raise_on_failure(self) -> None:
        """Raise ``TaskFailed`` (or ``PortInUse``) once any task has failed, after stopping the rest.

        It names the task that failed first: peers of a killed task fail within milliseconds
        (an all-reduce or a ps connection breaks), and the launcher may notice their exits in
        the same poll. So the cause is, in order: the task ``kill()`` was told to kill; a task
        that died of a signal; the earliest exit (by the task's own result file where it wrote
        one). The other tasks that failed on their own are reported as its consequences."""
        if not any(self._failed_on_its_own(p) for p in self._procs):
            return
        self._terminate([q for q in self._procs if q.running])
        time.sleep(0.1)  # let the last lines of a remote log arrive
        failed = sorted((p for p in self._procs if self._failed_on_its_own(p)), key=self._failure_order)
        first, others = failed[0], failed[1:]
        for p in failed:
            p.ended = "failed"
        log_tail = task_log_tail(first.log_path, 30)
        if first.returncode == EXIT_PORT_IN_USE:
            raise PortInUse(first.task.name, first.task.address, returncode=first.returncode, log_tail=log_tail,
                            log_path=first.log_path)
        hint = remote_failure_hint(first.task.host, first.returncode, log_tail, self.remote_dir, self.remote_python,
                                   started=f"[{first.task.name} " in log_tail) if first.remote else ""
        raise TaskFailed(first.task.name, first.returncode, log_tail, first.log_path,
                         detail=self._where(first) + (f" ({hint})" if hint else ""),
                         consequences={p.task.name: describe_exit(p.returncode) + self._where(p) for p in others})

    @staticmethod
    def _failed_on_its_own(p: _TaskProc) -> bool:
        """Exited non-zero or died, and not because the launcher stopped it. A task that died
        of SIGKILL while the launcher had only sent SIGTERM was killed by someone else."""
        rc = p.poll()
        if rc is None or rc == 0:
            return False
        if not p.signalled or p.injected:
            return True
        return rc == -signal.SIGKILL and p.ended != "killed"

    def _failure_order(self, p: _TaskProc) -> tuple:
        own_end = None
        if not p.remote:
            try:
                own_end = (_read_json(self.run_dir / task_file(p.task.type, p.task.index, ".json")) or {}) \
                    .get("ended_epoch")
            except ValueError:  # half written: it was still ending
                pass
        return (p.injected is None, not (p.returncode or 0) < 0, own_end or p.t_end_epoch or float("inf"))

    @staticmethod
    def _where(p: _TaskProc) -> str:
        """' on HOST after 3.2 s': where it ran, and for how long (its own run, not the others' teardown)."""
        on = f" on {p.task.host}" if p.remote else ""
        wall = (p.t_end or time.monotonic()) - p.t_start if p.t_start else None
        return on + (f" after {wall:.1f} s" if wall is not None else "")

    # --------------------------------------------------------------------- stop
    def stop(self) -> None:
        """Stop every task still running (SIGTERM, then SIGKILL) and gather what they
        wrote. Safe to call any number of times, from anywhere. A KeyboardInterrupt
        that arrives meanwhile (a second press of the notebook's stop button) is held
        until the teardown is complete, then re-raised."""
        if self._state in ("new", "dry-run", "stopped", "finished"):
            return
        interrupted = None
        for _ in range(5):
            try:
                self._terminate([p for p in self._procs if p.running])
                self._sweep()
                break
            except KeyboardInterrupt as e:
                interrupted = e
        with _LIVE_LOCK:
            _LIVE.discard(self)
        try:
            self.result = self._gather()
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            print(f"labkit: could not gather the results of {self.run_dir}: {e}", file=sys.stderr)
        self._state = "stopped"
        if interrupted is not None:
            raise interrupted

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one task (fault injection: kill a worker mid-run)."""
        p = self._proc(name)
        if not p.running:
            raise ValueError(f"task {name} is not running")
        p.injected = int(sig)  # if it fails now, it is the cause, whatever its peers do
        if p.remote:
            self._remote_signal(p.task.host, [p], sig)
        else:
            os.kill(p.proc.pid, sig)

    def _terminate(self, procs: list[_TaskProc]) -> None:
        """SIGTERM every tree at once (a task then writes its result), SIGKILL what is
        left after ``term_grace``; ``ended`` becomes terminated or killed."""
        procs = [p for p in procs if p.running]
        if not procs:
            return
        trees = {id(p): descendants(p.proc.pid) for p in procs}
        for host in {p.task.host for p in procs if p.remote}:
            self._remote_signal(host, [p for p in procs if p.remote and p.task.host == host], signal.SIGTERM)
        for p in procs:
            p.signalled, p.ended = True, "terminated"
            if not p.remote:  # a remote task's ssh client ends by itself once the task has written its result
                _signal_group(p.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.term_grace
        while any(p.running for p in procs) and time.monotonic() < deadline:
            time.sleep(0.02)
        late = [p for p in procs if p.running]
        for host in {p.task.host for p in late if p.remote}:
            self._remote_signal(host, [p for p in late if p.remote and p.task.host == host], signal.SIGKILL)
        for p in late:
            p.ended = "killed"
            _signal_group(p.proc.pid, signal.SIGKILL)
            try:
                p.proc.popen.wait(2.0)  # reap it here, so the return code says SIGKILL
            except subprocess.TimeoutExpired:
                print(f"labkit: {p.task.name} (pid {p.proc.pid}) survived SIGKILL for 2 s", file=sys.stderr)
            p.poll()
        for p in procs:
            for child in trees[id(p)]:
                _kill_quietly(child)

    def _sweep(self) -> None:
        """Last check that no process of ours is left (a child of a task still running, say).
        Tasks already reaped are skipped: their pids may belong to other processes by now."""
        for p in self._procs:
            if p.proc is not None and p.running:
                for child in descendants(p.proc.pid):
                    _kill_quietly(child)
                self._terminate([p])

    # ------------------------------------------------------------------- remote
    def _ssh(self, host: str, command: str, timeout: float = 30.0, binary: bool = False):
        remote = f"cd {shlex.quote(self.remote_dir)} && {command}"
        return subprocess.run([*self.ssh, "--", host, remote], capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, text=not binary)

    def _remote_signal(self, host: str, procs: list[_TaskProc], sig: int) -> None:
        """Send ``sig`` to tasks on ``host``, by the pids their wrappers wrote; a pid is signalled
        only while its environment still names this run's task (the pid may be reused)."""
        def one(p: _TaskProc) -> str:
            pid_file = shlex.quote(f"{self.remote_run}/{task_file(p.task.type, p.task.index, '.pid')}")
            mine = [shlex.quote(f"{ENV_RUN_DIR}={self.remote_run}"), shlex.quote(f"{ENV_TASK}={p.task.name}")]
            return (f"p=$(cat {pid_file} 2>/dev/null) && grep -qsxzF {mine[0]} /proc/$p/environ && "
                    f"grep -qsxzF {mine[1]} /proc/$p/environ && kill -{int(sig)} $p")
        script = "; ".join(f"{{ {one(p)}; }}" for p in procs) + "; true"
        try:
            self._ssh(host, script, timeout=15)
        except (subprocess.TimeoutExpired, OSError) as e:
            print(f"labkit: could not signal tasks on {host}: {e}", file=sys.stderr)

    def _copy_back(self) -> list[str]:
        """Copy remote hosts' result and hello files into the local run directory."""
        notes = []
        for host in sorted({p.task.host for p in self._procs if p.remote}):
            try:
                out = self._ssh(host, f"tar -cf - -C {shlex.quote(self.remote_run)} .", timeout=120, binary=True)
            except (subprocess.TimeoutExpired, OSError) as e:
                notes.append(f"could not copy results back from {host}: {e}")
                continue
            if out.returncode != 0:
                notes.append(f"could not copy results back from {host}: {out.stderr.decode(errors='replace').strip()}")
                continue
            with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.11.4
                tar.extractall(tmp, **safe)
                for f in Path(tmp).glob("*.json"):
                    shutil.copyfile(f, self.run_dir / f.name)
        return notes

    def hellos(self) -> dict[str, dict]:
        """Each task's hello (pid, host, versions), read where the task wrote it."""
        out = {}
        for p in self._procs:
            if not p.remote:
                h = _read_json(self.run_dir / task_file(p.task.type, p.task.index, ".hello.json"))
                if h:
                    out[p.task.name] = h
        for host in sorted({p.task.host for p in self._procs if p.remote}):
            names = [f"{self.remote_run}/{task_file(p.task.type, p.task.index, '.hello.json')}"
                     for p in self._procs if p.remote and p.task.host == host]
            done = self._ssh(host, "cat " + " ".join(map(shlex.quote, names)) + " 2>/dev/null; true", timeout=30)
            for line in done.stdout.splitlines():
                if line.strip():
                    h = _parse_hello(line, host)
                    out[h["task"]] = h
        return out

    # ------------------------------------------------------------------ results
    def _gather(self) -> ClusterResult:
        notes = self._copy_back() if any(p.remote for p in self._procs if p.proc) else []
        tasks = []
        for p in self._procs:
            result = _read_json(self.run_dir / task_file(p.task.type, p.task.index, ".json"))
            rc = p.poll()
            ended = p.ended
            if ended is None and rc is not None:
                ended = "failed" if rc != 0 else (result or {}).get("shutdown", "exited")
                if ended == "finished":
                    ended = "exited"
                p.ended = ended
            wall = (p.t_end - p.t_start) if p.t_end and p.t_start else None
            tasks.append(TaskOutcome(p.task.name, p.task.type, p.task.index, p.task.host, ended, rc, wall,
                                     p.log_path, result))
        res = ClusterResult(self.program, self.run_dir, self.spec.as_dict(), tasks, self.startup_s, self.teardown_s,
                            time.monotonic() - self._t_start if self._t_start else None, notes)
        return res.save()

    # ------------------------------------------------------------------- status
    def _proc(self, name: str) -> _TaskProc:
        for p in self._procs:
            if p.task.name == name:
                return p
        raise ValueError(f"no task {name!r} in this cluster; tasks are {[p.task.name for p in self._procs]}")

    def status(self) -> dict[str, str]:
        """task -> new | running | exited | done-queue | chief-port-closed | failed |
        terminated | killed (the last two: stopped by the launcher)."""
        out = {}
        for p in self._procs:
            rc = p.poll() if p.proc else None
            out[p.task.name] = ("new" if p.proc is None else "running" if rc is None
                                else p.ended or ("exited" if rc == 0 else f"failed ({rc})"))
        return out

    def pids(self) -> dict[str, int]:
        """Local pid of each started task (for remote tasks: their ssh client)."""
        return {p.task.name: p.proc.pid for p in self._procs if p.proc is not None}

    def local_pids(self) -> dict[str, int]:
        """Pid of each started task that runs on this machine (what a local sampler can watch)."""
        return {p.task.name: p.proc.pid for p in self._procs if p.proc is not None and not p.remote}

    def log_tail(self, name: str, lines: int = 30) -> str:
        return task_log_tail(self._proc(name).log_path, lines)

    def __enter__(self) -> "Cluster":
        if self._state == "new":
            self.start()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def __repr__(self) -> str:
        return f"Cluster({self.module}, {self.run_dir}, {self._state}, {self.status() if self._procs else {}})"


def remote_command(remote_dir: str, run: str, pid_file: str, env: dict[str, str], argv: list[str],
                   grace: float = REMOTE_TERM_GRACE_S) -> str:
    """The command ssh runs on a task's node: ``sh -c SCRIPT``, whatever the login shell.

    The script starts the task in the background, writes its pid (what ``stop()`` and
    ``kill()`` signal), and watches the session's stdin: the launcher writes one line when
    it starts the ssh client and then holds the pipe open, so end-of-file means the
    launcher or its ssh client is gone (SIGKILL included), and the task gets SIGTERM (it
    writes its result), then SIGKILL after ``grace`` s. An ssh whose stdin was never
    connected (``ssh -n``) sends no line, and the watch stays off. The script exits with
    the task's status, so a task killed by signal N ends ssh with 128 + N, where ssh's own
    failures are 255."""
    q = shlex.quote
    task = "env " + " ".join(f"{k}={q(v)}" for k, v in env.items()) + " " + shlex.join(argv)
    script = "\n".join([
        f"cd {q(remote_dir)} 2>/dev/null || {{ echo {q(f'cd: {remote_dir}: No such file or directory')} >&2; "
        "exit 127; }",
        f"command -v {q(argv[0])} >/dev/null 2>&1 || {{ echo {q(f'{argv[0]}: No such file or directory')} >&2; "
        "exit 127; }",
        f"mkdir -p {q(run)} || exit 1",
        "exec 3<&0",
        f"{task} </dev/null &",
        "task=$!",
        f"echo $task > {q(pid_file)}",
        "( if read -r _; then while read -r _; do :; done; kill -TERM $task; "
        f"sleep {int(grace)}; kill -KILL $task; fi ) <&3 >/dev/null 2>&1 &",
        "watch=$!",
        "exec 3<&-",
        "wait $task; rc=$?",
        "kill $watch 2>/dev/null",
        "exit $rc",
    ])
    return f"sh -c {q(script)}"


def remote_returncode(ssh_returncode: int) -> int:
    """A remote task's return code as a local one's: ``remote_command``'s script ends ssh with
    128 + N when the task died of signal N, which becomes -N; ssh's own 255 and the task's
    exit codes stay."""
    sig = ssh_returncode - 128
    if ssh_returncode != 255 and sig > 0 and sig in signal.valid_signals():
        return -sig
    return ssh_returncode


def _arm(proc: OwnedProcess) -> None:
    """Write the line that arms ``remote_command``'s stdin watch; the pipe then stays open."""
    try:
        proc.popen.stdin.write(b"\n")
        proc.popen.stdin.flush()
    except OSError:  # ssh exited at once (a bad host, say): poll() reports that
        pass


def _parse_hello(line: str, host: str) -> dict:
    """One line of a remote task's hello file, or a ``VersionSkew`` that says what to do: a
    node that writes something else runs another kit (or something else wrote there)."""
    try:
        hello = json.loads(line)
        if isinstance(hello, dict) and isinstance(hello.get("task"), str):
            return hello
        problem = "it has no task name"
    except json.JSONDecodeError as e:
        problem = f"it is not JSON ({e.msg})"
    raise VersionSkew(f"a task on {host} wrote a hello the launcher cannot read ({problem}): {line.strip()[:120]!r}; "
                      f"the kit there is likely another version: reinstall it with `make cluster-setup "
                      f"HOSTS=<hosts file>` (docs/cluster.md), or pass check_versions=False to run anyway")


def remote_failure_hint(host: str, returncode: int, log_tail: str, remote_dir: str, remote_python: str,
                        started: bool = False) -> str:
    """What a remote task's failure most likely means, and the fix ('' if unclear): ssh's own
    exit code 255 (``started``: after the task had logged, so the connection broke), a missing
    kit directory, interpreter or task module."""
    guide = "see docs/cluster.md"
    if returncode == 255 and started:
        return (f"the ssh connection to {host} ended while the task ran: the node rebooted, its network "
                f"dropped or sshd was stopped; the task's log there ends here, {guide}")
    if returncode == 255:
        return (f"ssh to {host} failed: unreachable host, unknown host key or no key login; check that "
                f"`ssh -o BatchMode=yes {host} true` works without a prompt, {guide}")
    missing = "No such file or directory" in log_tail or "not found" in log_tail
    if missing and (f"cd: {remote_dir}" in log_tail or remote_python in log_tail):
        return (f"the kit is not installed on {host}: no {remote_dir}/{remote_python}; run "
                f"`make cluster-setup HOSTS=<hosts file>` or `python -m labkit nodes setup`, {guide}")
    if "No module named" in log_tail:
        return (f"the kit on {host} lacks a module this launcher uses: it is older or incomplete; "
                f"reinstall it with `make cluster-setup HOSTS=<hosts file>`, {guide}")
    return ""


def _new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The whole lines written to ``path`` since byte ``offset``, and the new offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1  # whole lines only
    return chunk[:end].decode("utf-8", "replace").splitlines(), offset + end


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _kill_quietly(proc: psutil.Process) -> None:
    try:
        proc.kill()
        proc.wait(2)
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):
        pass


def _port_owner(port: int) -> str:
    """' (held by pid N: cmdline)' when psutil can tell, else ''."""
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.pid:
                try:
                    cmd = " ".join(psutil.Process(c.pid).cmdline())[:80]
                except psutil.Error:
                    cmd = "?"
                return f" (held by pid {c.pid}: {cmd})"
    except psutil.AccessDenied:
        pass
    return ""
