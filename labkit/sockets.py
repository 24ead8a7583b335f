"""Bytes each process has sent and received over TCP, from the kernel's per-socket counters.

On 127.0.0.1 every task of a cluster shares ``lo``, whose counters are system-wide: they
give the cluster's total traffic (and anyone else's), never one task's. The kernel also
counts bytes per TCP socket (``tcp_info``: ``bytes_sent``, ``bytes_received``), and
``ss -tinp`` lists them with the owning process. Summed over a process's sockets they give
that task's traffic, which is how Lab 5 shows a parameter server's load growing with the
workers while each ring worker's stays flat, on one machine.

Counters live as long as their socket: read them around a window in which the
connections stay open (gRPC keeps its channels for the life of a task). Imports no
TensorFlow; needs ``ss`` (iproute2) and returns None where it is missing.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterable

_PID = re.compile(r"pid=(\d+)")
_SENT = re.compile(r"\bbytes_sent:(\d+)")
_ACKED = re.compile(r"\bbytes_acked:(\d+)")
_RECV = re.compile(r"\bbytes_received:(\d+)")


def parse_ss(text: str) -> dict[int, tuple[int, int]]:
    """``ss -tinpH`` output -> {pid: (bytes sent, bytes received)} summed over its sockets.

    Each socket is a line with ``users:(("name",pid=N,fd=F),...)`` followed by an indented
    line of ``tcp_info`` fields; a counter the kernel leaves out is 0. A socket shared by
    several processes (inherited across fork) counts for each of them."""
    out: dict[int, list[int]] = {}
    pids: list[int] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():  # a socket's first line: state, addresses, users
            pids = [int(p) for p in _PID.findall(line)]
            continue
        sent = _SENT.search(line) or _ACKED.search(line)
        recv = _RECV.search(line)
        for pid in dict.fromkeys(pids):
            acc = out.setdefault(pid, [0, 0])
            acc[0] += int(sent.group(1)) if sent else 0
            acc[1] += int(recv.group(1)) if recv else 0
        pids = []
    return {pid: (s, r) for pid, (s, r) in out.items()}


def tcp_bytes(pids: Iterable[int] | None = None, timeout: float = 10.0) -> dict[int, tuple[int, int]] | None:
    """{pid: (bytes sent, bytes received)} over the open TCP sockets of ``pids`` (default:
    every process ``ss`` may show, i.e. this user's). None if ``ss`` is not installed."""
    ss = shutil.which("ss")
    if ss is None:
        return None
    text = subprocess.run([ss, "-tinpH"], capture_output=True, text=True, timeout=timeout, check=True).stdout
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
    """A counter callable for ``labkit.train_loop.train(counters=...)``: per cluster task on
    this host, ``{"<task> sent": bytes, "<task> recv": bytes}`` from its sockets.

    The tasks are those whose hello file (``<type>-<index>.hello.json``, written by every
    task at start-up) lies in ``run_dir`` and names a process alive here: on 127.0.0.1 the
    whole cluster, on a real cluster the tasks sharing this node."""

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self._pids: dict[str, int] | None = None

    def pids(self) -> dict[str, int]:
        if self._pids is None:
            import psutil

            found = {}
            for path in sorted(self.run_dir.glob("*.hello.json")):
                hello = json.loads(path.read_text())
                if psutil.pid_exists(int(hello["pid"])):
                    found[hello["task"]] = int(hello["pid"])
            self._pids = found
        return self._pids

    def __call__(self) -> dict[str, int]:
        pids = self.pids()
        counts = tcp_bytes(pids.values()) or {}
        out = {}
        for task, pid in pids.items():
            sent, recv = counts.get(pid, (0, 0))
            out[f"{task} sent"], out[f"{task} recv"] = sent, recv
        return out
