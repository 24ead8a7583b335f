"""Pages forked from a warm renderer, one child per page.

A feedback page rendered in a fresh interpreter costs about 1.1 s of CPU, two thirds of it
importing nbconvert and compiling its templates. This server (``python -m
labkit.grading.pages.warm SOCKET``) pays that once: before the first page of each writer it
imports the writer's module and runs its ``warm_up``, then it forks a child per page, which
joins the page's cgroups, takes its limits (``limited.main``), writes to its log and exits. A
child holds nothing of another student's: the server renders no student's page itself.

The server is a helper of the grader process that started it (``labkit.core.helper``: it dies
with it, its scratch folder too) and belongs to the command under way (``session``); every child
dies with the server (``PR_SET_PDEATHSIG``). Where it cannot start, or with
``LABKIT_COLD_PAGES=1``, each page runs in an interpreter of its own (``render.Rendering``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from labkit.core.helper import Helper, Slot, listen

FOLDER_PREFIX = "labkit-pages-"
DISABLE = "LABKIT_COLD_PAGES"
REPLY_TIMEOUT_S = 60.0  # the first page of a writer waits for its warm-up (about 1.3 s of CPU)


# ------------------------------------------------------------------------------------- the server


def serve(path: str) -> None:
    """Serve one connection (the grader's) until it closes, each writer warmed up before its first
    page; the pages' processes go with it."""
    listener = listen(path, 1)
    conn, _ = listener.accept()
    listener.close()
    children: dict[int, int] = {}  # pid -> the page's id
    pending = b""
    with conn:
        while True:
            ready, _, _ = select.select([conn], [], [], 0.05)
            if ready:
                data = conn.recv(65536)
                if not data:
                    break
                messages, pending = _messages(pending + data)
                for message in messages:
                    _handle(message, conn, children, Path(path).parent)
            _reap(conn, children)
    for pid in children:
        os.kill(pid, signal.SIGKILL)


def _handle(request: dict, conn: socket.socket, children: dict[int, int], folder: Path) -> None:
    if request["op"] == "start":
        try:
            _warm_up(request["writer"], folder)
            pid = os.fork()
        except OSError as e:
            _send(conn, {"id": request["id"], "error": f"fork: {e}"})
            return
        if pid == 0:
            _child(request, conn)
        children[pid] = request["id"]
        _send(conn, {"id": request["id"], "pid": pid})
    elif request["op"] == "kill":
        for pid, page in children.items():
            if page == request["id"]:
                os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's


def _warm_up(writer: str, folder: Path) -> None:
    """The writer's module imported and warmed up here (``limited.warm_up``), before the first fork."""
    from labkit.grading.pages import limited

    try:
        limited.warm_up(writer, folder)
    except Exception:  # noqa: BLE001 - only the speed-up is lost: the page still renders in its child, which says why
        traceback.print_exc()
        print(f"labkit: warming up for {writer} failed (above); its pages render from the start", flush=True)


def _reap(conn: socket.socket, children: dict[int, int]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        page = children.pop(pid, None)
        if page is not None:
            _send(conn, {"id": page, "exit": os.waitstatus_to_exitcode(status)})


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _messages(buffer: bytes) -> tuple[list[dict], bytes]:
    """The whole JSON lines at the start of ``buffer``, and the partial line after them."""
    *lines, rest = buffer.split(b"\n")
    return [json.loads(line) for line in lines], rest


def _child(request: dict, conn: socket.socket) -> None:
    """The page's process: joins its cgroups, its log and its folder, then renders (never returns)."""
    code = 1
    try:
        conn.close()
        from labkit.core.proc import die_with_parent

        die_with_parent(signal.SIGKILL, int(request["server"]))
        for procs in request["procs"]:
            Path(procs).write_text(str(os.getpid()))
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(request["cwd"])
        from labkit.grading.pages import limited

        code = limited.main([request["spec"]])
    except BaseException:  # noqa: BLE001 - the page's own failure: its log says why, its exit code 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# ------------------------------------------------------------------------------------- the grader's side


class Page:
    """One page forked by the server: ``poll()`` and ``kill(grace)``, as ``OwnedProcess`` has."""

    def __init__(self, server: "Server", page: int, pid: int):
        self.server, self.page, self.pid = server, page, pid

    def poll(self) -> int | None:
        return self.server.exit_code(self.page)

    def kill(self, grace: float = 1.0) -> None:
        self.server.kill(self.page, grace)


class Server(Helper):
    """This process's warm renderer (``get``)."""

    NAME = "page server"
    PREFIX = FOLDER_PREFIX
    MODULE = "labkit.grading.pages.warm"

    def __init__(self, timeout: float | None = None):
        self.lock = threading.Lock()
        self.exits: dict[int, int] = {}
        self.logs: dict[int, Path] = {}
        self.next_id = 0
        self.buffer = b""
        super().__init__(timeout)
        try:
            self.conn = self.connect()
        except BaseException:
            self.stop()
            raise

    def start(self, spec: Path, procs: list, log: Path, writer: str) -> Page:
        """Fork the page of ``spec`` (``limited.main``'s argument) into the cgroups of ``procs``;
        ``writer`` ("module:name", the spec's) is warmed up first (``limited.warm_up``)."""
        with self.lock:
            self.next_id += 1
            page = self.next_id
            request = {
                "op": "start",
                "id": page,
                "spec": str(spec),
                "writer": writer,
                "procs": [str(p) for p in procs],
                "log": str(Path(log).resolve()),
                "cwd": os.getcwd(),
                "server": self.process.pid,
            }
            self.conn.sendall(json.dumps(request).encode() + b"\n")
            deadline = time.monotonic() + REPLY_TIMEOUT_S
            while True:
                for reply in self._read(max(0.0, deadline - time.monotonic())):
                    if reply.get("id") == page and "pid" in reply:
                        self.logs[page] = Path(log)
                        return Page(self, page, reply["pid"])
                    if reply.get("id") == page:
                        raise RuntimeError(f"the page server could not start the page: {reply['error']}")
                if time.monotonic() > deadline or not self.running:
                    raise RuntimeError(f"the page server did not start the page:\n{self.process.log_tail()}")

    def exit_code(self, page: int) -> int | None:
        with self.lock:
            if page not in self.exits:
                self._read(0.0)
            if page not in self.exits and not self.running:  # its children died with it
                with open(self.logs[page], "a") as f:
                    f.write(f"labkit: the page server ended (exit code {self.process.poll()})\n")
                self.exits[page] = 1
            return self.exits.get(page)

    def kill(self, page: int, grace: float) -> None:
        """SIGKILL the page's process (if it still runs), and wait up to ``grace`` + 5 s for its end."""
        with self.lock:
            if page in self.exits or not self.running:
                return
            self.conn.sendall(json.dumps({"op": "kill", "id": page}).encode() + b"\n")
            deadline = time.monotonic() + grace + 5.0
            while page not in self.exits and time.monotonic() < deadline and self.running:
                self._read(0.05)

    def _read(self, timeout: float) -> list[dict]:
        """The server's messages that arrive within ``timeout``; exits are kept in ``exits``."""
        got = []
        ready, _, _ = select.select([self.conn], [], [], timeout)
        if ready:
            data = self.conn.recv(65536)
            got, self.buffer = _messages(self.buffer + data)
            for message in got:
                if "exit" in message:
                    self.exits[message["id"]] = message["exit"]
        return got


_slot = Slot(Server, restart=False)  # a server that died leaves its pages to fresh interpreters
_depth = 0  # sessions open in this process
_lock = threading.Lock()


def get() -> Server | None:
    """This process's page server, started on first use; None where it is off or cannot start
    (the reason is kept in ``failed()``: pages then render each in a fresh interpreter)."""
    if os.environ.get(DISABLE) == "1" or not hasattr(os, "fork"):
        return None
    return _slot.get()


def failed() -> str | None:
    return _slot.failed


@contextlib.contextmanager
def session():
    """A command's pages share one server, stopped at the end of the outermost session (``grade``
    around its batch, ``render.run`` around a list of pages), so none outlives the command."""
    global _depth
    with _lock:
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            last = _depth == 0
        if last:
            stop()


def stop() -> None:
    """Stop this process's server, if it started one (at the end of a session; tests)."""
    _slot.stop()


if __name__ == "__main__":
    serve(sys.argv[1])
