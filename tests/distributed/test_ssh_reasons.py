"""What an ssh failure says (no cluster needed): ssh's own reason with its fix, the node as the
hosts file names it, and the kit's liveness options in whatever ssh command the user gives."""

import pytest

from labkit.distributed.launchers import ssh
from labkit.distributed.launchers.ssh import SshOptions, node_label, remote_failure_hint

PY = ".venv/bin/python"


WRAPPER = "# ssh -o BatchMode=yes -- 10.10.1.3 sh -c 'cd labkit 2>/dev/null || { ... }\n" + "  ...\n" * 15


@pytest.mark.parametrize(
    "said, means",
    [
        ("ssh: connect to host 10.10.1.3 port 22: Connection refused", "its sshd is not running"),
        ("ssh: connect to host 10.10.1.3 port 22: No route to host", "unreachable host: no route to it"),
        ("ssh: connect to host 10.10.1.3 port 22: Connection timed out", "unreachable host: it does not answer"),
        ("nosuch@10.10.1.3: Permission denied (publickey).", "the account does not exist there"),
        ("Host key verification failed.", "its host key is not in ~/.ssh/known_hosts"),
        (
            "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed.",
            "host key changed",
        ),
        ("ssh: Could not resolve hostname node9: Name or service not known", "its name does not resolve"),
    ],
)
def test_each_reason_of_ssh_is_named_with_its_line(said, means):
    hint = remote_failure_hint("10.10.1.3", 255, WRAPPER + said + "\n", "labkit", PY)
    assert hint.startswith("ssh to 10.10.1.3 failed: ") and means in hint, hint
    assert f"(ssh said: {said.splitlines()[0].strip()})" in hint


def test_an_unknown_reason_keeps_the_general_hint():
    assert "unreachable host, unknown host key or no key login" in remote_failure_hint(
        "h", 255, "# ssh\n", "labkit", PY
    )


def test_a_node_is_named_as_the_hosts_file_names_it(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n10.10.1.3\tnode2-link-0 node2  # CloudLab's\n")
    assert node_label("10.10.1.3", str(hosts)) == "node2 (10.10.1.3)"
    assert node_label("10.10.1.9", str(hosts)) == "10.10.1.9" and node_label("node2", str(hosts)) == "node2"
    assert node_label("10.10.1.3", str(tmp_path / "none")) == "10.10.1.3"


def test_a_wrong_address_is_named_by_the_node_the_tas_hosts_file_gives_it(tmp_path):
    """An address no /etc/hosts lists (a typo in the TA's hosts file) is still called by the name
    the hosts file the kit read gives it, in every message that names a node."""
    from labkit.wire.spec import read_hosts_file

    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.10.1.1 node0-link-0 node0\n10.10.1.9 node2-link-0 node2\n")
    assert read_hosts_file(hosts) == ["10.10.1.1", "10.10.1.9"]
    assert node_label("10.10.1.9", str(tmp_path / "no-etc-hosts")) == "node2 (10.10.1.9)"
    hint = remote_failure_hint(
        "10.10.1.9", 255, "ssh: connect to host 10.10.1.9 port 22: No route to host\n", "labkit", PY
    )
    assert hint.startswith("ssh to node2 (10.10.1.9) failed: unreachable host"), hint


@pytest.mark.parametrize(
    "command",
    [
        "ssh -o BatchMode=yes",
        "ssh -i ~/.ssh/cloudlab -l you -o ServerAliveInterval=60",
        "/usr/bin/ssh -oServerAliveCountMax=100",
        "sshpass -p x ssh -l you",
    ],
)
def test_the_kits_liveness_options_come_first_in_any_ssh_command(command, monkeypatch):
    monkeypatch.setenv("LABKIT_SSH", command)
    argv = SshOptions.of().argv("10.10.1.2", "true")
    words = command.split()
    at = next(i for i, w in enumerate(words) if w.endswith("ssh")) + 1
    assert argv[:at] == words[:at] and tuple(argv[at : at + 6]) == ssh.LIVENESS + ssh.CONNECT
    assert argv[at + 6 : at + 6 + len(words) - at] == words[at:]
    assert SshOptions.of(argv[:-3]).ssh == tuple(argv[:-3])  # once


def test_a_users_own_connect_timeout_stays_the_only_one(monkeypatch):
    monkeypatch.setenv("LABKIT_SSH", "ssh -o ConnectTimeout=30")
    argv = SshOptions.of().argv("10.10.1.2", "true")
    assert [w for w in argv if "ConnectTimeout" in w] == ["ConnectTimeout=30"]


def test_the_default_command_has_them_once():
    assert SshOptions.of(list(ssh.DEFAULT_SSH)).ssh == ssh.DEFAULT_SSH
    assert " ".join(ssh.LIVENESS) in " ".join(ssh.DEFAULT_SSH)


def test_two_nodes_with_one_address_are_refused(tmp_path):
    from labkit.wire.spec import read_hosts_file

    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.10.1.1 node0-link-0 node0\n10.10.1.2 node1-link-0 node1\n10.10.1.2 node2-link-0 node2\n")
    with pytest.raises(
        ValueError,
        match="line 3: .* gives node2-link-0 node2 the address 10.10.1.2, which line 2 gives node1-link-0 node1",
    ):
        read_hosts_file(hosts)
    hosts.write_text("10.10.1.2:2222\n10.10.1.2:2300\n10.10.1.1 node0\n10.10.1.1 node0\n")  # a host's ports; a repeat
    assert read_hosts_file(hosts) == ["10.10.1.2:2222", "10.10.1.2:2300", "10.10.1.1", "10.10.1.1"]


def test_a_node_whose_session_broke_gets_nothing_more(tmp_path):
    """The teardown sends no signal and copies nothing from a node whose link went: another ssh
    would wait out the dead link (the cut link's test measured up to 95 s before)."""
    from labkit.distributed.launchers.base import TaskProcess
    from labkit.wire.spec import Task

    def task(index, host, rc, said):
        log = tmp_path / f"w{index}.log"
        log.write_text(f"some output\n{said}\n")
        tp = TaskProcess(Task("worker", index, f"{host}:2222"), None, [], "", {}, log, tmp_path / f"w{index}.ev")
        tp.returncode = rc
        return tp

    tps = [
        task(0, "10.10.1.2", 255, "Timeout, server 10.10.1.2 not responding."),
        task(1, "10.10.1.3", 255, "ssh: connect to host 10.10.1.3 port 22: Connection refused"),
        task(2, "10.10.1.4", 1, "Timeout, server 10.10.1.4 not responding."),
        task(3, "10.10.1.5", None, ""),
    ]
    assert ssh.lost_hosts(tps) == {"10.10.1.2"}
