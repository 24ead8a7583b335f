"""Lab 4's collectives between real processes: the notebook's ring all-reduce and gather/scatter.

``all_reduce(grads, ring=(reduce_scatter, all_gather), gather_scatter=(gather, scatter))`` starts
one worker process per gradient (``labkit.tasks.collective_worker``) and relays every message
between them over TCP, in this process: on 127.0.0.1, or (``link=``) from a node of its own per
worker behind an emulated link. The relay counts the payload bytes of every message per link
(source, destination) and per phase, and times each phase from its start signal to the last
worker's result. The workers run the notebook's functions and the kit's ``send``/``recv``; nothing
in their processes is read to learn what moved, and each gets its gradient over its connection.

A worker that raises, exits, or outlasts a phase's deadline ends the run with a ``CollectiveError``
naming it, with its log's tail; every worker is killed when the run ends, however it ends. The cost
model, the properties a correct run has and the measured-vs-model table are in ``collective_model``
(``table``, ``per_worker`` and ``plot`` are here too, for the notebook).
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import json
import os
import secrets
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from labkit.core.proc import OwnedProcess
from labkit.labs.lab4.collective_model import COLLECTIVES, CollectiveRun, per_worker, plot, properties, table

__all__ = ["CollectiveError", "all_reduce", "per_worker", "plot", "self_check", "shard_gradients", "table"]
from labkit.tasks import PROGRAMS
from labkit.tasks import collective_worker as wire

WORKER = PROGRAMS.reference("collective_worker")


class CollectiveError(RuntimeError):
    """A worker of a collective failed: raised, exited, or missed a deadline (the message says which)."""

    def __init__(self, message: str, rank: int | None = None, log_tail: str = ""):
        super().__init__(message)
        self.rank, self.log_tail = rank, log_tail


@dataclass
class _Conn:
    sock: socket.socket
    rank: int | None = None  # known once it has said which worker it is
    inbuf: bytearray = field(default_factory=bytearray)  # bytes read, not yet a whole frame
    out: list = field(default_factory=list)  # frames to send, the first maybe in part
    msg: "_Message | None" = None  # the message it is sending, while its payload comes


@dataclass
class _Message:
    dst: int
    header: bytes  # b"" once sent on
    left: int  # payload bytes still to come from the sender
    parts: list = field(default_factory=list)  # come, not yet sent on


def all_reduce(
    grads,
    ring=None,
    gather_scatter=None,
    folder=None,
    phase_timeout: float = 30.0,
    start_timeout: float = 60.0,
    link=None,
) -> CollectiveRun:
    """Average ``grads`` (one 1-D float32 vector per worker, equal lengths) with the notebook's
    collectives, each from the gradients: ``ring = (reduce_scatter, all_gather)`` and
    ``gather_scatter = (gather, scatter)``, each function ``(rank, world, value, send, recv)``.
    Returns what every phase returned on every worker, with the bytes and seconds the relay measured.
    ``folder`` holds the workers' logs (default: a new run folder under runs/lab4). ``link``
    (``"100mbit"``, say): each worker on an emulated node of its own behind a link of that rate, the
    relay on this machine's unshaped port of their switch (``labkit.infra.netem``, as root)."""
    grads = _gradients(grads)
    phases = _phases(ring, gather_scatter)
    folder = _folder(folder)
    (folder / "phases.json").write_text(
        json.dumps([{k: p[k] for k in ("phase", "name", "source", "fresh")} for p in phases])
    )
    world, recv_timeout = len(grads), max(1.0, 0.75 * phase_timeout)
    with contextlib.ExitStack() as stack:
        host, place = _network(stack, world, link, folder)
        relay = stack.enter_context(_Relay(grads, [p["phase"] for p in phases], host))
        procs = []
        for r in range(world):
            cmd = [sys.executable, "-m", WORKER, "--host", host, "--port", relay.port, "--rank", r, "--world", world]
            cmd += ["--phases", folder / "phases.json"]
            cmd += ["--recv-timeout", recv_timeout]
            total = start_timeout + len(phases) * phase_timeout + 10
            proc = OwnedProcess(
                place(r, cmd), folder / f"worker-{r}.log", env=_env(), timeout=total, stdin=subprocess.PIPE
            )
            procs.append(stack.enter_context(proc))
            with contextlib.suppress(BrokenPipeError):  # it has exited already: the relay reports it, with its log
                proc.popen.stdin.write(relay.tokens[r] + b"\n")  # its proof of rank, where no other worker reads it
                proc.popen.stdin.flush()
        relay.procs = procs
        relay.gather(start_timeout)
        for i in range(len(phases)):
            relay.phase(i, phase_timeout)
        relay.end()
        _reap(procs)
    return CollectiveRun(
        world=world,
        values=int(grads[0].size),
        itemsize=int(grads[0].itemsize),
        collectives=tuple(p["collective"] for p in phases),
        phases=tuple(p["phase"] for p in phases),
        results=relay.results,
        link_bytes=relay.link_bytes,
        messages=relay.messages,
        seconds=np.asarray(relay.seconds, float),
        link_bytes_per_s=_rate(link),
        folder=folder,
    )


