"""Scratch folders in /tmp that hold their owner's lock, so what a killed process left is found and removed.

A process ended by SIGKILL (a grader stopped mid-batch, a kernel the grader timed out, a harness
killed from outside) runs no ``finally`` and no ``atexit``: its ``tempfile.mkdtemp`` folder stays
in /tmp for good. A folder from ``make(prefix)`` holds a file ``.owner`` that its maker keeps
locked (``flock``) for as long as it lives; the kernel drops the lock when the last process holding
it ends, however it ends. ``remove_orphans(prefix)``, which every maker of such a folder calls
first, removes the folders whose lock it can take. A lock, unlike a pid, means the same in every
pid namespace (a sandboxed kernel's fork server shares /tmp with processes that cannot see its
pids) and cannot be reused. Imports nothing from labkit.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

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


def remove_orphans(prefix: str) -> list[Path]:
    """Remove this user's ``prefix`` folders that no live process holds; returns them."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(prefix + "*"):
        try:
            mine = folder.is_dir() and folder.stat().st_uid == os.geteuid() and folder not in _held
        except OSError:  # removed meanwhile by another process
            continue
        if mine and _orphaned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def folder(prefix: str):
    """``make(prefix)`` for the length of a block, removed when it ends (as ``TemporaryDirectory``)."""
    path = make(prefix)
    try:
        yield path
    finally:
        release(path)
