"""Before any task of a cluster starts, a local one included, every node it reaches over ssh is
asked at once: a node ssh cannot reach fails the start within ssh's own time for it, named as
the TA's hosts file names it, with ssh's reason and the fix; nothing was started, nothing is left."""

import stat
import sys
import time

import psutil
import pytest

from labkit.distributed.launch import Cluster, TaskFailed
from labkit.distributed.launchers.ssh import Unreachable
from labkit.wire import spec as cluster

# A stand-in for ssh: the hosts in unreachable.txt take DELAY s and fail as ssh does (exit 255, its
# own words); any other host runs the command here, from the kit's remote directory.
FAKE_SSH = """#!/bin/bash
while [ $# -gt 0 ]; do case "$1" in -o) shift 2 ;; --) shift; break ;; -*) shift ;; *) break ;; esac; done
host=$1; shift
if grep -qx "$host" "$(dirname "$0")/unreachable.txt"; then
    sleep {delay}; echo "ssh: connect to host $host port 22: No route to host" >&2; exit 255
fi
exec bash -c "$1"
"""
DELAY_S = 2.0


def _cluster(tmp_path, hosts_lines: str, unreachable: list[str]) -> Cluster:
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(FAKE_SSH.format(delay=DELAY_S))
    ssh.chmod(ssh.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "unreachable.txt").write_text("".join(f"{h}\n" for h in unreachable))
    (tmp_path / "kit").mkdir()
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(hosts_lines)
    return Cluster(
        cluster.from_hosts_file(hosts, ps=1, workers=hosts_lines.count("\n")),
        "ps_sgd",
        args={"steps": 100},
        lab="precheck",
        run_dir=tmp_path / "run",
        launcher_options={"ssh": [str(ssh)], "remote_dir": str(tmp_path / "kit"), "remote_python": sys.executable},
    )


@pytest.fixture(autouse=True)
def _own_host_names(monkeypatch):
    """The names learnt from this test's hosts file stay in this test."""
    monkeypatch.setattr(cluster, "HOST_NAMES", {})


def test_unreachable_nodes_are_named_before_any_task_starts(tmp_path):
    """node0 is this machine (its task would run here); node1 answers; node2 and node3, whose
    addresses are wrong, do not: both named, asked at once, and no task started, not even here."""
    c = _cluster(
        tmp_path,
        "127.0.0.1 node0-link-0 node0\n10.10.1.2 node1-link-0 node1\n"
        "10.10.1.8 node2-link-0 node2\n10.10.1.9 node3-link-0 node3\n",
        unreachable=["10.10.1.8", "10.10.1.9"],
    )
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as info:
        c.start()
    took = time.monotonic() - t0
    message = str(info.value)
    assert isinstance(info.value, TaskFailed) and message.startswith("no task was started: 2 node(s)"), message
    for node, address in (("node2", "10.10.1.8"), ("node3", "10.10.1.9")):
        assert (
            f"ssh to {node} ({address}) failed: unreachable host: no route to it (its link is down, or the address "
            f"is not on this network) (ssh said: ssh: connect to host {address} port 22: No route to host)"
        ) in message, message
    assert "node1" not in message and "node0" not in message
    assert took < 2 * DELAY_S, f"the nodes were asked one after another ({took:.1f} s)"
    assert not list((tmp_path / "run").glob("*.log")), "a task was started"
    assert not any(p.proc for p in c._procs), "a task was spawned"
    assert not psutil.Process().children(recursive=True)


def test_the_start_goes_on_when_every_node_answers(tmp_path):
    """The same check passes nodes that answer, once per node (here: no task is started, only asked)."""
    c = _cluster(
        tmp_path,
        "127.0.0.1 node0-link-0 node0\n10.10.1.2 node1-link-0 node1\n10.10.1.3 node2-link-0 node2\n",
        unreachable=[],
    )
    ssh = c._launchers["worker:1"]
    ssh.precheck([p for p in c._procs if p.launcher is ssh])
    assert ssh._checked == {"10.10.1.2", "10.10.1.3"}
