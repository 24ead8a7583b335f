"""Tasks as child processes of this one, each in its own session with its own log.

Each child gets SIGTERM from the kernel if this process dies, however it dies
(``labkit.core.proc.OwnedProcess``); stopping signals its whole process group. A task starts
through this process's fork server (``labkit.distributed.launchers.forkserver``: TensorFlow imported
once, each task forked from it) unless ``launcher_options={"forkserver": False}``, the Cluster
was given another ``python``, ``LABKIT_NO_FORKSERVER=1`` is set, or the server cannot start.
The printed command (``Cluster.commands``) is the task's own interpreter either way: pasted,
it runs the same program."""

from __future__ import annotations

import os
import select
import sys
import time

from labkit.wire.spec import Task, port_is_free
from labkit.distributed.launchers import forkserver
from labkit.distributed.launchers.base import Launcher, Settings, TaskProcess, pasteable
from labkit.core.proc import OwnedProcess
from labkit.wire.results import read_json


FORKED_END_WAIT_S = 5.0  # a forked task ends itself this long at most after its stand-in is killed


class LocalLauncher(Launcher):
    name = "local"
    OPTIONS = ("forkserver",)

    def __init__(self, settings: Settings):
        super().__init__(settings)
        wanted = settings.options.get("forkserver", True)
        if not isinstance(wanted, bool):
            raise ValueError(
                f"launcher_options forkserver={wanted!r}: give True (tasks forked from this process's "
                f"fork server, the default) or False (each task its own interpreter)"
            )
        self.forks = wanted and settings.python == sys.executable  # the server runs this interpreter

    def command(self, task: Task, env: dict[str, str], argv_tail: list[str]) -> tuple[list[str], str]:
        argv = [self.settings.python, *argv_tail]
        return argv, pasteable(env, argv)

    def started_argv(self, tp: TaskProcess) -> list[str]:
        """What to run for the task: its command, with the fork server's stand-in for its
        interpreter when it forks (a subclass's wrapper before it stays); the server starts here
        on first use, and where it cannot, the task runs its own interpreter."""
        argv = list(tp.argv)
        if self.forks and self.settings.python in argv:
            server = forkserver.get()
            if server is not None:
                argv[argv.index(self.settings.python)] = server.python
        return argv

    def spawn(self, tp: TaskProcess) -> OwnedProcess:
        return OwnedProcess(self.started_argv(tp), tp.log_path, env={**os.environ, **tp.env}).start()

    def port_taken(self, task: Task) -> bool:
        return not port_is_free(task.port)  # TensorFlow listens on 0.0.0.0:PORT

    def signal(self, tps: list[TaskProcess], sig: int) -> None:
        for tp in tps:
            os.kill(tp.proc.pid, sig)

    def local_pid(self, tp: TaskProcess) -> int | None:
        """The child's pid; for a forked task (the child is its stand-in) the pid its hello
        names, once written."""
        try:
            hello = read_json(self.settings.run_dir / tp.file(".hello.json")) or {}
        except ValueError:  # being written
            hello = {}
        return hello["pid"] if hello.get("forkserver") and hello.get("pid") else super().local_pid(tp)

    def release(self, tps: list[TaskProcess]) -> None:
        """Wait until every forked task has ended. It is no child of this process: a stand-in
        killed with SIGKILL leaves its task to notice the closed lifeline and end itself a moment
        later, with its port still bound until it has. A task without a hello never bound one."""
        deadline = time.monotonic() + FORKED_END_WAIT_S
        for tp in tps:
            pid = self.local_pid(tp)
            if tp.proc is None or pid is None or pid == tp.proc.pid:
                continue
            try:
                ended = os.pidfd_open(pid)
            except OSError:  # gone already
                continue
            try:
                if not select.select([ended], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    print(
                        f"labkit: forked task {tp.task.name} (pid {pid}) was still running "
                        f"{FORKED_END_WAIT_S:.0f} s after its stand-in ended; kill it with `kill -9 {pid}`",
                        file=sys.stderr,
                    )
            finally:
                os.close(ended)
