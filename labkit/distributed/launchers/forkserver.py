"""Start local task processes from one that has imported TensorFlow already: a fork server.

Importing TensorFlow costs a task 3-4 s of CPU, and a cluster's tasks start at once on the same
cores. The fork server imports it all once, in a process that has run no TensorFlow op (nothing
a fork would copy half made), and forks one child per local task, which runs its program as
``python -m`` would. The local and netns launchers use it unless told otherwise
(``launcher_options={"forkserver": False}``, another ``python``, ``LABKIT_NO_FORKSERVER=1``),
through a stand-in (``forkclient.py``) that they start and signal as they would the task.

The server is a helper of this process (``labkit.core.helper``): started on first use, it dies
with its parent. It keeps the modules it imported: a kernel that changed the kit's code restarts
to run the new code. Tasks elsewhere (ssh, Slurm), or where the server cannot start (a warning
says why), start as their own interpreters.

More in docs/internals.md, section labkit.distributed (the stand-in, what a task's hello says).
"""

from __future__ import annotations

import ast
import json
import os
import runpy
import select
import shutil
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

import labkit
from labkit.core.helper import Helper, Slot, listen
from labkit.tasks import PROGRAMS
from labkit.wire.protocol import ENV_FORKSERVER

FOLDER_PREFIX = "labkit-forkserver-"  # a server's socket, stand-in and log, in /tmp (labkit.core.scratch)
DISABLE = "LABKIT_NO_FORKSERVER"  # "1": every task starts as its own interpreter
# What a forked task finds imported: these libraries (TensorFlow loads Keras and pandas itself) and
# every task program of ``labkit.tasks.PROGRAMS`` with the kit's modules it imports (``preload``).
LIBRARIES = ("tensorflow", "keras", "pandas")
CLIENT = Path(__file__).with_name("forkclient.py")
CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000  # <sched.h>; Python 3.11's os has no setns
REAP_S = 0.02  # how often the server looks for ended tasks: the delay before a stand-in exits


# ------------------------------------------------------------------------------ the server


def send_message(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """A stand-in's request (length-prefixed JSON) and the descriptors sent with it."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 8)
    if len(data) < 4:
        raise ValueError("short request")
    size = struct.unpack("!I", data[:4])[0]
    body = data[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("request cut short")
        body += chunk
    return json.loads(body), fds


def _kit_module_file(name: str) -> Path | None:
    """The source of the labkit module ``name`` (None: no such module, e.g. a name it defines)."""
    base = Path(labkit.__file__).parent.joinpath(*name.split(".")[1:])
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def _kit_imports(source: Path) -> set[str]:
    """The labkit modules a module's import statements name, at any level (a program imports its
    training loop inside the function that runs it)."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in found if n.partition(".")[0] == "labkit" and _kit_module_file(n)}


def preload() -> list[str]:
    """What the server imports before it forks: ``LIBRARIES``, then every task program
    (``PROGRAMS``) and, read from their source, the kit's modules they import and those import."""
    todo, seen = [PROGRAMS.reference(name) for name in PROGRAMS], {}
    while todo:
        name = todo.pop(0)
        if name not in seen:
            seen[name] = None
            todo += sorted(_kit_imports(_kit_module_file(name)))
    return [*LIBRARIES, *seen]


def serve(path: str) -> None:
    """Import what the tasks need, listen on ``path``, fork a task per request, report each
    task's exit status to its stand-in. Ends with the process that started it."""
    import psutil

    started = psutil.Process().create_time()
    _remove_folder_on_term(os.path.dirname(path))
    for name in preload():
        __import__(name)
    info = {"pid": os.getpid(), "started_epoch": started, "ready_epoch": time.time()}
    listener = listen(path, 64)  # the socket appears once TensorFlow is imported
    print(f"fork server {os.getpid()} ready after {info['ready_epoch'] - started:.1f} s", flush=True)
    tasks: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([listener], [], [], REAP_S)
        if readable:
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (OSError, ValueError) as e:
                conn.close()
                print(f"fork server: a bad request ({e})", flush=True)
                continue
            # A signal for the task can arrive the moment it exists (a stand-in stopped during
            # start forwards it at once): held until the child has its own dispositions, it then
            # ends the task, instead of running the server's handler there or being lost.
            held = signal.pthread_sigmask(signal.SIG_BLOCK, TASK_SIGNALS)
            pid = os.fork()
            if pid == 0:
                _child(request, fds, [listener, conn, *tasks.values()], info, held)
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            for fd in fds:
                os.close(fd)
            tasks[pid] = conn
            try:
                send_message(conn, {"pid": pid})
            except OSError:  # the stand-in is gone already: the task follows it (its lifeline)
                pass
        _reap(tasks)


TASK_SIGNALS = {
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCHLD,
    signal.SIGINT,
}


