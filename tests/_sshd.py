"""A real OpenSSH server for tests: Debian's ``sshd`` (package openssh-server) on loopback
aliases, with its own config, host key and client key made in a temporary folder, so a test
logs in as the current user exactly as the launcher does on a cluster, and nothing of the
machine's own ssh setup (no ~/.ssh, no system sshd) is read or changed."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from helpers import WaitTimeout, wait_until
from labkit.wire import spec as cluster
from labkit.core.proc import OwnedProcess, tail

CONFIG = """\
Port {port}
{listen}
HostKey {dir}/host_key
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
MaxStartups 100
LogLevel ERROR
"""


def _sshd() -> str:
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None)
    if found is None:
        pytest.skip("OpenSSH's sshd is not installed (apt install openssh-server): the real-ssh tests need it")
    return found


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def sshd(folder: Path, hosts=("127.0.0.2", "127.0.0.3")):
    """Run sshd on ``hosts`` (one free port on all of them) until the block ends; yields
    ``(ssh, pid)``: the ssh command (argv) that logs into any of them without a prompt, and
    the daemon's pid. Skips, saying why, where
    sshd is missing or cannot start (no privilege separation directory, no loopback aliases)."""
    binary = _sshd()
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "labkit-test", "-f", folder / key],
            check=True,
            timeout=60,
        )
    shutil.copyfile(folder / "client_key.pub", folder / "authorized_keys")
    port = cluster.free_ports(1)[0]
    (folder / "sshd_config").write_text(
        CONFIG.format(port=port, dir=folder, listen="\n".join(f"ListenAddress {h}" for h in hosts))
    )
    host_key = " ".join((folder / "host_key.pub").read_text().split()[:2])
    (folder / "known_hosts").write_text("".join(f"[{h}]:{port} {host_key}\n" for h in hosts))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory, as the package makes
    check = subprocess.run([binary, "-t", "-f", folder / "sshd_config"], capture_output=True, text=True, timeout=60)
    if check.returncode != 0:
        pytest.skip(f"sshd refuses its test config here: {check.stderr.strip()}")
    ssh = [
        "ssh",
        "-F",
        "/dev/null",
        "-p",
        str(port),
        "-i",
        str(folder / "client_key"),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={folder / 'known_hosts'}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "LogLevel=ERROR",
    ]
    with OwnedProcess([binary, "-D", "-e", "-f", folder / "sshd_config"], folder / "sshd.log") as daemon:

        def listening() -> bool:
            if daemon.poll() is not None:
                raise WaitTimeout(f"sshd exited ({daemon.poll()})")
            return all(_accepts(h, port) for h in hosts)

        try:
            wait_until(listening, 30, 0.05, "sshd to listen")
        except WaitTimeout as e:
            pytest.skip(f"sshd did not listen on {', '.join(hosts)} port {port} ({e}): {tail(folder / 'sshd.log', 5)}")
        login = subprocess.run(
            [*ssh, "--", hosts[0], "true"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
        if login.returncode != 0:
            pytest.skip(
                f"cannot log in to the test sshd as this user: {login.stderr.strip()} {tail(folder / 'sshd.log', 5)}"
            )
        yield ssh, daemon.pid
