"""The interface every way of starting a cluster's tasks implements (``labkit.distributed.launchers``
says who calls what, and how to add one). Each method's default is the local one."""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from labkit.wire.spec import ClusterSpec, Task, accepts, free_ports
from labkit.core.proc import OwnedProcess
from labkit.wire.protocol import task_file
from labkit.wire.results import read_json


class ClusterTimeout(TimeoutError):
    """A cluster's global timeout expired (raised by ``launch.Cluster``, and by a launcher that sees a
    start cannot succeed); ``running`` names the tasks that were still running."""

    def __init__(self, seconds: float, running: list[str], what: str = "finish", detail: str = ""):
        self.seconds, self.running, self.detail = seconds, running, detail
        super().__init__(
            f"cluster did not {what} within {seconds:.0f} s; still running: {', '.join(running) or 'none'}; "
            f"every task was stopped ({detail or 'raise the timeout, or see the logs for a hang'})"
        )


@dataclass(frozen=True)
class Settings:
    """What a launcher knows of the run: set once by the Cluster, read by each launcher."""

    run_dir: Path  # the run directory here, absolute: logs, results, cluster.json
    remote_run: str  # the same run below the kit's directory on a node: runs/<lab>/<run>
    python: str  # the interpreter for tasks started here
    local_hosts: frozenset = frozenset()  # names and addresses that mean this machine
    options: dict = field(default_factory=dict)  # Cluster(launcher_options=...): each launcher reads its OPTIONS


@dataclass
class TaskProcess:
    """One task and the local process that stands for it. The launcher sets ``proc``
    (``spawn``); the Cluster keeps the rest (times, how it ended, who signalled it, whether it said it started)."""

    task: Task
    launcher: "Launcher"
    argv: list[str]
    command: str  # the exact command line, for printing
    env: dict[str, str]
    log_path: Path
    events_path: Path  # where its events arrive here (labkit.wire.events), whoever brings them
    proc: OwnedProcess | None = None
    t_start: float | None = None
    t_end: float | None = None
    t_end_epoch: float | None = None  # when the launcher saw the exit, on the tasks' clock
    returncode: int | None = None  # a task killed by signal N: -N, wherever it ran
    ended: str | None = None
    signalled: bool = False  # the launcher stopped it (SIGTERM, then SIGKILL after the grace)
    injected: int | None = None  # the signal Cluster.kill() sent it
    said_started: bool = False  # its ``started`` event arrived (labkit.wire.events): it runs where it was sent

    def poll(self) -> int | None:
        if self.returncode is None and self.proc is not None:
            rc = self.proc.poll()
            if rc is not None:
                self.t_end, self.t_end_epoch = time.monotonic(), time.time()
                self.returncode = self.launcher.returncode(rc)
        return self.returncode

    @property
    def running(self) -> bool:
        return self.proc is not None and self.poll() is None

    def file(self, suffix: str) -> str:
        """This task's file name in the run directory: ``worker-1.json``, ``.hello.json``, ``.pid``."""
        return task_file(self.task.type, self.task.index, suffix)


