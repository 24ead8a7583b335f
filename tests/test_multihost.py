"""The multi-node path as docs/cluster.md tells a TA to use it, with its commands run for real.

Nodes are home directories reached through a stand-in for ssh that runs the command in the
node's home with a clean environment (nothing of the driver's environment leaks over), so
`nodes setup` really copies, installs, fetches and checks, and tasks start over "ssh":

- over loopback aliases (127.0.0.2, ...): the troubleshooting table's failures (ssh failure,
  a node without the kit, version skew) give their clear errors, end to end;
- in network namespaces (``ip netns`` + veth pairs on a bridge), each node with its own
  address and NIC: a cluster spread over two nodes, driven from a third, shows each node's
  own traffic on its own ``lan0`` (on 127.0.0.1 everything shares ``lo``); skipped, with the
  reason, where namespaces cannot be made.
"""
import os
import random
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import psutil
import pytest

from labkit import cluster
from labkit.launch import ClusterResult

pytestmark = pytest.mark.cluster

FAKE_SSH = """#!/bin/bash
# Stand-in for ssh: [options] HOST COMMAND runs COMMAND from HOST's home (in HOST's network
# namespace, if it has one) with a clean environment, as sshd would. Unknown host: exit 255.
# Like a careful ssh user, it insists on '--' before the host (a host never reads as an option).
while [ $# -gt 0 ]; do case "$1" in -o|-i|-p) shift 2 ;; --) shift; break ;; -*) shift ;;
    *) echo "fake ssh: no -- before the host $1" >&2; exit 255 ;; esac; done
host=$1; shift
read -r _ ns home < <(grep "^$host " "$(dirname "$0")/nodes.map") || {
    echo "ssh: Could not resolve hostname $host: Name or service not known" >&2; exit 255; }
cd "$home" || exit 255
run=(env -i HOME="$home" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 bash -c "$*")
if [ "$ns" = "-" ]; then exec "${run[@]}"; else exec ip netns exec "$ns" "${run[@]}"; fi
"""

REPO = Path(__file__).resolve().parents[1]
TINY = "--steps 150 --train-limit 1000 --test-limit 200 --sample-interval 0.25"


def _mirror() -> str:
    mirror = os.environ.get("LABKIT_DATA_MIRROR")
    if not mirror:
        pytest.skip("LABKIT_DATA_MIRROR is not set: the nodes fetch MNIST from it (see README, Data)")
    return mirror


def _fake_ssh(tmp_path: Path, nodes: dict[str, tuple[str, Path]]) -> str:
    """Write the fake ssh and its map (host -> (namespace or '-', home)); return its path."""
    (tmp_path / "nodes.map").write_text("".join(f"{h} {ns} {home}\n" for h, (ns, home) in nodes.items()))
    path = tmp_path / "fake-ssh"
    path.write_text(FAKE_SSH)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    for _, home in nodes.values():
        home.mkdir(parents=True, exist_ok=True)
    return str(path)


def labkit(*args, env: dict | None = None, netns: str | None = None, timeout: float = 300):
    """``python -m labkit ARGS`` (in a namespace, if given), as a person types it."""
    cmd = [sys.executable, "-m", "labkit", *map(str, args)]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def _setup_args(ssh: str, hosts: Path, mirror: str) -> list[str]:
    # the test installs by linking this virtualenv; on a real node the default is `make setup`
    return ["nodes", "setup", "--hosts", hosts, "--ssh", ssh, "--install", f"ln -sfn {shlex.quote(sys.prefix)} .venv",
            "--dataset", "mnist", "--data-mirror", mirror]


def _no_children():
    left = psutil.Process().children(recursive=True)
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()[:5]) for p in left]}"


