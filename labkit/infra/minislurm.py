"""A Slurm owned by the process that starts it (the tests, the benchmark, ``make cloudlab-local
SLURM=1``): munged, slurmctld and slurmd from Debian's packages, in the foreground, as children
that die with it, with their configuration and logs in one folder::

    with MiniSlurm(tmp_path) as s:                 # one node: this machine
        s.run("sbatch", "--wrap", "hostname")       # SLURM_CONF etc. in s.env()

With ``nodes=`` a running ``LocalCloudLab``, each emulated node runs its own slurmd in its
namespaces and node0 is the controller, as on a CloudLab experiment. Stopping cancels every job,
shuts the daemons down and leaves nothing running.

It needs root (slurmd runs jobs as their user) and the packages: ``missing()`` says what is not
there, for a clear skip. More in docs/internals.md, section labkit.infra (one node or emulated
nodes, the configuration).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from labkit.wire.spec import free_ports
from labkit.core.lifetime import StartStop
from labkit.core.proc import OwnedProcess, kill_tree, tail
from labkit.measure.sockets import netns_id

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
PACKAGES = "slurmctld slurmd slurm-client munge"
SLURMD_TIMEOUT_S = 300  # Slurm's own default
NODE_RUN = "/run/slurm"  # an emulated node's own files (on its /run tmpfs)
NODE_MUNGE = "/run/munge"

CONF = """\
ClusterName=labkit
SlurmctldHost={ctld}({ctld_addr})
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
MailProg=/bin/true
SlurmUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={run}/state
SlurmdSpoolDir={run}/spool-%n
SlurmctldPidFile={run}/slurmctld.pid
SlurmdPidFile={run}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
SlurmdTimeout={slurmd_timeout}
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
KillWait=5
MinJobAge=600
{nodes}
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe={oversubscribe}
"""
NODE = "NodeName={name} NodeAddr={addr} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN"


class SlurmStartError(RuntimeError):
    """The Slurm could not start (after what had started was stopped); the message says why,
    with the end of the daemons' logs."""


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


