"""Where a student's code runs: a bubblewrap sandbox that shows it only what it needs, as a
user that owns nothing of the grader's.

Every process that runs a student's code (a notebook's kernel and the cluster it starts, the
probe importing the student's functions) and every verifier reading a student's files runs
inside ``bwrap``: as a uid leased to the run when the grader is root (dropped to with
``setpriv``; never host uid 0), in new PID and network namespaces (loopback only), on a file
system of read-only binds with the student's view of the kit, where submissions, other students'
work and the grader's output are simply not there; with no capabilities and a cleared
environment.

Memory and process limits come from ``labkit.grading.run.limits``; this module only builds
command lines. Sandboxes are a registry (``SANDBOXES``): ``bwrap``, and ``none`` for
``--no-sandbox`` runs (same command, unconfined). More in docs/internals.md, section
labkit.grading (each layer, and why ``bwrap --uid`` would not do).
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

APT_LINE = "sudo apt-get install bubblewrap"
# What every sandbox sees read-only: the system's programs and libraries, and the few files of
# /etc that programs read (not /etc as a whole).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "gai.conf",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "fonts",
    "mime.types",
    "protocols",
    "services",
    "os-release",
    "matplotlibrc",
)
INSIDE_HOME = "/tmp"  # the sandbox's own /tmp (mode 1777, sized), so the run's user can write its caches
UID_BASE, UID_COUNT = 1_900_000_000, 65536  # uids leased to runs under a root grader; no account owns them
LEASES = Path("/run/labkit-uids")  # one lock file per uid in use (root's; ``/tmp`` where /run is not writable)
DROP = ("--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs")


@dataclass
class Account:
    """Who a run's sandboxed processes are: a uid and gid leased to that run alone while it and its
    checks run (``uid`` None: the grader's own user, when it is not root and cannot switch)."""

    uid: int | None = None
    gid: int | None = None
    lock: int | None = None  # the lease's locked file descriptor

    @property
    def owner(self) -> tuple[int, int] | None:
        return (self.uid, self.gid) if self.uid is not None else None

    def release(self) -> None:
        if self.lock is not None:
            os.close(self.lock)  # closing the descriptor drops the lock
            self.lock = None


def lease_account() -> Account:
    """A uid and gid for one run: the grader's own when it is not root; under root, the first
    free one of ``UID_BASE .. UID_BASE + UID_COUNT`` from a random start, held by an exclusive
    ``flock`` on its lock file for as long as the run lasts (so concurrent batches, even of other
    grader processes, never share one), and skipped while any process still runs as it."""
    if os.geteuid() != 0:
        return Account()
    folder = _lease_folder()
    start = random.randrange(UID_COUNT)
    for i in range(UID_COUNT):
        uid = UID_BASE + (start + i) % UID_COUNT
        fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if uid_in_use(uid):
            os.close(fd)
            continue
        return Account(uid, uid, fd)
    raise OSError(f"all {UID_COUNT} sandbox uids from {UID_BASE} are in use")


def _lease_folder() -> Path:
    for folder in (LEASES, Path(tempfile.gettempdir()) / "labkit-uids-root"):
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            st = folder.lstat()
            if st.st_uid == 0 and (st.st_mode & 0o777) == 0o700 and not folder.is_symlink():
                return folder
        except OSError:
            continue
    raise OSError(f"no root-only folder for the sandbox uids' lock files ({LEASES})")


def uid_in_use(uid: int) -> bool:
    """Whether any process runs with ``uid`` as its real, effective, saved or file-system uid."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if str(uid).encode() in line.split()[1:]:
                            return True
                        break
        except OSError:
            continue
    return False


@dataclass
class View:
    """What one sandboxed process sees beyond the system and the Python environment.

    ``ro``/``rw``: host paths shown at the same path, read-only or read-write; ``overlays``:
    (host, inside) pairs bound read-only after everything else (the student's kit over the
    real package); ``scratch``: a private folder for the unconfined run's HOME and caches;
    ``account``: who runs inside; ``tmp_bytes``: the size of its /tmp and of its /dev/shm;
    ``file_bytes``: the largest file it may write; ``processes``: its RLIMIT_NPROC (a leased uid's)."""

    cwd: Path
    env: dict[str, str]
    scratch: Path
    ro: list[Path] = field(default_factory=list)
    rw: list[Path] = field(default_factory=list)
    overlays: list[tuple[Path, Path]] = field(default_factory=list)
    account: Account = field(default_factory=Account)
    tmp_bytes: int = 512 * 2**20
    file_bytes: int | None = None
    processes: int | None = None


def python_paths() -> list[Path]:
    """The interpreter's installation and the environment labkit runs in (a venv, usually), each
    at its own path and at its target's: a symlinked venv is entered by the link's name
    (``sys.executable``), whose ``pyvenv.cfg`` makes it the venv rather than the bare interpreter."""
    return sorted(
        {path for prefix in (sys.base_prefix, sys.prefix) for path in (Path(prefix).absolute(), Path(prefix).resolve())}
    )


def home_env(home: str) -> dict[str, str]:
    """HOME and the caches programs write there (IPython, Jupyter, matplotlib, Keras)."""
    return {
        "HOME": home,
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_CONFIG_HOME": f"{home}/.config",
        "IPYTHONDIR": f"{home}/.ipython",
        "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter-runtime",
        "MPLCONFIGDIR": f"{home}/.matplotlib",
        "KERAS_HOME": f"{home}/.keras",
    }


class Bubblewrap:
    """``bwrap`` with the namespaces and binds described in the module docstring."""

    name = "bwrap"
    confined = True

    def __init__(self, program: str = "bwrap"):
        self.program = program

    def unavailable(self) -> str | None:
        """Why this machine cannot run the sandbox (None when it can): missing, or refused. Tried
        as a run would use it: under root, dropping to a sandbox uid."""
        path = shutil.which(self.program)
        if path is None:
            return f"bubblewrap is not installed; install it with `{APT_LINE}`"
        missing = [tool for tool in ("setpriv", "prlimit", "nsenter") if shutil.which(tool) is None]
        if missing:
            return f"{', '.join(missing)} (util-linux) is missing; install it with `sudo apt-get install util-linux`"
        account = Account(UID_BASE, UID_BASE) if os.geteuid() == 0 else Account()
        cmd, env = self.command(
            ["true"], View(cwd=Path("/"), env={}, scratch=Path("/"), account=account, tmp_bytes=2**20)
        )
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bubblewrap could not start: {e}"
        if r.returncode != 0:
            return (
                f"bubblewrap cannot create namespaces here ({r.stderr.strip() or r.returncode}); allow "
                f"unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run as root"
            )
        return None

    def command(self, argv: list[str], view: View) -> tuple[list[str], dict[str, str]]:
        """``argv`` inside the sandbox, and the environment to start bwrap with."""
        args = [
            shutil.which(self.program) or self.program,
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
        ]
        if os.geteuid() != 0:  # bwrap makes a user namespace anyway; none may be made inside it
            args += ["--unshare-user", "--disable-userns"]
        elif view.account.uid is not None:  # only for setpriv, which drops them with root before the run starts
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        for p in SYSTEM:
            args += _bind("--ro-bind", Path(p))
        for name in ETC:
            args += _bind("--ro-bind", Path("/etc") / name)
        size = str(int(view.tmp_bytes))
        args += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--size",
            size,
            "--tmpfs",
            "/tmp",
            "--perms",
            "1777",
            "--size",
            size,
            "--tmpfs",
            "/dev/shm",
        ]
        ro, rw = python_paths() + [Path(p) for p in view.ro], [Path(p) for p in view.rw]
        args += _parents([*ro, *rw, *(Path(inside) for _, inside in view.overlays)])
        for p in ro:  # not checked on the host: a run's disk exists only in the namespace bwrap starts in
            args += ["--ro-bind", str(p), str(p)]
        for p in rw:
            args += ["--bind", str(p), str(p)]
        for host, inside in view.overlays:
            args += ["--ro-bind", str(host), str(inside)]
        # only the binds above are writable; nothing under /proc (sysctls, /proc/self/*) is
        args += ["--remount-ro", "/", "--remount-ro", "/proc", "--clearenv"]
        if view.account.uid is None:  # else the payload changes folder, once it is the run's user (0700 folders)
            args += ["--chdir", str(view.cwd)]
        # a leased uid has no passwd entry: getpass.getuser() and its users read the name from here
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "USER": "student",
            "LOGNAME": "student",
            **home_env(INSIDE_HOME),
            **view.env,
        }
        for k, v in env.items():
            args += ["--setenv", k, v]
        return args + ["--", *self.payload(view), *argv], {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    @staticmethod
    def payload(view: View) -> list[str]:
        """What runs first inside: the drop to the run's account (under root), then its rlimits."""
        drop = []
        if view.account.uid is not None:
            drop = [
                "setpriv",
                f"--reuid={view.account.uid}",
                f"--regid={view.account.gid}",
                *DROP,
                "--",
                "env",
                f"--chdir={view.cwd}",
                "--",
            ]
        caps = ["--core=0:0"]
        if view.file_bytes:
            caps.append(f"--fsize={int(view.file_bytes)}:{int(view.file_bytes)}")
        if view.processes and view.account.uid is not None:
            caps.append(f"--nproc={int(view.processes)}:{int(view.processes)}")
        return drop + ["prlimit", *caps, "--"]


class Unconfined:
    """``--no-sandbox``: the same command and environment, with nothing hidden or confined. The
    command still dies with its parent (util-linux's ``setpriv --pdeathsig``, where it exists)."""

    name = "none"
    confined = False

    def unavailable(self) -> str | None:
        return None

    def command(self, argv: list[str], view: View) -> tuple[list[str], dict[str, str]]:
        home = view.scratch / "home"
        home.mkdir(parents=True, exist_ok=True)
        # Not the grader's LABKIT_* settings, nor a Slurm allocation the grader may run in: a
        # notebook's cluster runs on this machine (inside an allocation the launcher would
        # otherwise start its tasks as job steps), as it does in the bwrap sandbox's clean env.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LABKIT_", "SLURM_"))}
        env.update(LANG=env.get("LANG", "C.UTF-8"), **home_env(str(home)), **view.env)
        setpriv = shutil.which("setpriv")
        return ([setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []) + list(argv), env


def _parents(targets: list[Path]) -> list[str]:
    """``--dir`` for every folder bwrap would otherwise create on its own to hold a mount point,
    mode 0555: bwrap makes them 0700 and root's, which a run's user could not walk through, and
    a grader that is not root owns them inside its user namespace, so with a write bit its runs
    could fill the grader's folder layout (in the sandbox's own /tmp) with look-alike files.
    Folders inside another mount point are left alone (they are that mount's own)."""
    outer = set(targets) | {Path(p) for p in SYSTEM}
    made = {Path(p) for p in ("/", "/tmp", "/dev", "/proc")}  # the sandbox's own, already there
    wanted = set()
    for t in targets:
        for parent in t.parents:
            if parent in made or any(parent == o or o in parent.parents for o in outer):
                continue
            wanted.add(parent)
    out = []
    for d in sorted(wanted, key=lambda p: len(p.parts)):
        out += ["--perms", "0555", "--dir", str(d)]
    return out


def _bind(option: str, path: Path) -> list[str]:
    """Bind ``path`` at the same place; a symlink (``/bin`` -> ``usr/bin``) is recreated as one."""
    if path.is_symlink():
        return ["--symlink", os.readlink(path), str(path)]
    if path.exists():
        return [option, str(path), str(path)]
    return []


SANDBOXES = {"bwrap": Bubblewrap(), "none": Unconfined()}
