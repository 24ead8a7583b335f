"""Emulated CloudLab nodes on this machine: the experiment a TA meets, with real ssh, owned.

    with LocalCloudLab(4, link="1gbit") as lab:          # node0..node3: 10.10.1.1-4 on a shaped LAN
        lab.sh("node0", "ssh node1 hostname")            # -> node1, as the experiment's user
        lab.home("node1") / "labkit"                     # node1's files, seen from here

``make cloudlab-local NODES=4`` brings the same up and opens a shell on node0. Each node has its
own network (``labkit.infra.netem``), host name, mounts, an account that exists only inside the
nodes and a real sshd, so the tests can follow docs/cluster.md word for word. Everything lives in
the nodes' namespaces: when the owner stops, or dies even by SIGKILL, the kernel frees it all,
and nothing is added to this machine but the owner's log folder.

Needs root (mount namespaces, sshd); ``unavailable()`` says what is missing, for a clear skip.
More in docs/internals.md, section labkit.infra (what a node is, what it sees of this machine).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labkit.infra import netem
from labkit.core.proc import OwnedProcess, StopAtExit

SUBNET = "10.10.1.0/24"  # CloudLab's experiment LAN
USER = "ta"
HOME_ROOT = "/home"
NODE_DIR = "/run/labkit-node"  # a node's own files (on its /run tmpfs)
SSH_PORT = 22
START_TIMEOUT_S = 30

SSHD_CONFIG = """\
Port {port}
ListenAddress 0.0.0.0
HostKey {node_dir}/ssh_host_ed25519_key
PidFile /run/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers {user}
UsePAM no
PrintMotd no
MaxStartups 100:30:200
LogLevel INFO
"""


def unavailable() -> str:
    """Why emulated nodes cannot run here ('' if they can)."""
    if not sys.platform.startswith("linux"):
        return f"emulated nodes need Linux namespaces; this is {sys.platform}"
    if os.geteuid() != 0:
        return "emulated nodes need root (mount and UTS namespaces, sshd)"
    missing = [
        p
        for p in ("sshd", "ssh", "ssh-keygen", "setpriv", "nsenter", "unshare", "ip", "tc")
        if shutil.which(p) is None and not os.access(f"/usr/sbin/{p}", os.X_OK)
    ]
    if missing:
        return (
            f"no {', '.join(missing)}: install openssh-server, openssh-client, util-linux and iproute2 (.ci/run does)"
        )
    mode, why = netem.availability("1gbit")
    return "" if mode == "root" else f"cannot emulate the LAN: {why or 'not in root mode'}"


def _own_etc(files) -> list[str]:
    """Shell lines that give a node an ``/etc`` of its own: an overlay on this machine's, the
    node's ``files`` (written to ``NODE_DIR`` first) copied into its upper layer. A file bound
    over ``/etc/passwd`` would not do: ``useradd`` here replaces ``/etc/passwd`` by a rename,
    which detaches such a mount, and the account would vanish from every node."""
    lines = [
        f"mkdir -p {NODE_DIR}/etc.upper {NODE_DIR}/etc.work",
        f"mount -t overlay labkit-etc -o lowerdir=/etc,upperdir={NODE_DIR}/etc.upper,workdir={NODE_DIR}/etc.work /etc",
    ]
    return lines + [f"cp --preserve=mode {NODE_DIR}/{f} /etc/{f}" for f in files]


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_id(start: int = 20000) -> int:
    """A uid (and gid) no account of this machine has."""
    used = {p.pw_uid for p in pwd.getpwall()} | {p.pw_gid for p in pwd.getpwall()}
    return next(i for i in range(start, 60000) if i not in used)


def _python_root() -> str:
    """The top directory under /root that holds this interpreter ('' if it is elsewhere)."""
    real = Path(os.path.realpath(sys.executable))
    try:
        first = real.relative_to("/root").parts[0]
    except (ValueError, IndexError):
        return ""
    return f"/root/{first}"


OWN_ROOTS = ("/root", "/home")  # a node mounts its own tmpfs on these


def kit_paths() -> list[str]:
    """What the account must read on a node: the kit's checkout, its venv, the Python under it."""
    import labkit

    checkout = Path(labkit.__file__).resolve().parents[1]
    return [str(checkout), os.path.realpath(sys.prefix), _python_root() or os.path.realpath(sys.base_prefix)]