class Launcher:
    """One way to start, signal, wait for and collect a cluster's tasks (see ``labkit.distributed.launchers``).

    ``files_here``: a task writes its hello and result files straight into ``settings.run_dir``
    (this machine, or a filesystem it shares with the nodes), where the Cluster may read them
    while the run goes on; otherwise ``collect`` brings them at the end. ``OPTIONS``: the keys of
    ``launcher_options`` it reads (the Cluster refuses a key no launcher reads)."""

    name = ""
    files_here = True
    OPTIONS: tuple[str, ...] = ()

    def __init__(self, settings: Settings):
        self.settings = settings

    # ------------------------------------------------------------------ placing and commands
    def place(self, spec: ClusterSpec) -> ClusterSpec:
        """The spec the tasks run with (a launcher that chooses the nodes itself re-places them)."""
        return spec

    def move_ports(self, spec: ClusterSpec, tasks: list[Task]) -> ClusterSpec:
        """``spec`` with ``tasks`` on other free ports (a port was taken before or while they started)."""
        used = {t.port for t in spec.tasks()}
        new = free_ports(len(tasks), avoid=used)
        return spec.with_addresses({t.name: f"{t.host}:{port}" for t, port in zip(tasks, new)})

    def task_run_dir(self, task: Task) -> str:
        """The run directory as the task's node sees it (the task's ``LABKIT_RUN_DIR``)."""
        return str(self.settings.run_dir.resolve())

    def task_env(self, task: Task) -> dict[str, str]:
        """More environment for the task. By default it writes its events into its file in its
        run directory, which is ``events_path`` here (this machine, or a filesystem it shares);
        a launcher whose tasks' files stay elsewhere names a channel that comes home
        (``labkit.wire.events.ENV``)."""
        return {}

    def command(self, task: Task, env: dict[str, str], argv_tail: list[str]) -> tuple[list[str], str]:
        """``(argv, text)``: what ``spawn`` runs for ``task`` with its environment ``env`` and the
        program's arguments ``argv_tail`` (``-m MODULE ...``); ``text`` is it as one pasteable line."""
        raise NotImplementedError

    def spawn(self, tp: TaskProcess) -> OwnedProcess:
        """Start the task; the returned child ends when the task ends (and dies with this process)."""
        return OwnedProcess(tp.argv, tp.log_path, env={**os.environ, **tp.env}).start()

    # ------------------------------------------------------------------------------ states
    def precheck(self, tps: list[TaskProcess]) -> None:
        """Before any task of the cluster starts (a local one included): raise if these tasks'
        nodes cannot run them, naming each node and why (ssh: every node answers, in parallel)."""

    def port_taken(self, task: Task) -> bool:
        """Whether the task's port is known to be taken before it starts (False: cannot tell)."""
        return False

    def ready(self, task: Task) -> bool:
        """Whether the task's server accepts connections."""
        return accepts(task.host, task.port)

    def unready_hint(self, tps: list[TaskProcess]) -> str:
        """Why these running tasks' servers never became ready, when the launcher can tell ('')."""
        return ""

    def returncode(self, rc: int) -> int:
        """The spawned child's exit code as the task's own."""
        return rc

    # --------------------------------------------------------------------------- signals
    def signal(self, tps: list[TaskProcess], sig: int) -> None:
        """Deliver ``sig`` to the tasks themselves."""
        raise NotImplementedError

    def stop(self, tps: list[TaskProcess], sig: int) -> None:
        """Teardown: ``sig`` to each task and whatever it started: SIGTERM first (a task then writes
        its result), SIGKILL to those left after the grace (the Cluster then also kills their
        local children)."""
        for tp in tps:
            signal_group(tp.proc.pid, sig)

    def release(self, tps: list[TaskProcess]) -> None:
        """Called once every task is down: free what the launcher still holds for them."""

    # ---------------------------------------------------------------------------- files
    def collect(self, tps: list[TaskProcess]) -> list[str]:
        """Bring the tasks' result and hello files into the run directory; notes on what failed."""
        return []

    def hellos(self, tps: list[TaskProcess]) -> dict[str, dict]:
        """Each task's hello (pid, host, versions), by task name."""
        out = {}
        for tp in tps:
            hello = read_json(self.settings.run_dir / tp.file(".hello.json"))
            if hello:
                out[tp.task.name] = hello
        return out

    # ------------------------------------------------------------------------- reports
    def where(self, tp: TaskProcess) -> str:
        """Where the task ran, for messages: '' here, ' on HOST' elsewhere."""
        return ""

    def failure_hint(self, tp: TaskProcess, log_tail: str) -> str:
        """What the task's failure most likely means and the fix, when the launcher can tell ('')."""
        return ""

    def local_pid(self, tp: TaskProcess) -> int | None:
        """The pid of the task's own process on this machine, if it runs here (for live sampling)."""
        return tp.proc.pid if tp.proc is not None else None


def pasteable(env: dict[str, str], argv: list[str]) -> str:
    """A command started here as one line to paste in a shell: ``cd DIR && env K=V ... ARGV``."""
    return (
        f"cd {shlex.quote(os.getcwd())} && env "
        + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        + " "
        + shlex.join(argv)
    )


def signal_group(pid: int, sig: int) -> None:
    """``sig`` to ``pid``'s process group (a child in its own session leads one), else to ``pid``."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
