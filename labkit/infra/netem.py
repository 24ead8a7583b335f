"""Emulated network links on one machine: each node a network namespace, each node's NIC shaped.

On 127.0.0.1 every task shares ``lo``, so nothing a lab runs is ever network-bound. An
``EmulatedNetwork`` gives each node a namespace with one NIC, ``lan0``, joined by a veth pair to a
bridge, and shapes that link in both directions (``tc``: ``tbf`` at RATE, ``netem`` DELAY split
over both ends), as a host's full-duplex NIC. Tasks on one node share its unshaped ``lo``.

As root the driver reaches every node; as a user (``unshare -rn``) all works but the driver's own
link; where neither works ``require()`` raises ``EmulationUnavailable`` saying why. Each
namespace lives as long as a holder process that stops what runs in it when its owner stops or
dies, even by SIGKILL; the kernel then frees everything.

Imports only the standard library, ``labkit.core`` and ``labkit.measure.sockets``.
More in docs/internals.md, section labkit.infra (an example, shaping, privileges, ownership).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from labkit.core import sweep
from labkit.core.proc import OwnedProcess, StopAtExit, kill_tree
from labkit.measure.sockets import netns_id, nic_counters

NIC = "lan0"  # each node's one interface
NAMESPACES = ("uts", "mount")  # what a node may have of its own besides its network (unshare's names)
SUBNETS = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544: set aside for benchmarking networks
DRIVER_HOST = 254  # the driver's address on the switch: .254 (root mode)
GRACE_S = 10  # SIGTERM to SIGKILL, for tasks left in a namespace
SETUP_TIMEOUT_S = 30
WHAT_STILL_WORKS = (
    "What still works: every lab on 127.0.0.1 (leave link empty: the tasks then share the "
    "loopback, which is never the bottleneck), and on real nodes over ssh or Slurm (hosts_file)"
)

RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
DELAY_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_RATE = re.compile(_NUMBER + r"\s*([a-z]*)(?:/s)?$")
_DELAY = re.compile(_NUMBER + r"\s*([a-z]*)$")
_LINK_HELP = (
    "write RATE or RATE,DELAY, e.g. link='1gbit' or link='1gbit,0.2ms': RATE in bit, kbit, mbit or "
    "gbit (per second, each direction), DELAY in us, ms or s (one way, node to node)"
)

# The holder: keeps its namespace alive until its owner closes the pipe on its stdin (or dies),
# then stops what still runs in the namespace (TERM, KILL after the grace) and exits. An owner
# that stops it writes a line first; end-of-file alone means the owner died (SIGKILL, say), and
# then the holder that has LABKIT_ORPHANED set removes that folder (the owner's logs) last.
HOLDER = r"""
read why
others() {
    left=""
    for d in /proc/[0-9]*; do
        [ "${d#/proc/}" != "$$" ] && [ "$d/ns/net" -ef /proc/$$/ns/net ] && left="$left ${d#/proc/}"
    done
    return 0
}
others
if [ -n "$left" ]; then
    echo "stopping what still runs here:$left"
    kill -TERM $left 2>/dev/null
    i=0
    while [ -n "$left" ] && [ "$i" -lt "$((GRACE * 10))" ]; do sleep 0.1; i=$((i + 1)); others; done
    [ -n "$left" ] && echo "killing$left" && kill -KILL $left 2>/dev/null
