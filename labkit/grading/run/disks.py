"""Each graded run's disk: a tmpfs of the rubric's size (``disk_mb``) that only the run's own
processes and the grader's see, and that disappears when the run is over or the grader dies.

A batch starts one *holder* process (this file, run as a script: it needs only the standard
library) that makes a mount namespace of its own and mounts a tmpfs per run on the grader's
request; everything of a run starts inside that namespace (``Holder.prefix``). So a run writes
at most ``disk_mb`` in all (work folder, sockets, check output), what it leaves is gone when the
grader unmounts it or dies, and the host has nothing to clean up. A tmpfs is memory: it counts
against the run's ``memory_mb``.

``Folders`` is the fallback where nothing is held (``--no-sandbox``, a Slurm node): host folders,
with the grader polling their size and ``RLIMIT_FSIZE`` capping each file.
More in docs/internals.md, section labkit.grading (the unprivileged case, the tmpfs's layout).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

PARTS = ("work", "ipc", "probe", "judge")
IPC_PREFIX = "lk-"  # a host folder's run: its kernel's sockets, in /tmp (``labkit.core.scratch``)
CONTAINER = "labkit-disks-"  # + the grader's pid: the host folder the holder mounts its runs' disks under
INODES_PER_MB = 64  # files a run may create per MB of disk (each costs kernel memory)
MAX_WALK = 200_000  # entries a usage walk of a host folder counts before calling it full

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_SLAVE = 2, 4, 4096, 16384, 1 << 19
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1


# ---------------------------------------------------------------------------------------------
# The grader's side


class TmpfsDisk:
    """One run's tmpfs in the holder's namespace: ``work`` is bound over ``bind`` (the job's work folder)."""

    polled = False

    def __init__(self, holder: "Holder", root: Path, bind: Path, size: int):
        self.holder, self.root, self.bind, self.size = holder, root, bind, size
        self.work, self.ipc, self.probe, self.judge = bind, root / "ipc", root / "probe", root / "judge"

    @property
    def prefix(self) -> list[str]:
        return self.holder.prefix

    def outside(self, path: Path) -> Path:
        """``path`` as the grader reaches it from outside the namespace."""
        return Path(f"/proc/{self.holder.pid}/root") / Path(path).relative_to("/")

    def used(self) -> int:
        """Bytes in use (0 once unmounted or unreadable)."""
        try:
            st = os.statvfs(self.outside(self.root))
        except OSError:
            return 0
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def full(self) -> bool:
        """Out of space or of files (what a run that hit its cap leaves)."""
        try:
            st = os.statvfs(self.outside(self.root))
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < 64 * 2**10 or st.f_favail < 2

    def over(self) -> bool:
        return False  # the kernel enforces the cap itself

    def close(self) -> None:
        """Unmount it (all it held is freed) and remove the empty host folder it covered."""
        self.holder.request(op="umount", root=str(self.root), bind=str(self.bind))
        try:
            self.bind.rmdir()
        except FileNotFoundError:
            pass


class Holder:
    """The batch's mount namespace, held by a child process that mounts on request."""

    def __init__(self):
        remove_stale()
        self.container = Path(tempfile.mkdtemp(prefix=f"{CONTAINER}{os.getpid()}-"))
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, str(self.container)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        line = self.proc.stdout.readline().decode()
        if not line.startswith("ready"):
            err = self.proc.stderr.read().decode().strip()
            self.close()
            raise OSError(f"the grader could not make a mount namespace for the runs' disks: {err or line}")
        self.pid = self.proc.pid
        self.userns = line.split()[1] == "userns"

    @property
    def prefix(self) -> list[str]:
        """A command line's start that runs the rest inside the namespace."""
        enter = [shutil.which("nsenter") or "nsenter", f"--target={self.pid}", "--mount"]
        return enter + (["--user", "--preserve-credentials"] if self.userns else []) + ["--"]

    def request(self, **cmd) -> None:
        if self.proc.poll() is not None:
            raise OSError(f"the grader's disk holder has ended (code {self.proc.returncode})")
        self.proc.stdin.write(json.dumps(cmd).encode() + b"\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline() or b'{"error": "no reply"}')
        if reply.get("error"):
            raise OSError(f"{cmd['op']}: {reply['error']}")

    def open(self, bind: Path, size_bytes: int, uid: int | None, gid: int | None) -> TmpfsDisk:
        root = self.container / uuid.uuid4().hex[:16]
        size = int(size_bytes)
        self.request(
            op="mount",
            root=str(root),
            bind=str(bind),
            size=size,
            inodes=max(1024, size // 2**20 * INODES_PER_MB),
            uid=uid,
            gid=gid,
        )
        return TmpfsDisk(self, root, bind, size)

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()
        try:
            self.container.rmdir()
        except OSError:  # a namespace still held open by a process the grader did not end (reported by its run)
            pass


class FolderDisk:
    """A host folder: the grader polls its size (``over``), ``RLIMIT_FSIZE`` caps each file."""

    polled = True
    prefix: list = []

    def __init__(self, work: Path, checks: Path, size: int, owner: tuple | None, keep: bool):
        self.work, self.size, self.keep = work, size, keep
        from labkit.core import scratch  # here: the holder runs this file with the standard library alone

        # short: a Unix socket path has 107 bytes at most; held by the grader's lock, so a killed grader's is removed
        self.ipc = scratch.make(IPC_PREFIX)
        self.probe, self.judge = checks / "probe", checks / "judge"
        for d in (self.probe, self.judge):
            d.mkdir(parents=True, exist_ok=True)
        for d in (self.ipc, self.probe, self.judge):
            if owner:
                os.chown(d, *owner)
            os.chmod(d, 0o700)
        if owner:  # a run of another machine's may have left it to another uid
            hand_over(self.work, owner)
        os.chmod(self.work, 0o700)

    def outside(self, path: Path) -> Path:
        return Path(path)

    def used(self) -> int:
        return usage(self.work) + usage(self.ipc)

    def full(self) -> bool:
        return self.used() >= self.size

    def over(self) -> bool:
        return self.used() > self.size

    def close(self) -> None:
        from labkit.core import scratch

        scratch.release(self.ipc)
        if not self.keep:  # rmtree works on file descriptors: a link left in the folder is removed, not followed
            shutil.rmtree(self.work, ignore_errors=True)


class Folders:
    """Disks as host folders; ``keep``: leave the work folders for another machine's grader."""

    prefix: list = []

    def __init__(self, keep: bool = False):
        self.keep = keep

    def open_folder(self, work: Path, checks: Path, size_bytes: int, owner) -> FolderDisk:
        return FolderDisk(work, checks, int(size_bytes), owner, self.keep)

    def close(self) -> None:
        pass


def _containers() -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"{CONTAINER}*-*"))


def remove_stale() -> list[Path]:
    """The empty host folders that killed graders' holders covered (their mounts ended with them)."""
    return STALE.sweep()


if __name__ != "__main__":  # the holder (this file as a script, -I -S) has no labkit to import
    from labkit.core import sweep

    # rmdir: only if empty (nothing of a run was ever written to the host folder)
    STALE = sweep.register(
        sweep.Sweeper("grading-disk-folders", _containers, lambda f: sweep.maker_gone(f.name, CONTAINER), Path.rmdir)
    )


def usage(folder: Path) -> int:
    """Bytes of the files under ``folder`` (links not followed); past ``MAX_WALK`` entries, a
    number over any cap (a run that makes that many files is over its disk either way)."""
    total, seen, stack = 0, 0, [str(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    seen += 1
                    if seen > MAX_WALK:
                        return 2**62
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue  # gone while counting
        except OSError:
            continue
    return total


def hand_over(folder: Path, owner: tuple[int, int]) -> None:
    """Make everything under ``folder`` (links themselves, never what they point to) ``owner``'s."""
    os.lchown(folder, *owner)
    seen, stack = 0, [str(folder)]
    while stack and seen < MAX_WALK:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    seen += 1
                    try:
                        os.lchown(entry.path, *owner)
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                    except OSError:
                        continue  # gone meanwhile
        except OSError:
            continue


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# ---------------------------------------------------------------------------------------------
# The holder process (``python disks.py CONTAINER``, single-threaded: unshare needs that)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _enter(libc, container: str) -> str:
    """A new mount namespace (and user namespace, unprivileged), private from the host; a
    small tmpfs over ``container`` to hold the runs' mount points."""
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWNS | (CLONE_NEWUSER if uid else 0)), "unshare")
    if uid:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    _check(libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None), "make / a slave mount")
    _check(
        libc.mount(b"labkit-disks", container.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=0711"),
        f"mount {container}",
    )
    return "userns" if uid else "root"


def _mount(libc, root: str, bind: str, size: int, inodes: int, uid, gid) -> None:
    os.mkdir(root, 0o700)
    owner = f",uid={int(uid)},gid={int(gid)}" if uid is not None else ""
    _check(
        libc.mount(
            b"labkit-run",
            root.encode(),
            b"tmpfs",
            MS_NOSUID | MS_NODEV,
            f"size={int(size)},nr_inodes={int(inodes)},mode=0700{owner}".encode(),
        ),
        f"mount {root}",
    )
    for part in PARTS:
        os.mkdir(f"{root}/{part}", 0o700)
        if uid is not None:
            os.chown(f"{root}/{part}", int(uid), int(gid))
    _check(libc.mount(f"{root}/work".encode(), bind.encode(), None, MS_BIND, None), f"bind {bind}")


def _umount(libc, root: str, bind: str) -> None:
    for target in (bind, root):
        if libc.umount2(target.encode(), MNT_DETACH) != 0 and ctypes.get_errno() not in (22, 2):  # not mounted
            raise OSError(ctypes.get_errno(), f"umount {target}: {os.strerror(ctypes.get_errno())}")
    os.rmdir(root)


def hold(container: str) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    _die_with_parent()
    if os.getppid() == 1:
        return 1
    try:
        mode = _enter(libc, container)
    except OSError as e:
        print(e, file=sys.stderr, flush=True)
        return 1
    print(f"ready {mode}", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "mount":
                _mount(libc, cmd["root"], cmd["bind"], cmd["size"], cmd["inodes"], cmd["uid"], cmd["gid"])
            else:
                _umount(libc, cmd["root"], cmd["bind"])
            reply = {}
        except OSError as e:
            reply = {"error": str(e)}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(hold(sys.argv[1]))
