"""Bytes on the wire, counted in one place: per network interface and per process.

Per interface (``nic_counters``): psutil's host counters, as dstat shows them; on 127.0.0.1 all
tasks share ``lo``, so these give a cluster's total, never one task's (an emulated node's
namespace has NICs of its own: ``nic_counters(pid=P)``). Per process (``tcp_bytes``,
``TaskBytes``): the kernel's per-socket TCP counters, as ``ss -tinp`` lists them, summed over a
process's sockets: one task's traffic, even on one machine. ``Meter`` puts any of them around a
window, and ``traffic`` records it under one set of names for every program.

Socket counters live as long as their socket: read them around a window in which the
connections stay open. Imports no TensorFlow; the socket counters need ``ss`` (iproute2) and are
None where it is missing. More in docs/internals.md, section labkit.measure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterable

import psutil

_PID = re.compile(r"pid=(\d+)")
_SENT = re.compile(r"\bbytes_sent:(\d+)")
_ACKED = re.compile(r"\bbytes_acked:(\d+)")
_RECV = re.compile(r"\bbytes_received:(\d+)")


def nic_counters(nics: Iterable[str] | None = None, pid: int | None = None) -> dict[str, tuple[int, int]]:
    """{interface: (bytes sent, bytes received)} since boot, for ``nics`` (default: every
    interface); an interface that is missing is left out. Counters that wrap are unwrapped.

    ``pid``: the interfaces of the network namespace process ``pid`` is in (an emulated node),
    read from ``/proc/<pid>/net/dev`` (64-bit counters, which do not wrap); {} once it is gone."""
    wanted = None if nics is None else set(nics)
    if pid is not None:
        return {n: c for n, c in _proc_net_dev(pid).items() if wanted is None or n in wanted}
    counters = psutil.net_io_counters(pernic=True, nowrap=True)
    return {n: (c.bytes_sent, c.bytes_recv) for n, c in counters.items() if wanted is None or n in wanted}


def _proc_net_dev(pid: int) -> dict[str, tuple[int, int]]:
    try:
        lines = Path(f"/proc/{int(pid)}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return {}
    out = {}
    for line in lines:  # "  lan0: rx_bytes rx_packets ... (8 receive fields) tx_bytes ..."
        name, _, fields = line.partition(":")
        f = fields.split()
        if len(f) >= 9:
            out[name.strip()] = (int(f[8]), int(f[0]))
    return out


def netns_id(pid: int | None = None) -> tuple[int, int] | None:
    """The network namespace process ``pid`` (default: this one) is in, as ``(device, inode)``
    of ``/proc/<pid>/ns/net``: equal for processes that share one; None once it is gone."""
    try:
        st = os.stat(f"/proc/{os.getpid() if pid is None else int(pid)}/ns/net")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def nic_bytes(nic: str | None) -> tuple[int, int]:
    """(bytes sent, bytes received) since boot on ``nic``; (0, 0) for None. An unknown name
    is a ValueError that lists the interfaces there are."""
    if nic is None:
        return 0, 0
    counts = nic_counters()
    if nic not in counts:
        raise ValueError(f"network interface {nic!r} not found; known: {', '.join(counts)}")
    return counts[nic]


def pick_nic(choice: str, host: str) -> str | None:
    """The interface that carries a task's traffic: ``choice`` itself when it names one,
    None for ``"none"``; for ``"auto"``, the interface holding ``host``'s address, ``lo`` for
    a loopback address (None when it cannot be told)."""
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return None
    for nic, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return nic
    return "lo" if address.startswith("127.") else None


class Meter:
    """Bytes on the wire over a window, the kit's one meter: ``start()`` opens it, ``stop()``
    closes it and returns what moved (a *reading*); ``pause()``/``resume()`` leave a stretch out
    (a chief's evaluation is not a training step). Three sources, each optional:

    - ``own`` (default): this process's TCP sockets (``own_tcp_bytes``): exactly this task's
      traffic, whatever else uses the network; ``sent_bytes``/``recv_bytes``, None where ``ss``
      is missing;
    - ``nics``: those interfaces' host counters (what dstat shows; on 127.0.0.1 ``lo`` carries
      the whole cluster, and anything else): ``nic_sent_bytes``/``nic_recv_bytes``;
    - ``counters``: a callable returning cumulative counters (``TaskBytes``: every local task's
      sockets, ``{"worker:0 sent": ...}``): ``counters``, each one's change.

    A reading also holds ``window_s``; ``per_step(reading, steps)`` divides it by the window's
    steps, with the same names and ``_per_step`` after them, so every program's traffic reads alike.
    """

    def __init__(self, nics=(), counters: "callable | None" = None, own: bool = True):
        self.nics, self.counters, self.own = sorted(set(nics)), counters, own
        self._base = self._out = self._left_out = None

    def _read(self) -> dict:
        out = {"t": time.monotonic()}
        if self.own:
            out["own"] = own_tcp_bytes()
        if self.nics:
            have = nic_counters(self.nics).values()
            out["nic"] = (sum(s for s, _ in have), sum(r for _, r in have))
        if self.counters is not None:
            out["counters"] = dict(self.counters())
        return out

    def start(self) -> None:
        self._base, self._out = self._read(), None
        self._left_out = {"t": 0.0, "own": (0, 0), "nic": (0, 0), "counters": {}}

    def pause(self) -> None:
        if self._base is not None:  # a window is open
            self._out = self._read()

    def resume(self) -> None:
        if self._out is None:
            return
        back, gone = self._read(), self._out
        self._out = None
        left = self._left_out
        left["t"] += back["t"] - gone["t"]
        for key in ("own", "nic"):
            if back.get(key) is not None and gone.get(key) is not None:
                left[key] = tuple(a + b - c for a, b, c in zip(left[key], back[key], gone[key]))
        for name, value in (back.get("counters") or {}).items():
            left["counters"][name] = left["counters"].get(name, 0) + value - (gone.get("counters") or {}).get(name, 0)

    def stop(self) -> dict:
        end, base, left = self._read(), self._base, self._left_out
        reading = {"window_s": end["t"] - base["t"] - left["t"]}
        if self.own:
            moved = end["own"] is not None and base["own"] is not None
            reading["sent_bytes"] = end["own"][0] - base["own"][0] - left["own"][0] if moved else None
            reading["recv_bytes"] = end["own"][1] - base["own"][1] - left["own"][1] if moved else None
        if self.nics:
            reading.update(
                nics=self.nics,
                nic_sent_bytes=end["nic"][0] - base["nic"][0] - left["nic"][0],
                nic_recv_bytes=end["nic"][1] - base["nic"][1] - left["nic"][1],
            )
        if self.counters is not None:
            reading["counters"] = {
                k: v - base["counters"].get(k, 0) - left["counters"].get(k, 0) for k, v in end["counters"].items()
            }
        self._base = self._out = None
        return reading


def per_step(reading: dict, steps: int) -> dict:
    """A ``Meter`` reading per step: each byte count divided by ``steps`` (at least 1), named
    ``<name>_per_step`` (``counters_per_step`` for the counters); None stays None."""
    n = max(1, steps)
    out = {f"{k}_per_step": (v / n if v is not None else None) for k, v in reading.items() if k.endswith("_bytes")}
    if "counters" in reading:
        out["counters_per_step"] = {k: v / n for k, v in reading["counters"].items()}
    return out


def traffic(readings: list[dict], steps: int) -> dict:
    """What a task records of its traffic, the same for every program: its ``Meter`` readings over
    the windows of its training added up, the ``steps`` they held, and each figure per step."""
    total: dict = {"window_s": sum(r["window_s"] for r in readings)}
    for key in dict.fromkeys(k for r in readings for k in r if k.endswith("_bytes")):
        values = [r.get(key) for r in readings]
        total[key] = None if any(v is None for v in values) else sum(values)
    if any("nics" in r for r in readings):
        total["nics"] = next(r["nics"] for r in readings if "nics" in r)
    if any("counters" in r for r in readings):
        names = dict.fromkeys(k for r in readings for k in r.get("counters", {}))
        total["counters"] = {k: sum(r.get("counters", {}).get(k, 0) for r in readings) for k in names}
    return {**total, "steps": steps, **per_step(total, steps)}


def step_bytes(traffic: dict, way: str = "both") -> float | None:
    """Bytes a task's own sockets moved per step, from its ``traffic`` (a ``Meter`` reading with
    ``per_step``'s figures): ``sent``, ``recv`` or ``both``; None where they were not counted (no ``ss``)."""
    sent, recv = traffic.get("sent_bytes_per_step"), traffic.get("recv_bytes_per_step")
    if way == "sent":
        return sent
    if way == "recv":
        return recv
    return None if sent is None or recv is None else sent + recv


