"""One worker of a hand-written collective: ``python -m labkit.tasks.collective_worker``.

The worker connects to the relay (Lab 4's ``collective`` module, in the process that started it)
on 127.0.0.1 (or across an emulated node's link), proves which worker it is with the token its parent wrote to its stdin, receives its
gradient over that connection (no other worker can read it from a file), defines the notebook's phase
functions from their source, and runs each phase when the relay says so: ``fn(rank, world, value, send, recv)``, where ``value`` is its
gradient for a collective's first phase and the previous phase's result after that. ``send(dst,
array)`` and ``recv(src)`` go through the relay, which counts every byte and times every phase;
nothing in this process is read to decide what moved. A phase's result goes back to the relay; an
exception goes back as its text (the traceback goes to the log), and the process exits 1.

Every message is a frame: a fixed header (``HEADER``: kind, two integers, payload length) and the
payload. The relay uses the same ``read_frame``/``frame`` below. Imports only NumPy.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import traceback
from collections import defaultdict, deque
from pathlib import Path

import numpy as np

from labkit.tasks.tf1 import define_function

HEADER = struct.Struct("!Biiq")  # kind, a, b, payload bytes
HELLO, PHASE, DONE, DATA, ERROR, END, INPUT = range(7)
# DATA: a = the destination (worker -> relay) or the source (relay -> worker), b = the dtype's code
# DONE: a = the phase, b = the result's dtype code (-1: None); PHASE: a = the phase; HELLO: a = the rank,
# the payload its token; INPUT: b = the gradient's dtype code
DTYPES = (np.float32, np.float64, np.int32, np.int64)
NO_ARRAY = -1
SIGNATURE = "(rank, world, value, send, recv)"


def frame(kind: int, a: int = 0, b: int = 0, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, a, b, len(payload)) + payload


def read_exact(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock``; ConnectionError when it closes first."""
    chunks, left = [], n
    while left:
        got = sock.recv(min(left, 1 << 20))
        if not got:
            raise ConnectionError("the relay closed the connection (another worker failed, or the run was stopped)")
        chunks.append(got)
        left -= len(got)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> tuple[int, int, int, bytes]:
    kind, a, b, n = HEADER.unpack(read_exact(sock, HEADER.size))
    return kind, a, b, read_exact(sock, n)


def encode(array) -> tuple[int, bytes]:
    """(dtype code, bytes) of a 1-D copy of ``array``; (NO_ARRAY, b"") for None."""
    if array is None:
        return NO_ARRAY, b""
    a = np.ascontiguousarray(array).reshape(-1)
    for code, dtype in enumerate(DTYPES):
        if a.dtype == dtype:
            return code, a.tobytes()
    raise TypeError(f"only arrays of {', '.join(np.dtype(d).name for d in DTYPES)} can be sent, got {a.dtype}")


def decode(code: int, payload: bytes):
    if code == NO_ARRAY:
        return None
    if not 0 <= code < len(DTYPES):
        raise ValueError(f"unknown dtype code {code}")
    return np.frombuffer(payload, DTYPES[code]).copy()


class Peer:
    """This worker's ``send`` and ``recv``: messages through the relay, received in order per source."""

    def __init__(self, sock: socket.socket, rank: int, world: int, recv_timeout: float):
        self.sock, self.rank, self.world = sock, rank, world
        self.inbox: dict[int, deque] = defaultdict(deque)
        self.phase = ""
        sock.settimeout(recv_timeout)
        self.recv_timeout = recv_timeout

    def _rank(self, other, what: str) -> int:
        if isinstance(other, bool) or not isinstance(other, (int, np.integer)):
            raise TypeError(f"{what} must be a worker's rank (an int), got {other!r}")
        if not 0 <= int(other) < self.world or int(other) == self.rank:
            raise ValueError(
                f"{what} must be another worker's rank, 0..{self.world - 1} but not {self.rank}; got {other}"
            )
        return int(other)

    def send(self, dst, array) -> None:
        """Send ``array`` (a NumPy array, sent flat) to worker ``dst``."""
        code, payload = encode(array)
        if code == NO_ARRAY:
            raise TypeError("send needs an array, got None")
        self.sock.sendall(frame(DATA, self._rank(dst, "send's dst"), code, payload))

    def recv(self, src):
        """The next array worker ``src`` sent to this worker (flat), waiting for it."""
        src = self._rank(src, "recv's src")
        while not self.inbox[src]:
            try:
                kind, a, b, payload = read_frame(self.sock)
            except TimeoutError:
                raise TimeoutError(
                    f"worker {self.rank} waited {self.recv_timeout:g} s in {self.phase} for a message from worker "
                    f"{src} that never came"
                ) from None
            if kind != DATA:
                raise ConnectionError(f"the relay sent a control message (kind {kind}) in the middle of {self.phase}")
            self.inbox[a].append(decode(b, payload))
        return self.inbox[src].popleft()

    def unread(self) -> int:
        return sum(len(q) for q in self.inbox.values())


def serve(args) -> int:
    phases = json.loads(Path(args.phases).read_text())
    token = sys.stdin.readline().strip().encode()  # from the parent, before anything of the student's runs
    sock = socket.create_connection((args.host, args.port), timeout=args.recv_timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(frame(HELLO, args.rank, 0, token))
    kind, _, code, payload = read_frame(sock)
    if kind != INPUT:
        raise ConnectionError(f"the relay sent no gradient (kind {kind})")
    grad = value = decode(code, payload)
    peer = Peer(sock, args.rank, args.world, args.recv_timeout)
    try:
        fns = [define_function(p["source"], p["name"], "--phases", SIGNATURE) for p in phases]
        while True:
            sock.settimeout(None)  # between phases the relay waits for the slowest worker
            kind, a, _, payload = read_frame(sock)
            sock.settimeout(args.recv_timeout)
            if kind == END:
                return 0
            if kind != PHASE or not 0 <= a < len(fns):
                raise ConnectionError(f"unexpected message from the relay (kind {kind})")
            peer.phase = phases[a]["phase"]
            print(f"worker {args.rank}: {peer.phase}", flush=True)
            given = grad.copy() if phases[a]["fresh"] else value  # a collective starts from the gradient
            value = fns[a](args.rank, args.world, given, peer.send, peer.recv)
            code, data = encode(value)
            sock.sendall(frame(DONE, a, code, data))
    except BaseException as e:  # the student's code failed: the relay reports it, with this log's tail
        traceback.print_exc()
        text = f"{type(e).__name__}: {e}"[:2000].encode()
        try:
            sock.sendall(frame(ERROR, args.rank, 0, text))
        except OSError:  # the relay has gone: the parent reads this log instead
            print(f"worker {args.rank}: could not tell the relay", file=sys.stderr)
        return 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="the relay's address")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--phases", required=True, help="JSON list of {name, source}")
    p.add_argument("--recv-timeout", type=float, default=20.0)
    return serve(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
