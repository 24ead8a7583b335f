"""Tasks as Slurm job steps inside the allocation this process runs in (``salloc``, ``sbatch``).

One ``srun --jobid=JOB --nodelist=NODE --overlap --overcommit ...`` step per task, so each can be
signalled, logged and waited for on its own. The tasks are placed on the allocation's nodes as
``SlurmClusterResolver`` places them (``labkit.infra.slurm``), whatever hosts the spec named,
with ports chosen per node. The kit, its interpreter and the run directory must be on a
filesystem every node mounts. Signals go through ``scancel --signal`` to the task's step; if
this process dies, ``srun`` cancels its step, and ``release`` cancels any step left over.

``launcher_options={"srun": [...]}`` adds ``srun`` arguments (``--mem-per-cpu=2G``, say).
More in docs/cluster.md, section 11 (the full command, files, signals, exit codes).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time
import uuid

from labkit.infra import slurm
from labkit.wire.spec import ClusterSpec, Task, port_is_free
from labkit.distributed.launchers.base import Launcher, Settings, TaskProcess, pasteable, signal_group
from labkit.distributed.launchers.ssh import remote_returncode
from labkit.wire.results import read_json

RELEASE_WAIT_S = 15.0  # how long release() waits for cancelled steps to leave squeue


class SlurmLauncher(Launcher):
    name = "srun"
    files_here = True  # on the filesystem the nodes share with this machine
    OPTIONS = ("srun",)

    def __init__(self, settings: Settings):
        super().__init__(settings)
        self.allocation = slurm.Allocation.here()
        self.token = uuid.uuid4().hex[:8]  # names this cluster's steps apart from others' in the same job
        self.srun_args = [str(a) for a in settings.options.get("srun", ())]

    # ------------------------------------------------------------------ placing and commands
    def place(self, spec: ClusterSpec, avoid=()) -> ClusterSpec:
        jobs = {job: spec.num_tasks(job) for job in spec.jobs}
        counts = self.allocation.spread(sum(jobs.values()))
        per_node = {node: n for node, n in zip(self.allocation.nodes, counts) if n}
        here = any(node in self.settings.local_hosts for node in per_node)
        base = slurm.port_base(max(per_node.values()), avoid=avoid, here=here)
        return ClusterSpec(slurm.resolver_jobs(jobs, per_node, base), auto_ports=True)

    def move_ports(self, spec: ClusterSpec, tasks: list[Task]) -> ClusterSpec:
        """The whole cluster on a new base port, as the resolver's layout has one per run."""
        return self.place(spec, avoid={t.port for t in spec.tasks()})

    def step_name(self, task: Task) -> str:
        return f"labkit-{self.token}-{task.type}-{task.index}"

    def command(self, task: Task, env: dict[str, str], argv_tail: list[str]) -> tuple[list[str], str]:
        argv = [
            "srun",
            f"--jobid={self.allocation.job_id}",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={task.host}",
            "--overlap",
            "--overcommit",
            f"--job-name={self.step_name(task)}",
            "--kill-on-bad-exit=1",
            *self.srun_args,
            self.settings.python,
            *argv_tail,
        ]
        return argv, pasteable(env, argv)

    # ------------------------------------------------------------------------------ states
    def port_taken(self, task: Task) -> bool:
        return task.host in self.settings.local_hosts and not port_is_free(task.port)

    def returncode(self, rc: int) -> int:
        return remote_returncode(rc)  # srun, like the ssh wrapper, ends with 128 + N for signal N

    # --------------------------------------------------------------------------- signals
    def signal(self, tps: list[TaskProcess], sig: int) -> None:
        """``scancel --signal`` to each task's step. A step not (yet) listed, while its ``srun``
        still asks for it, is stopped through ``srun``, which cancels it on SIGTERM."""
        try:
            ids = self._step_ids(tps)
            slurm.cancel(ids.values(), sig)
        except slurm.SlurmError as e:
            print(f"labkit: could not signal the Slurm steps: {e}", file=sys.stderr)
            ids = {}
        for tp in tps:
            if tp.task.name not in ids and tp.running and sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
                signal_group(tp.proc.pid, signal.SIGTERM)

    def stop(self, tps: list[TaskProcess], sig: int) -> None:
        self.signal(tps, sig)

    def release(self, tps: list[TaskProcess]) -> None:
        """Cancel this cluster's steps still listed (an ``srun`` killed before its step ended
        leaves it running), and wait until squeue lists none."""
        deadline = time.monotonic() + RELEASE_WAIT_S
        try:
            while left := self._step_ids(tps):
                if time.monotonic() > deadline:
                    print(
                        f"labkit: Slurm steps {', '.join(left.values())} were still listed {RELEASE_WAIT_S:.0f} s "
                        f"after they were cancelled; check with `squeue --steps`",
                        file=sys.stderr,
                    )
                    return
                slurm.cancel(left.values(), signal.SIGKILL)
                time.sleep(0.2)
        except slurm.SlurmError as e:
            print(f"labkit: could not check for Slurm steps left running: {e}", file=sys.stderr)

    def _step_ids(self, tps: list[TaskProcess]) -> dict[str, str]:
        """Task name -> step id, for those of ``tps`` whose step squeue lists."""
        names = {self.step_name(tp.task): tp.task.name for tp in tps}
        return {names[n]: step for n, step in slurm.steps(self.allocation.job_id).items() if n in names}

    # ---------------------------------------------------------------------------- files
    def collect(self, tps: list[TaskProcess]) -> list[str]:
        os.listdir(self.settings.run_dir)  # on NFS, a fresh listing shows files other nodes created
        return []

    # ------------------------------------------------------------------------- reports
    def where(self, tp: TaskProcess) -> str:
        return f" on {tp.task.host}"

    def failure_hint(self, tp: TaskProcess, log_tail: str) -> str:
        job, node, guide = self.allocation.job_id, tp.task.host, "see docs/cluster.md, Slurm"
        slurm_said = _slurm_hint(job, node, tp.returncode, log_tail, self.allocation.nodes)
        if slurm_said:
            return f"{slurm_said}, {guide}"
        if "execve(): " in log_tail or ("srun: error" in log_tail and self.settings.python in log_tail):
            return (
                f"{node} has no {self.settings.python}: srun runs the interpreter by the path it has here; "
                f"put the kit and its .venv on a filesystem every node mounts (a shared home), {guide}"
            )
        if "couldn't chdir" in log_tail:
            return (
                f"{node} does not see this directory ({os.getcwd()}): run from a directory on a filesystem "
                f"every node mounts, {guide}"
            )
        if "Unable to create step" in log_tail or "Invalid job id" in log_tail or "already completing" in log_tail:
            return (
                f"srun could not start a step in job {job}: the allocation has ended or cannot hold the step "
                f"(`squeue -j {job}`), {guide}"
            )
        if "No module named" in log_tail:
            return f"the kit on {node} lacks a module this launcher uses: it is another version of the kit, {guide}"
        return ""

    def local_pid(self, tp: TaskProcess) -> int | None:
        """The task's own pid when its node is this machine (from its hello file), else None."""
        try:
            hello = read_json(self.settings.run_dir / tp.file(".hello.json")) or {}
        except ValueError:  # being written
            return None
        return hello.get("pid") if hello.get("host") == socket.gethostname() else None


