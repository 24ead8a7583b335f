"""The multi-node path as docs/cluster.md tells a TA to use it, with its commands run for real.

Nodes are home directories reached through a stand-in for ssh that runs the command in the
node's home with a clean environment (nothing of the driver's environment leaks over), so
`nodes setup` really copies, installs, fetches and checks, and tasks start over "ssh":

- over loopback aliases (127.0.0.2, ...): the troubleshooting table's failures (ssh failure,
  a node without the kit, version skew) give their clear errors, end to end;
- with a real OpenSSH ``sshd`` on loopback aliases (``_sshd.py``): what only a real ssh
  shows, a remote task killed by a signal (ssh itself then exits 255) and a launcher killed
  with SIGKILL (its remote tasks must go too);
- in network namespaces (``ip netns`` + veth pairs on a bridge), each node with its own
  address and NIC: a cluster spread over two nodes, driven from a third, shows each node's
  own traffic on its own ``lan0`` (on 127.0.0.1 everything shares ``lo``); skipped, with the
  reason, where namespaces cannot be made.
"""

import json
import os
import random
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from _sshd import sshd
from helpers import alive, data_mirror, wait_until, wait_while
from labkit.wire import spec as cluster
from labkit.wire.spec import ClusterSpec
from labkit.distributed.launch import Cluster, ClusterResult, TaskFailed
from labkit.distributed.launchers import forkserver

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

REPO = Path(__file__).resolve().parents[2]
TINY = "--steps 150 --train-limit 1000 --test-limit 200 --sample-interval 0.25"


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
    return [
        "nodes",
        "setup",
        "--hosts",
        hosts,
        "--ssh",
        ssh,
        "--install",
        f"ln -sfn {shlex.quote(sys.prefix)} .venv",
        "--dataset",
        "mnist",
        "--data-mirror",
        mirror,
    ]


def _no_children(node_sshd: int | None = None):
    """Nothing of ours is left running here. The test's sshd (``node_sshd``) and its sessions
    stand for the nodes: a session winds down by itself after its ssh client has gone."""
    on_nodes = {node_sshd} | {p.pid for p in alive_tree(node_sshd)} if node_sshd else set()
    server = forkserver.running()  # this process's own, which ends with it
    ours = {server.process.pid} if server else set()
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in on_nodes | ours]
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()[:5]) for p in left]}"


