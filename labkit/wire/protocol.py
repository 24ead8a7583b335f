"""What the launcher (``labkit.distributed.launch``) and a task program (``labkit.tasks``) agree on.

The launcher never imports the task runtime, nor the runtime the launcher; both import
this: the files a task writes in its run directory, the environment the launcher sets,
which task is the chief, the exit codes, the versions that must match across a cluster,
and the errors a task's
end becomes (``TaskFailed``, and ``PortInUse``, which the task raises and the launcher
reports). Imports nothing beyond the standard library.
"""

from __future__ import annotations

import importlib.metadata
import platform
import signal


RESULT_FORMAT = "labkit.task-result/1"
EXIT_OK, EXIT_ERROR, EXIT_PORT_IN_USE, EXIT_TERMINATED = 0, 1, 98, 143

# The environment the launcher gives a task, besides TF_CONFIG.
ENV_RUN_DIR = "LABKIT_RUN_DIR"  # where the task writes its files
ENV_TASK = "LABKIT_TASK"  # its name, for the log
ENV_INTRA_OP, ENV_INTER_OP = "LABKIT_INTRA_OP_THREADS", "LABKIT_INTER_OP_THREADS"
ENV_FORKSERVER = (
    "LABKIT_FORKSERVER"  # set in a task forked by labkit.distributed.launchers.forkserver: the server, as JSON
)

VERSION_KEYS = ("tensorflow", "keras", "labkit", "python")

# gRPC's own retries, off in every task. TensorFlow sends each RunGraph call with a request id and
# its worker service refuses an id it has seen ("ABORTED: The same RunGraph (Worker) request was
# received twice"): a call the gRPC library sent again on a new attempt (its retry layer, on by
# default, replays a call whose first attempt it judged unseen) killed a long async run over ssh.
# TensorFlow's own RPC retries are already off (GRPC_MAX_RETRIES, default 0); TF_GRPC_DEFAULT_OPTIONS
# gives every channel TensorFlow makes this argument, so a broken call is an error, never a replay.
ENV_GRPC_OPTIONS = "TF_GRPC_DEFAULT_OPTIONS"
NO_GRPC_RETRIES = "grpc.enable_retries=0"


def grpc_options(current: str | None) -> str:
    """``TF_GRPC_DEFAULT_OPTIONS`` for a task: ``current`` (the user's, if any) with gRPC's
    retries turned off, unless ``current`` sets ``grpc.enable_retries`` itself."""
    options = [o for o in (current or "").split(",") if o.strip()]
    if not any(o.strip().startswith("grpc.enable_retries=") for o in options):
        options.append(NO_GRPC_RETRIES)
    return ",".join(options)


def log_hint(log_tail: str) -> str:
    """What a task's log says happened, whatever launcher ran it ('' if nothing known)."""
    if "request was received twice" in log_tail:
        return (
            "TensorFlow's worker service got one call twice (the same request id): the gRPC library sent "
            "it again after a first attempt it could not confirm, typically over a slow or lossy link. The "
            f"kit turns gRPC's retries off in every task ({ENV_GRPC_OPTIONS}={NO_GRPC_RETRIES}): check that "
            f"nothing sets {ENV_GRPC_OPTIONS} with grpc.enable_retries=1 for the tasks, then run again; the "
            "run's results up to here are in its folder"
        )
    return ""


def chief_of(jobs) -> str:
    """The name of the task that leads training and measures it: the ``chief`` job's task, else
    worker 0 (TensorFlow's convention for a cluster without a chief job). The kit's one rule."""
    return "chief:0" if "chief" in jobs else "worker:0"


def is_chief(task_type: str, index: int, jobs) -> bool:
    """Whether task ``task_type:index`` of a cluster with ``jobs`` is its chief (``chief_of``)."""
    return f"{task_type}:{int(index)}" == chief_of(jobs)


def task_file(task_type: str, index: int, suffix: str) -> str:
    """The file name a task writes in the run directory: ``worker-1.json`` (result),
    ``worker-1.hello.json`` (versions, written at start), ``worker-1.log``, ``worker-1.pid``."""
    return f"{task_type}-{index}{suffix}"


def versions() -> dict:
    """Versions that must agree across a cluster, read without importing TensorFlow."""

    def dist(*names):
        for n in names:
            try:
                return importlib.metadata.version(n)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None

    import labkit

    return {
        "python": platform.python_version(),
        "tensorflow": dist("tensorflow-cpu", "tensorflow"),
        "keras": dist("keras"),
        "labkit": labkit.__version__,
    }


def describe_exit(returncode: int | None) -> str:
    """``"exited with code 1"`` or ``"was killed by SIGKILL"`` (a negative return code)."""
    if returncode is not None and returncode < 0 and -returncode in signal.valid_signals():
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


class TaskFailed(RuntimeError):
    """A task exited non-zero or was killed; the launcher stopped the others.

    ``task`` is the task that failed first (one killed by a signal before one that exited
    with an error, else the earliest exit); ``log_tail`` holds the end of its log.
    ``consequences`` maps each other task that failed on its own meanwhile (a peer that
    lost its connection to the first, say) to how it ended: effects, not causes."""

    def __init__(
        self,
        task: str,
        returncode,
        log_tail: str,
        log_path=None,
        detail: str = "",
        consequences: dict[str, str] | None = None,
    ):
        self.task, self.returncode, self.log_tail, self.log_path = task, returncode, log_tail, log_path
        self.detail, self.consequences = detail, dict(consequences or {})
        super().__init__(self._message())

    def _message(self) -> str:
        where = f" (log: {self.log_path})" if self.log_path else ""
        then = "".join(f"\n  then {name} {how}" for name, how in self.consequences.items())
        if then:
            then = f"\nwhich the others did not survive (consequences, not causes):{then}"
        return (
            f"task {self.task} {describe_exit(self.returncode)}{self.detail}{where}; every other task still "
            f"running was stopped.{then}\nLast lines of its log:\n{self.log_tail or '(empty)'}"
        )


class VersionSkew(RuntimeError):
    """Tasks (or tasks and the launcher) run different TensorFlow/keras/labkit/Python versions,
    or a node's task wrote a hello this launcher cannot read."""


class PortInUse(TaskFailed):
    """A task's port is taken by another process: raised by the launcher's check before
    a local task starts, and by the task itself when its server cannot bind (it then
    exits with ``EXIT_PORT_IN_USE``, which the launcher reports as this)."""

    def __init__(self, task: str, address: str, owner: str = "", returncode=None, log_tail: str = "", log_path=None):
        self.address, self.owner = address, owner
        super().__init__(task, returncode, log_tail, log_path)

    def _message(self) -> str:
        return (
            f"port of task {self.task} ({self.address}) is in use{self.owner}; pick other ports (cluster.local() "
            f"picks free ones and avoids taken ones) or stop the process that holds it"
            + (f". Last lines of its log:\n{self.log_tail}" if self.log_tail else "")
        )
