"""Scratch folders in /tmp that hold their owner's lock, so what a killed process left is found and removed.

A process ended by SIGKILL (a grader stopped mid-batch, a kernel the grader timed out, a harness
killed from outside) runs no ``finally`` and no ``atexit``: its ``tempfile.mkdtemp`` folder stays
in /tmp for good. A folder from ``make(prefix)`` holds a file ``.owner`` that its maker keeps
locked (``flock``) for as long as it lives; the kernel drops the lock when the last process holding
it ends, however it ends. ``remove_orphans(prefix)``, which every maker of such a folder calls
first, removes the folders whose lock it can take. A lock, unlike a pid, means the same in every
pid namespace (a sandboxed kernel's fork server shares /tmp with processes that cannot see its
pids) and cannot be reused: the maker of ``labkit.core.sweep``'s idiom is the lock's holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from labkit.core import sweep

OWNER = ".owner"
_held: dict[Path, int] = {}  # this process's folders -> the descriptor that holds each one's lock


def make(prefix: str, mode: int = 0o700) -> Path:
    """A new folder ``/tmp/<prefix>XXXX``, locked by this process until ``release`` or its end;
    the orphans of ``prefix`` go first."""
    remove_orphans(prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    fd = os.open(folder / f"{OWNER}.new", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(folder / f"{OWNER}.new", folder / OWNER)  # locked before another process can see it
    _held[folder] = fd
    folder.chmod(mode)
    return folder


def release(folder: Path) -> None:
    """Remove ``folder`` (one of this process's) and drop its lock."""
    shutil.rmtree(folder, ignore_errors=True)
    fd = _held.pop(Path(folder), None)
    if fd is not None:
        os.close(fd)


def _orphaned(folder: Path) -> bool:
    """Whether no process holds ``folder``'s lock (taking it, then letting it go)."""
    try:
        fd = os.open(folder / OWNER, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # not made by make(), being made right now, or not ours to read
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _mine(prefix: str) -> list[Path]:
    """This user's ``prefix`` folders, but those this process holds."""
    out = []
    for folder in Path(tempfile.gettempdir()).glob(prefix + "*"):
        try:
            if folder.is_dir() and folder.stat().st_uid == os.geteuid() and folder not in _held:
                out.append(folder)
        except OSError:  # removed meanwhile by another process
            continue
    return out


def sweeper(prefix: str) -> sweep.Sweeper:
    """The ``prefix`` folders whose maker is gone: no process holds their lock."""
    return sweep.Sweeper(
        f"scratch-folders:{prefix}", lambda: _mine(prefix), _orphaned, lambda f: shutil.rmtree(f, ignore_errors=True)
    )


def remove_orphans(prefix: str) -> list[Path]:
    """Remove this user's ``prefix`` folders that no live process holds; returns them. The
    sweeper of each prefix in use here is registered (``sweep.SWEEPERS``) on its first sweep."""
    return sweep.register(sweeper(prefix)).sweep()


@contextlib.contextmanager
def folder(prefix: str):
    """``make(prefix)`` for the length of a block, removed when it ends (as ``TemporaryDirectory``)."""
    path = make(prefix)
    try:
        yield path
    finally:
        release(path)