def self_check(grads, ring=None, gather_scatter=None, **options) -> CollectiveRun | None:
    """The notebook's self-check of its collectives: run them on the student's own vectors (one per
    worker process) and test every property a correct run has (``collective_model.properties``),
    naming each one that failed. Shows the verdict; returns the run, or None when it could not finish
    (the error and the worker's log tail are printed)."""
    from labkit.notebook.verdicts import Verdict, verdict

    given = [
        f"{c}: {', '.join(f.__name__ for f in fns)}"
        for c, fns in (("ring", ring), ("gather/scatter", gather_scatter))
        if fns
    ]
    v = Verdict(f"the collective code ({'; '.join(given)})")
    try:
        run = all_reduce(grads, ring, gather_scatter, **options)
    except CollectiveError as e:
        print(e)
        v.expect(False, f"runs on {len(grads)} worker processes without an error ({str(e).splitlines()[0]})")
        verdict(v)
        return None
    for what, held in properties(run, grads):
        v.expect(held, what)
    run.verdict = verdict(v)
    return run


def _gradients(grads) -> list[np.ndarray]:
    try:
        out = [np.asarray(g) for g in grads]
    except TypeError:
        raise TypeError(
            f"grads must be a list of 1-D float32 vectors, one per worker; got {type(grads).__name__}"
        ) from None
    if len(out) < 2 or any(g.ndim != 1 or g.dtype != np.float32 for g in out):
        raise ValueError("grads must be at least two 1-D float32 vectors (one per worker); flatten and cast them first")
    if len({g.size for g in out}) != 1 or out[0].size < len(out):
        raise ValueError(f"every worker's gradient needs the same length, at least the {len(out)} workers")
    return out


def _phases(ring, gather_scatter) -> list[dict]:
    """The phases to run, in order, each with its function's source for the workers."""
    from labkit.experiments import function_source

    phases = []
    for collective, fns in (("ring", ring), ("gather/scatter", gather_scatter)):
        if fns is None:
            continue
        names = COLLECTIVES[collective]
        if not (isinstance(fns, (tuple, list)) and len(fns) == len(names)):
            raise ValueError(f"{collective} must be a pair of functions ({', '.join(names)}), got {fns!r}")
        for i, (name, fn) in enumerate(zip(names, fns)):
            fn_name = getattr(fn, "__name__", "")
            source = function_source(fn, fn_name, wire.SIGNATURE, f"{collective}'s {name} function")
            phases.append({"collective": collective, "phase": name, "name": fn_name, "source": source, "fresh": i == 0})
    if not phases:
        raise ValueError("give ring=(reduce_scatter, all_gather), gather_scatter=(gather, scatter), or both")
    return phases


def _network(stack: contextlib.ExitStack, world: int, link, folder: Path):
    """(the relay's address, ``place(rank, cmd)``: the command that runs worker ``rank``). Without a
    link: 127.0.0.1 and the command as it is; with one, an emulated network of a node per worker,
    which ``stack`` takes down, and the worker's command run inside its node."""
    if not link:
        return "127.0.0.1", lambda rank, cmd: cmd
    from labkit.infra import netem

    net = stack.enter_context(netem.EmulatedNetwork(world, link=link, log_dir=folder / "network"))
    if not net.reachable:
        raise netem.EmulationUnavailable(
            "the relay needs this machine's own port on the emulated switch, which only root gets; "
            "run as root, or leave link empty (127.0.0.1)"
        )
    host = str(net.subnet.network_address + netem.DRIVER_HOST)
    return host, lambda rank, cmd: net.command(net.names[rank], cmd)


def _rate(link) -> float | None:
    if not link:
        return None
    from labkit.infra import netem

    return netem.parse_link(link).bytes_per_s