def _remove_folder_on_term(folder: str) -> None:
    """The driver's death signal (SIGTERM, ``labkit.core.proc``) or a hangup ends the server with
    its folder: a driver that was killed runs no clean-up of its own."""

    def end(signum, frame):
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, end)


def _reap(tasks: dict[int, socket.socket]) -> None:
    while tasks:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = tasks.pop(pid, None)
        if conn is not None:
            try:
                send_message(conn, {"status": status})
            except OSError:
                pass
            conn.close()


def become_task_signals(mask: set) -> None:
    """The task's own dispositions (the defaults; SIGINT raises KeyboardInterrupt), then the
    signals blocked since the fork unblocked: one that came meanwhile ends the task as it would
    have, instead of running the server's handler (which removes the server's folder) or being lost."""
    for s in TASK_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _child(request: dict, fds: list[int], inherited: list, info: dict, mask: set) -> None:
    """In the forked process: become the task and run its program; never returns. It starts with
    ``TASK_SIGNALS`` blocked, unblocked (to ``mask``) once their handlers are the task's."""
    code = 1
    try:
        become_task_signals(mask)
        for s in inherited:
            s.close()
        os.setsid()  # a session of its own, as the launcher gives a task
        stdin, stdout, stderr, lifeline, *namespaces = fds
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):  # first: an error below is in the task's log
            os.dup2(fd, target)
            os.close(fd)
        _join_namespaces(*namespaces)  # before any thread starts: the threads TensorFlow starts later inherit it
        threading.Thread(target=_watch_lifeline, args=(lifeline,), name="labkit-lifeline", daemon=True).start()
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[ENV_FORKSERVER] = json.dumps(info)
        os.chdir(request["cwd"])
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[1:1] = extra  # as an interpreter started with the task's PYTHONPATH would search
        argv = request["argv"]
        if len(argv) < 2 or argv[0] not in ("-m", "-c"):
            raise ValueError(f"the fork server runs -m MODULE ARGS or -c CODE ARGS, got {argv[:2]}")
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _join_namespaces(net: int | None = None, user: int | None = None) -> None:
    """Move this process into its stand-in's network namespace (``net``), and first into the user
    namespace that owns it (``user``: an unprivileged user's emulated node, where only that
    namespace grants the CAP_SYS_ADMIN that joining its network needs). A namespace this process is
    in already is left alone: setns needs the capability even for that one."""
    for fd, kind, name in ((user, CLONE_NEWUSER, "user"), (net, CLONE_NEWNET, "net")):
        if fd is None:
            continue
        here, there = os.stat(f"/proc/self/ns/{name}"), os.fstat(fd)
        if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, kind) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"could not join the stand-in's {name} namespace: {os.strerror(err)}")
        os.close(fd)


def _watch_lifeline(fd: int) -> None:
    """The stand-in holds the other end: when it is gone, so is this task, at once."""
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.kill(os.getpid(), signal.SIGKILL)


# ------------------------------------------------------------------------------ the driver's side


class ForkServer(Helper):
    """A running fork server of this process: ``python`` is the interpreter to give the launcher."""

    NAME = "fork server"
    PREFIX = FOLDER_PREFIX
    MODULE = "labkit.distributed.launchers.forkserver"
    READY_TIMEOUT_S = 180.0  # its imports, on cores a cluster may be using
    STOP_GRACE_S = 2.0

    def prepare(self) -> None:
        """The stand-in script the launcher runs as a task's ``python``."""
        self.python = str(self.dir / "python")
        q = lambda s: "'" + str(s).replace("'", "'\\''") + "'"  # noqa: E731  (a shell word)
        Path(self.python).write_text(
            f'#!/bin/sh\nexec {q(sys.executable)} -I -S {q(CLIENT)} {q(sys.executable)} {q(self.socket)} "$@"\n'
        )
        os.chmod(self.python, 0o755)


_slot = Slot(ForkServer, restart=True)  # a server that died is replaced


def get() -> ForkServer | None:
    """This process's fork server, started on first use; None where it is off or cannot start
    (then, once, a warning says why)."""
    if os.environ.get(DISABLE, "") not in ("", "0") or not sys.platform.startswith("linux"):
        return None
    failed_before = _slot.failed
    server = _slot.get()
    if server is None and failed_before is None:
        warnings.warn(
            f"labkit: tasks start as their own interpreters, the fork server could not start: {_slot.failed}",
            RuntimeWarning,
            stacklevel=2,
        )
    return server


def running() -> ForkServer | None:
    """This process's fork server if one runs, without starting one: it is meant to outlive the
    clusters it started, so whoever looks for processes left behind leaves it out."""
    return _slot.running()


if __name__ == "__main__":
    serve(sys.argv[1])
