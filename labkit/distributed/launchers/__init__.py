"""Ways to start a cluster's tasks: one small interface, one module per way, found by name.

``Cluster`` (``labkit.distributed.launch``) owns a run's bookkeeping; a *launcher* owns the
mechanics of one way to run a task's process (``local``, ``ssh``, ``srun`` alias ``slurm``,
``netns`` alias ``netem``), and the Cluster reaches a task only through it. The interface is
``launchers.base.Launcher``, whose defaults do the local thing; a new way is a registered subclass
(``@launchers.register``) that overrides only what differs.

``choose`` picks per task: ``launcher=NAME``; else ``$LABKIT_LAUNCHER``; else ``srun`` inside a
Slurm allocation when the spec names only this machine; else ``local`` for this machine's
addresses and ``ssh`` for any other host.

More in docs/cluster.md, section 11 (the table of launchers, each method of the interface, an
example of a new launcher).
"""

from __future__ import annotations

import os

from labkit.distributed.launchers.base import Launcher, Settings, TaskProcess  # noqa: F401  (the interface, by its package)
from labkit.core.registry import Registry

ENV_LAUNCHER = "LABKIT_LAUNCHER"  # a launcher's name: what Cluster uses when not told

# Built in, imported when first used (the Slurm one only where Slurm is asked for).
LAUNCHERS = Registry(
    "launcher",
    builtin={
        "local": "labkit.distributed.launchers.local:LocalLauncher",
        "ssh": "labkit.distributed.launchers.ssh:SshLauncher",
        "srun": "labkit.distributed.launchers.srun:SlurmLauncher",
        "netns": "labkit.distributed.launchers.netns:NetemLauncher",
    },
    aliases={"slurm": "srun", "netem": "netns"},
    hint="or leave it empty: this machine's tasks run here, others over ssh, and inside a Slurm allocation "
    "through srun",
    base=Launcher,
)
register = LAUNCHERS.add_subclass  # a class decorator: a Launcher subclass, found by its ``name``
names = LAUNCHERS.names
get = LAUNCHERS.__getitem__  # the launcher class called NAME; a ValueError that lists the known ones otherwise


def choose(name: str | None, spec, local_hosts, environ=None) -> dict[str, str]:
    """Task name -> launcher name for ``spec`` (the rules are in the module docstring)."""
    environ = os.environ if environ is None else environ
    name = (name or "").strip() or environ.get(ENV_LAUNCHER, "").strip()
    if not name or name == "auto":
        if environ.get("SLURM_JOB_ID") and all(t.host in local_hosts for t in spec.tasks()):
            name = "srun"
    if name and name != "auto":
        get(name)  # a clear error for a name nobody registered
        name = LAUNCHERS.canonical(name)
        away = [t for t in spec.tasks() if t.host not in local_hosts]
        if name == "local" and away:
            raise ValueError(
                f"the local launcher runs tasks on this machine only, but {away[0].name} is on "
                f"{away[0].host}; leave the launcher empty (other hosts are reached over ssh) "
                f"or choose another one ({', '.join(names())})"
            )
        return {t.name: name for t in spec.tasks()}
    return {t.name: "local" if t.host in local_hosts else "ssh" for t in spec.tasks()}
