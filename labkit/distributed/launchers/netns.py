"""Local tasks on emulated nodes: each host of the spec a network namespace on a shaped link.

    spec = cluster.mode("cluster2", hosts=netem_nodes(3))      # node0: ps + worker 0; node1, node2
    Cluster(spec, "ps_sgd", launcher="netns", launcher_options={"link": "1gbit"})

Every distinct host of the spec becomes one emulated node (``labkit.infra.netem``): tasks of
one host share its ``lo``, the others cross two shaped links. The tasks run here, as the local
launcher's do, started through ``nsenter`` inside their node. The network is planned with the
Cluster, started with its first task and taken down with its last; its namespaces die with this
process however it ends. ``network.json`` in the run directory records the link, nodes,
addresses and shared cores. Where links cannot be emulated, making the Cluster raises
``netem.EmulationUnavailable``, which says why and what still works.

More in docs/internals.md, section labkit.distributed.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from labkit.infra import netem
from labkit.infra.cpuquota import NodeQuotas, availability
from labkit.wire.spec import ClusterSpec, Task, join_address
from labkit.distributed.launchers.base import Settings, TaskProcess
from labkit.distributed.launchers.local import LocalLauncher
from labkit.core.proc import OwnedProcess, usable_cores


def netem_nodes(n: int) -> list[str]:
    """``["node0", ..., "node{n-1}"]``: hosts for a spec whose nodes this launcher emulates."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}: give the number of emulated nodes, >= 1")
    return [f"node{i}" for i in range(n)]


def cluster_args(link, nodes: int, cpus: float | None = None) -> dict:
    """``Cluster`` (and the labs' experiment) keyword arguments that run a spec placed on
    ``nodes`` emulated hosts (node0, node1, ...) through this launcher at ``link``, with one
    intra-op thread per task. ``cpus``: each node's CPU quota in cores (``labkit.infra.cpuquota``);
    None: the nodes share this machine's cores, as tasks on 127.0.0.1 do."""
    options = {"link": str(netem.parse_link(link))} | ({"cpus": float(cpus)} if cpus else {})
    return {"hosts": netem_nodes(nodes), "launcher": NetemLauncher.name, "launcher_options": options, "threads": (1, 2)}


def described(run_dir) -> dict | None:
    """The emulated network a run had (its ``network.json``: link, ``rate_bits``, nodes and their
    addresses, ``cores`` the nodes shared), or None where it had none: what its counters mean."""
    path = Path(run_dir) / "network.json"
    return json.loads(path.read_text()) if path.exists() else None


def task_nodes(result) -> dict[str, str]:
    """Each task of a finished run (a ``ClusterResult``) by its node: the emulated node's name
    where the run had emulated links (its ``network.json``), else the task's host."""
    net = described(result.run_dir) or {"nodes": {}}
    by_address = {a: n for n, a in net["nodes"].items()}
    return {t.name: by_address.get(t.host, t.host) for t in result}


class NetemLauncher(LocalLauncher):
    """Launcher options: ``link`` ("1gbit", "1gbit,0.2ms": ``netem.parse_link``); ``grace``:
    seconds a task left in a node gets between SIGTERM and SIGKILL when the network goes;
    ``cpus``: each node's CPU quota in cores (``labkit.infra.cpuquota``; a RuntimeError saying why
    where quotas cannot be set), absent: the nodes share the machine's cores."""

    name = "netns"
    OPTIONS = (*LocalLauncher.OPTIONS, "link", "grace", "cpus")

    def __init__(self, settings: Settings):
        super().__init__(settings)
        self.link = netem.parse_link(settings.options.get("link"))
        if self.link is None:
            raise ValueError(
                "the netem launcher needs a link: launcher_options={'link': '1gbit'} "
                "(RATE or RATE,DELAY, e.g. '1gbit,0.2ms')"
            )
        netem.require(self.link)  # here, before anything starts: why not, and what still works
        cpus = settings.options.get("cpus")
        self.quotas = NodeQuotas([], float(cpus)) if cpus else None  # its nodes come with the spec (place)
        if self.quotas is not None and availability()[0] is None:
            raise RuntimeError(availability()[1])
        self.network: netem.EmulatedNetwork | None = None
        self.node: dict[str, str] = {}  # a task's address's host -> its node

    # ------------------------------------------------------------------ placing and commands
    def place(self, spec: ClusterSpec) -> ClusterSpec:
        """One node per host of ``spec``; each task moves to its node's address, same port."""
        hosts = spec.hosts()
        self.network = netem.EmulatedNetwork(
            hosts,
            self.link,
            log_dir=self.settings.run_dir / "network",
            grace=float(self.settings.options.get("grace", netem.GRACE_S)),
        )
        addresses = self.network.plan()
        self.node = {addresses[h]: h for h in hosts}
        if self.quotas is not None:
            self.quotas.nodes = list(hosts)
        return spec.with_addresses({t.name: join_address(addresses[t.host], t.port) for t in spec.tasks()})

    def move_ports(self, spec: ClusterSpec, tasks: list[Task]) -> ClusterSpec:
        return spec  # every node is a fresh namespace: no other process holds its ports

    def command(self, task: Task, env: dict[str, str], argv_tail: list[str]) -> tuple[list[str], str]:
        argv, text = super().command(task, env, argv_tail)
        node = self.node[task.host]
        return argv, f"nsenter --target=<pid holding {node}'s namespace> --net -- sh -c {shlex.quote(text)}"

    def spawn(self, tp: TaskProcess) -> OwnedProcess:
        """Start the network with the first task, then the task inside its node."""
        net = self._running()
        node, argv = self.node[tp.task.host], self.started_argv(tp)
        argv = net.command(node, self.quotas.wrap(node, argv) if self.quotas is not None else argv)
        return OwnedProcess(argv, tp.log_path, env={**os.environ, **tp.env}).start()

    def _running(self) -> netem.EmulatedNetwork:
        if not self.network.running:
            self.network.start()
            if self.quotas is not None:
                self.quotas.start()
            self.settings.run_dir.mkdir(parents=True, exist_ok=True)
            info = {
                **self.network.describe(),
                "cores": usable_cores(),
                "cpu_quota": self.quotas.describe() if self.quotas is not None else None,
            }
            (self.settings.run_dir / "network.json").write_text(json.dumps(info, indent=1))
        return self.network

    # ------------------------------------------------------------------------------ states
    def port_taken(self, task: Task) -> bool:
        return False  # see move_ports

    def ready(self, task: Task) -> bool:
        """A socket listens on the task's port inside its node (this process may not reach the
        node's address: without root there is no link from here)."""
        return self.network.running and self.network.listening(self.node[task.host], task.port)

    def release(self, tps: list[TaskProcess]) -> None:
        """Every task is down: take the network down (namespaces, links, qdiscs)."""
        super().release(tps)
        if self.network is not None:
            self.network.stop()
        if self.quotas is not None:
            self.quotas.stop()

    # ------------------------------------------------------------------------- reports
    def where(self, tp: TaskProcess) -> str:
        return f" on emulated node {self.node[tp.task.host]}"
