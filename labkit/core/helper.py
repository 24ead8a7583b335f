"""A helper process of this one, serving on a Unix socket in a scratch folder.

The fork server (cluster tasks, ``labkit.distributed.launchers.forkserver``) and the warm page
renderer (feedback pages, ``labkit.grading.pages.warm``) are both this: ``python -m MODULE SOCKET``
pays for an expensive import once, then serves the process that started it. A helper is owned
(``labkit.core.proc.OwnedProcess``: it dies with this process, whatever signal ends it), and it lives
in a scratch folder of its own (``labkit.core.scratch``: removed when it stops, or by the next
helper if this process was killed). Its socket appears once it is ready to serve.

``Slot`` holds this process's one helper of a kind: started on first use, with the reason kept when
it could not start, so a caller falls back at once instead of waiting for it again.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
from typing import Callable

from labkit.core import scratch


class Helper:
    """One helper process; a subclass names it and its module, and may ``prepare`` its folder."""

    NAME = "helper"  # in errors: "the fork server ended during its start-up"
    PREFIX = "labkit-helper-"  # its scratch folder's name
    MODULE = ""  # python -m MODULE SOCKET
    READY_TIMEOUT_S = 60.0  # for its socket to appear
    STOP_GRACE_S = 1.0

    def __init__(self, timeout: float | None = None):
        from labkit.core.proc import OwnedProcess

        # held by this process's lock: if it is killed, the next helper started here removes the folder
        self.dir = scratch.make(self.PREFIX)
        self.socket = str(self.dir / "socket")
        self.log = self.dir / "server.log"
        self.process = None
        try:
            self.prepare()
            self.process = OwnedProcess(
                [sys.executable, "-u", "-m", self.MODULE, self.socket],
                self.log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            ).start()
            self._wait_ready(self.READY_TIMEOUT_S if timeout is None else timeout)
        except BaseException:  # not ready, or interrupted (a kernel's stop button) while it imports: it goes
            self.stop()
            raise

    def prepare(self) -> None:
        """What the folder needs before the helper starts (nothing, unless a subclass says so)."""

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the {self.NAME} ended during its start-up (exit code {self.process.poll()}):\n"
                    f"{self.process.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {self.NAME} was not ready after {timeout:.0f} s; its log ends:\n{self.process.log_tail()}"
                )
            time.sleep(0.02)

    def connect(self) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.socket)
        return conn

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Stop the helper and remove its folder (socket, log, whatever ``prepare`` put there)."""
        if self.process is not None:
            self.process.kill(grace=self.STOP_GRACE_S)
        scratch.release(self.dir)


def listen(path: str, backlog: int) -> socket.socket:
    """The helper's side: a socket that appears at ``path`` only once it listens, so whoever waits
    for the path (``Helper``) can connect at once."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(backlog)
    os.replace(path + ".tmp", path)
    return listener


class Slot:
    """This process's one helper of a kind (``get``), started on first use.

    Where it cannot start, ``failed`` keeps why and ``get`` returns None until ``stop``: the caller
    falls back (tasks and pages start as their own interpreters). A helper that died is replaced
    (``restart``), or counted as a failure, with its log's tail as the reason."""

    def __init__(self, start: Callable[[], Helper], restart: bool):
        self.start, self.restart = start, restart
        self.helper: Helper | None = None
        self.failed: str | None = None
        self.lock = threading.Lock()
        atexit.register(self.stop)

    def get(self) -> Helper | None:
        with self.lock:
            if self.helper is not None and not self.helper.running:
                dead, self.helper = self.helper, None
                if not self.restart:
                    self.failed = f"the {dead.NAME} ended:\n{dead.process.log_tail()}"
                dead.stop()  # its folder goes with it
            if self.helper is None and self.failed is None:
                try:
                    self.helper = self.start()
                except (OSError, RuntimeError) as e:
                    self.failed = str(e)
            return self.helper

    def running(self) -> Helper | None:
        """The helper if one runs, without starting one."""
        helper = self.helper
        return helper if helper is not None and helper.running else None

    def stop(self) -> None:
        """Stop the helper, if one started, and forget why an earlier one could not."""
        with self.lock:
            if self.helper is not None:
                self.helper.stop()
            self.helper, self.failed = None, None