def _folder(folder) -> Path:
    if folder is None:
        from labkit.core import paths

        folder = paths.run_dir("lab4", prefix="collective")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _env() -> dict:
    """The workers' environment: this one, one thread for NumPy, and this kit first on the path."""
    kit = str(Path(__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH", "")
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {**os.environ, **threads, "PYTHONPATH": kit + (os.pathsep + path if path else "")}


def _reap(procs, grace: float = 10.0) -> None:
    """Each worker, told to end, exits 0 within ``grace``; else a CollectiveError."""
    for r, p in enumerate(procs):
        try:
            code = p.wait(grace)
        except subprocess.TimeoutExpired:
            raise CollectiveError(
                f"worker {r} did not exit after the last phase\n{_tail(p, r)}", r, p.log_tail()
            ) from None
        if code != 0:
            raise CollectiveError(
                f"worker {r} exited with code {code} after the last phase\n{_tail(p, r)}", r, p.log_tail()
            )


def _tail(proc: OwnedProcess, rank: int, lines: int = 20) -> str:
    return f"--- worker {rank}'s log, last {lines} lines ({proc.log_path}) ---\n{proc.log_tail(lines)}"


class _Relay:
    """The hub every worker connects to: it forwards each worker's messages to their destination,
    counts them per phase and link, and runs the phases one after another (a barrier between them)."""

    def __init__(self, grads: list[np.ndarray], phases: list[str], host: str = "127.0.0.1"):
        self.world, self.names, self.grads = len(grads), phases, grads
        self.tokens = [secrets.token_hex(16).encode() for _ in grads]
        self.listener = socket.create_server((host, 0))
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.conns: dict[int, _Conn] = {}  # rank -> connection
        self.lanes: dict[int, collections.deque] = {}  # rank -> the messages on their way to it, in order
        self.procs: list[OwnedProcess] = []
        self.current = -1
        self.results = [[None] * self.world for _ in phases]
        self.done_at = [[None] * self.world for _ in phases]
        self.link_bytes = np.zeros((len(phases), self.world, self.world), np.int64)
        self.messages = np.zeros((len(phases), self.world, self.world), np.int64)
        self.seconds: list[float] = []
        self.ending = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()
        return False

    # -- the run's steps -------------------------------------------------------------------

    def gather(self, timeout: float) -> None:
        """Wait until every worker has connected and said which rank it is."""
        self._pump(lambda: len(self.conns) == self.world, time.monotonic() + timeout, "connect to the relay")

    def phase(self, i: int, timeout: float) -> None:
        self.current = i
        for conn in self.conns.values():
            self._queue(conn, wire.frame(wire.PHASE, i))
        start = time.monotonic()
        self._pump(lambda: None not in self.done_at[i], start + timeout, f"finish {self.label(i)}")
        self.seconds.append(max(self.done_at[i]) - start)

    def end(self) -> None:
        self.ending = True
        for conn in self.conns.values():
            self._queue(conn, wire.frame(wire.END))
        self._pump(lambda: not any(c.out for c in self.conns.values()), time.monotonic() + 10, "be told to end")

    def label(self, i: int) -> str:
        return self.names[i] if i >= 0 else "start-up"

    # -- the loop -------------------------------------------------------------------------

    def _pump(self, until, deadline: float, what: str) -> None:
        while not until():
            if time.monotonic() > deadline:
                late = [r for r in range(self.world) if self._late(r)]
                tails = "\n".join(_tail(self.procs[r], r) for r in late)
                raise CollectiveError(
                    f"worker(s) {', '.join(map(str, late))} did not {what} in time (a recv waiting for a message "
                    f"no worker sent, or a loop that does not end)\n{tails}",
                    late[0] if late else None,
                    tails,
                )
            self._check_alive()
            for key, events in self.sel.select(0.05):
                if key.fileobj is self.listener:
                    self._accept()
                    continue
                conn = key.data
                if events & selectors.EVENT_READ:
                    self._read(conn)
                if events & selectors.EVENT_WRITE:
                    self._write(conn)

    def _late(self, rank: int) -> bool:
        if rank not in self.conns:
            return True
        return self.current >= 0 and self.done_at[self.current][rank] is None

    def _check_alive(self) -> None:
        for r, p in enumerate(self.procs):
            code = p.poll()
            if code is not None and not (self.ending and code == 0):
                raise CollectiveError(
                    f"worker {r} exited with code {code} during {self.label(self.current)}\n{_tail(p, r)}",
                    r,
                    p.log_tail(),
                )

    def _accept(self) -> None:
        sock, _ = self.listener.accept()
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sel.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._lost(conn)
            return
        conn.inbuf += data
        size = wire.HEADER.size
        while conn.inbuf:
            if conn.msg is not None:  # the rest of a message on its way: forwarded as it arrives, as a switch does
                part = bytes(conn.inbuf[: conn.msg.left])
                del conn.inbuf[: len(part)]
                self._pass(conn, part)
                continue
            if len(conn.inbuf) < size:
                break
            kind, a, b, n = wire.HEADER.unpack_from(conn.inbuf)
            if kind == wire.DATA:
                del conn.inbuf[:size]
                self._message(conn, a, b, n)
                continue
            if len(conn.inbuf) < size + n:
                break
            payload = bytes(conn.inbuf[size : size + n])
            del conn.inbuf[: size + n]
            self._handle(conn, kind, a, b, payload)

    def _message(self, conn: _Conn, dst: int, code: int, n: int) -> None:
        """A worker's message to ``dst`` begins: its header goes on at once, its payload as it comes."""
        src = conn.rank
        if src is None:
            raise CollectiveError("a connection sent a message before saying which worker it is")
        if not 0 <= dst < self.world or dst == src:
            raise CollectiveError(f"worker {src} sent a message to {dst}, not another worker")
        if self.current < 0:
            raise CollectiveError(f"worker {src} sent a message before the first phase began")
        self.messages[self.current, src, dst] += 1
        msg = _Message(dst, wire.HEADER.pack(wire.DATA, src, code, n), n)
        self.lanes.setdefault(dst, collections.deque()).append(msg)
        conn.msg = msg if n else None
        self._flush(dst)

    def _pass(self, conn: _Conn, part: bytes) -> None:
        """Part of a message's payload, counted on its link and sent on."""
        msg = conn.msg
        self.link_bytes[self.current, conn.rank, msg.dst] += len(part)
        msg.parts.append(part)
        msg.left -= len(part)
        if not msg.left:
            conn.msg = None
        self._flush(msg.dst)

    def _flush(self, dst: int) -> None:
        """Send on what has come of the messages to ``dst``, one message after another: a message
        waits, buffered, until the one before it has passed whole."""
        lane = self.lanes[dst]
        while lane:
            head = lane[0]
            for part in ([head.header] if head.header else []) + head.parts:
                self._queue(self.conns[dst], part)
            head.header, head.parts = b"", []
            if head.left:
                return
            lane.popleft()

    def _lost(self, conn: _Conn) -> None:
        self.sel.unregister(conn.sock)
        conn.sock.close()
        if conn.rank is None or self.ending:
            return
        r = conn.rank
        with contextlib.suppress(subprocess.TimeoutExpired):  # its log is complete once it has exited
            self.procs[r].popen.wait(2)
        proc = self.procs[r]
        raise CollectiveError(
            f"worker {r} closed its connection during {self.label(self.current)}\n{_tail(proc, r)}", r, proc.log_tail()
        )

    def _handle(self, conn: _Conn, kind: int, a: int, b: int, payload: bytes) -> None:
        if kind == wire.HELLO:
            if not 0 <= a < self.world or a in self.conns or not hmac.compare_digest(payload, self.tokens[a]):
                raise CollectiveError(f"a connection said it was worker {a} without that worker's token")
            conn.rank = a
            self.conns[a] = conn
            self._queue(conn, wire.frame(wire.INPUT, 0, *wire.encode(self.grads[a])))
        elif conn.rank is None:
            raise CollectiveError("a connection sent a message before saying which worker it is")
        elif kind == wire.DONE:
            if a != self.current or self.done_at[a][conn.rank] is not None:
                raise CollectiveError(f"worker {conn.rank} finished phase {a} twice or out of turn")
            self.results[a][conn.rank] = wire.decode(b, payload)
            self.done_at[a][conn.rank] = time.monotonic()
        elif kind == wire.ERROR:
            r, proc = conn.rank, self.procs[conn.rank]
            with contextlib.suppress(subprocess.TimeoutExpired):  # its traceback is in its log once it has exited
                proc.popen.wait(2)
            raise CollectiveError(
                f"worker {r} raised in {self.label(self.current)}: {payload.decode(errors='replace')}\n{_tail(proc, r)}",
                r,
                proc.log_tail(),
            )
        else:
            raise CollectiveError(f"worker {conn.rank} sent a message of unknown kind {kind}")

    def _queue(self, conn: _Conn, data: bytes) -> None:
        conn.out.append(memoryview(data))
        self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def _write(self, conn: _Conn) -> None:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out[0])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._lost(conn)
                return
            if sent < len(conn.out[0]):
                conn.out[0] = conn.out[0][sent:]
                return
            conn.out.pop(0)
        self.sel.modify(conn.sock, selectors.EVENT_READ, conn)


def shard_gradients(net, x, y, workers: int) -> list[np.ndarray]:
    """The gradients of one SGD step of ``net`` on ``(x, y)`` split into ``workers`` equal shards, one
    flat float32 vector per worker: each is its shard's mean loss's gradient, so their average is the
    whole batch's (what a data-parallel step all-reduces)."""
    import tensorflow as tf

    if len(x) % workers or len(x) < workers:
        raise ValueError(f"the batch of {len(x)} images must split into {workers} equal shards")
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    out = []
    for xs, ys in zip(np.split(np.asarray(x), workers), np.split(np.asarray(y), workers)):
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, net(xs, training=True))
        grads = tape.gradient(loss, net.trainable_variables)
        out.append(np.concatenate([g.numpy().reshape(-1) for g in grads]).astype(np.float32))
    return out