def parse_ss_sockets(text: str) -> dict[tuple[int, str, str], tuple[int, int]]:
    """``ss -tinpH`` output -> {(pid, local address, peer address): (bytes sent, bytes received)},
    one entry per socket and process that holds it.

    Each socket is a line with ``users:(("name",pid=N,fd=F),...)`` followed by an indented
    line of ``tcp_info`` fields; a counter the kernel leaves out is 0 (``bytes_acked`` stands in
    for a missing ``bytes_sent``). A socket shared by several processes (inherited across fork)
    counts for each of them; one whose process ``ss`` cannot name counts for nobody."""
    out: dict[tuple[int, str, str], tuple[int, int]] = {}
    keys: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():  # a socket's first line: state, queues, addresses, users
            fields = line.split()
            local, peer = (fields[3], fields[4]) if len(fields) > 4 else ("?", "?")
            keys = [(int(p), local, peer) for p in dict.fromkeys(_PID.findall(line))]
            continue
        sent = _SENT.search(line) or _ACKED.search(line)
        recv = _RECV.search(line)
        for key in keys:
            out[key] = (int(sent.group(1)) if sent else 0, int(recv.group(1)) if recv else 0)
        keys = []
    return out


def parse_ss(text: str) -> dict[int, tuple[int, int]]:
    """``ss -tinpH`` output -> {pid: (bytes sent, bytes received)} summed over its sockets
    (``parse_ss_sockets``)."""
    out: dict[int, list[int]] = {}
    for (pid, _local, _peer), (sent, recv) in parse_ss_sockets(text).items():
        acc = out.setdefault(pid, [0, 0])
        acc[0] += sent
        acc[1] += recv
    return {pid: (s, r) for pid, (s, r) in out.items()}


