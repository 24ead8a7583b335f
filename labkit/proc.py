"""Owning child processes: every process labkit starts is killed with its whole tree.

A child gets its own session (process group), so one signal reaches everything it
spawned; ``kill_tree`` also walks psutil's view of descendants, which catches
grandchildren that left the group (TensorFlow servers started by a kernel, say).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def kill_tree(pid: int, grace: float = 3.0, include_self: bool = True) -> list[int]:
    """SIGTERM ``pid``'s process group and every descendant, SIGKILL what survives ``grace``
    seconds. Returns the pids that had to be killed with SIGKILL."""
    procs = descendants(pid)
    if include_self:
        try:
            procs.insert(0, psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    if include_self:
        try:
            os.killpg(pid, signal.SIGTERM)  # the child's own group, when it leads one
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return [p.pid for p in alive]


class OwnedProcess:
    """A child in its own session, with a log file, a deadline and a guaranteed teardown.

    Use as a context manager; leaving the block (normally, on error or on
    KeyboardInterrupt) kills whatever is still running.
    """

    def __init__(self, cmd, log_path, env=None, cwd=None, timeout: float | None = None):
        self.cmd = [str(c) for c in cmd]
        self.log_path = Path(log_path)
        self.env, self.cwd, self.timeout = env, cwd, timeout
        self.popen: subprocess.Popen | None = None
        self.started = None

    def start(self) -> "OwnedProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=self.env, cwd=self.cwd, start_new_session=True)
        self.started = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self):
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for exit; on timeout kill the tree and raise ``subprocess.TimeoutExpired``."""
        limit = timeout if timeout is not None else self.timeout
        try:
            return self.popen.wait(limit)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self, grace: float = 3.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:  # not reaped, so the pid is still this child's (a zombie at worst)
            kill_tree(self.popen.pid, grace)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                print(f"labkit: pid {self.popen.pid} ({self.cmd[0]}) survived SIGKILL for {grace:g} s", file=sys.stderr)
        else:
            # Reaped: the pid may be another process's by now, so no descendants() walk; only the
            # child's own group, which may still hold processes it left behind.
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass  # no process is left in that group

    def log_tail(self, lines: int = 30) -> str:
        return tail(self.log_path, lines)

    def __enter__(self):
        return self.start() if self.popen is None else self

    def __exit__(self, *exc):
        self.kill()
        return False


def tail(path, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