fi
[ -z "$why" ] && [ -n "$LABKIT_ORPHANED" ] && rm -rf -- "$LABKIT_ORPHANED"
exit 0
"""


class EmulationUnavailable(RuntimeError):
    """Links cannot be emulated here; the message says why and what still works."""


class NetworkSetupError(RuntimeError):
    """Setting up an emulated network failed (after what was made was taken down)."""


# ------------------------------------------------------------------------------ link specs


@dataclass(frozen=True)
class LinkSpec:
    """One emulated link: ``rate_bits`` per second in each direction; ``delay_s`` one way,
    node to node (each of the two links on the way adds half)."""

    rate_bits: float
    delay_s: float = 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.rate_bits / 8

    def __str__(self) -> str:
        return _fmt_rate(self.rate_bits) + (f",{_fmt_delay(self.delay_s)}" if self.delay_s else "")


def parse_link(text) -> LinkSpec | None:
    """``"1gbit"`` or ``"1gbit,0.2ms"`` (or a ``LinkSpec``) -> ``LinkSpec``; None or ``""`` -> None
    (no emulation). Anything else is a ValueError that shows the form."""
    if text is None or isinstance(text, LinkSpec):
        return text
    if not isinstance(text, str):
        raise ValueError(f"link={text!r}: {_LINK_HELP}")
    if not text.strip():
        return None
    parts = [p.strip().lower() for p in text.split(",")]
    if len(parts) > 2:
        raise ValueError(f"link={text!r} has {len(parts)} parts; {_LINK_HELP}")
    rate = _RATE.match(parts[0].replace(" ", ""))
    if "bps" in parts[0] or "byte" in parts[0]:
        raise ValueError(
            f"link={text!r}: give the rate in bits (tc reads 'bps' as bytes per second, so "
            f"'1gbps' would be 8 Gbit/s); {_LINK_HELP}"
        )
    if rate is None or rate.group(2) not in RATE_UNITS:
        raise ValueError(f"link={text!r}: cannot read the rate {parts[0]!r}; {_LINK_HELP}")
    bits = float(round(float(rate.group(1)) * RATE_UNITS[rate.group(2)]))
    if not 1e3 <= bits <= 1e12:
        raise ValueError(f"link={text!r}: the rate must be between 1kbit and 1000gbit; {_LINK_HELP}")
    delay = 0.0
    if len(parts) == 2:
        d = _DELAY.match(parts[1].replace(" ", ""))
        if d is None or d.group(2) not in DELAY_UNITS:
            raise ValueError(f"link={text!r}: cannot read the delay {parts[1]!r}; {_LINK_HELP}")
        delay = round(float(d.group(1)) * DELAY_UNITS[d.group(2)], 9)
        if delay > 10:
            raise ValueError(f"link={text!r}: a delay of {delay:g} s is more than any LAN's; {_LINK_HELP}")
    return LinkSpec(bits, delay)


def _fmt_rate(bits: float) -> str:
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        if bits >= RATE_UNITS[unit]:
            return f"{bits / RATE_UNITS[unit]:g}{unit}"
    return f"{bits:g}bit"


def _fmt_delay(seconds: float) -> str:
    return f"{seconds * 1e3:g}ms" if seconds >= 1e-3 else f"{seconds * 1e6:g}us"


def burst_bytes(link: LinkSpec) -> int:
    """The token bucket's size: 1 ms at the rate, at least 64 KiB (see ``shaping``)."""
    return max(64 * 1024, int(link.bytes_per_s * 1e-3))


def shaping(link: LinkSpec) -> list[str]:
    """``tc`` batch lines (``{dev}`` to fill in) that shape one end of a veth pair: a token
    bucket at the rate; under ``netem`` with half the delay when there is one.

    The bucket holds 1 ms at the rate, at least 64 KiB (one TCP segmentation-offload packet,
    so no packet is larger than the bucket); the queue behind it holds 5 ms more, at least
    256 KiB: a switch port's buffer, not minutes of queueing."""
    burst = burst_bytes(link)
    limit = burst + max(256 * 1024, int(link.bytes_per_s * 5e-3))
    tbf = f"tbf rate {int(link.rate_bits)}bit burst {burst} limit {limit}"
    if not link.delay_s:
        return [f"qdisc add dev {{dev}} root handle 1: {tbf}"]
    half_us = max(1, round(link.delay_s / 2 * 1e6))
    return [
        f"qdisc add dev {{dev}} root handle 1: netem delay {half_us}us limit 100000",
        f"qdisc add dev {{dev}} parent 1:1 handle 10: {tbf}",
    ]


# ------------------------------------------------------------------------------ availability