def _ss_text(timeout: float) -> str | None:
    """What ``ss -tinpH`` prints; None if ``ss`` is not installed."""
    ss = shutil.which("ss")
    if ss is None:
        return None
    return subprocess.run([ss, "-tinpH"], capture_output=True, text=True, timeout=timeout, check=True).stdout


def tcp_bytes(pids: Iterable[int] | None = None, timeout: float = 10.0) -> dict[int, tuple[int, int]] | None:
    """{pid: (bytes sent, bytes received)} over the open TCP sockets of ``pids`` (default:
    every process ``ss`` may show, i.e. this user's). None if ``ss`` is not installed."""
    text = _ss_text(timeout)
    if text is None:
        return None
    counts = parse_ss(text)
    if pids is None:
        return counts
    return {int(p): counts.get(int(p), (0, 0)) for p in pids}


def own_tcp_bytes() -> tuple[int, int] | None:
    """(bytes sent, bytes received) over this process's open TCP sockets; None where ``ss``
    is missing. A task's gRPC channels stay open for its whole life, so the difference of
    two readings is the task's own traffic in between, whatever else uses the network."""
    pid = os.getpid()
    counts = tcp_bytes([pid])
    return None if counts is None else counts[pid]


class TaskBytes:
    """A counter callable for ``labkit.learning.train_loop.train(counters=...)``: per cluster task on
    this host, ``{"<task> sent": bytes, "<task> recv": bytes}`` from its sockets.

    The tasks are those whose hello file (``<type>-<index>.hello.json``, written by every
    task at start-up) lies in ``run_dir`` and names a process alive here, in this network
    namespace (``ss`` sees that namespace's sockets only): on 127.0.0.1 the whole cluster, on
    a real cluster or an emulated node (``labkit.infra.netem``) the tasks sharing this node.

    Each reading adds what every socket moved since the reading before, so the counts only grow:
    a socket that closes (a configuration's channels, when a shared cluster moves on to the next
    one) takes none of its bytes back, and one that opens brings all of its own. What a socket
    moves after the last reading that saw it open is not counted.

    A socket ``ss`` leaves out of one listing is not taken for closed: the kernel's socket dump
    is not a snapshot (a connection opened or closed elsewhere while it runs can make it skip
    one), so a reading that misses a socket of a live task lists again (``RETRIES``), and a
    socket that comes back adds only what it moved since it was last seen, never its whole count
    again. Without this a missed listing at the end of a window dropped a whole epoch of one
    worker's bytes (Lab 5 once measured a ring worker at 1.11 M per step for 4/3 M)."""

    RETRIES = 2  # more listings when one misses a socket the last one had

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self._pids: dict[str, int] | None = None
        self._last: dict[tuple[int, str, str], tuple[int, int]] = {}  # each socket's counts when last seen
        self._total: dict[int, list[int]] = {}  # pid -> [sent, received], accumulated

    def pids(self) -> dict[str, int]:
        if self._pids is None:
            found, here = {}, netns_id()
            for path in sorted(self.run_dir.glob("*.hello.json")):
                hello = json.loads(path.read_text())
                if psutil.pid_exists(int(hello["pid"])) and netns_id(int(hello["pid"])) == here:
                    found[hello["task"]] = int(hello["pid"])
            self._pids = found
        return self._pids

    def _listing(self, pids: set[int]) -> dict[tuple[int, str, str], tuple[int, int]]:
        """The sockets of ``pids`` now; listed again (up to ``RETRIES`` times) while a socket the
        last reading had, of a task still alive, is missing, each listing adding what it found."""
        now: dict[tuple[int, str, str], tuple[int, int]] = {}
        for _ in range(1 + self.RETRIES):
            text = _ss_text(10.0)
            if text is None:
                return now
            for key, counts in parse_ss_sockets(text).items():
                if key[0] in pids:
                    now[key] = max(now.get(key, (0, 0)), counts)
            if not [k for k in self._last if k not in now and psutil.pid_exists(k[0])]:
                break
        return now

    def __call__(self) -> dict[str, int]:
        pids = self.pids()
        now = self._listing(set(pids.values()))
        for key, (sent, recv) in now.items():
            last_sent, last_recv = self._last.get(key, (0, 0))
            acc = self._total.setdefault(key[0], [0, 0])
            acc[0] += sent - last_sent if sent >= last_sent else sent  # lower: a new socket on the same ports
            acc[1] += recv - last_recv if recv >= last_recv else recv
        self._last.update(now)  # a socket missing from this listing keeps its last counts (see the class)
        out = {}
        for task, pid in pids.items():
            out[f"{task} sent"], out[f"{task} recv"] = self._total.get(pid, (0, 0))
        return out