class MiniSlurm(StartStop):
    """A Slurm in ``folder`` (see the module docstring). ``nodes``: None (this machine, one
    node; ``folder`` needed) or a running ``LocalCloudLab`` (``folder`` defaults to a ``slurm``
    folder in its log folder, which goes with the nodes). ``cpus``: each node's CPUs (default:
    this machine's); ``memory_mb``: each node's memory (default: 90% of this machine's, shared
    out over the nodes); ``oversubscribe``: jobs that may share a core (1: none, each job has
    its CPUs to itself); ``slurmd_timeout``: Slurm's ``SlurmdTimeout``."""

    def __init__(
        self,
        folder=None,
        cpus: int | None = None,
        memory_mb: int | None = None,
        partition: str = "debug",
        oversubscribe: int = 4,
        start_timeout: float = 60.0,
        nodes=None,
        slurmd_timeout: int = SLURMD_TIMEOUT_S,
    ):
        if folder is None and nodes is None:
            raise ValueError("give the folder a one-node Slurm keeps its files in (or nodes=LocalCloudLab)")
        self.lab = nodes
        self.folder = Path(folder if folder is not None else nodes.log_dir / "slurm").absolute()
        if nodes is not None and any(self.folder.is_relative_to(p) for p in ("/run", "/home", "/root")):
            raise ValueError(
                f"folder={self.folder}: the emulated nodes have their own /run, /home and /root, so "
                f"they would not see it; pick one elsewhere (under /tmp, say)"
            )
        self.names = list(nodes.names) if nodes is not None else [socket.gethostname().split(".")[0]]
        self.host = self.names[0]  # the controller's node (the only one, on this machine)
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = memory_mb or int(psutil.virtual_memory().total / 2**20 * 0.9 / len(self.names))
        self.partition, self.oversubscribe, self.start_timeout = partition, oversubscribe, start_timeout
        self.slurmd_timeout = int(slurmd_timeout)
        self.conf = self.folder / ("etc/slurm.conf" if nodes is not None else "slurm.conf")
        self.daemons: dict[str, OwnedProcess] = {}  # "munged", "slurmctld", "slurmd on NODE"
        self._mounted: list[str] = []  # the emulated nodes that mount Slurm's folders
        self.up_s: float | None = None

    # ------------------------------------------------------------------------------ where
    @property
    def emulated(self) -> bool:
        return self.lab is not None

    def env(self) -> dict[str, str]:
        """What a client needs to talk to this Slurm (Slurm's commands read ``SLURM_CONF``); on
        the emulated nodes, the path they mount it on."""
        return {"SLURM_CONF": "/etc/slurm/slurm.conf" if self.emulated else str(self.conf)}

    def on(self, node: str, argv) -> list[str]:
        """``argv`` run on ``node`` as root (on this machine when there is one node)."""
        return self.lab.network.command(node, argv) if self.emulated else [str(a) for a in argv]

    def run(self, *argv: str, timeout: float = 60, check: bool = True) -> str:
        """Run a Slurm client command against this Slurm (on the controller's node); its stdout."""
        done = subprocess.run(
            self.on(self.host, argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **self.env()},
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def address(self, node: str) -> str:
        return self.lab.address(node) if self.emulated else "127.0.0.1"

    # --------------------------------------------------------------------------------- start
    def start(self) -> "MiniSlurm":
        reason = missing()
        if reason:
            raise SlurmStartError(f"cannot start a Slurm here: {reason}")
        t0 = time.monotonic()
        run = NODE_RUN if self.emulated else str(self.folder)
        self.conf.parent.mkdir(parents=True, exist_ok=True)
        try:
            key = self._prepare()
            ctld_port, slurmd_port = (6817, 6818) if self.emulated else free_ports(2)
            nodes = "\n".join(
                NODE.format(name=n, addr=self.address(n), cpus=self.cpus, memory_mb=self.memory_mb) for n in self.names
            )
            munge_socket = f"{NODE_MUNGE}/munge.socket.2" if self.emulated else f"{self.folder}/munge.sock"
            self.conf.write_text(
                CONF.format(
                    ctld=self.host,
                    ctld_addr=self.address(self.host),
                    munge_socket=munge_socket,
                    run=run,
                    dir=self.folder,
                    ctld_port=ctld_port,
                    slurmd_port=slurmd_port,
                    slurmd_timeout=self.slurmd_timeout,
                    nodes=nodes,
                    partition=self.partition,
                    oversubscribe=f"FORCE:{self.oversubscribe}" if self.oversubscribe > 1 else "NO",
                )
            )
            self.conf.chmod(0o644)
            socket_path = self.folder / ("munge/munge.socket.2" if self.emulated else "munge.sock")
            self._daemon(
                "munged",
                self.host,
                [
                    "--foreground",
                    "--force",
                    f"--socket={munge_socket}",
                    f"--key-file={key}",
                    f"--pid-file={run}/munged.pid",
                    f"--log-file={self.folder}/munged.log",
                    f"--seed-file={run}/munged.seed",
                ],
            )
            self._wait(socket_path.exists, "munged to open its socket")
            self._daemon("slurmctld", self.host, ["-D", "-i"])
            self._wait(lambda: self.run("scontrol", "ping", check=False).count("UP") > 0, "slurmctld to answer")
            for node in self.names:
                self.start_slurmd(node)
            self._wait(self._nodes_idle, f"{len(self.names)} node(s) to be idle")
        except BaseException:
            self.stop()
            raise
        self.up_s = time.monotonic() - t0
        return self

    def _prepare(self) -> str:
        """The folders and the munge key; on emulated nodes, each node's mounts. The key's path."""
        if not self.emulated:
            for sub in ("state", "spool"):
                (self.folder / sub).mkdir(parents=True, exist_ok=True)
            key = self.folder / "munge.key"
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
            return str(key)
        (self.folder / "munge").mkdir(mode=0o755, exist_ok=True)
        for node in self.names:
            script = [
                f"mkdir -p -m 700 {NODE_RUN}/state",
                f"mkdir -p -m 755 {NODE_MUNGE}",
                f"mount --bind {shlex.quote(str(self.conf.parent))} /etc/slurm",
                f"mount --bind {shlex.quote(str(self.folder / 'munge'))} {NODE_MUNGE}",
            ]
            self._mounted.append(node)
            done = self.lab.network.run(node, ["sh", "-ec", "\n".join(script)], timeout=30)
            if done.returncode != 0:
                raise SlurmStartError(f"could not prepare Slurm's folders on {node}: {done.stderr.strip()}")
        key = self.lab.path(self.host, f"{NODE_RUN}/munge.key")
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        return f"{NODE_RUN}/munge.key"

    def _daemon(self, name: str, node: str, args: list[str], log: str | None = None) -> None:
        label = f"slurmd on {node}" if name == "slurmd" else name
        self.daemons[label] = OwnedProcess(
            self.on(node, [_program(name), *args]),
            self.folder / (log or f"{name}.out"),
            env={**os.environ, **self.env()},
            cwd=self.folder,
        ).start()

    def slurmd(self, node: str) -> OwnedProcess:
        """The ``slurmd`` of ``node`` (to kill it, say)."""
        return self.daemons[f"slurmd on {node}"]

    def start_slurmd(self, node: str) -> None:
        """Start ``node``'s slurmd, or start it again (after it was killed, as a node's admin would
        with ``systemctl restart slurmd``): it finds the steps its node still runs and, for a job
        Slurm has ended meanwhile, stops them."""
        old = self.daemons.get(f"slurmd on {node}")
        if old is not None:
            old.kill(grace=5)
        self._daemon("slurmd", node, ["-D"], log=f"slurmd-{node}.out")

    def _nodes_idle(self) -> bool:
        states = self.run("sinfo", "--noheader", "--Node", "--format=%N %t", check=False).split()
        return states[1::2].count("idle") == len(self.names)

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            for label, d in self.daemons.items():
                if d.poll() is not None:
                    raise SlurmStartError(
                        f"{label} exited with code {d.poll()} while waiting for {what}; its log:\n"
                        f"{d.log_tail(20)}\n{self._logs()}"
                    )
            if time.monotonic() > deadline:
                raise SlurmStartError(f"gave up waiting {self.start_timeout:.0f} s for {what}\n{self._logs()}")
            time.sleep(0.1)

    def _logs(self, lines: int = 15) -> str:
        return "\n".join(f"--- {p.name}\n{tail(p, lines)}" for p in sorted(self.folder.glob("*.log")))

    # ---------------------------------------------------------------------------------- stop
    def jobs(self) -> list[str]:
        """Every job Slurm lists (running or pending), as ``JOBID STATE``."""
        return self.run("squeue", "--noheader", "--format=%i %T", check=False).split("\n")[:-1]

    def steps(self) -> list[str]:
        return self.run("squeue", "--steps", "--noheader", "--format=%i %j", check=False).split("\n")[:-1]

    def stop(self) -> None:
        """Cancel every job, stop the daemons, kill whatever they started, and (emulated) take
        Slurm's mounts and files off the nodes."""
        if not self.daemons and not self._mounted:
            return
        try:
            if self.daemons and all(d.poll() is None for d in self.daemons.values()):
                self.run("scancel", "--full", f"--partition={self.partition}", check=False, timeout=30)
                deadline = time.monotonic() + 20
                while self.jobs() and time.monotonic() < deadline:
                    time.sleep(0.2)
        except (subprocess.TimeoutExpired, OSError) as e:  # the kills below end everything anyway
            print(f"labkit: could not cancel the jobs of the Slurm in {self.folder}: {e}", file=sys.stderr)
        finally:
            for d in reversed(self.daemons.values()):  # slurmd first, munged last
                d.kill(grace=5)
            for stepd in self.step_daemons():
                kill_tree(stepd.pid, grace=2)
            self.daemons = {}
            self._unmount()

    def _unmount(self) -> None:
        mounted, self._mounted = self._mounted, []
        if not self.lab or not self.lab.network.running:
            return  # gone with the nodes
        for node in mounted:
            self.lab.network.run(
                node, ["sh", "-c", f"umount /etc/slurm {NODE_MUNGE}; rm -rf {NODE_RUN} {NODE_MUNGE}"], timeout=30
            )

    def step_daemons(self) -> list[psutil.Process]:
        """This Slurm's ``slurmstepd`` processes (they leave slurmd's tree): on emulated nodes,
        those in the nodes' namespaces; else those whose working directory is slurmd's, this folder."""
        nodes = {n.netns for n in self.lab.network.nodes.values()} if self.emulated else set()
        out = []
        for p in psutil.process_iter(["name"]):
            try:
                if p.info["name"] != "slurmstepd":
                    continue
                if netns_id(p.pid) in nodes if self.emulated else Path(p.cwd()).is_relative_to(self.folder):
                    out.append(p)
            except psutil.Error:
                continue  # gone, or not ours to read
        return out