def test_troubleshooting_errors_over_fake_ssh(tmp_path):
    """Setup works; then each failure of docs/cluster.md's table gives its message and fix."""
    mirror = _mirror()
    ports = cluster.free_ports(4)
    while not cluster.port_is_free(ports[0] + 1) or ports[0] + 1 in ports:
        ports = cluster.free_ports(4)
    homes = {h: tmp_path / h for h in ("node2", "node3", "bare")}
    ssh = _fake_ssh(tmp_path, {"127.0.0.2": ("-", homes["node2"]), "127.0.0.3": ("-", homes["node3"]),
                               "127.0.0.4": ("-", homes["bare"])})
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"# two 'nodes' on loopback aliases\n127.0.0.2:{ports[0]}\n127.0.0.3:{ports[2]}\n")
    env = {"LABKIT_RUNS": str(tmp_path / "runs")}

    make = subprocess.run(["make", "-n", "cluster-setup", f"HOSTS={hosts}"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)  # the guide's `make cluster-setup` is this command
    assert f"-m labkit nodes setup --hosts {hosts}" in make.stdout, make.stdout + make.stderr
    done = labkit(*_setup_args(ssh, hosts, mirror), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    for host in ("127.0.0.2", "127.0.0.3"):
        assert f"[{host}] copied the kit" in done.stdout and f"[{host}] ok:" in done.stdout
        assert (homes["node2" if host.endswith("2") else "node3"] / "labkit/data/mnist").is_dir()

    # ssh fails (an unknown host): exit 255, and the hint names the key check
    bad = tmp_path / "bad-hosts.txt"
    bad.write_text("127.0.0.9\n")
    done = labkit("nodes", "check", "--hosts", bad, "--ssh", ssh)
    assert done.returncode == 1 and "exit 255" in done.stderr and "ssh to 127.0.0.9 failed" in done.stderr
    done = labkit("run", "ps_sgd", "--hosts", bad, "--ps", "0", "--workers", "1", "--ssh", ssh, env=env)
    assert done.returncode == 1 and "exited with code 255" in done.stderr and "ssh to 127.0.0.9 failed" in done.stderr

    # a node without the kit: the check and the launcher both say so, with the fix
    bare = tmp_path / "bare-hosts.txt"
    bare.write_text(f"127.0.0.4:{ports[3]}\n")
    done = labkit("nodes", "check", "--hosts", bare, "--ssh", ssh)
    assert done.returncode == 1 and "the kit is not installed on 127.0.0.4" in done.stderr, done.stderr
    done = labkit("run", "ps_sgd", "--hosts", bare, "--ps", "0", "--workers", "1", "--ssh", ssh, "--args", TINY,
                  env=env)
    assert done.returncode == 1 and "the kit is not installed on 127.0.0.4" in done.stderr, done.stderr
    assert "make cluster-setup" in done.stderr

    # version skew: node3 runs another labkit; the check refuses, and so does the launcher
    init = homes["node3"] / "labkit/labkit/__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "0.0.9-old+'))
    done = labkit("nodes", "check", "--hosts", hosts, "--ssh", ssh)
    assert done.returncode == 1 and "run different versions" in done.stderr and "labkit 0.0.9-old+" in done.stderr
    done = labkit("run", "ps_sgd", "--hosts", hosts, "--ps", "1", "--workers", "2", "--ssh", ssh, "--args", TINY,
                  env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "worker:1" in done.stderr and "labkit 0.0.9-old+" in done.stderr and "make setup" in done.stderr
    _no_children()
    assert all(cluster.port_is_free(p) for p in (ports[0], ports[0] + 1, ports[2]))


# ---------------------------------------------------------------------------- namespaces

@pytest.fixture
def netns(tmp_path):
    """Three nodes node0..node2, each a network namespace with one NIC (lan0, 10.x.y.1-3/24)
    on a bridge in a fourth; removed (with anything still running in them) afterwards."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2): cannot make network namespaces")
    prefix = f"lk{os.getpid() % 100000}"
    subnet = f"10.{random.randint(100, 250)}.{random.randint(1, 250)}"
    names = [f"{prefix}sw"] + [f"{prefix}n{i}" for i in range(3)]
    made = []

    def ip(*args):
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    try:
        for n in names:
            ip("netns", "add", n)
            made.append(n)
        sw = names[0]
        ip("-n", sw, "link", "add", "br0", "type", "bridge")
        ip("-n", sw, "link", "set", "br0", "up")
        for i, n in enumerate(names[1:]):
            ip("link", "add", "lan0", "netns", n, "type", "veth", "peer", "name", f"p{i}", "netns", sw)
            ip("-n", sw, "link", "set", f"p{i}", "master", "br0")
            ip("-n", sw, "link", "set", f"p{i}", "up")
            ip("-n", n, "addr", "add", f"{subnet}.{i + 1}/24", "dev", "lan0")
            for dev in ("lan0", "lo"):
                ip("-n", n, "link", "set", dev, "up")
    except OSError as e:
        for n in made:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)
        pytest.skip(f"cannot make network namespaces here (needs root and CAP_NET_ADMIN): {e}")
    yield {f"node{i}": (n, f"{subnet}.{i + 1}") for i, n in enumerate(names[1:])}
    left = {}
    for n in names:
        pids = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True, timeout=30).stdout.split()
        for pid in pids:
            left.setdefault(n, []).append(pid)
            try:
                psutil.Process(int(pid)).kill()
            except psutil.NoSuchProcess:
                pass
        subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)
    assert not left, f"processes were left in the namespaces: {left}"


def _traffic(task_result: dict, nic: str) -> float:
    cols = task_result["samples"]["columns"]
    return sum(v or 0 for v in cols.get(f"net_recv_{nic}", [])) + sum(v or 0 for v in cols.get(f"net_sent_{nic}", []))


def test_cluster_over_network_namespaces_shows_each_nodes_own_traffic(tmp_path, netns):
    """The guide's commands: set up node1 and node2, run ps_sgd on them from node0 (the
    driver, where the notebook would run) with LABKIT_SSH set, write per-node CSVs."""
    mirror = _mirror()
    ssh = _fake_ssh(tmp_path, {addr: (ns, tmp_path / name) for name, (ns, addr) in netns.items()})
    hosts = tmp_path / "hosts.txt"  # as in CloudLab's /etc/hosts: ADDRESS NAME ALIASES
    hosts.write_text("".join(f"{netns[n][1]}\t{n}-link-0 {n}\n" for n in ("node1", "node2")))
    driver = netns["node0"][0]
    env = {"LABKIT_RUNS": str(tmp_path / "runs"), "LABKIT_SSH": ssh}

    done = labkit(*_setup_args(ssh, hosts, mirror), env=env, netns=driver)
    assert done.returncode == 0, done.stdout + done.stderr
    done = labkit("nodes", "check", "--hosts", hosts, env=env, netns=driver)  # LABKIT_SSH: no --ssh needed
    assert done.returncode == 0 and done.stdout.count("ok:") == 2, done.stdout + done.stderr

    done = labkit("run", "ps_sgd", "--hosts", hosts, "--ps", "1", "--workers", "2", "--lab", "multihost",
                  "--args", TINY, env=env, netns=driver)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = next((tmp_path / "runs" / "multihost").iterdir())
    result = ClusterResult.load(run_dir)
    node1, node2 = netns["node1"][1], netns["node2"][1]
    assert {t.name: t.result["address"] for t in result} == {
        "ps:0": f"{node1}:2222", "worker:0": f"{node1}:2223", "worker:1": f"{node2}:2222"}  # CloudLab's ports
    assert [t.ended for t in result] == ["done-queue", "exited", "exited"]

    # node2's worker reaches the ps only through its NIC; on node1 the ps and worker 0 share lo
    w1, ps, w0 = (result[n].result for n in ("worker:1", "ps:0", "worker:0"))
    assert _traffic(w1, "lan0") > 100_000 and _traffic(w1, "lo") < 0.05 * _traffic(w1, "lan0")
    assert _traffic(ps, "lan0") > 100_000 and _traffic(w0, "lo") > 100_000

    out = tmp_path / "csv"
    done = labkit("nodes", "csv", run_dir, "--out", out)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"{node1}_ps-0.csv", f"{node1}_worker-0.csv",
                                                     f"{node2}_worker-1.csv"]
    frame = pd.read_csv(out / f"{node2}_worker-1.csv")
    assert frame["net_recv_lan0"].sum() > 50_000 and "net_recv_lo" in frame
    _no_children()
