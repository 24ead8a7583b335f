"""Start, watch and stop one process per TensorFlow task (here, over ssh or through Slurm); gather results.

    with Cluster(cluster.local(ps=1, workers=2), "ps_sgd", {"steps": 300}, lab="lab2") as c:
        result = c.wait(timeout=300)   # TaskFailed / ClusterTimeout, never a hang
    result.table()                     # one row per task: how it ended, steps, metrics, resources

The Cluster owns every task it starts: leaving the block, an exception, a KeyboardInterrupt, exit
or a timeout stops them all (SIGTERM, then SIGKILL after ``term_grace``). A failed task raises
``TaskFailed`` within a poll interval, naming the task that failed first; parameter servers get
``ps_grace`` to shut down by themselves; tasks whose versions disagree stop with ``VersionSkew``.
Each task's typed events (``labkit.wire.events``) reach subscribers as they come; the log is for
people. Where a task runs is its launcher's business (``labkit.distributed.launchers``).

More in docs/cluster.md, section 11 (events, ownership, ports, ps shutdown, launcher options).
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from labkit.wire import events
from labkit.distributed import launchers
from labkit.core import paths
from labkit.wire.spec import LOCAL_HOSTS, ClusterSpec, Task
from labkit.distributed.launchers.base import ClusterTimeout, Launcher, Settings, TaskProcess, signal_group
from labkit.core.paths import run_name, runs_root
from labkit.core.proc import StopAtExit, descendants
from labkit.wire.results import ClusterResult, TaskOutcome, task_log_tail  # noqa: F401  (re-exported: launch.ClusterResult)
from labkit.wire.results import read_json as _read_json
from labkit.core.registry import resolve
from labkit.tasks import PROGRAMS

# TaskFailed, PortInUse and VersionSkew are re-exported: notebooks and tests catch them as launch.TaskFailed
from labkit.wire.protocol import (
    ENV_GRPC_OPTIONS,
    ENV_INTER_OP,
    ENV_INTRA_OP,
    ENV_RUN_DIR,
    ENV_TASK,  # noqa: F401
    EXIT_PORT_IN_USE,
    VERSION_KEYS,
    PortInUse,
    TaskFailed,
    VersionSkew,
    chief_of,
    describe_exit,
    grpc_options,
    log_hint,
    task_file,
    versions,
)

POLL_S = 0.05


def program_module(program: str) -> str:
    """``"ps_sgd"`` -> ``"labkit.tasks.ps_sgd"`` (``PROGRAMS``); a dotted name is used as given."""
    if not program or not all(part.isidentifier() for part in program.split(".")):
        raise ValueError(f"program {program!r} must be a module name, e.g. 'ps_sgd' (labkit.tasks.ps_sgd)")
    return program if "." in program else PROGRAMS.reference(program)


def check_program_args(module: str, argv: list[str]) -> None:
    """Parse ``argv`` with the kit's task program's own parser (its ``parse_args``) before any task
    starts: a misspelt or invalid argument fails here, with argparse's message, not on a node after
    start-up. A program outside ``PROGRAMS`` is left to its own parser."""
    if module not in {PROGRAMS.reference(name) for name in PROGRAMS}:
        return
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            resolve(f"{module}:parse_args")(argv)
    except SystemExit as e:
        if e.code in (0, None):
            return
        lines = said.getvalue().strip().splitlines()
        message = lines[-1] if lines else f"{module} rejected its arguments {argv}"
        own = [n for n in inspect.signature(Cluster).parameters if n not in ("spec", "program", "args", "program_args")]
        typos = [
            close[0]
            for flag in re.findall(r"--([\w-]+)", message.partition("unrecognized arguments:")[2])
            if (close := difflib.get_close_matches(flag.replace("-", "_"), own, n=1))
        ]
        hint = f" (did you mean the Cluster's own {', '.join(f'{t}=' for t in typos)}?)" if typos else ""
        raise ValueError(
            f"{message}{hint}; the program's arguments go in args={{...}}, as its --help lists them"
        ) from None


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
        lines += [
            f"  {name} ({h.get('host')}): "
            + ", ".join(f"{k} {v}" for k, v in zip(VERSION_KEYS, key(h.get("versions", {}))))
            for name, h in bad.items()
        ]
        raise VersionSkew(
            "the cluster's nodes run different versions, which makes TensorFlow fail in obscure ways:\n"
            + "\n".join(lines)
            + "\ninstall the same versions everywhere: `make cluster-setup HOSTS=<hosts file>` "
            "from one checkout (it also remakes a .venv that another Python made, which `make setup` "
            "would keep), or pass check_versions=False to run anyway"
        )


_LIVE = StopAtExit()  # every running Cluster, stopped at interpreter exit


class Cluster:
    """Run ``program`` (``labkit.tasks.NAME`` or a dotted module) as every task of ``spec``.

    ``args``: the program's arguments, ``{"batch_size": 50}`` -> ``--batch-size 50``, checked
    against the program's own parser before anything starts. The rest are the Cluster's options,
    keywords only:

    - ``lab``, ``run``, ``run_dir``: the run directory (default ``runs/<lab>/<run>``,
      ``run`` = ``paths.run_name(program)``);
    - ``python``: the interpreter for local tasks (default: this one);
    - ``launcher``: how every task starts, by name (``local``, ``ssh``, ``slurm``, or one
      registered in ``labkit.distributed.launchers``); empty: chosen per task (see the module docstring);
      ``launcher_options``: the launchers' settings, each reading its own keys (ssh:
      ``{"ssh": [...], "remote_dir": ..., "remote_python": ..., "local_hosts": [...]}``; Slurm:
      ``{"srun": [extra srun arguments]}``; netem: ``{"link": "1gbit"}``);
    - ``env``: extra environment for every task; ``threads``: ``(intra, inter)`` op
      threads per task (default: the task picks from its host's cores);
    - ``timeout``: seconds from ``start()`` until everything must have finished;
      ``start_timeout``: until every server must be up; ``ps_grace``: how long a ps
      may take to exit after the trainers finish; ``term_grace``: SIGTERM to SIGKILL;
    - ``check_versions``: refuse a cluster with mismatched versions (``VersionSkew``);
    - ``dry_run``: ``start()`` prints the commands and starts nothing;
    - ``on_event``: called with each event of the tasks (``labkit.wire.events``; ``subscribe`` adds more);
    - ``program_argv``: more command-line arguments for the program, as given.
    """

    def __init__(
        self,
        spec: ClusterSpec,
        program: str,
        args: dict | None = None,
        *,
        lab: str = "adhoc",
        run: str | None = None,
        run_dir=None,
        python: str | None = None,
        env: dict | None = None,
        threads: tuple[int, int] | None = None,
        timeout: float = 900.0,
        start_timeout: float = 180.0,
        ps_grace: float = 10.0,
        term_grace: float = 5.0,
        check_versions: bool = True,
        dry_run: bool = False,
        program_argv=(),
        launcher: str | None = None,
        launcher_options: dict | None = None,
        on_event=None,
    ):
        if not isinstance(spec, ClusterSpec):
            raise ValueError(
                f"spec must be a labkit.wire.spec.ClusterSpec (e.g. cluster.local(ps=1, workers=2)), "
                f"got {type(spec).__name__}"
            )
        for name, value in (
            ("timeout", timeout),
            ("start_timeout", start_timeout),
            ("ps_grace", ps_grace),
            ("term_grace", term_grace),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if threads is not None and (len(threads) != 2 or min(threads) < 1):
            raise ValueError(f"threads must be (intra_op, inter_op) with both >= 1, got {threads!r}")
        self.spec, self.program, self.module = spec, program, program_module(program)
        if args is not None and not isinstance(args, dict):
            raise ValueError(f"args must be a dict of the program's arguments, got {type(args).__name__}")
        self.args, self.program_argv = dict(args or {}), [str(a) for a in program_argv]
        check_program_args(self.module, cli_args(self.args))  # program_argv: passed as given, unchecked
        self.run_name = run or run_name(program.rsplit(".", 1)[-1])
        self.run_dir = Path(run_dir) if run_dir else paths.run_dir(lab, self.run_name)
        # on the nodes, the same path below runs/ as here: <lab>/<sweep>/<run> stays apart from
        # another sweep's <run>, whose leftover results and pid files must never be read as ours
        try:
            below = self.run_dir.absolute().relative_to(runs_root()).as_posix()
        except ValueError:  # a run_dir outside the runs root
            below = f"{lab}/{self.run_name}"
        self.remote_run = f"runs/{below}"
        self.python = python or sys.executable
        options = {"check_versions": check_versions, **(launcher_options or {})}
        settings = Settings(
            self.run_dir.absolute(),
            self.remote_run,
            self.python,
            frozenset(local_addresses() | set(options.get("local_hosts", ()))),
            options,
        )
        self.spec, self._launchers = _assign_launchers(spec, launcher, settings)
        self.env, self.threads = dict(env or {}), threads
        self.timeout, self.start_timeout = float(timeout), float(start_timeout)
        self.ps_grace, self.term_grace = float(ps_grace), float(term_grace)
        self.check_versions, self.dry_run = check_versions, dry_run
        self.result: ClusterResult | None = None
        self.startup_s: float | None = None
        self.teardown_s: float | None = None
        self._procs: list[TaskProcess] = []
        self._subscribers: list = [on_event] if on_event is not None else []
        self._events: list[events.Event] = []
        self._tails: dict[str, events.Tail] = {}
        self._t_start: float | None = None
        self._t_trainers_done: float | None = None
        self._state = "new"
        self._build()

    # ----------------------------------------------------------------- commands
    def _task_env(self, task: Task, launcher: Launcher) -> dict[str, str]:
        env = {
            **self.spec.env(task.type, task.index),
            ENV_RUN_DIR: launcher.task_run_dir(task),
            ENV_TASK: task.name,
            **launcher.task_env(task),
            "PYTHONUNBUFFERED": "1",
            "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
            ENV_GRPC_OPTIONS: grpc_options(self.env.get(ENV_GRPC_OPTIONS, os.environ.get(ENV_GRPC_OPTIONS))),
        }
        if self.threads:
            env[ENV_INTRA_OP], env[ENV_INTER_OP] = map(str, self.threads)
        env.update({k: str(v) for k, v in self.env.items() if k != ENV_GRPC_OPTIONS})
        return env

    def _build(self) -> None:
        argv_tail = ["-m", self.module, *cli_args(self.args), *self.program_argv]
        self._procs = []
        for task in self.spec.tasks():
            launcher = self._launchers[task.name]
            env = self._task_env(task, launcher)
            argv, command = launcher.command(task, env, argv_tail)
            log = self.run_dir / task_file(task.type, task.index, ".log")
            self._procs.append(
                TaskProcess(
                    task,
                    launcher,
                    argv,
                    command,
                    env,
                    log,
                    self.run_dir / task_file(task.type, task.index, events.SUFFIX),
                )
            )

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
        _LIVE.add(self)
        try:
            for launcher, group in _by_launcher(self._procs):  # every node can run its tasks, before any starts
                launcher.precheck(group)
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
        taken = [p.task for p in self._procs if p.launcher.port_taken(p.task)]
        if not taken:
            return
        if self.spec.auto_ports:
            self._move_ports(taken)
            return
        t = taken[0]
        raise PortInUse(t.name, t.address, _port_owner(t.port))

    def _move_ports(self, tasks: list[Task]) -> None:
        self.spec = self._launchers[tasks[0].name].move_ports(self.spec, tasks)
        self._build()

    def _spawn(self) -> None:
        """Start every task through its launcher: each stands as a local child that dies with
        this process, however it goes (``labkit.distributed.launchers``)."""
        for p in self._procs:
            p.log_path.write_text(f"# {p.command}\n")
            p.events_path.write_bytes(b"")  # a start again (a port was taken) begins the stream anew
            self._tails[p.task.name] = events.Tail(p.events_path)
            p.proc = p.launcher.spawn(p)
            p.t_start = time.monotonic()

    def _wait_ready(self) -> None:
        deadline = self._t_start + min(self.start_timeout, self.timeout)
        pending = list(self._procs)
        while pending:
            self._deliver()
            self._raise_on_failure()
            written = set(os.listdir(self.run_dir))  # a fresh listing: on NFS, it shows what other nodes wrote
            for p in list(pending):
                if p.poll() is not None or (self._said_hello(p, written) and p.launcher.ready(p.task)):
                    pending.remove(p)
            if pending and time.monotonic() > deadline:
                why = "; ".join(h for launcher, group in _by_launcher(pending) if (h := launcher.unready_hint(group)))
                raise ClusterTimeout(
                    time.monotonic() - self._t_start,
                    [p.task.name for p in pending],
                    what="bring every server up",
                    detail=why,
                )
            if pending:
                time.sleep(POLL_S)
        self._raise_on_failure()  # a task that exited in the last round (its peers were up at once)

    @staticmethod
    def _said_hello(p: TaskProcess, written: set[str]) -> bool:
        """Whether the task has written its hello (in ``written``, the run directory's files), which
        it does once it has found its port free, where its files are here: until then, another
        process that took its port would pass for its server."""
        return not p.launcher.files_here or p.file(".hello.json") in written

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
                self._deliver()
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
            self._deliver()  # the last events, written just before the exits
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
            _LIVE.discard(self)

    def run(self, timeout: float | None = None) -> ClusterResult:
        """``start()`` + ``wait()``, with everything stopped on the way out."""
        with self:
            return self.wait(timeout)

    def follow(self, on_event=None, until=None, poll: float = 0.1) -> ClusterResult | None:
        """``wait()``, passing each event of the tasks (``labkit.wire.events``) to ``on_event(event)``
        (``subscribe``: those received so far, then each as it comes; a lab prints its chief's
        epochs, or moves a progress bar).

        Returns ``wait()``'s result, or None as soon as ``until()`` is true (checked after each
        round of events), leaving the cluster running (to kill a task mid-run, say). A failed
        task raises ``TaskFailed`` as ``wait`` does; starts the cluster if it is new."""
        unsubscribe = self.subscribe(on_event) if on_event is not None else None
        try:
            if self._state == "new":
                self.start()
            deadline = (self._t_start or time.monotonic()) + self.timeout
            while True:
                self._deliver()
                if until is not None and until():
                    return None
                # a task killed as expected (kill(..., expected=True)) is the experiment's: follow on without it
                if any(s not in ("running", "killed") for s in self.status().values()) or time.monotonic() > deadline:
                    return self.wait()  # every task done, or one failed: wait() gathers or raises
                time.sleep(poll)
        finally:
            if unsubscribe is not None:
                unsubscribe()

    # ------------------------------------------------------------------- events
    def subscribe(self, fn, replay: bool = True):
        """Call ``fn(event)`` with every event (see the module docstring): first those received so
        far (``replay``), then each as it comes. Returns a function that ends the subscription."""
        for event in list(self._events) if replay else ():
            fn(event)
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def events(self, task: str | None = None, kind: str | None = None) -> list:
        """The events received so far (those the tasks have written are read now, and handed to
        the subscribers first), in order of arrival: all, or ``task``'s, or of ``kind``."""
        self._deliver()
        return [e for e in self._events if (task is None or e.task == task) and (kind is None or e.kind == kind)]

    @property
    def chief(self) -> str:
        """The name of the task that leads the training (``protocol.chief_of``)."""
        return chief_of(self.spec.jobs)

    def _deliver(self) -> None:
        """Read what the tasks have emitted since the last call; hand each event to the subscribers."""
        for p in self._procs:
            tail = self._tails.get(p.task.name)
            for event in tail.read() if tail is not None else ():
                self._events.append(event)
                p.said_started = p.said_started or event.kind == "started"
                for fn in list(self._subscribers):
                    fn(event)

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
            raise PortInUse(
                first.task.name,
                first.task.address,
                returncode=first.returncode,
                log_tail=log_tail,
                log_path=first.log_path,
            )
        hint = log_hint(log_tail) or first.launcher.failure_hint(first, log_tail)
        raise TaskFailed(
            first.task.name,
            first.returncode,
            log_tail,
            first.log_path,
            detail=self._where(first) + (f" ({hint})" if hint else ""),
            consequences={p.task.name: describe_exit(p.returncode) + self._where(p) for p in others},
        )

    @staticmethod
    def _failed_on_its_own(p: TaskProcess) -> bool:
        """Exited non-zero or died, and not because the launcher stopped it. A task that died
        of SIGKILL while the launcher had only sent SIGTERM was killed by someone else."""
        rc = p.poll()
        if rc is None or rc == 0:
            return False
        if not p.signalled or p.injected:
            return True
        return rc == -signal.SIGKILL and p.ended != "killed"

    def _failure_order(self, p: TaskProcess) -> tuple:
        own_end = None
        if p.launcher.files_here:
            try:
                own_end = (_read_json(self.run_dir / task_file(p.task.type, p.task.index, ".json")) or {}).get(
                    "ended_epoch"
                )
            except ValueError:  # half written: it was still ending
                pass
        return (p.injected is None, not (p.returncode or 0) < 0, own_end or p.t_end_epoch or float("inf"))

    @staticmethod
    def _where(p: TaskProcess) -> str:
        """' on HOST after 3.2 s': where it ran, and for how long (its own run, not the others' teardown)."""
        on = p.launcher.where(p)
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
        _LIVE.discard(self)
        try:
            self.result = self._gather()
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            print(f"labkit: could not gather the results of {self.run_dir}: {e}", file=sys.stderr)
        try:
            self._deliver()  # what the tasks said before they went (a subscriber's error must not stop the teardown)
        except Exception as e:
            print(
                f"labkit: an event subscriber failed while {self.run_dir} stopped: {type(e).__name__}: {e}",
                file=sys.stderr,
            )
        self._state = "stopped"
        if interrupted is not None:
            raise interrupted

    def kill(self, name: str, sig: int = signal.SIGKILL, expected: bool = False) -> None:
        """Send ``sig`` to one task (fault injection: kill a worker mid-run).

        ``expected``: the task's death is the experiment, a fault its peers are meant to
        survive (ParameterServerStrategy's coordinator carries on without a worker): it is no
        failure of the cluster, which runs on, and its outcome says ``killed``. A peer that
        then fails because of it still raises ``TaskFailed``, naming that peer."""
        p = self._proc(name)
        if not p.running:
            raise ValueError(f"task {name} is not running")
        if expected:
            p.signalled, p.ended = True, "killed"  # as if the launcher had stopped it
        else:
            p.injected = int(sig)  # if it fails now, it is the cause, whatever its peers do
        p.launcher.signal([p], sig)

    def _terminate(self, procs: list[TaskProcess]) -> None:
        """SIGTERM every tree at once (a task then writes its result), SIGKILL what is
        left after ``term_grace``; ``ended`` becomes terminated or killed."""
        procs = [p for p in procs if p.running]
        if not procs:
            return
        trees = {id(p): descendants(p.proc.pid) for p in procs}
        for p in procs:
            p.signalled, p.ended = True, "terminated"
        for launcher, group in _by_launcher(procs):
            launcher.stop(group, signal.SIGTERM)
        deadline = time.monotonic() + self.term_grace
        while any(p.running for p in procs) and time.monotonic() < deadline:
            time.sleep(0.02)
        late = [p for p in procs if p.running]
        for p in late:
            p.ended = "killed"
        for launcher, group in _by_launcher(late):
            launcher.stop(group, signal.SIGKILL)
        for p in late:
            signal_group(p.proc.pid, signal.SIGKILL)  # the local child too, whatever the launcher did
            try:
                p.proc.popen.wait(2.0)  # reap it here, so the return code says SIGKILL
            except subprocess.TimeoutExpired:
                print(f"labkit: {p.task.name} (pid {p.proc.pid}) survived SIGKILL for 2 s", file=sys.stderr)
            p.poll()
        for p in procs:
            for child in trees[id(p)]:
                _kill_quietly(child)

    def _sweep(self) -> None:
        """Last check that no process of ours is left (a child of a task still running, say),
        then each launcher releases what it still holds. Tasks already reaped are skipped:
        their pids may belong to other processes by now."""
        for p in self._procs:
            if p.proc is not None and p.running:
                for child in descendants(p.proc.pid):
                    _kill_quietly(child)
                self._terminate([p])
        # a start interrupted (Ctrl-C) between a child's fork and its bookkeeping leaves a
        # task nobody tracks: found among this process's children by the environment it was
        # given (its command line may be a stand-in's or a wrapper's)
        unrecorded = {(p.env[ENV_RUN_DIR], p.task.name) for p in self._procs if p.proc is None and p.log_path.exists()}
        for child in psutil.Process().children() if unrecorded else ():
            try:
                env = child.environ()
                if (env.get(ENV_RUN_DIR), env.get(ENV_TASK)) in unrecorded:
                    for grandchild in descendants(child.pid):
                        _kill_quietly(grandchild)
                    _kill_quietly(child)
            except psutil.Error:
                pass  # gone meanwhile
        for launcher, group in _by_launcher([p for p in self._procs if p.proc is not None]):
            launcher.release(group)

    def hellos(self) -> dict[str, dict]:
        """Each task's hello (pid, host, versions), read where the task wrote it."""
        out = {}
        for launcher, group in _by_launcher(self._procs):
            out.update(launcher.hellos(group))
        return out

    # ------------------------------------------------------------------ results
    def _gather(self) -> ClusterResult:
        notes = []
        for launcher, group in _by_launcher(self._procs):
            if any(p.proc for p in group):
                notes += launcher.collect(group)
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
            tasks.append(
                TaskOutcome(p.task.name, p.task.type, p.task.index, p.task.host, ended, rc, wall, p.log_path, result)
            )
        res = ClusterResult(
            self.program,
            self.run_dir,
            self.spec.as_dict(),
            tasks,
            self.startup_s,
            self.teardown_s,
            time.monotonic() - self._t_start if self._t_start else None,
            notes,
        )
        return res.save()

    # ------------------------------------------------------------------- status
    def _proc(self, name: str) -> TaskProcess:
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
            out[p.task.name] = (
                "new"
                if p.proc is None
                else "running"
                if rc is None
                else p.ended or ("exited" if rc == 0 else f"failed ({rc})")
            )
        return out

    def pids(self) -> dict[str, int]:
        """The pid of each started task's local child (the task here; its ssh client or srun elsewhere)."""
        return {p.task.name: p.proc.pid for p in self._procs if p.proc is not None}

    def local_pids(self) -> dict[str, int]:
        """Pid of each started task that runs on this machine (what a local sampler can watch)."""
        pids = {p.task.name: p.launcher.local_pid(p) for p in self._procs if p.proc is not None}
        return {name: pid for name, pid in pids.items() if pid is not None}

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


def use(launcher: str | None) -> None:
    """Make ``launcher`` the way every Cluster of this process starts its tasks when not told
    (``$LABKIT_LAUNCHER``): a notebook's ``launcher`` parameter. Empty leaves the choice as it
    was (the module docstring); an unknown name is a ValueError now, not at the first run."""
    name = (launcher or "").strip()
    if name:
        launchers.get(name)
        os.environ[launchers.ENV_LAUNCHER] = name


def placed(spec: ClusterSpec, launcher: str | None = None) -> ClusterSpec:
    """``spec`` as its launcher will place it (inside a Slurm allocation: on the allocation's
    nodes, on ports the run picks again), to print before a run; other specs as given."""
    here = frozenset(local_addresses())
    settings = Settings(runs_root(), "runs", sys.executable, local_hosts=here)
    return _assign_launchers(spec, launcher, settings)[0]


def _assign_launchers(
    spec: ClusterSpec, name: str | None, settings: Settings
) -> tuple[ClusterSpec, dict[str, Launcher]]:
    """The spec as the launchers place it, and each task's launcher (by task name): one
    launcher object per way, shared by the tasks it starts."""
    chosen = launchers.choose(name, spec, settings.local_hosts)
    ways = list(dict.fromkeys(chosen.values()))
    _check_options(settings.options, ways)
    made = {way: launchers.get(way)(settings) for way in ways}
    for one in made.values():
        spec = one.place(spec)  # a launcher that picks the nodes itself (Slurm) moves the tasks there
    return spec, {task: made[way] for task, way in chosen.items()}


def _check_options(options: dict, ways: list[str]) -> None:
    """A ValueError for a ``launcher_options`` key no registered launcher reads. A key of a
    launcher not in use (the ssh settings of a cluster whose hosts are all here) is left unread."""
    own = {key for way in ways for key in launchers.get(way).OPTIONS}
    left = set(options) - own
    if left:  # the others are imported only now, to tell a typo from another launcher's key
        unknown = sorted(left - {key for way in launchers.names() for key in launchers.get(way).OPTIONS})
        if unknown:
            raise ValueError(
                f"launcher_options {unknown} are not the {' or '.join(ways)} launcher's; it takes "
                f"{', '.join(sorted(own)) or 'none'}"
            )


def _by_launcher(procs: list[TaskProcess]) -> list[tuple[Launcher, list[TaskProcess]]]:
    """``procs`` grouped by their launcher, in order of first appearance."""
    groups: dict[int, tuple[Launcher, list[TaskProcess]]] = {}
    for p in procs:
        groups.setdefault(id(p.launcher), (p.launcher, []))[1].append(p)
    return list(groups.values())


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