def closed_folder(path: str) -> str:
    """The folder a node must cover for the account to reach ``path``: its own ``/root`` or
    ``/home`` when ``path`` is under one, else the topmost ancestor others may not enter
    (mode without o+x); '' when the account reaches ``path`` as it is."""
    parts = Path(path).parts
    for own in OWN_ROOTS:
        if Path(path).is_relative_to(own) and Path(path) != Path(own):
            return own
    for i in range(2, len(parts)):
        folder = str(Path(*parts[:i]))
        try:
            if not os.stat(folder).st_mode & 0o001:
                return folder
        except OSError:
            return ""
    return ""


def exposure(paths, covered_anyway=OWN_ROOTS) -> tuple[list[str], list[str]]:
    """(paths to bind back, folders to cover) for an account to see ``paths``: each real path that
    needs it, once (none inside another), and each closed folder once (none inside another, or
    inside ``covered_anyway``: a node covers its own root and home itself)."""
    real = sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)})
    real = [p for p in real if not any(p != q and Path(p).is_relative_to(q) for q in real)]
    needed = [(p, closed_folder(p)) for p in real]
    binds = [p for p, folder in needed if folder]
    folders = sorted({folder for _, folder in needed if folder and folder not in covered_anyway})
    folders = [f for f in folders if not any(f != g and Path(f).is_relative_to(g) for g in [*folders, *covered_anyway])]
    return binds, folders


def expose_lines(paths, aside: str, *, covered_anyway=OWN_ROOTS, then=(), writable: str = "") -> list[str]:
    """Shell lines for root in a mount namespace of its own, after which every account there reads
    each of ``paths`` at its own path, under whatever folder only root may enter (``exposure``):
    each is bound aside (under ``aside``, gone at the end), each closed folder covered by a tmpfs
    of mode 711, ``then`` run (a node mounts its own /root and /home there), and each path bound
    back, read-only but for ``writable``. Nothing outside the namespace changes."""
    binds, folders = exposure(paths, covered_anyway)
    spots = [shlex.quote(f"{aside}/{i}") for i in range(len(binds))]
    lines = []
    for path, where in zip(binds, spots):  # before the covers hide them
        lines += [f"mkdir -p {where}", f"mount --bind {shlex.quote(path)} {where}"]
    lines += [f"mount -t tmpfs -o mode=711,size=1m labkit-closed {shlex.quote(f)}" for f in folders]
    lines += list(then)
    for path, where in zip(binds, spots):
        lines += [f"mkdir -p {shlex.quote(path)}", f"mount --bind {where} {shlex.quote(path)}"]
        lines += [] if path == writable else [f"mount -o remount,bind,ro {shlex.quote(path)}"]
        lines += [f"umount {where}", f"rmdir {where}"]
    return lines


_LIVE = StopAtExit()


