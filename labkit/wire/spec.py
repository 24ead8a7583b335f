"""Cluster specs: which TensorFlow task runs where, and the ``TF_CONFIG`` each one reads.

A ``ClusterSpec`` is a small immutable map of jobs (``ps``, ``worker``, ``chief``) to
``host:port`` addresses. It starts no processes (that is ``labkit.distributed.launch``); it
builds, validates and prints. Every mistake is a ``ValueError`` that names the bad value and the
fix, raised when the spec is built rather than when a task hangs.

    spec = local(ps=1, workers=3)               # 127.0.0.1, free ports
    spec = mode("cluster2", hosts="hosts.txt")  # the reports' deploy modes
    spec.tf_config("worker", 1)                 # the JSON for TF_CONFIG

Placement on hosts follows the CS744 kits: task *i* of each job goes to host ``i mod
len(hosts)``, and each host hands out ports from ``base_port`` upwards, so 1 ps + 3 workers on
node0..node2 gives ps node0:2222, workers node0:2223, node1:2222, node2:2222.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import socket
from dataclasses import dataclass
from pathlib import Path

JOBS = ("chief", "ps", "worker")  # the task types TF_CONFIG may name, in TensorFlow's order
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})  # what a spec may name for this machine
DEFAULT_BASE_PORT = 2222

# The reports' deploy modes: name -> (ps, workers, hosts they assume when none are given).
MODES = {
    "single": (1, 1, 1),  # report 002: 1 ps + 1 worker on one host
    "cluster": (1, 2, 2),  # report 002: 1 ps + 2 workers
    "cluster2": (1, 3, 3),  # report 002: 1 ps + 3 workers
    "cs744": (1, 3, 3),  # CS744 kit: ps node0:2222, workers node0:2223, node1:2222, node2:2222
}


@dataclass(frozen=True)
class Task:
    """One task of a cluster: ``type`` (job name), ``index`` and ``host:port`` address."""

    type: str
    index: int
    address: str

    @property
    def name(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def host(self) -> str:
        return split_address(self.address)[0]

    @property
    def port(self) -> int:
        return split_address(self.address)[1]

    @property
    def is_local(self) -> bool:
        return self.host in LOCAL_HOSTS


_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_.])?$")


def _ip(text: str):
    """``text`` as an IP address (v4, or v6 with an optional %zone), else None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def check_host(host: str, where: str = "") -> str:
    """``host`` if it is an IP address or a host name; else a ValueError that says why.
    A host that begins with '-' is refused: ssh would read it as an option."""
    if not host:
        raise ValueError(f"{where}an empty host name")
    if host.startswith("-"):
        raise ValueError(
            f"{where}host {host!r} begins with '-', which ssh would read as an option; write the node's name or address"
        )
    if _ip(host) is None and not _HOSTNAME.match(host):
        raise ValueError(f"{where}{host!r} is not an IP address or a host name (letters, digits, '.', '-', '_')")
    return host


def join_address(host: str, port: int) -> str:
    """``(host, port)`` -> ``"host:port"``; an IPv6 host goes in brackets: ``"[2001:db8::5]:2222"``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _port(text: str, address: str) -> int:
    if not text.isdigit():
        raise ValueError(f"address {address!r}: port {text!r} is not a number; use host:PORT with PORT in 1-65535")
    if not 1 <= int(text) <= 65535:
        raise ValueError(
            f"address {address!r}: port {text} is outside 1-65535; pick a port in that range "
            f"(2222 and up is the course's convention)"
        )
    return int(text)


def parse_host(entry: str) -> tuple[str, int | None]:
    """One host as people write it -> ``(host, port or None)``: ``node1``, ``node1:2300``,
    ``10.10.1.2``, an IPv6 address bare (``2001:db8::5``, ``::1``) or in brackets
    (``[2001:db8::5]``, ``[2001:db8::5]:2300``). A ValueError says what is wrong."""
    entry = str(entry).strip()
    if entry.startswith("["):
        inside, sep, rest = entry[1:].partition("]")
        if not sep or _ip(inside) is None or _ip(inside).version != 6:
            raise ValueError(f"{entry!r}: brackets hold an IPv6 address, as in [2001:db8::5]:2222")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{entry!r}: after ']' comes ':PORT' or nothing")
        return inside, (_port(rest[1:], entry) if rest else None)
    if entry.count(":") > 1:  # a bare IPv6 address: its last ':' is not a port separator
        if _ip(entry) is None:
            raise ValueError(f"{entry!r} is not an IPv6 address; write [ADDRESS]:PORT to give an IPv6 host a port")
        return entry, None
    host, sep, port = entry.partition(":")
    check_host(host, f"{entry!r}: ")
    return host, (_port(port, entry) if sep else None)


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> ``(host, port)``, with a ValueError that says what is wrong."""
    text = str(address)
    if not text.startswith("[") and text.count(":") > 1:
        raise ValueError(f"address {text!r}: put an IPv6 address in brackets, e.g. [2001:db8::5]:2222")
    host, port = parse_host(text) if text.strip() else ("", None)
    if not host or port is None:
        raise ValueError(f"address {text!r} must look like host:port, e.g. 127.0.0.1:2222")
    return host, port


