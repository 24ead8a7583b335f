"""A CPU quota per emulated node, so N nodes have N times the compute of one on a shared machine.

Emulated nodes (``labkit.infra.netem``) share this machine's cores, so a "speed-up" over one
worker would measure the cores, not the architecture. A ``NodeQuotas`` gives every node a
control group of its own capped at ``cpus`` cores: with ``cpus`` = cores / nodes, a node's
compute is the same at every N, as on separate machines. It uses cgroup v2 (``cpu.max``) where
it may, else a writable cgroup v1 ``cpu`` hierarchy; ``availability()`` says which, or why
neither (the runs then go on without quotas, and say so). A quota is a ceiling, not a
reservation.

The groups are named by their owner's pid; ``stop()`` removes them, and a start sweeps away
empty ones whose owner died. A task joins its node's group before it executes (``wrap``), so
everything it starts is capped too. Imports only labkit.core.
More in docs/internals.md, section labkit.infra.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from labkit.core import cgroups, sweep
from labkit.core.cgroups import PREFIX

PERIOD_US = 100_000


def _writable(path: Path | None) -> bool:
    return path is not None and path.is_dir() and os.access(path, os.W_OK)


def _v2_base() -> Path | None:
    """A v2 cgroup whose children may get ``cpu.max``: the cpu controller is offered there and
    this process may enable it for the children (the root, or a delegated group of no processes)."""
    own = cgroups.v2_dir()
    return own if _writable(own) and "cpu" in cgroups.offered(own) else None


def _v1_base() -> Path | None:
    own = cgroups.v1_dir("cpu")
    return own if _writable(own) and (own / "cpu.cfs_quota_us").exists() else None


def availability() -> tuple[str | None, str]:
    """("v2" or "v1", where), or (None, why not and what happens instead)."""
    base = _v2_base()
    if base is not None:
        return "v2", str(base)
    base = _v1_base()
    if base is not None:
        return "v1", str(base)
    return None, (
        "no CPU quota per node here: this process may not create a cgroup with a cpu controller "
        "(cgroup v2 without the cpu controller delegated to this user, and no writable cgroup v1 cpu "
        "hierarchy; run as root, or under a systemd scope with Delegate=yes). The nodes share the "
        "machine's cores instead, as tasks on 127.0.0.1 do"
    )


def _bases() -> list[Path]:
    version, where = availability()
    return [Path(where)] if version is not None else []


STALE = sweep.register(cgroups.sweeper("cpu-quota-cgroups", _bases))


def sweep_stale(base: Path) -> list[str]:
    """Remove the empty quota groups (and their nodes' groups) under ``base`` whose owner has
    died (``labkit.core.sweep``); their paths."""
    return [str(g) for g in cgroups.sweeper(STALE.name, lambda: [base]).sweep()]


class NodeQuotas:
    """One cgroup per node, each capped at ``cpus`` cores. ``start()`` raises ``RuntimeError``
    (saying why, from ``availability``) where quotas cannot be set."""

    def __init__(self, nodes, cpus: float):
        if not isinstance(cpus, (int, float)) or isinstance(cpus, bool) or not cpus > 0:
            raise ValueError(f"cpus={cpus!r}: give the cores each node may use, e.g. 0.5")
        self.nodes, self.cpus = [str(n) for n in nodes], float(cpus)
        self.version: str | None = None
        self.group: Path | None = None

    def start(self) -> "NodeQuotas":
        version, where = availability()
        if version is None:
            raise RuntimeError(where)
        base = Path(where)
        sweep_stale(base)
        self.version = version
        self.group = cgroups.make(base, f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}", {})
        if version == "v2":
            cgroups.enable(self.group, {"cpu"})
        quota = max(1000, int(round(self.cpus * PERIOD_US)))
        if version == "v2":
            settings = {"cpu.max": f"{quota} {PERIOD_US}"}
        else:
            settings = {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": str(quota)}
        for node in self.nodes:
            cgroups.make(self.group, node, settings)
        return self

    def procs(self, node: str) -> Path:
        if self.group is None:
            raise RuntimeError("the quotas are not started")
        return self.group / node / "cgroup.procs"

    def wrap(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` run inside ``node``'s group: the shell joins it, then becomes the command."""
        return cgroups.enter_command([self.procs(node).parent], argv)

    def cpu_seconds(self, node: str) -> float | None:
        """CPU seconds the node's processes have used (v2's ``usage_usec``); None under v1, whose
        accounting lives in another hierarchy (``cpuacct``)."""
        if self.group is None or self.version != "v2":
            return None
        for line in (self.group / node / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        return None

    def throttled_s(self, node: str) -> float:
        """Seconds the node's processes waited for their quota (``cpu.stat``)."""
        for line in (self.group / node / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "throttled_usec":
                return int(value) / 1e6
            if key == "throttled_time":
                return int(value) / 1e9
        return 0.0

    def describe(self) -> dict:
        return {"cpus_per_node": self.cpus, "cgroup": self.version, "group": str(self.group)}

    def stop(self, timeout: float = 10.0) -> list[str]:
        """Remove the groups once their processes are gone; what could not be removed."""
        if self.group is None:
            return []
        deadline, left = time.monotonic() + timeout, []
        for d in [self.group / n for n in self.nodes] + [self.group]:
            if not cgroups.remove(d, max(0.0, deadline - time.monotonic()), poll=0.1):
                left.append(str(d))
        self.group = None if not left else self.group
        return left