class LocalCloudLab:
    """``nodes`` emulated CloudLab nodes (a count: node0, node1, ...; or names) on ``link``
    (``netem.parse_link``), each with an sshd and the account ``user``. ``log_dir``: where sshd
    and the namespace holders log (default: a temporary folder, removed at the end);
    ``shared_home``: one home for the account on every node; ``expose``: paths of this machine
    the account reads on every node besides the kit's (see the module docstring)."""

    def __init__(
        self,
        nodes=4,
        link="1gbit",
        user: str = USER,
        subnet: str = SUBNET,
        log_dir=None,
        grace: float = 5.0,
        shared_home: bool = False,
        expose=(),
    ):
        self.network = netem.EmulatedNetwork(
            nodes,
            link,
            log_dir=None,
            grace=grace,
            mode="root",
            subnet=subnet,
            driver=False,
            namespaces=("uts", "mount"),
        )
        self.names = self.network.names
        if not user.isidentifier() or user == "root":
            raise ValueError(f"user={user!r}: give an account name such as 'ta' (not root: CloudLab's is yours)")
        self.user, self.uid = user, _free_id()
        self.shared_home = bool(shared_home)
        self.expose = [str(p) for p in expose]
        self._own_logs = log_dir is None
        self.log_dir = Path(log_dir) if log_dir else None
        self.sshd: dict[str, OwnedProcess] = {}
        self.public_key = ""
        self.up_s: float | None = None
        self._state = "new"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LocalCloudLab":
        why = unavailable()
        if why:
            raise netem.EmulationUnavailable(f"cannot emulate CloudLab nodes here: {why}")
        t0 = time.monotonic()
        self.log_dir = self.log_dir or Path(tempfile.mkdtemp(prefix="labkit-cloudlab-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.network.log_dir = self.log_dir / "network"
        if self._own_logs:
            self.network.orphaned = self.log_dir  # the switch's holder removes it if we die unstopped
        self._state = "starting"
        _LIVE.add(self)
        try:
            self.network.start()
            if self.shared_home:
                self._shared_home().mkdir(mode=0o755)
                os.chown(self._shared_home(), self.uid, self.uid)
            for name in self.names:
                self._prepare(name)
            self._keys()
            for name in self.names:
                self._start_sshd(name)
            self._wait_sshd()
        except BaseException:
            self.stop()
            raise
        self._state = "running"
        self.up_s = time.monotonic() - t0
        return self

    def stop(self) -> list[str]:
        """Stop every sshd and session, free the namespaces (and with them every node's files);
        returns what was left (nothing, or a bug)."""
        if self._state in ("new", "stopped"):
            return []
        for daemon in self.sshd.values():
            daemon.kill(grace=2)
        left = self.network.stop()
        _LIVE.discard(self)
        if self._own_logs and self.log_dir is not None and not left:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        self._state = "stopped"
        return left

    def leftovers(self) -> list[str]:
        return self.network.leftovers()

    def __enter__(self) -> "LocalCloudLab":
        return self.start() if self._state == "new" else self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    # ------------------------------------------------------------------ views
    def address(self, node: str) -> str:
        return self.network.address(node)

    def addresses(self) -> dict[str, str]:
        return self.network.addresses()

    @property
    def home_dir(self) -> str:
        return f"{HOME_ROOT}/{self.user}"

    def path(self, node: str, path: str) -> Path:
        """``path`` as ``node`` sees it (its own /run, /home, /root), reachable from here."""
        return Path(f"/proc/{self.network.nodes[node].pid}/root") / path.lstrip("/")

    def home(self, node: str) -> Path:
        """The account's home on ``node``, seen from here (read it; files written through it
        belong to root)."""
        return self.path(node, self.home_dir)

    def etc_hosts(self) -> str:
        """The nodes' /etc/hosts: CloudLab's layout (``10.10.1.2 node1-link-0 node1``)."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{a}\t{n}-link-0 {n}" for n, a in self.addresses().items()]
        return "\n".join(lines) + "\n"

    def table(self) -> str:
        rows = [("node", "address", "ssh", "link")] + [
            (n, a, f"{self.user}@{n}:{SSH_PORT}", str(self.network.link)) for n, a in self.addresses().items()
        ]
        w = [max(len(r[c]) for r in rows) for c in range(4)]
        return "\n".join("  ".join(f"{r[c]:<{w[c]}}" for c in range(4)).rstrip() for r in rows)

    # ------------------------------------------------------------------ running on a node
    def command(self, node: str, command: str, user: bool = True, env: dict | None = None) -> list[str]:
        """argv that runs the shell ``command`` on ``node``: as the account, from its home, with a
        login shell's environment (as after ``ssh node``) plus ``env``; or as the node's root."""
        extra = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
        if not user:
            return self.network.command(node, [*extra, "sh", "-c", command])
        as_user = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--init-groups", "--reset-env"]
        return self.network.command(node, [*as_user, *extra, "bash", "-lc", f"cd && {command}"])

    def sh(
        self,
        node: str,
        command: str,
        user: bool = True,
        env: dict | None = None,
        timeout: float = 300,
        check: bool = False,
    ) -> subprocess.CompletedProcess:
        """Run ``command`` on ``node`` (``command``); its output, as text."""
        done = subprocess.run(
            self.command(node, command, user, env),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"on {node}: {command!r} failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-2000:]}"
            )
        return done

    def set_link(self, node: str, up: bool) -> None:
        """Pull ``node``'s cable (``up=False``) or plug it back."""
        self.network.set_link(node, up)

    # ------------------------------------------------------------------ building
    def _prepare(self, node: str) -> None:
        env = {"NODE": node, "NODE_DIR": NODE_DIR}
        home = self.home_dir
        own = [  # the node's own root and home, in place before the kit's paths are bound back into them
            "mount -t tmpfs -o mode=711,size=16m labkit-root /root",
            f"mount -t tmpfs -o mode=755,size=4g labkit-home {HOME_ROOT}",
            f"mkdir -m 755 {home}",
        ]
        script = [
            "umask 022",
            f"hostname {shlex.quote(node)}",
            "mount -t tmpfs -o mode=755,size=64m labkit-run /run",
            f"mkdir -p /run/sshd /run/lock {NODE_DIR}",
            "chmod 755 /run/sshd",
        ]
        # the checkout writable, as through an open folder: root on a node grades from it
        kit = kit_paths()
        script += expose_lines([*kit, *self.expose], f"{NODE_DIR}/seen", then=own, writable=kit[0])
        if self.shared_home:
            script += [f"mount --bind {shlex.quote(str(self._shared_home()))} {home}"]
        script += [f"mkdir -p -m 700 {home}/.ssh", f"chown -R {self.uid}:{self.uid} {home}"]
        self._root(node, script, env)
        etc = {
            "hosts": self.etc_hosts(),
            "hostname": node + "\n",
            "passwd": Path("/etc/passwd").read_text().rstrip("\n")
            + f"\n{self.user}:x:{self.uid}:{self.uid}:experiment account:{home}:/bin/bash\n",
            "group": Path("/etc/group").read_text().rstrip("\n") + f"\n{self.user}:x:{self.uid}:\n",
            "shadow": _read_or_empty("/etc/shadow").rstrip("\n") + f"\n{self.user}:*:19000:0:99999:7:::\n",
            "sshd_config": SSHD_CONFIG.format(port=SSH_PORT, node_dir=NODE_DIR, user=self.user),
        }
        for name, text in etc.items():
            target = self.path(node, f"{NODE_DIR}/{name}")
            target.write_text(text)
            target.chmod(0o640 if name == "shadow" else 0o644)
        self._root(
            node,
            [
                *_own_etc(("hosts", "hostname", "passwd", "group", "shadow")),
                f"ssh-keygen -q -t ed25519 -N '' -C {node} -f {NODE_DIR}/ssh_host_ed25519_key",
            ],
            env,
        )

    def _shared_home(self) -> Path:
        return self.log_dir / "home"

    def _root(self, node: str, lines: list[str], env: dict) -> None:
        done = self.network.run(
            node, ["env", *(f"{k}={v}" for k, v in env.items()), "sh", "-ec", "\n".join(lines)], timeout=START_TIMEOUT_S
        )
        if done.returncode != 0:
            raise netem.NetworkSetupError(
                f"could not prepare emulated node {node}: {done.stderr.strip()}\nscript:\n" + "\n".join(lines)
            )

    def _keys(self) -> None:
        """node0's account gets a key of its own, which every node's authorized_keys lists."""
        first = self.names[0]
        self.sh(
            first,
            "ssh-keygen -q -t ed25519 -N '' -C \"$USER@$(hostname)\" -f ~/.ssh/id_ed25519",
            check=True,
            timeout=START_TIMEOUT_S,
        )
        self.public_key = (self.home(first) / ".ssh/id_ed25519.pub").read_text()
        for node in self.names[:1] if self.shared_home else self.names:
            self.sh(
                node,
                f"printf '%s' {shlex.quote(self.public_key)} >> ~/.ssh/authorized_keys && "
                f"chmod 600 ~/.ssh/authorized_keys",
                check=True,
                timeout=START_TIMEOUT_S,
            )

    def _start_sshd(self, node: str) -> None:
        argv = self.network.command(node, [_sbin("sshd"), "-D", "-e", "-f", f"{NODE_DIR}/sshd_config"])
        self.sshd[node] = OwnedProcess(argv, self.log_dir / f"sshd-{node}.log").start()

    def _wait_sshd(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = list(self.names)
        while waiting:
            for node in list(waiting):
                if self.sshd[node].poll() is not None:
                    raise netem.NetworkSetupError(
                        f"sshd on {node} exited with code {self.sshd[node].poll()}: {self.sshd[node].log_tail(10)}"
                    )
                if self.network.listening(node, SSH_PORT):
                    waiting.remove(node)
            if waiting and time.monotonic() > deadline:
                raise netem.NetworkSetupError(f"sshd did not listen within {START_TIMEOUT_S} s on {waiting}")
            time.sleep(0.02)


def session(
    nodes: int = 4,
    link: str = "1gbit",
    user: str = USER,
    command: str | None = None,
    slurm: bool = False,
    log=print,
    shared_home: bool = False,
) -> int:
    """``make cloudlab-local``: bring the nodes up (``slurm``: with a Slurm across them, and the
    account's home shared by the nodes; ``shared_home``: that home alone), then run ``command`` on
    node0 as the account (its exit code is ours), or open a login shell there when this is a
    terminal, or else hold the nodes until stdin closes; everything goes down afterwards, however
    this process ends."""
    with contextlib.ExitStack() as stack:
        lab = stack.enter_context(LocalCloudLab(nodes, link, user=user, shared_home=slurm or shared_home))
        log(
            f"{len(lab.names)} emulated CloudLab nodes up in {lab.up_s:.1f} s (link {lab.network.link}):\n{lab.table()}"
        )
        if slurm:
            from labkit.infra.minislurm import MiniSlurm

            cluster = stack.enter_context(MiniSlurm(nodes=lab))
            log(
                f"Slurm up in {cluster.up_s:.1f} s: slurmctld on {cluster.host}, a slurmd on every node, all idle; "
                f"the home of {lab.user} is the same folder on every node (a cluster's shared home). On any node: "
                f"`sinfo`, `salloc --nodes={len(lab.names)}`, then docs/cluster.md section 9."
            )
        else:
            shared = f" The home of {lab.user} is the same folder on every node." if lab.shared_home else ""
            log(
                f"On node0 as {lab.user}: `getent hosts {' '.join(lab.names)} > hosts.txt`, then docs/cluster.md.{shared}"
            )
        log("The nodes and everything on them go when this command ends.")
        if command:
            return subprocess.run(lab.command(lab.names[0], command)).returncode
        if sys.stdin.isatty():
            return subprocess.run(lab.command(lab.names[0], "exec bash -l")).returncode
        log("no terminal: holding the nodes until stdin closes (or Ctrl-C)")
        sys.stdin.read()
    return 0


def _read_or_empty(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


__all__ = ["LocalCloudLab", "session", "unavailable", "kit_paths", "exposure", "expose_lines", "SUBNET", "USER"]