class ClusterSpec:
    """An immutable, validated map of job name -> task addresses.

    ``auto_ports`` marks a local spec whose ports were picked by ``local()``: the
    launcher may replace them with other free ports if one is taken before it starts.
    """

    __slots__ = ("_jobs", "auto_ports")

    def __init__(self, jobs: dict, auto_ports: bool = False):
        cleaned = {}
        for job, addrs in dict(jobs).items():
            if job not in JOBS:
                raise ValueError(f"unknown job {job!r}; a cluster has jobs {', '.join(JOBS)}")
            if isinstance(addrs, str):
                addrs = [addrs]
            addrs = tuple(str(a) for a in addrs)
            for a in addrs:
                split_address(a)
            if addrs:
                cleaned[job] = addrs
        if not cleaned.get("worker"):
            raise ValueError(
                "the worker job is empty; a cluster needs at least one worker (e.g. local(ps=1, workers=2))"
            )
        if len(cleaned.get("chief", ())) > 1:
            raise ValueError(f"a cluster has at most one chief, got {len(cleaned['chief'])}")
        seen: dict[str, str] = {}
        for job in JOBS:
            for i, a in enumerate(cleaned.get(job, ())):
                if a in seen:
                    raise ValueError(
                        f"duplicate address {a}: used by {seen[a]} and {job}:{i}; give each task its own port"
                    )
                seen[a] = f"{job}:{i}"
        object.__setattr__(self, "_jobs", {j: cleaned[j] for j in JOBS if j in cleaned})
        object.__setattr__(self, "auto_ports", bool(auto_ports))

    def __setattr__(self, *_):
        raise AttributeError("ClusterSpec is immutable; build a new one")

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __hash__(self):
        return hash(tuple(self._jobs.items()))

    def __repr__(self):
        return f"ClusterSpec({self.as_dict()})"

    # ------------------------------------------------------------------ views
    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(self._jobs)

    def num_tasks(self, job: str) -> int:
        return len(self._jobs.get(job, ()))

    def tasks(self) -> list[Task]:
        """Every task, ps first, then chief, then workers (the order they are started in)."""
        order = ("ps", "chief", "worker")
        return [Task(j, i, a) for j in order for i, a in enumerate(self._jobs.get(j, ()))]

    def task(self, task_type: str, index: int) -> Task:
        if task_type not in self._jobs:
            known = ", ".join(self._jobs)
            raise ValueError(f"unknown task type {task_type!r}; this cluster has {known}")
        n = len(self._jobs[task_type])
        if not 0 <= int(index) < n:
            raise ValueError(
                f"{task_type} index {index} is out of range; this cluster has {n} {task_type} "
                f"task(s), indices 0-{n - 1}"
            )
        return Task(task_type, int(index), self._jobs[task_type][int(index)])

    def hosts(self) -> list[str]:
        """Distinct hosts, in task order."""
        return list(dict.fromkeys(t.host for t in self.tasks()))

    @property
    def is_local(self) -> bool:
        return all(t.is_local for t in self.tasks())

    # ----------------------------------------------------------------- outputs
    def as_dict(self) -> dict[str, list[str]]:
        """The dict for ``tf.train.ClusterSpec`` and the ``cluster`` part of TF_CONFIG."""
        return {j: list(a) for j, a in self._jobs.items()}

    def tf_config(self, task_type: str, index: int) -> str:
        """The TF_CONFIG JSON string for one task."""
        t = self.task(task_type, index)
        return json.dumps({"cluster": self.as_dict(), "task": {"type": t.type, "index": t.index}})

    def env(self, task_type: str, index: int) -> dict[str, str]:
        """The environment variables that make a process this task."""
        return {"TF_CONFIG": self.tf_config(task_type, index)}

    def table(self) -> str:
        """A readable table: task, host, port."""
        rows = [("task", "host", "port")] + [(t.name, t.host, str(t.port)) for t in self.tasks()]
        w = [max(len(r[c]) for r in rows) for c in range(3)]
        return "\n".join(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:>{w[2]}}" for r in rows)

    def with_addresses(self, mapping: dict[str, str]) -> "ClusterSpec":
        """A copy with some tasks moved: ``{"ps:0": "127.0.0.1:3000", ...}``."""
        jobs = {j: list(a) for j, a in self._jobs.items()}
        for name, addr in mapping.items():
            t = self.task(*_parse_task_name(name))
            jobs[t.type][t.index] = addr
        return ClusterSpec(jobs, auto_ports=self.auto_ports)