@functools.lru_cache(maxsize=None)
def _probe(delay: bool) -> tuple[str | None, str]:
    """(mode, why not): mode "root" or "userns" where namespaces, veth pairs and the qdiscs
    work here, else None and the reason. Tried once per process, in a throw-away namespace."""
    if not sys.platform.startswith("linux"):
        return None, f"network namespaces are a Linux feature; this is {sys.platform}"
    missing = [t for t in ("ip", "tc", "unshare", "nsenter") if shutil.which(t) is None]
    if missing:
        return None, (
            f"{', '.join(missing)} not found: install iproute2 (ip, tc) and util-linux (unshare, "
            f"nsenter), e.g. `apt-get install iproute2 util-linux`"
        )
    qdisc = "netem delay 1ms" if delay else "tbf rate 1mbit burst 65536 limit 131072"
    script = (
        "ip link add name lkp0 type veth peer name lkp1 && ip link add name lkbr type bridge && "
        f"tc qdisc add dev lkp0 root {qdisc}"
    )
    tries = [("root", ["unshare", "--net", "--"])] if os.geteuid() == 0 else []
    tries.append(("userns", ["unshare", "--user", "--map-root-user", "--net", "--"]))
    errors = []
    for mode, prefix in tries:
        try:
            done = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            errors.append(f"{mode}: the probe hung")
            continue
        if done.returncode == 0:
            return mode, ""
        errors.append(
            f"{' '.join(prefix[:-1])}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
        )
    why = "; ".join(errors)
    if delay and "qdisc kind is unknown" in why:
        return None, (
            f"this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM; try `modprobe sch_netem` as "
            f"root), so a delay cannot be emulated: give the rate alone (link='1gbit') ({why})"
        )
    if "Operation not permitted" in why or "Permission denied" in why:
        why = (
            f"not root, and this host does not let an unprivileged user make a network namespace "
            f"(user namespaces off: sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces, or "
            f"an AppArmor/SELinux rule; inside a container, it may lack CAP_NET_ADMIN) ({why})"
        )
    return None, why


def availability(link=None) -> tuple[str | None, str]:
    """``("root" | "userns", "")`` where links like ``link`` can be emulated here, else
    ``(None, reason)``. A delay needs the kernel's ``netem`` qdisc besides."""
    link = parse_link(link)
    mode, why = _probe(False)
    if mode and link is not None and link.delay_s:
        ok, why = _probe(True)
        mode = mode if ok else None
    return mode, why


def usable(links, log=print) -> bool:
    """Whether a lab's section on emulated ``links`` (a link or a list) can run here; if not,
    ``log`` says why (none given, or the reason and what still works)."""
    links = [links] if isinstance(links, str) or links is None else list(links)
    links = [parse_link(link) for link in links if link]
    if not links:
        log("skipped: no emulated link given (set it in the parameters cell, e.g. '1gbit')")
        return False
    mode, why = availability(max(links, key=lambda link: link.delay_s))
    if mode is None:
        log(f"skipped: cannot emulate network links here: {why}. {WHAT_STILL_WORKS}")
        return False
    return True


def require(link=None) -> str:
    """The mode links like ``link`` are emulated in here ("root" or "userns"), or an
    ``EmulationUnavailable`` that says why and what still works."""
    mode, why = availability(link)
    if mode is None:
        raise EmulationUnavailable(f"cannot emulate network links here: {why}. {WHAT_STILL_WORKS}")
    return mode


# ------------------------------------------------------------------------------ the network


@dataclass
class Node:
    """One emulated node: its name, address on the switch, and the process that holds its
    namespace (``pid``; ``/proc/<pid>/net`` is the node's view of the network)."""

    name: str
    address: str
    holder: OwnedProcess
    netns: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of its namespace: what leftovers() looks for

    @property
    def pid(self) -> int:
        return self.holder.pid


_LIVE = StopAtExit()  # every running EmulatedNetwork, stopped at interpreter exit


