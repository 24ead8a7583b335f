"""Emulated CloudLab nodes (``labkit.infra.cloudlab_local``): each node a host of its own on the
experiment LAN, with a real sshd and the experiment's account, and nothing left afterwards,
even when their owner is killed with SIGKILL."""

import glob
import os
import subprocess
import sys
import tempfile

import psutil
import pytest

from _cloudlab import cloudlab, mounts_here, user_exists_here, why_not
from helpers import wait_while

pytestmark = [pytest.mark.cloudlab]


def test_nodes_are_hosts_of_their_own_reached_by_key_only_ssh():
    with cloudlab(3) as lab:
        assert lab.up_s < 20, f"the nodes took {lab.up_s:.1f} s to come up"
        done = lab.sh("node0", "hostname; id -un; pwd; getent hosts node0 node1 node2")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[:3] == ["node0", "ta", "/home/ta"]
        assert [ln.split() for ln in lines[3:]] == [
            ["10.10.1.1", "node0-link-0", "node0"],
            ["10.10.1.2", "node1-link-0", "node1"],
            ["10.10.1.3", "node2-link-0", "node2"],
        ]
        # the guide's host key step, then a prompt-free login, as the account, on node2's own address
        done = lab.sh(
            "node0",
            "ssh-keyscan -H node1 node2 >> ~/.ssh/known_hosts 2>/dev/null && "
            "ssh -o BatchMode=yes node2 'hostname; id -un; pwd; ip -4 -o addr show lan0' && "
            "ssh -o BatchMode=yes node1 'ls -A ~'",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[:3] == ["node2", "ta", "/home/ta"] and "10.10.1.3/24" in done.stdout
        assert done.stdout.split()[-1] == ".ssh"  # node1's home is its own: empty but for its key
        # no password login, no root login
        done = lab.sh(
            "node0",
            "ssh -o BatchMode=yes -o PubkeyAuthentication=no node1 true; echo rc=$?; "
            "ssh -o BatchMode=yes root@node1 true; echo rc=$?",
        )
        assert done.stdout.split() == ["rc=255", "rc=255"], done.stdout + done.stderr
        assert "Permission denied (publickey)" in done.stderr
        # none of this is on this machine: no account, no mounts, no /etc/hosts lines
        assert not user_exists_here("ta") or lab.user != "ta"
        assert "labkit-home" not in mounts_here() and "node1-link-0" not in open("/etc/hosts").read()
        # a pulled cable: node1 unreachable, then back
        lab.set_link("node1", False)
        assert lab.sh("node0", "ssh -o BatchMode=yes -o ConnectTimeout=2 node1 true").returncode == 255
        lab.set_link("node1", True)
        assert lab.sh("node0", "ssh -o BatchMode=yes -o ConnectTimeout=5 node1 true").returncode == 0


HOLD = [sys.executable, "-m", "labkit", "cloudlab-local", "--nodes", "2"]


def test_the_command_leaves_nothing_when_killed_with_sigkill():
    """``make cloudlab-local`` is ``python -m labkit cloudlab-local``: killed with SIGKILL, its
    nodes' holders stop sshd and every session, and remove its log folder."""
    if why_not():
        pytest.skip(why_not())
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "labkit-cloudlab-*")))
    owner = subprocess.Popen(HOLD, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for line in owner.stdout:
            if "holding the nodes" in line:
                break
        tree = psutil.Process(owner.pid).children(recursive=True)
        assert sum("sshd" in " ".join(p.cmdline()) for p in tree) == 2, [p.cmdline() for p in tree]
    finally:
        owner.kill()
        owner.wait()
    wait_while(
        lambda: [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE],
        20,
        0.1,
        "the nodes' processes to end with their owner",
    )
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "labkit-cloudlab-*"))) == before