def _parse_task_name(name: str) -> tuple[str, int]:
    job, _, idx = name.partition(":")
    if not idx.isdigit():
        raise ValueError(f"task name {name!r} must look like job:index, e.g. worker:0")
    return job, int(idx)


# ---------------------------------------------------------------- free ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def port_is_free(port: int, host: str = "") -> bool:
    """Whether a TensorFlow server could listen on ``port`` now.

    TensorFlow's gRPC server listens on 0.0.0.0 whatever host the spec names, with
    SO_REUSEADDR and without SO_REUSEPORT; this binds the same way, so leftovers in
    TIME_WAIT count as free and any other socket on the port does not.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def accepts(host: str, port: int, timeout: float = 0.2) -> bool:
    """Whether something listens on ``host:port`` now (a TCP connection is accepted)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_ports(n: int, avoid=()) -> list[int]:
    """``n`` distinct ports that are free now, chosen at random below the ephemeral range.

    Below the ephemeral range, so that outgoing connections (other clusters' gRPC
    clients on this machine) do not grab them between the check and the bind.
    """
    lo_eph, _ = _ephemeral_range()
    lo, hi = (20000, lo_eph - 1) if lo_eph > 21000 else (lo_eph // 2, lo_eph - 1)
    avoid, out = set(avoid), []
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))
    for _ in range(50 * n + 100):
        p = rng.randint(lo, hi)
        if p not in avoid and p not in out and port_is_free(p):
            out.append(p)
            if len(out) == n:
                return out
    raise RuntimeError(f"found only {len(out)} of {n} free ports in {lo}-{hi}; is the machine out of ports?")


# -------------------------------------------------------------- constructors


def _counts(ps: int, workers: int) -> None:
    if ps < 0:
        raise ValueError(f"ps must be >= 0, got {ps}")
    if workers < 1:
        raise ValueError(f"the worker job is empty (workers={workers}); a cluster needs at least one worker")


def local(ps: int = 1, workers: int = 3, chief: bool = False) -> ClusterSpec:
    """All tasks on 127.0.0.1, on ports the OS reports free now."""
    _counts(ps, workers)
    ports = iter(free_ports(ps + workers + int(chief)))
    jobs = {"ps": [f"127.0.0.1:{next(ports)}" for _ in range(ps)]}
    if chief:
        jobs["chief"] = [f"127.0.0.1:{next(ports)}"]
    jobs["worker"] = [f"127.0.0.1:{next(ports)}" for _ in range(workers)]
    return ClusterSpec(jobs, auto_ports=True)


def from_hosts(
    hosts, ps: int = 1, workers: int | None = None, chief: bool = False, base_port: int = DEFAULT_BASE_PORT
) -> ClusterSpec:
    """Tasks spread over ``hosts`` round-robin (task i of a job on host i mod n).

    ``workers`` defaults to one per host. A host given as ``host:port`` starts its
    ports there instead of at ``base_port``.
    """
    hosts = [str(h).strip() for h in hosts]
    if not hosts or not all(hosts):
        raise ValueError(f"from_hosts needs a non-empty list of host names, got {hosts!r}")
    workers = len(hosts) if workers is None else workers
    _counts(ps, workers)
    _port(str(base_port), f"base_port={base_port}")
    names, next_port = [], {}
    for h in hosts:
        name, port = parse_host(h)
        names.append(name)
        next_port.setdefault(name, base_port if port is None else port)

    def place(i: int) -> str:
        host = names[i % len(names)]
        port = next_port[host]
        next_port[host] = port + 1
        return join_address(host, port)

    jobs = {"ps": [place(i) for i in range(ps)]}
    if chief:
        jobs["chief"] = [place(0)]
    jobs["worker"] = [place(i + int(chief)) for i in range(workers)]
    return ClusterSpec(jobs)


# The name an /etc/hosts-style line of a hosts file read here gave an address (its last, shortest:
# node2 for ``10.10.1.3 node2-link-0 node2``): what an error calls the node (launchers.ssh.node_label)
HOST_NAMES: dict[str, str] = {}