class EmulatedNetwork:
    """Nodes in network namespaces on one shaped switch (see the module docstring).

    ``nodes``: node names (or a count: node0, node1, ...); ``link``: a ``LinkSpec`` or its
    text; ``log_dir``: where the holders log (default: a temporary directory, removed at the
    end); ``grace``: seconds tasks left in a namespace get between SIGTERM and SIGKILL.
    ``mode``: "root" or "userns" to insist on one (default: root's where it works).
    ``start()`` raises ``EmulationUnavailable`` where links cannot be emulated, and
    ``NetworkSetupError`` (after taking down what it made) if a step fails.

    For whole emulated machines (``labkit.infra.cloudlab_local``): ``subnet`` fixes the nodes' /24
    (node *i* gets its host *i* + 1, e.g. CloudLab's 10.10.1.1, ...: the addresses exist only
    inside the namespaces, so two networks on one subnet do not meet); ``driver=False`` leaves
    out this process's own link to the switch; ``namespaces`` gives each node more namespaces of
    its own besides the network's ("uts": a host name, "mount": its own mounts), which
    ``command`` and ``run`` enter too. ``orphaned``: a folder to remove if the owner dies without
    stopping the network (SIGKILL): by default the log folder this network made itself."""

    def __init__(
        self,
        nodes,
        link="1gbit",
        log_dir=None,
        grace: float = GRACE_S,
        mode: str | None = None,
        subnet=None,
        driver: bool = True,
        namespaces=(),
        orphaned=None,
    ):
        names = [f"node{i}" for i in range(nodes)] if isinstance(nodes, int) else [str(n) for n in nodes]
        if not names or len(set(names)) != len(names) or len(names) > 250:
            raise ValueError(f"nodes={nodes!r}: give 1-250 distinct node names, or a count")
        self.link = parse_link(link)
        if self.link is None:
            raise ValueError(f"link={link!r}: an emulated network needs a link; {_LINK_HELP}")
        if mode not in (None, "root", "userns"):
            raise ValueError(f"mode={mode!r}: choose 'root', 'userns' or None (the best that works here)")
        unknown = set(namespaces) - set(NAMESPACES)
        if unknown:
            raise ValueError(f"namespaces={namespaces!r}: choose among {', '.join(NAMESPACES)}")
        self.names, self.grace, self.wanted_mode = names, float(grace), mode
        self.driver, self.namespaces = bool(driver), tuple(n for n in NAMESPACES if n in namespaces)
        self.mode: str | None = None
        self.nodes: dict[str, Node] = {}
        self.switch: Node | None = None
        self.subnet: ipaddress.IPv4Network | None = None
        if subnet is not None:
            self.subnet = ipaddress.ip_network(subnet)
            if self.subnet.version != 4 or self.subnet.num_addresses - 2 < len(names):
                raise ValueError(f"subnet={subnet!r}: an IPv4 network with room for {len(names)} nodes")
        self.driver_link: str | None = None
        self._own_logs = log_dir is None
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.orphaned = Path(orphaned) if orphaned is not None else None
        self._state = "new"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "EmulatedNetwork":
        if self._state != "new":
            raise RuntimeError(f"this network is {self._state}; an EmulatedNetwork runs once, make a new one")
        self.mode = require(self.link)
        if self.wanted_mode == "root" and self.mode != "root":
            raise EmulationUnavailable(
                "mode='root' needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); run as root, "
                "or leave mode=None to use an unprivileged user namespace"
            )
        self.mode = self.wanted_mode or self.mode
        self._state = "starting"
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="labkit-netem-"))
            self.orphaned = self.orphaned or self.log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _LIVE.add(self)
        try:
            if self.mode == "root":
                sweep_stale_links()
            planned = self.plan()
            self.switch = self._hold("switch", None)
            for name in self.names:
                self.nodes[name] = self._hold(name, planned[name])
            self._wire()
            self._state = "running"
        except BaseException as e:
            self.stop()
            if isinstance(e, subprocess.SubprocessError | OSError):
                raise NetworkSetupError(f"could not set up the emulated network: {e}") from e
            raise
        return self

    def stop(self) -> list[str]:
        """Take everything down: each holder stops what still runs in its namespace and exits,
        then the kernel frees the namespaces with their links. Safe to call again. Returns
        ``leftovers()`` (empty unless something could not be removed), after waiting for them."""
        if self._state in ("new", "stopped"):
            return []
        holders = [n.holder for n in self.nodes.values()] + ([self.switch.holder] if self.switch else [])
        for h in holders:
            _release(h)
        deadline = time.monotonic() + self.grace + 5
        for h in holders:
            try:
                h.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(
                    f"labkit.infra.netem: holder {h.pid} did not exit; killing it and its namespace's processes",
                    file=sys.stderr,
                )
                kill_tree(h.pid, grace=1)
        left = self._wait_gone(deadline + 5)
        for pid in [int(x.split()[1]) for x in left if x.startswith("process ")]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.driver_link and _link_exists(self.driver_link):
            subprocess.run(["ip", "link", "del", self.driver_link], capture_output=True, timeout=30)
        left = self._wait_gone(time.monotonic() + 5)
        _LIVE.discard(self)
        if self._own_logs and self.log_dir is not None and not left:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        self._state = "stopped"
        if left:
            print(f"labkit.infra.netem: left behind after stop: {left}", file=sys.stderr)
        return left

    def __enter__(self) -> "EmulatedNetwork":
        return self.start() if self._state == "new" else self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def __repr__(self) -> str:
        return f"EmulatedNetwork({self.names}, {self.link}, {self._state}, {self.mode})"

    # ------------------------------------------------------------------ views
    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def reachable(self) -> bool:
        """Whether this process reaches the nodes' addresses itself (root mode's driver link)."""
        return self.driver_link is not None

    def plan(self) -> dict[str, str]:
        """{node: address}, chosen now (a /24 no route of this machine uses) and kept by
        ``start()``: a launcher builds the tasks' ``TF_CONFIG`` before it starts the network."""
        if self.subnet is None:
            self.subnet = _free_subnet()
        return {name: str(self.subnet.network_address + i + 1) for i, name in enumerate(self.names)}

    def address(self, node: str) -> str:
        if node not in self.names:
            raise ValueError(f"no node {node!r}; nodes are {self.names}")
        return self.plan()[node]

    def addresses(self) -> dict[str, str]:
        return self.plan()

    def node_of(self, address: str) -> str | None:
        """The node that holds ``address`` (None if none does)."""
        return next((n for n, a in self.plan().items() if a == address), None)

    def command(self, node: str, argv) -> list[str]:
        """``argv`` run inside ``node``'s namespace (``nsenter``, which then becomes ``argv``:
        the same pid, so signals and ``PR_SET_PDEATHSIG`` reach the program itself)."""
        return self._enter(self._node(node).pid, self.namespaces) + [str(a) for a in argv]

    def run(self, node: str, argv, **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run`` of ``argv`` inside ``node`` (output captured as text, 60 s timeout)."""
        kwargs = {"capture_output": True, "text": True, "timeout": 60, **kwargs}
        return subprocess.run(self.command(node, argv), **kwargs)

    def counters(self, node: str) -> dict[str, tuple[int, int]]:
        """{interface: (bytes sent, bytes received)} inside ``node``, since the node was made."""
        return nic_counters(pid=self._node(node).pid)

    def listening(self, node: str, port: int) -> bool:
        """Whether a TCP socket listens on ``port`` inside ``node`` (the launcher's readiness
        check where this process cannot connect itself)."""
        return port in listening_ports(self._node(node).pid)

    def describe(self) -> dict:
        """JSON-able: the link, the mode and each node's address (saved with a run)."""
        return {
            "link": str(self.link),
            "rate_bits": self.link.rate_bits,
            "delay_s": self.link.delay_s,
            "mode": self.mode,
            "nic": NIC,
            "subnet": str(self.subnet),
            "nodes": self.addresses(),
        }

    def table(self) -> str:
        rows = [("node", "address", "link")] + [(n, a, str(self.link)) for n, a in self.addresses().items()]
        w = [max(len(r[c]) for r in rows) for c in range(3)]
        return "\n".join("  ".join(f"{r[c]:<{w[c]}}" for c in range(3)) for r in rows)

    def leftovers(self) -> list[str]:
        """What of this network still exists: processes in its namespaces, the driver's link."""
        wanted = {n.netns: name for name, n in self._all_nodes().items() if n.netns != (0, 0)}
        left = [f"process {pid} in {wanted[ns]}" for pid, ns in _netns_of_all().items() if ns in wanted]
        if self.driver_link and _link_exists(self.driver_link):
            left.append(f"link {self.driver_link}")
        return left

    # ------------------------------------------------------------------ building
    def _node(self, name: str) -> Node:
        if name not in self.names:
            raise ValueError(f"no node {name!r}; nodes are {self.names}")
        if self._state != "running":
            raise RuntimeError(
                f"the emulated network is {self._state}: start() it first (or use it as a context manager)"
            )
        return self.nodes[name]

    def _all_nodes(self) -> dict[str, Node]:
        return {**self.nodes, **({"switch": self.switch} if self.switch else {})}

    def _enter(self, pid: int, extra=()) -> list[str]:
        user = ["--user", "--preserve-credentials"] if self.mode == "userns" else []
        return ["nsenter", f"--target={pid}", *user, "--net", *(f"--{n}" for n in extra), "--"]

    def set_link(self, node: str, up: bool) -> None:
        """Take ``node``'s link down (its switch port goes down: the cable pulled) or up again."""
        port = f"p{self.names.index(node)}"
        self._node(node)
        self._batch(self.switch.pid, "ip", [f"link set {port} {'up' if up else 'down'}"])

    def _hold(self, name: str, address: str | None) -> Node:
        """Start the holder of a new namespace: in user-namespace mode the switch's holder makes
        the user namespace, and every node's namespace belongs to it. A node's holder also makes
        its other namespaces (``namespaces``; a mount namespace's mounts stay private to it)."""
        extra = [f"--{n}" for n in self.namespaces] if address else []
        if self.mode == "root":
            prefix = ["unshare", "--net", *extra, "--"]
        elif self.switch is None:
            prefix = ["unshare", "--user", "--map-root-user", "--net", "--"]
        else:
            prefix = [
                "nsenter",
                f"--target={self.switch.pid}",
                "--user",
                "--preserve-credentials",
                "--",
                "unshare",
                "--net",
                *extra,
                "--",
            ]
        argv = [*prefix, "sh", "-c", HOLDER.replace("$((GRACE * 10))", str(int(self.grace * 10)))]
        env = {**os.environ, "LABKIT_ORPHANED": str(self.orphaned)} if self.orphaned and not address else None
        holder = OwnedProcess(
            argv, self.log_dir / f"{name}.holder.log", env=env, stdin=subprocess.PIPE, death_signal=None
        ).start()
        node = Node(name, address or "", holder)
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        mine = netns_id(os.getpid())
        while True:  # unshare has made the namespace once the holder's differs from ours
            ns = netns_id(holder.pid)
            if ns is not None and ns != mine:
                node.netns = ns
                return node
            if holder.poll() is not None or time.monotonic() > deadline:
                raise NetworkSetupError(f"could not make the namespace of {name}: {holder.log_tail(5) or 'timeout'}")
            time.sleep(0.005)

    def _batch(self, pid: int | None, tool: str, lines: list[str]) -> None:
        """Run ``ip -batch -`` or ``tc -batch -`` inside the namespace of ``pid`` (None: here)."""
        if not lines:
            return
        argv = ([] if pid is None else self._enter(pid)) + [tool, "-batch", "-"]
        done = subprocess.run(
            argv, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=SETUP_TIMEOUT_S
        )
        if done.returncode != 0:
            raise NetworkSetupError(
                f"{tool} failed ({shlex.join(argv)}): {done.stderr.strip()}\ncommands:\n" + "\n".join(lines)
            )

    def _wire(self) -> None:
        sw = self.switch.pid
        ports = [f"p{i}" for i in range(len(self.names))]
        ip_sw = ["link add name br0 type bridge", "link set br0 up"]
        for port, node in zip(ports, self.nodes.values()):
            ip_sw += [
                f"link add name {port} type veth peer name {NIC} netns {node.pid}",
                f"link set {port} master br0",
                f"link set {port} up",
            ]
        self._batch(sw, "ip", ip_sw)
        prefix = self.subnet.prefixlen
        for node in self.nodes.values():
            _disable_ipv6(self._enter(node.pid))
            self._batch(
                node.pid, "ip", [f"addr add {node.address}/{prefix} dev {NIC}", f"link set {NIC} up", "link set lo up"]
            )
            self._batch(node.pid, "tc", [line.format(dev=NIC) for line in shaping(self.link)])
        self._batch(sw, "tc", [line.format(dev=port) for port in ports for line in shaping(self.link)])
        if self.mode == "root" and self.driver:
            self.driver_link = f"lk{os.getpid()}x{random.randrange(16**3):03x}"
            self._batch(None, "ip", [f"link add name {self.driver_link} type veth peer name drv netns {sw}"])
            self._batch(sw, "ip", ["link set drv master br0", "link set drv up"])
            driver = self.subnet.network_address + DRIVER_HOST
            self._batch(
                None, "ip", [f"addr add {driver}/{prefix} dev {self.driver_link}", f"link set {self.driver_link} up"]
            )

    def _wait_gone(self, deadline: float) -> list[str]:
        while True:
            left = self.leftovers()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)


