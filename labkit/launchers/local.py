"""Tasks as child processes of this one, each in its own session with its own log.

Each child gets SIGTERM from the kernel if this process dies, however it dies
(``labkit.proc.OwnedProcess``); stopping signals its whole process group."""
from __future__ import annotations

import os
import shlex

from labkit.cluster import Task, port_is_free
from labkit.launchers.base import Launcher, TaskProcess
from labkit.results import read_json


class LocalLauncher(Launcher):
    name = "local"

    def command(self, task: Task, env: dict[str, str], argv_tail: list[str]) -> tuple[list[str], str]:
        argv = [self.settings.python, *argv_tail]
        text = (f"cd {shlex.quote(os.getcwd())} && env "
                + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(argv))
        return argv, text

    def port_taken(self, task: Task) -> bool:
        return not port_is_free(task.port)  # TensorFlow listens on 0.0.0.0:PORT

    def signal(self, tps: list[TaskProcess], sig: int) -> None:
        for tp in tps:
            os.kill(tp.proc.pid, sig)

    def local_pid(self, tp: TaskProcess) -> int | None:
        """The child's pid; for a task forked by ``labkit.tasks.forkserver`` (the child is its
        stand-in) the pid its hello names, once written."""
        try:
            hello = read_json(self.settings.run_dir / tp.file(".hello.json")) or {}
        except ValueError:  # being written
            hello = {}
        return hello["pid"] if hello.get("forkserver") and hello.get("pid") else super().local_pid(tp)