def read_hosts_file(path) -> list[str]:
    """Hosts from a file: one per line, ``#`` comments and blank lines skipped.

    A line is a host as ``parse_host`` reads it (``node1``, ``node1:2300``, ``10.10.1.2``,
    ``2001:db8::5``, ``[2001:db8::5]:2300``), or ``/etc/hosts``-style ``ADDRESS NAME
    [ALIASES]``, whose address is used (names may not resolve on every node). A UTF-8 BOM
    (Windows editors write one) and CRLF line ends are fine. Any other line is a
    ValueError that names it. Returns ``host`` or ``host:port`` strings (IPv6 ports in
    brackets), for ``from_hosts``.
    """
    path = Path(path)
    if not path.exists() or path.is_dir():  # a pipe, as from <(getent hosts ...), is fine
        raise ValueError(f"hosts file {path} does not exist; write one host per line (see docs/cluster.md)")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"hosts file {path} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8"
        ) from None
    hosts, named = [], {}  # an /etc/hosts-style line's address -> (its line number, its names)
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            hosts.append(_hosts_line(line))
        except ValueError as e:
            raise ValueError(
                f"{path}, line {n}: cannot parse {raw.strip()!r}: {e}. A line is 'host', 'host:port' "
                f"or '/etc/hosts'-style 'ADDRESS NAME'"
            ) from None
        names = line.split()[1:]
        if names:
            HOST_NAMES[hosts[-1]] = names[-1]
            first, other = named.setdefault(hosts[-1], (n, names))
            if other != names:
                raise ValueError(
                    f"{path}, line {n}: {raw.strip()!r} gives {' '.join(names)} the address {hosts[-1]}, "
                    f"which line {first} gives {' '.join(other)}: two nodes cannot share an address "
                    f"(their tasks would all run on one machine); fix the address"
                )
    if not hosts:
        raise ValueError(f"hosts file {path} lists no hosts; write one host per line")
    return hosts


def _hosts_line(line: str) -> str:
    if "," in line:
        raise ValueError("one host per line, without commas")
    first, *names = line.split()
    if not names:
        host, port = parse_host(first)
        return host if port is None else join_address(host, port)
    if _ip(first) is None:
        raise ValueError(f"a line with several fields is /etc/hosts-style and starts with an IP address, not {first!r}")
    for name in names:
        check_host(name)
    return first


def from_hosts_file(
    path, ps: int = 1, workers: int | None = None, chief: bool = False, base_port: int = DEFAULT_BASE_PORT
) -> ClusterSpec:
    """``from_hosts`` on the hosts listed in a file (see ``read_hosts_file``)."""
    return from_hosts(read_hosts_file(path), ps=ps, workers=workers, chief=chief, base_port=base_port)


def mode(name: str, hosts=None, base_port: int = DEFAULT_BASE_PORT) -> ClusterSpec:
    """A deploy mode from the reports, by name: ``single``, ``cluster``, ``cluster2``, ``cs744``.

    ``hosts`` (a list or a hosts-file path) places it on real machines; without hosts
    it runs on 127.0.0.1 with free ports, except ``cs744``, whose layout is about
    node names (node0-node2).
    """
    if name not in MODES:
        raise ValueError(f"unknown deploy mode {name!r}; choose one of {', '.join(MODES)}")
    ps, workers, n_hosts = MODES[name]
    if hosts is None and name == "cs744":
        hosts = [f"node{i}" for i in range(n_hosts)]
    if hosts is None:
        return local(ps=ps, workers=workers)
    if isinstance(hosts, (str, os.PathLike)):
        hosts = read_hosts_file(hosts)
    return from_hosts(list(hosts)[:n_hosts], ps=ps, workers=workers, base_port=base_port)


def build(
    mode_name: str | None = None, hosts=None, ps: int = 1, workers: int | None = None, chief: bool = False
) -> ClusterSpec:
    """One entry point for notebooks and the CLI: a deploy mode by name, else ``ps`` /
    ``workers`` placed on ``hosts`` (a list or a hosts file), else on 127.0.0.1. An empty
    ``hosts`` ("" or None) means 127.0.0.1."""
    if mode_name:
        return mode(mode_name, hosts=hosts or None)
    if hosts:
        hosts = read_hosts_file(hosts) if isinstance(hosts, (str, os.PathLike)) else list(hosts)
        return from_hosts(hosts, ps=ps, workers=workers, chief=chief)
    return local(ps=ps, workers=2 if workers is None else workers, chief=chief)


def from_tf_config(text: str | None = None) -> tuple[ClusterSpec, Task]:
    """Parse TF_CONFIG (default: the environment's) into the spec and this process's task."""
    text = os.environ.get("TF_CONFIG") if text is None else text
    if not text:
        raise ValueError(
            "TF_CONFIG is not set; start this program through labkit.distributed.launch.Cluster "
            "or set TF_CONFIG to ClusterSpec.tf_config(type, index)"
        )
    try:
        cfg = json.loads(text)
        spec = ClusterSpec(cfg["cluster"])
        task = spec.task(cfg["task"]["type"], cfg["task"]["index"])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(
            f"TF_CONFIG is not valid ({type(e).__name__}: {e}); expected "
            f'{{"cluster": {{...}}, "task": {{"type": ..., "index": ...}}}}'
        ) from None
    return spec, task