def _release(holder: OwnedProcess) -> None:
    """Tell a holder to stop (a line, then end-of-file): it stops what runs in its namespace and exits."""
    try:
        holder.popen.stdin.write(b"stop\n")
        holder.popen.stdin.close()
    except OSError:  # it is gone already, and its end of the pipe with it
        pass


# ------------------------------------------------------------------------------ /proc readers


def _netns_of_all() -> dict[int, tuple[int, int]]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ns = netns_id(int(entry))
            if ns is not None:
                out[int(entry)] = ns
    return out


def listening_ports(pid: int) -> set[int]:
    """TCP ports with a listening socket in the network namespace of process ``pid``."""
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 3 and f[3] == "0A":  # TCP_LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def _link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def _disable_ipv6(enter: list[str]) -> None:
    """No IPv6 on the nodes: its router solicitations would add bytes to the counters the labs read."""
    subprocess.run(
        [
            *enter,
            "sh",
            "-c",
            "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6",
        ],
        capture_output=True,
        timeout=SETUP_TIMEOUT_S,
    )


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 198.18.0.0/15 that no route or address of this namespace overlaps."""
    used = []
    done = subprocess.run(
        ["ip", "-4", "-o", "route", "show", "table", "all"], capture_output=True, text=True, timeout=30
    )
    for line in done.stdout.splitlines():
        words = line.split()
        first = (
            words[1]
            if words and words[0] in ("local", "broadcast", "unicast") and len(words) > 1
            else (words[0] if words else "")
        )
        try:
            used.append(ipaddress.ip_network(first, strict=False))
        except ValueError:
            continue
    nets = list(SUBNETS.subnets(new_prefix=24))
    random.shuffle(nets)
    for net in nets:
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise NetworkSetupError("every /24 of 198.18.0.0/15 is in use on this machine; stop other emulated networks")


_DRIVER_LINK = re.compile(r"lk(\d+)x[0-9a-f]{3}")  # lk<owner pid>x<hex>


def _driver_links() -> list[str]:
    try:
        return [n for n in os.listdir("/sys/class/net") if _DRIVER_LINK.fullmatch(n)]
    except OSError:
        return []


def _delete_link(name: str) -> None:
    done = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"ip link del {name}: {done.stderr.strip()}")


STALE_LINKS = sweep.register(
    sweep.Sweeper(
        "netem-driver-links",
        _driver_links,
        lambda name: sweep.ended(int(_DRIVER_LINK.fullmatch(name).group(1))),
        _delete_link,
    )
)


def sweep_stale_links() -> list[str]:
    """Delete driver links (``lk<pid>x<hex>``) whose owner process is gone: after a SIGKILL the
    kernel removes them with their switch namespace, so this only catches what an older kit left."""
    return STALE_LINKS.sweep()


# ------------------------------------------------------------------------------ measuring a link

_PROBE = r"""
import json, socket, sys, time
role, host, port, arg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def recv_exact(c, n, buf):
    view, got = memoryview(buf)[:n], 0
    while got < n:
        r = c.recv_into(view[got:])
        if not r:
            return False
        got += r
    return True