def alive_tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_troubleshooting_errors_over_fake_ssh(tmp_path):
    """Setup works; then each failure of docs/cluster.md's table gives its message and fix."""
    mirror = data_mirror()
    ports = cluster.free_ports(4)
    while not cluster.port_is_free(ports[0] + 1) or ports[0] + 1 in ports:
        ports = cluster.free_ports(4)
    homes = {h: tmp_path / h for h in ("node2", "node3", "bare")}
    ssh = _fake_ssh(
        tmp_path,
        {"127.0.0.2": ("-", homes["node2"]), "127.0.0.3": ("-", homes["node3"]), "127.0.0.4": ("-", homes["bare"])},
    )
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"# two 'nodes' on loopback aliases\n127.0.0.2:{ports[0]}\n127.0.0.3:{ports[2]}\n")
    env = {"LABKIT_RUNS": str(tmp_path / "runs")}

    make = subprocess.run(
        ["make", "-n", "cluster-setup", f"HOSTS={hosts}"], cwd=REPO, capture_output=True, text=True, timeout=60
    )  # the guide's `make cluster-setup` is this command
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
    assert done.returncode == 1 and "no task was started" in done.stderr and "ssh to 127.0.0.9 failed" in done.stderr

    # a node without the kit: the check and the launcher both say so, with the fix
    bare = tmp_path / "bare-hosts.txt"
    bare.write_text(f"127.0.0.4:{ports[3]}\n")
    done = labkit("nodes", "check", "--hosts", bare, "--ssh", ssh)
    assert done.returncode == 1 and "the kit is not installed on 127.0.0.4" in done.stderr, done.stderr
    done = labkit(
        "run", "ps_sgd", "--hosts", bare, "--ps", "0", "--workers", "1", "--ssh", ssh, "--args", TINY, env=env
    )
    assert done.returncode == 1 and "the kit is not installed on 127.0.0.4" in done.stderr, done.stderr
    assert "make cluster-setup" in done.stderr

    # version skew: node3 runs another labkit; the check refuses, and so does the launcher
    init = homes["node3"] / "labkit/labkit/__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "0.0.9-old+'))
    done = labkit("nodes", "check", "--hosts", hosts, "--ssh", ssh)
    assert done.returncode == 1 and "run different versions" in done.stderr and "labkit 0.0.9-old+" in done.stderr
    done = labkit(
        "run", "ps_sgd", "--hosts", hosts, "--ps", "1", "--workers", "2", "--ssh", ssh, "--args", TINY, env=env
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "worker:1" in done.stderr and "labkit 0.0.9-old+" in done.stderr and "make setup" in done.stderr
    _no_children()
    assert all(cluster.port_is_free(p) for p in (ports[0], ports[0] + 1, ports[2]))


# ---------------------------------------------------------------------------- a real sshd


@pytest.fixture
def real_ssh(tmp_path_factory):
    """(ssh argv, remote_dir, sshd's pid): a real sshd on 127.0.0.2 and 127.0.0.3, and the
    kit's directory there (the tasks run this checkout's Python, as ``remote_python``)."""
    folder = tmp_path_factory.mktemp("sshd")
    remote_dir = folder / "node home" / "labkit"
    remote_dir.mkdir(parents=True)
    with sshd(folder / "daemon") as (ssh, pid):
        yield ssh, remote_dir, pid


def _two_node_spec() -> ClusterSpec:
    ports = cluster.free_ports(3)
    return ClusterSpec({"ps": [f"127.0.0.2:{ports[0]}"], "worker": [f"127.0.0.2:{ports[1]}", f"127.0.0.3:{ports[2]}"]})


def _remote_pids(run: Path, names=("ps-0", "worker-0", "worker-1"), timeout: float = 120) -> dict[str, int]:
    """The pids the remote wrapper wrote, once every task has written its hello (it runs)."""
    wait_until(
        lambda: all((run / f"{n}.hello.json").exists() for n in names),
        timeout,
        0.05,
        lambda: f"the remote tasks to start: {sorted(p.name for p in run.glob('*'))}",
    )
    return {n: int((run / f"{n}.pid").read_text()) for n in names}


def test_real_ssh_a_remote_task_killed_by_a_signal_is_reported_as_such(real_ssh, tmp_path, monkeypatch):
    """ssh exits 255 when the remote command dies of a signal, which is also its code for
    'cannot connect': the launcher must say SIGKILL on that host, not send the TA after keys."""
    ssh, remote_dir, daemon = real_ssh
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    c = Cluster(
        _two_node_spec(),
        "ps_sgd",
        args={"steps": 10_000_000, "train_limit": 1000, "test_limit": 200, "sample_interval": 0.25},
        lab="sshd",
        launcher_options={"ssh": ssh, "remote_dir": str(remote_dir), "remote_python": sys.executable},
        env={"LABKIT_DATA_MIRROR": data_mirror()},
    )
    assert all(" -- 127.0.0." in cmd for _, cmd in c.commands())
    with c:
        pids = _remote_pids(remote_dir / c.remote_run)
        os.kill(pids["worker-1"], signal.SIGKILL)  # the OOM killer, or a TA's kill on node 127.0.0.3
        t0 = time.monotonic()
        with pytest.raises(TaskFailed) as info:
            c.wait(timeout=120)
        noticed = time.monotonic() - t0
    failed = info.value
    assert failed.task == "worker:1" and failed.returncode == -signal.SIGKILL, str(failed)
    assert "worker:1 was killed by SIGKILL on 127.0.0.3" in str(failed) and "ssh to" not in str(failed)
    # the hint follows from the evidence (a signal, after the task had run), not from words in its log
    assert "not installed" not in str(failed) and "OOM killer" in str(failed), str(failed)
    # noticed, not waited out: far under the wait's timeout, by a margin that holds with both cores busy
    assert noticed < 45, f"TaskFailed took {noticed:.1f} s"
    assert not alive(pids.values()), "remote tasks survived the stop"
    # the others were stopped on their node, wrote their results there, and those were copied back
    assert c.result["ps:0"].result["shutdown"] == "terminated" and c.result["worker:0"].ended == "terminated"
    _no_children(daemon)


LAUNCHER = """
import json, sys, time
from labkit.wire.spec import ClusterSpec
from labkit.distributed.launch import Cluster
spec, ssh, remote_dir, mirror = json.loads(sys.argv[1])
c = Cluster(ClusterSpec(spec), "ps_sgd", {"steps": 10**7, "train_limit": 1000, "test_limit": 200}, lab="sshd",
            launcher_options={"ssh": ssh, "remote_dir": remote_dir, "remote_python": sys.executable},
            env={"LABKIT_DATA_MIRROR": mirror}).start()
print(c.remote_run, flush=True)
time.sleep(600)
"""


def test_real_ssh_remote_tasks_do_not_outlive_a_killed_launcher(real_ssh, tmp_path):
    """A notebook kernel killed with SIGKILL runs no cleanup: its ssh clients die with it, and
    each remote task's wrapper sees the session end and stops the task, which writes its result."""
    ssh, remote_dir, daemon = real_ssh
    spec = _two_node_spec()
    args = json.dumps([spec.as_dict(), ssh, str(remote_dir), data_mirror()])
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "LABKIT_RUNS": str(tmp_path / "runs")},
    )
    try:
        run = remote_dir / launcher.stdout.readline().strip()  # start() returned: every server is up
        pids = _remote_pids(run, timeout=10)
        assert len(alive(pids.values())) == 3
    finally:
        launcher.kill()
        launcher.wait()
    t0 = time.monotonic()
    wait_while(lambda: alive(pids.values()), 30, 0.1, "the remote tasks to end with their launcher")
    for name in pids:  # SIGTERM from the wrapper, not SIGKILL: each wrote its result
        assert json.loads((run / f"{name}.json").read_text())["shutdown"] == "terminated", name
    # the kernel closes the dead tasks' connections on its own time (within the same 30 s)
    wait_while(
        lambda: [t.port for t in spec.tasks() if not cluster.port_is_free(t.port)],
        max(0.0, 30 - (time.monotonic() - t0)),
        0.1,
        lambda: (
            "the tasks' ports to be free:\n" + subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout
        ),
    )
    _no_children(daemon)


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
    mirror = data_mirror()
    ssh = _fake_ssh(tmp_path, {addr: (ns, tmp_path / name) for name, (ns, addr) in netns.items()})
    hosts = tmp_path / "hosts.txt"  # as in CloudLab's /etc/hosts: ADDRESS NAME ALIASES
    hosts.write_text("".join(f"{netns[n][1]}\t{n}-link-0 {n}\n" for n in ("node1", "node2")))
    driver = netns["node0"][0]
    env = {"LABKIT_RUNS": str(tmp_path / "runs"), "LABKIT_SSH": ssh}

    done = labkit(*_setup_args(ssh, hosts, mirror), env=env, netns=driver)
    assert done.returncode == 0, done.stdout + done.stderr
    done = labkit("nodes", "check", "--hosts", hosts, env=env, netns=driver)  # LABKIT_SSH: no --ssh needed
    assert done.returncode == 0 and done.stdout.count("ok:") == 2, done.stdout + done.stderr

    done = labkit(
        "run",
        "ps_sgd",
        "--hosts",
        hosts,
        "--ps",
        "1",
        "--workers",
        "2",
        "--lab",
        "multihost",
        "--args",
        TINY,
        env=env,
        netns=driver,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = next((tmp_path / "runs" / "multihost").iterdir())
    result = ClusterResult.load(run_dir)
    node1, node2 = netns["node1"][1], netns["node2"][1]
    assert {t.name: t.result["address"] for t in result} == {
        "ps:0": f"{node1}:2222",
        "worker:0": f"{node1}:2223",
        "worker:1": f"{node2}:2222",
    }  # CloudLab's ports
    assert [t.ended for t in result] == ["done-queue", "exited", "exited"]

    # node2's worker reaches the ps only through its NIC; on node1 the ps and worker 0 share lo
    w1, ps, w0 = (result[n].result for n in ("worker:1", "ps:0", "worker:0"))
    assert _traffic(w1, "lan0") > 100_000 and _traffic(w1, "lo") < 0.05 * _traffic(w1, "lan0")
    assert _traffic(ps, "lan0") > 100_000 and _traffic(w0, "lo") > 100_000

    out = tmp_path / "csv"
    done = labkit("nodes", "csv", run_dir, "--out", out)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        f"{node1}_ps-0.csv",
        f"{node1}_worker-0.csv",
        f"{node2}_worker-1.csv",
    ]
    frame = pd.read_csv(out / f"{node2}_worker-1.csv")
    assert frame["net_recv_lan0"].sum() > 50_000 and "net_recv_lo" in frame
    _no_children()
