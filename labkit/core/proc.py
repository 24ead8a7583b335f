"""Owning child processes: every process labkit starts is killed with its whole tree, and
dies with the process that started it, whatever signal ends that one.

- A child gets its own session (process group), so one signal reaches everything it
  spawned; ``kill_tree`` also walks psutil's view of descendants, which catches
  grandchildren that left the group (TensorFlow servers started by a kernel, say).
- A child asks Linux for a signal (``death_signal``, SIGTERM by default) when its parent
  dies (``PR_SET_PDEATHSIG``, set between fork and exec), so even a parent killed with
  SIGKILL, which runs no cleanup, leaves nothing behind. Linux sends it when the *thread*
  that started the child ends, so children of other threads are started from one thread
  that lives as long as the process (``_spawner``).
- A harness (``python -m labkit ...``) calls ``unwind_on_signals()``: SIGTERM and SIGHUP
  then unwind it like Ctrl-C, through the ``with`` blocks and ``finally`` clauses that
  stop its children. Its own children get SIGTERM from the kernel when it dies, and do
  the same, so a whole chain of harnesses goes down together.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import psutil

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
LINUX = sys.platform.startswith("linux")
# Looked up once, here: a child between fork and exec (``preexec_fn``) may only call it.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if LINUX else None


def prctl(option: int, value: int) -> None:
    """Linux's ``prctl(option, value)``, the kit's one call of it; a no-op elsewhere."""
    if _PRCTL is not None and _PRCTL(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {value}): {os.strerror(err)}")


def die_with_parent(sig: int, parent: int) -> None:
    """This process gets ``sig`` when ``parent`` (the pid it was started by) dies; if it has died
    already (this process was re-parented), it gets ``sig`` now. Linux only; elsewhere only the
    second half holds."""
    prctl(PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


def own_descendants(parent: int, sig: int = signal.SIGTERM) -> None:
    """Make this process the owner of its whole tree: descendants orphaned below it are
    re-parented to it rather than to init (``PR_SET_CHILD_SUBREAPER``), so it can still kill
    them; and it gets ``sig`` when ``parent`` dies (``die_with_parent``). Install the handler
    for ``sig`` first: if ``parent`` is gone already, ``sig`` arrives at once."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    die_with_parent(sig, parent)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its descendants ([] when it is gone)."""
    try:
        return [psutil.Process(pid), *descendants(pid)]
    except psutil.NoSuchProcess:
        return []


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (pages they share count in each: a ceiling)."""
    return _rss(_tree(pid))


def _rss(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # ended, or another user's, since listed
            continue
    return total


def in_memfds(pids) -> int:
    """Bytes held in the memfds these processes have open, each file once. A memfd written with
    ``write`` and never mapped is memory that no process's RSS or data limit counts."""
    seen, total = set(), 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # ended, or not ours to read
            continue
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                if not os.readlink(link).startswith("/memfd:"):
                    continue
                st = os.stat(link)
            except OSError:  # closed meanwhile
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def tree_memory(pid: int) -> int:
    """Memory ``pid`` and its descendants hold: their RSS and their memfds (a mapped memfd counts
    in both: a ceiling, as shared pages are)."""
    procs = _tree(pid)  # listed once for both: the runner polls this while the run lasts
    return _rss(procs) + in_memfds(p.pid for p in procs)


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


def unwind_on_signals(signals=(signal.SIGTERM, signal.SIGHUP)) -> None:
    """Make ``signals`` raise ``KeyboardInterrupt`` in this (harness) process, so that it
    unwinds as on Ctrl-C and stops what it owns. Only from the main thread (where Python
    runs signal handlers); a no-op elsewhere."""
    if threading.current_thread() is not threading.main_thread():
        return

    def unwind(signum, _frame):
        raise KeyboardInterrupt(f"{signal.Signals(signum).name}: stopping what this process started")

    for sig in signals:
        signal.signal(sig, unwind)


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a cgroup or ``taskset`` may narrow),
    which every task of a local cluster and every emulated node shares."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class StopAtExit:
    """The objects with a ``stop()`` that this process has running (clusters, emulated networks):
    whatever its owner has not stopped is stopped when the interpreter exits, so nothing
    outlives the interpreter that started it. Registries made later stop first (``atexit``)."""

    def __init__(self):
        self._live: set = set()
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def add(self, obj) -> None:
        with self._lock:
            self._live.add(obj)

    def discard(self, obj) -> None:
        with self._lock:
            self._live.discard(obj)

    def stop_all(self) -> None:
        with self._lock:
            live = list(self._live)
        for obj in live:
            obj.stop()


def _die_with_parent(sig: int, parent: int):
    """A ``preexec_fn``: in the child, before exec, ``die_with_parent(sig, parent)``."""
    return lambda: die_with_parent(sig, parent)


class _Spawner:
    """Starts children for threads other than the main one, from one daemon thread that
    ends only with the process: ``PR_SET_PDEATHSIG`` fires when the starting thread ends,
    and a worker thread (a notebook's background run, a thread pool) may end long before
    the child should."""

    def __init__(self):
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue | None = None

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        if threading.current_thread() is threading.main_thread():
            return subprocess.Popen(*args, **kwargs)
        with self._lock:
            if self._jobs is None:
                self._jobs = queue.SimpleQueue()
                threading.Thread(target=self._serve, name="owned-process-spawner", daemon=True).start()
        done: Future = Future()
        self._jobs.put((args, kwargs, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            args, kwargs, done = self._jobs.get()
            try:
                done.set_result(subprocess.Popen(*args, **kwargs))
            except BaseException as e:  # handed to the caller's thread, raised there
                done.set_exception(e)


_spawner = _Spawner()


class OwnedProcess:
    """A child in its own session, with a log file, a deadline and a guaranteed teardown.

    Use as a context manager; leaving the block (normally, on error or on
    KeyboardInterrupt) kills whatever is still running. ``death_signal`` (Linux) is what
    the child gets when this process dies (None: nothing). ``stdin=subprocess.PIPE`` gives
    the child a pipe that this process holds open and never writes to (``popen.stdin``):
    the child reads end-of-file once this process is gone, however it went. Its output goes
    to ``log_path``, stdout and stderr together, unless ``stdout_path`` takes its stdout.
    """

    def __init__(
        self,
        cmd,
        log_path,
        env=None,
        cwd=None,
        timeout: float | None = None,
        stdin=None,
        death_signal: int | None = signal.SIGTERM,
        stdout_path=None,
    ):
        self.cmd = [str(c) for c in cmd]
        self.log_path = Path(log_path)
        self.stdout_path = Path(stdout_path) if stdout_path is not None else None
        self.env, self.cwd, self.timeout = env, cwd, timeout
        self.stdin = subprocess.DEVNULL if stdin is None else stdin
        self.death_signal = death_signal
        self.popen: subprocess.Popen | None = None
        self.started = None

    def start(self) -> "OwnedProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        preexec = _die_with_parent(self.death_signal, os.getpid()) if LINUX and self.death_signal else None
        with open(self.log_path, "ab") as log, open(self.stdout_path or os.devnull, "ab") as out:
            self.popen = _spawner.popen(
                self.cmd,
                stdout=out if self.stdout_path else log,
                stderr=log,
                stdin=self.stdin,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=preexec,
            )
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
        self._close_stdin()
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

    def _close_stdin(self) -> None:
        if self.popen.stdin is not None and not self.popen.stdin.closed:
            try:
                self.popen.stdin.close()
            except OSError:  # the child is gone and its end of the pipe with it
                pass

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