if role == "serve":
    s = socket.create_server((host, port))
    print("listening", flush=True)
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head, buf = bytearray(8), bytearray(int(arg))
    while recv_exact(c, 8, head):
        n = int.from_bytes(head, "big")
        while n > 0:
            k = min(n, len(buf))
            if not recv_exact(c, k, buf):
                sys.exit(1)
            n -= k
        c.sendall(b"\x01")
else:
    plan = json.loads(arg)
    c = socket.create_connection((host, port), timeout=60)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload, ack, rows = memoryview(bytes(max(plan["sizes"]))), bytearray(1), []
    for rep in range(plan["repeats"] + 1):
        for n in plan["sizes"]:
            time.sleep(plan["pause"])  # the token bucket refills, as it does between training steps
            t0 = time.perf_counter()
            c.sendall(n.to_bytes(8, "big"))
            c.sendall(payload[:n])
            if not recv_exact(c, 1, ack):
                sys.exit(1)
            if rep:
                rows.append([n, time.perf_counter() - t0])
    print(json.dumps(rows), flush=True)
"""


def transfers(
    net: EmulatedNetwork, src: str, dst: str, sizes, repeats: int = 3, pause: float = 0.01, port: int = 5201
) -> list[tuple[int, float]]:
    """Time TCP transfers from ``src`` to ``dst`` over the emulated link: send ``size`` bytes,
    wait for a 1-byte ack (one message of the alpha-beta model). Returns ``(bytes, seconds)``
    rows, ``repeats`` per size after one warm-up round."""
    sizes = [int(s) for s in sizes]
    server = subprocess.Popen(
        net.command(dst, [sys.executable, "-c", _PROBE, "serve", net.address(dst), port, max(sizes)]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if server.stdout.readline().strip() != "listening":
            raise NetworkSetupError(f"the probe server on {dst} did not start: {server.stderr.read().strip()}")
        plan = json.dumps({"sizes": sizes, "repeats": int(repeats), "pause": float(pause)})
        done = net.run(src, [sys.executable, "-c", _PROBE, "send", net.address(dst), port, plan], timeout=600)
        if done.returncode != 0:
            raise NetworkSetupError(f"the probe from {src} to {dst} failed: {done.stderr.strip()}")
        return [(int(n), float(t)) for n, t in json.loads(done.stdout.strip().splitlines()[-1])]
    finally:
        server.kill()
        server.wait(10)


def throughput(net: EmulatedNetwork, src: str, dst: str, nbytes: int = 50_000_000, port: int = 5201) -> float:
    """Bytes per second one TCP stream carries from ``src`` to ``dst``: ``nbytes`` sent at once,
    timed to the receiver's ack (after one warm-up transfer of as many bytes)."""
    ((_, seconds),) = transfers(net, src, dst, [nbytes], repeats=1, pause=0, port=port)
    return nbytes / seconds


