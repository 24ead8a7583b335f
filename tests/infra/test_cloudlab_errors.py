"""Errors that name their cause at once, on 3 emulated CloudLab nodes with real sshd: ssh's own
reason and the node's name for each way a login fails, the healthy nodes' ok lines beside them,
a firewall within seconds, a node on another Python before its task starts, a link cut with the
guide's ``LABKIT_SSH``; and an account added on this machine, which changes nothing on the nodes.

The TA is ``ta`` on node0, in the kit's checkout (``_cloudlab.checkout``), with the other nodes
set up by ``nodes setup`` (``--install`` links this machine's .venv: the nodes reach no PyPI).
"""

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _cloudlab import checkout, cloudlab
from helpers import data_mirror

pytestmark = [pytest.mark.cloudlab, pytest.mark.cluster, pytest.mark.slow]

LINK_VENV = f"ln -sfn {shlex.quote(sys.prefix)} .venv"  # the nodes' make setup: this machine's venv, wherever it is
TINY = "--steps 100000 --train-limit 1000 --test-limit 200"


@pytest.fixture(scope="module")
def lab():
    mirror = data_mirror()
    with cloudlab(3, "1gbit") as lab:
        checkout(lab, mirror)
        done = ta(
            lab,
            "getent hosts node0 node1 node2 > ~/hosts.txt && "
            "ssh-keyscan -H $(awk '{print $1}' ~/hosts.txt) >> ~/.ssh/known_hosts 2>/dev/null && "
            f".venv/bin/python -m labkit nodes setup --hosts ~/hosts.txt --install {shlex.quote(LINK_VENV)} "
            f"--dataset mnist --data-mirror {shlex.quote(mirror)}",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        yield lab


def ta(lab, command: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """A command as the TA types it on node0, in ~/labkit."""
    return lab.sh("node0", f"cd labkit && {command}", timeout=timeout, env=env)


def check(lab, env: dict | None = None) -> subprocess.CompletedProcess:
    return ta(lab, ".venv/bin/python -m labkit nodes check --hosts ~/hosts.txt", env=env)


def test_each_ssh_failure_names_its_cause_and_node_beside_the_healthy_nodes(lab):
    # sshd stopped on node2: connection refused; node1 is still ok
    lab.sshd["node2"].kill(grace=2)
    try:
        done = check(lab)
    finally:
        lab._start_sshd("node2")
        lab._wait_sshd()
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "node2 (10.10.1.3): check versions failed (exit 255); ssh to node2 (10.10.1.3) failed: nothing accepts "
        "ssh there: its sshd is not running (ssh said: ssh: connect to host 10.10.1.3 port 22: Connection "
        "refused)" in done.stderr
    ), done.stderr
    assert "[10.10.1.2] ok: node1," in done.stdout, done.stdout

    # a user the nodes do not have: the login is refused
    done = check(lab, env={"LABKIT_SSH": "ssh -o BatchMode=yes -l nosuch"})
    assert (
        done.returncode == 1
        and "ssh to node1 (10.10.1.2) failed: it refused the login: the account does not exist there" in done.stderr
    ), done.stderr

    # node1's address answers with another host key (a reinstalled node): the changed key, and the fix
    done = ta(
        lab,
        "ssh-keyscan node2 2>/dev/null | sed 's/^node2/10.10.1.2/' > ~/wrong_known_hosts && "
        "ssh-keyscan node2 2>/dev/null | sed 's/^node2/10.10.1.3/' >> ~/wrong_known_hosts",
    )
    assert done.returncode == 0
    done = check(lab, env={"LABKIT_SSH": "ssh -o BatchMode=yes -o UserKnownHostsFile=~/wrong_known_hosts"})
    assert (
        done.returncode == 1
        and "ssh to node1 (10.10.1.2) failed: its host key changed" in done.stderr
        and "ssh-keygen -R 10.10.1.2" in done.stderr
    ), done.stderr

    # a link down: unreachable
    lab.set_link("node2", False)
    try:
        done = check(lab, env={"LABKIT_SSH": "ssh -o BatchMode=yes -o ConnectTimeout=3"})
    finally:
        lab.set_link("node2", True)
    assert done.returncode == 1 and "ssh to node2 (10.10.1.3) failed: unreachable host" in done.stderr, done.stderr
    assert "[10.10.1.2] ok: node1," in done.stdout


def test_a_hosts_file_giving_two_nodes_one_address_is_refused(lab):
    done = ta(
        lab,
        "sed 's/^10.10.1.3/10.10.1.2/' ~/hosts.txt > ~/dup.txt && "
        ".venv/bin/python -m labkit cluster --mode cluster2 --hosts ~/dup.txt --print-commands",
    )
    assert (
        done.returncode != 0
        and "line 3" in done.stderr
        and "gives node2-link-0 node2 the address 10.10.1.2, which line 2 gives node1-link-0 node1" in done.stderr
    ), done.stdout + done.stderr


def test_a_firewall_is_named_within_seconds(lab):
    if lab.sh("node2", "command -v iptables", user=False).returncode != 0:
        pytest.skip("no iptables (Debian's package; .ci/run installs it)")
    fw = "iptables -A INPUT -p tcp --dport 2222:2239 -i lo -j ACCEPT && iptables -A INPUT -p tcp --dport 2222:2239 -j DROP"
    assert lab.sh("node2", fw, user=False).returncode == 0
    t0 = time.monotonic()
    try:  # the default start timeout, 180 s
        done = ta(
            lab,
            f".venv/bin/python -m labkit run ps_sgd --hosts ~/hosts.txt --ps 1 --workers 3 --lab errors "
            f"--args {shlex.quote(TINY)}",
        )
    finally:
        lab.sh("node2", "iptables -F INPUT", user=False)
    took = time.monotonic() - t0
    assert done.returncode == 1 and "did not bring every server up" in done.stderr, (
        done.stdout[-2000:] + done.stderr[-3000:]
    )
    assert (
        "worker:2 on 10.10.1.3:2222 (node2 (10.10.1.3), port 2222) listens on its node, but this machine "
        "cannot connect to it: a firewall" in done.stderr
    ), done.stderr[-3000:]
    print(f"\nthe firewall on node2 named after {took:.1f} s (TensorFlow's start on the nodes included)")
    assert took < 90, f"the firewall took {took:.0f} s to be named"


def test_a_node_on_another_python_is_stopped_before_its_task_starts(lab):
    other = sorted(Path("/root/.pyenv/versions").glob("3.12*/bin/python3"))
    if not other:
        pytest.skip("no second Python minor version here to make a node's .venv with")
    assert lab.sh("node2", f"cd labkit && rm .venv && {other[0]} -m venv --without-pip .venv").returncode == 0
    try:
        t0 = time.monotonic()
        done = ta(
            lab,
            f".venv/bin/python -m labkit run ps_sgd --hosts ~/hosts.txt --ps 1 --workers 3 --lab errors "
            f"--args {shlex.quote(TINY)}",
        )
        took = time.monotonic() - t0
    finally:
        lab.sh("node2", f"cd labkit && rm -rf .venv && {LINK_VENV}")
    assert (
        done.returncode == 1
        and "error: node2 (10.10.1.3) runs other versions than this machine "
        "(keras none, labkit none, numpy none, python 3.12"
        in done.stderr
    ), done.stderr[-3000:]
    assert "rm -rf .venv && make setup PYTHON=python3.11" in done.stderr
    assert "No module named" not in done.stderr and "exited with code" not in done.stderr  # no task failed first
    print(f"\nthe node on Python 3.12 named after {took:.1f} s")


def test_a_link_cut_is_noticed_with_the_guides_labkit_ssh(lab):
    """``LABKIT_SSH`` as docs/cluster.md shows it has no ServerAlive option: the kit's own come first."""
    env = {"LABKIT_SSH": "ssh -o BatchMode=yes"}
    run = subprocess.Popen(
        lab.command(
            "node0",
            f"cd labkit && .venv/bin/python -m labkit run ps_sgd --hosts ~/hosts.txt "
            f"--ps 1 --workers 2 --lab linkcut --args {shlex.quote(TINY)}",
            env=env,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = lab.home("node1") / "labkit/runs/linkcut"
    deadline = time.monotonic() + 180
    while not (runs.exists() and list(runs.glob("*/worker-1.hello.json"))):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.2)
    lab.set_link("node1", False)
    t0 = time.monotonic()
    try:
        out, err = run.communicate(timeout=120)
    finally:
        lab.set_link("node1", True)
    took = time.monotonic() - t0
    assert run.returncode == 1 and "the ssh connection to node1 (10.10.1.2) ended while the task ran" in err, err[
        -3000:
    ]
    print(f"\nthe cut link noticed after {took:.1f} s")
    # ssh's liveness options (5 s x 3) notice in 15 s; stopping the other tasks and exiting follow, and
    # nothing more goes to the lost node (ssh.lost_hosts). Measured 24-31 s, two cores busy; while the
    # teardown still copied results back from the lost node, 40-95 s; without the options, over 150 s
    assert took < 90, f"the cut link went unnoticed for {took:.0f} s"


def test_an_account_added_here_leaves_the_nodes_accounts_alone(lab):
    """``useradd`` replaces /etc/passwd by a rename: done here with the same contents."""
    new = "/etc/passwd.labkit-test"
    shutil.copy2("/etc/passwd", new)
    os.rename(new, "/etc/passwd")
    done = lab.sh("node0", "id -un && ssh -o BatchMode=yes 10.10.1.2 id -un")
    assert done.stdout.split() == ["ta", "ta"], done.stdout + done.stderr
