"""Slurm as the kit uses it: the allocation a process runs in, where a cluster's tasks go in
it, and the few client commands the kit runs (``srun``, ``squeue``, ``scancel``, ``sbatch``,
``sinfo`` for the nodes Slurm took out of service).

Placement follows TensorFlow's ``tf.distribute.cluster_resolver.SlurmClusterResolver``, so a
TF_CONFIG the kit builds is the one the resolver would build inside one step of the same
shape (``resolver_jobs``): nodes in sorted order, each node's tasks on ports ``base``,
``base + 1``, ...; ranks numbered over that list; jobs in sorted name order (chief, ps,
worker) take consecutive ranks. How many tasks go on each node is the allocation's own
``SLURM_TASKS_PER_NODE`` when the cluster has as many tasks as the allocation, else the
tasks are spread as evenly as the nodes allow, the first nodes taking one more.

Accounting (``sacct``) is not needed: what is running comes from ``squeue``, and how a job
ended from the files it writes. Every command has a timeout, and a Slurm that cannot be
reached is a ``SlurmError`` that says what to check.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass

from labkit.wire.spec import _ephemeral_range, join_address, port_is_free

COMMAND_TIMEOUT_S = 60
_REPEAT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


class SlurmError(RuntimeError):
    """A Slurm command failed or Slurm is not there; the message says what to do."""


def command(*argv: str, timeout: float = COMMAND_TIMEOUT_S, check: bool = True, env=None) -> str:
    """Run a Slurm client command; its stdout, or ``SlurmError`` with its stderr."""
    if shutil.which(argv[0]) is None:
        raise SlurmError(
            f"{argv[0]} is not installed here: install Slurm's client commands "
            f"(Debian: apt install slurm-client) or run where Slurm is (docs/cluster.md)"
        )
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{' '.join(argv[:3])} did not answer within {timeout:.0f} s: is slurmctld up (`scontrol ping`)?"
        ) from None
    if check and done.returncode != 0:
        raise SlurmError(
            f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


# ------------------------------------------------------------------------------- the allocation


def expand_tasks_per_node(text: str) -> list[int]:
    """``"2(x3),1"`` -> ``[2, 2, 2, 1]`` (Slurm's SLURM_TASKS_PER_NODE / SLURM_JOB_CPUS_PER_NODE)."""
    out = []
    for part in str(text).split(","):
        m = _REPEAT.match(part.strip())
        if not m:
            raise ValueError(f"cannot read the tasks-per-node list {text!r} (expected e.g. '2(x3),1')")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def hostnames(nodelist: str) -> list[str]:
    """A Slurm node list (``node[01-03],gpu7``) as names, in Slurm's order (``scontrol show hostnames``)."""
    return command("scontrol", "show", "hostnames", nodelist).split()


@dataclass(frozen=True)
class Allocation:
    """The Slurm job this process runs in (``salloc`` or ``sbatch``)."""

    job_id: str
    nodes: tuple[str, ...]
    tasks_per_node: tuple[int, ...] = ()  # SLURM_TASKS_PER_NODE, when the job has tasks

    @classmethod
    def here(cls, environ=None) -> "Allocation":
        """The allocation of this process, from the environment Slurm gives it."""
        environ = os.environ if environ is None else environ
        job = environ.get("SLURM_JOB_ID", "").strip()
        if not job:
            raise ValueError(
                "the Slurm launcher starts tasks as job steps inside an allocation, and this process "
                "is not in one (no SLURM_JOB_ID): start JupyterLab or the script inside one, e.g. "
                "`salloc -N 2 -n 4 make lab` or an sbatch script (docs/cluster.md, Slurm)"
            )
        nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
        if not nodelist:
            raise ValueError(
                f"Slurm job {job} names no nodes (SLURM_JOB_NODELIST is empty); run inside the "
                f"allocation's shell, not on the login node with a copied SLURM_JOB_ID"
            )
        per_node = environ.get("SLURM_TASKS_PER_NODE", "")
        return cls(job, tuple(hostnames(nodelist)), tuple(expand_tasks_per_node(per_node)) if per_node else ())

    def spread(self, n: int) -> list[int]:
        """How many of ``n`` tasks go on each node (see the module docstring)."""
        if len(self.tasks_per_node) == len(self.nodes) and sum(self.tasks_per_node) == n:
            return list(self.tasks_per_node)
        k = len(self.nodes)
        return [n // k + (1 if i < n % k else 0) for i in range(k)]


def resolver_jobs(jobs: dict[str, int], per_node: dict[str, int], port_base: int) -> dict[str, list[str]]:
    """``{"ps": 1, "worker": 3}`` placed as ``SlurmClusterResolver.cluster_spec()`` places it on
    nodes with ``per_node`` tasks each: job -> addresses."""
    slots = [join_address(node, port_base + i) for node in sorted(per_node) for i in range(per_node[node])]
    if len(slots) != sum(jobs.values()):
        raise ValueError(f"{sum(jobs.values())} tasks but {len(slots)} places on the nodes")
    out, rank = {}, 0
    for job in sorted(jobs):
        out[job] = slots[rank : rank + jobs[job]]
        rank += jobs[job]
    return out


def port_base(width: int, avoid=(), here: bool = True) -> int:
    """A first port such that ``width`` ports from it are free on this machine (``here``: it is
    one of the nodes; elsewhere the check is only a guess, and a task that finds its port taken
    makes the launcher move the cluster), below the ephemeral range."""
    lo_eph, _ = _ephemeral_range()
    lo, hi = (20000, lo_eph - width - 1) if lo_eph > 21000 else (lo_eph // 2, lo_eph - width - 1)
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))
    for _ in range(200):
        base = rng.randint(lo, hi)
        ports = range(base, base + width)
        if not set(ports) & set(avoid) and (not here or all(port_is_free(p) for p in ports)):
            return base
    raise RuntimeError(f"found no {width} free ports in a row in {lo}-{hi}")


# ---------------------------------------------------------------------------------- job steps


def steps(job_id: str) -> dict[str, str]:
    """The job's running steps: step name -> step id (``JOB.STEP``)."""
    out = {}
    for line in command("squeue", "--steps", "--noheader", "--jobs", str(job_id), "--format", "%i %j").splitlines():
        step, _, name = line.strip().partition(" ")
        if step and name:
            out[name.strip()] = step
    return out


def cancel(ids, sig: int | None = None) -> None:
    """``scancel`` these jobs or steps (``sig``: send that signal instead of cancelling)."""
    ids = [str(i) for i in ids]
    if not ids:
        return
    how = ["--signal", signal.Signals(sig).name.removeprefix("SIG")] if sig is not None else []
    command("scancel", "--quiet", *how, *ids, check=False)


def down_nodes(nodes) -> dict[str, str]:
    """Those of ``nodes`` that Slurm has taken out of service (down, drained, failed or not
    responding): node -> its state and Slurm's reason (``down*: Not responding``)."""
    out = {}
    listing = command(
        "sinfo",
        "--noheader",
        "--Node",
        f"--nodes={','.join(nodes)}",
        "--states=down,drain,fail,no_respond",
        "--format=%N|%T|%E",
        check=False,
    )
    for line in listing.splitlines():
        node, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if node:
            out[node] = f"{state}: {reason}" if reason and reason != "none" else state
    return out


def jobs(job_id: str) -> dict[str, str]:
    """Job or array task id -> state (PENDING, RUNNING, COMPLETING ...) of job ``job_id``'s parts
    that squeue still lists; array tasks are listed as ``ARRAY_TASK`` (pending ones may be
    listed together, as ``ARRAY_[3-7]``). A job Slurm has forgotten lists nothing; a squeue that
    fails otherwise is a ``SlurmError``, never an empty listing."""
    if shutil.which("squeue") is None:
        raise SlurmError(
            "squeue is not installed here: install Slurm's client commands (Debian: apt install slurm-client)"
        )
    try:
        done = subprocess.run(
            ["squeue", "--noheader", "--array", "--jobs", str(job_id), "--format", "%i %T"],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"squeue did not answer within {COMMAND_TIMEOUT_S} s: is slurmctld up (`scontrol ping`)?"
        ) from None
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return {}
        raise SlurmError(f"squeue failed (exit {done.returncode}): {done.stderr.strip()}")
    out = {}
    for line in done.stdout.splitlines():
        job, _, state = line.strip().partition(" ")
        if job:
            out[job] = state.strip()
    return out