LARGE_BYTES = 2**20  # messages from this size on fix a link's B
LINK_SIZES = (1024, 4096) + tuple(2**p for p in range(20, 26))  # 1-4 KiB fix alpha; 1-32 MiB fix B


def measure_link(link, sizes=LINK_SIZES, repeats: int = 3):
    """alpha and B of an emulated ``link`` for ``labkit.learning.costmodel``: timed transfers between two
    nodes of a network of its own, the median time of each size.

    Small messages fix alpha; large ones, of the size a training step moves, fix B, with that
    alpha. They are fitted apart: the token bucket lets a message within its burst (``burst_bytes``)
    through at once, so no straight line through alpha and B runs through both (one fitted through
    all of them at 100 Mbit/s gave B 50-100% above the rate). Sizes in between are left out."""
    import pandas as pd

    from labkit.learning import costmodel

    spec = parse_link(link)
    burst = burst_bytes(spec)
    if not any(s <= burst for s in sizes) or not any(s >= LARGE_BYTES for s in sizes):
        raise ValueError(f"sizes {sizes}: give some within the burst ({burst} B) and some of 1 MiB or more")
    with EmulatedNetwork(2, link) as net:
        rows = transfers(net, "node1", "node0", sizes, repeats=repeats)
    med = pd.DataFrame(rows, columns=["bytes", "seconds"]).groupby("bytes")["seconds"].median()
    alpha = float(med[med.index <= burst].median())
    big = med[med.index >= LARGE_BYTES]
    return costmodel.fit_link(big.index, big.values, source=f"emulated {spec} link (micro-benchmark)", alpha_s=alpha)
