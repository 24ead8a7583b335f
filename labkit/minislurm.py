"""A one-node Slurm on this machine, owned by the process that starts it (the tests, the
benchmark): munged, slurmctld and slurmd from Debian's packages, in the foreground, as
children that die with it, with their configuration, state, logs and munge key in one
folder and their ports picked free::

    with MiniSlurm(tmp_path) as s:          # SLURM_CONF etc. in s.env()
        s.run("sbatch", "--wrap", "hostname")

The node is this machine under its short host name (``NodeAddr=127.0.0.1``), with as many
CPUs as it has; ``srun -O`` (``--overcommit``) places more tasks than CPUs on it.
``SlurmdParameters=config_overrides`` lets the node claim what the configuration says.
Stopping cancels every job, shuts the daemons down (SIGKILL for what is left, the step
daemons included) and leaves nothing running. It needs root (slurmd runs jobs as their
user) and the packages: ``missing()`` says what is not there, for a clear skip.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from labkit.cluster import free_ports
from labkit.proc import OwnedProcess, kill_tree

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
PACKAGES = "slurmctld slurmd slurm-client munge"

CONF = """\
ClusterName=labkit
SlurmctldHost={host}(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
SlurmUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
KillWait=5
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe={oversubscribe}
"""


def missing() -> str:
    """Why a MiniSlurm cannot run here ('' if it can)."""
    absent = [p for p in PROGRAMS if shutil.which(p) is None and not os.path.exists(f"/usr/sbin/{p}")]
    if absent:
        return f"no {', '.join(absent)}: install Debian's {PACKAGES} (.ci/run does)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs"
    return ""


def _program(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class MiniSlurm:
    """A one-node Slurm in ``folder`` (see the module docstring). ``cpus``: the node's CPUs
    (default: this machine's); ``memory_mb``: its memory (default: 90% of this machine's);
    ``oversubscribe``: jobs that may share a core (1: none, each job has its CPUs to itself)."""

    def __init__(self, folder, cpus: int | None = None, memory_mb: int | None = None, partition: str = "debug",
                 oversubscribe: int = 4, start_timeout: float = 60.0):
        self.folder = Path(folder).absolute()
        self.host = socket.gethostname().split(".")[0]
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = memory_mb or int(psutil.virtual_memory().total / 2**20 * 0.9)
        self.partition, self.oversubscribe, self.start_timeout = partition, oversubscribe, start_timeout
        self.conf = self.folder / "slurm.conf"
        self._daemons: list[OwnedProcess] = []

    def env(self) -> dict[str, str]:
        """What a client needs to talk to this Slurm (Slurm's commands read ``SLURM_CONF``)."""
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 60, check: bool = True) -> str:
        """Run a Slurm client command against this Slurm; its stdout."""
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env()}, stdin=subprocess.DEVNULL)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}")
        return done.stdout

    # --------------------------------------------------------------------------------- start
    def start(self) -> "MiniSlurm":
        reason = missing()
        if reason:
            raise RuntimeError(f"cannot start a Slurm here: {reason}")
        for sub in ("state", "spool"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        key = self.folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        ctld_port, slurmd_port = free_ports(2)
        self.conf.write_text(CONF.format(host=self.host, dir=self.folder, ctld_port=ctld_port,
                                         slurmd_port=slurmd_port, cpus=self.cpus, memory_mb=self.memory_mb,
                                         partition=self.partition,
                                         oversubscribe=f"FORCE:{self.oversubscribe}" if self.oversubscribe > 1 else "NO"))
        env = {**os.environ, **self.env()}
        try:
            self._daemon(["munged", "--foreground", "--force", f"--socket={self.folder}/munge.sock",
                          f"--key-file={key}", f"--pid-file={self.folder}/munged.pid",
                          f"--log-file={self.folder}/munged.log", f"--seed-file={self.folder}/munged.seed"], env)
            self._wait(lambda: (self.folder / "munge.sock").exists(), "munged to open its socket")
            self._daemon(["slurmctld", "-D", "-i"], env)
            self._wait(lambda: self.run("scontrol", "ping", check=False).count("UP") > 0, "slurmctld to answer")
            self._daemon(["slurmd", "-D"], env)
            self._wait(self._node_idle, f"node {self.host} to be idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _daemon(self, argv: list[str], env: dict) -> None:
        log = self.folder / f"{argv[0]}.out"
        self._daemons.append(OwnedProcess([_program(argv[0]), *argv[1:]], log, env=env, cwd=self.folder).start())

    def _node_idle(self) -> bool:
        return self.run("sinfo", "--noheader", "--format=%t", check=False).strip() == "idle"

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            for d in self._daemons:
                if d.poll() is not None:
                    raise RuntimeError(f"{d.cmd[0]} exited with code {d.poll()} while waiting for {what}; "
                                       f"its log:\n{d.log_tail(20)}\n{self._logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"gave up waiting {self.start_timeout:.0f} s for {what}\n{self._logs()}")
            time.sleep(0.1)

    def _logs(self, lines: int = 15) -> str:
        from labkit.proc import tail

        return "\n".join(f"--- {p.name}\n{tail(p, lines)}" for p in sorted(self.folder.glob("*.log")))

    # ---------------------------------------------------------------------------------- stop
    def jobs(self) -> list[str]:
        """Every job Slurm lists (running or pending), as ``JOBID STATE``."""
        return self.run("squeue", "--noheader", "--format=%i %T", check=False).split("\n")[:-1]

    def steps(self) -> list[str]:
        return self.run("squeue", "--steps", "--noheader", "--format=%i %j", check=False).split("\n")[:-1]

    def stop(self) -> None:
        """Cancel every job, stop the daemons, and kill whatever they started."""
        if not self._daemons:
            return
        try:
            if all(d.poll() is None for d in self._daemons):
                self.run("scancel", "--full", f"--partition={self.partition}", check=False, timeout=30)
                deadline = time.monotonic() + 20
                while self.jobs() and time.monotonic() < deadline:
                    time.sleep(0.2)
        except (subprocess.TimeoutExpired, OSError) as e:  # the kills below end everything anyway
            print(f"labkit: could not cancel the jobs of the Slurm in {self.folder}: {e}", file=sys.stderr)
        finally:
            for d in reversed(self._daemons):  # slurmd first, munged last
                d.kill(grace=5)
            for stepd in self.step_daemons():
                kill_tree(stepd.pid, grace=2)
            self._daemons = []

    def step_daemons(self) -> list[psutil.Process]:
        """This Slurm's ``slurmstepd`` processes (they leave slurmd's tree; their working
        directory is slurmd's, this folder)."""
        out = []
        for p in psutil.process_iter(["name"]):
            try:
                if p.info["name"] == "slurmstepd" and Path(p.cwd()).is_relative_to(self.folder):
                    out.append(p)
            except psutil.Error:
                continue  # gone, or not ours to read
        return out

    def __enter__(self) -> "MiniSlurm":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