_CANCELLED = re.compile(r"\*\*\* (STEP|JOB) (\S+) ON (\S+) CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))?(?:,| \*\*\*)")


def _slurm_hint(job: str, node: str, returncode: int | None, log_tail: str, nodes) -> str:
    """What Slurm's own words in a step's log (srun's and slurmstepd's), or a SIGKILL on its
    node, say happened; '' if they say nothing. A node failure asks ``sinfo`` which node, and
    why; a cancelled step asks ``squeue`` whether the job still holds its nodes."""
    cancelled = _CANCELLED.search(log_tail)
    kind, step, where, why = cancelled.groups() if cancelled else (None, None, None, None)
    if why == "NODE FAILURE" or "Node failure on" in log_tail:
        return _node_failure(job, nodes)
    if why == "TIME LIMIT":
        return f"job {job} reached its time limit and Slurm stopped its steps: salloc again with a longer --time"
    if cancelled and why is None:
        try:
            held = bool(slurm.jobs(job))
        except slurm.SlurmError:
            held = None
        if kind == "JOB" or held is False:
            return (
                f"job {job} was cancelled (`scancel`, by a person or an administrator), and its steps with it: "
                f"get a new allocation"
            )
        return f"its step {step} on {where} was cancelled (`scancel`, by a person or an administrator)" + (
            f"; job {job} still holds its nodes: run again" if held else ""
        )
    if "oom" in log_tail.lower() and "kill" in log_tail.lower():
        return f"Slurm's memory limit killed it on {node}: ask for more memory (--mem) in the allocation"
    if returncode == -signal.SIGKILL:
        return (
            f"something on {node} killed it: most often the kernel's OOM killer (`sudo dmesg | grep -i oom` "
            f"there), or a person (`kill -9`, `scancel --signal=KILL`); give it more memory (--mem in the "
            f"allocation, fewer tasks on that node, smaller batches)"
        )
    return ""


def _node_failure(job: str, nodes) -> str:
    """Slurm ended the job because a node failed: which one (``sinfo``), why, and what to do."""
    try:
        down = slurm.down_nodes(nodes)
    except slurm.SlurmError:
        down = {}
    if not down:
        return (
            f"a node of job {job} failed, so Slurm ended the job and its steps on every node: `sinfo -R` says "
            f"which and why; salloc again (with --exclude=NODE until it is back)"
        )
    lost, first = ", ".join(f"{n} ({state})" for n, state in down.items()), next(iter(down))
    if all("Not responding" in state for state in down.values()):
        return (
            f"Slurm lost {lost}: its slurmd stopped answering, so Slurm ended job {job} and its steps on every "
            f"node. On {first}, restart slurmd (`sudo systemctl restart slurmd`): it stops what the job left "
            f"running there and returns the node to service (else `sudo scontrol update nodename={first} "
            f"state=resume`); then salloc again (with --exclude={first} until then)"
        )
    return (
        f"Slurm took {lost} out of service, so it ended job {job} and its steps on every node: `scontrol show "
        f"node {first}` says why; once it is fixed, `sudo scontrol update nodename={first} state=resume`; salloc "
        f"again (with --exclude={first} until then)"
    )
