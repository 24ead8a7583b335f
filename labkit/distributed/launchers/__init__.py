"""Ways to start a cluster's tasks: one small interface, one module per way, found by name.

``labkit.distributed.launch.Cluster`` owns a run's bookkeeping (which task failed first, timeouts, ps
shutdown, results, teardown order); a *launcher* owns the mechanics of one way to run a
task's process, and the Cluster reaches a task only through its launcher:

======== =================================================================== ==============
name     how a task runs                                                     task's files
======== =================================================================== ==============
local    a child process here (``launchers.local``)                          written here
ssh      ``ssh -- HOST sh -c WRAPPER`` on another node (``launchers.ssh``)   copied back
srun     ``srun`` job step inside the allocation (``launchers.srun``;        shared filesystem
         also called ``slurm``)
netns    a child here, inside its emulated node's network namespace          written here
         (``launchers.netns``, also called ``netem``:
         ``launcher_options={"link": "1gbit"}``)
======== =================================================================== ==============

The interface is ``labkit.distributed.launchers.base.Launcher``; each method has a default that does
the local thing, so a new way overrides only what differs:

- ``place(spec)`` -> the spec the tasks really run with (Slurm: the allocation's nodes);
- ``task_run_dir(task)``: the run directory as the task's node sees it; ``task_env(task)``: more
  environment for it (where its events go, when not into its run directory);
- ``command(task, env, argv_tail)`` -> ``(argv, printable command)``; ``spawn(tp)`` -> the
  started ``OwnedProcess`` (a local child that stands for the task: the task itself, its
  ssh client, its ``srun``), which ``wait`` is built on: its exit is the task's exit;
- ``returncode(rc)``: that child's exit code as the task's (``-N`` for signal N);
- ``signal(tps, sig)``: deliver ``sig`` to the tasks (``Cluster.kill``, fault injection);
  ``stop(tps, sig)``: teardown, SIGTERM first and SIGKILL for what survives the grace;
  ``release(tps)``: last cleanup once all are down (Slurm: cancel steps left over);
- ``collect(tps)``: bring the result files into the local run directory;
  ``hellos(tps)``: the tasks' hello files; ``log_tail`` is the Cluster's (every launcher
  streams the task's output into the local log file, and its events (``labkit.wire.events``) into
  ``TaskProcess.events_path`` as they come, where the Cluster reads them);
- ``precheck(tps)``: before any task starts, whether their nodes can run them (ssh: each answers);
- ``port_taken(task)``, ``ready(task)``: the port checks before and after the start;
- ``where(tp)``, ``failure_hint(tp, log_tail)``, ``local_pid(tp)``: what ``TaskFailed`` and
  the live view say about a task.

A launcher is made once per Cluster with the run's ``Settings`` (run directory, interpreter,
``launcher_options``, of which it reads the keys it names in ``OPTIONS``: how to reach nodes over
ssh is the ssh launcher's, the link the netem launcher's). Choosing one (``choose``): ``Cluster(..., launcher=NAME)``
runs every task with that launcher; without one, ``$LABKIT_LAUNCHER``; else Slurm when the
process runs inside a Slurm allocation (``SLURM_JOB_ID``) and the spec names only this
machine (no hosts file); else each task by its host: this machine's addresses ``local``, any
other ``ssh``.

The launchers are a ``labkit.core.registry.Registry`` (``LAUNCHERS``). A new way to start tasks
(say, local tasks at a lower CPU priority) is a subclass of ``Launcher`` with a ``name``,
registered once::

    from labkit.distributed import launchers
    from labkit.distributed.launchers.local import LocalLauncher

    @launchers.register
    class NiceLauncher(LocalLauncher):
        name = "nice"
        def command(self, task, env, argv_tail):
            argv, text = super().command(task, env, argv_tail)
            return ["nice", "-n", "10", *argv], "nice -n 10 " + text

    Cluster(spec, "ps_sgd", launcher="nice")

A built-in launcher's name is its module's: ``srun`` (also called ``slurm``) and ``netns`` (also
``netem``, the links it emulates) keep the names they had as aliases.
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
)


def register(cls: type) -> type:
    """Make a ``Launcher`` subclass available by its ``name`` (a class decorator)."""
    return LAUNCHERS.add_subclass(cls, Launcher)


def names() -> list[str]:
    return sorted(LAUNCHERS)


def get(name: str) -> type:
    """The launcher class called ``name``; a ValueError that lists the known ones otherwise."""
    return LAUNCHERS[name]


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
