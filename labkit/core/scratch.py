"""Scratch folders in /tmp that name their owner, so what a killed process left is found and removed.

A process ended by SIGKILL (a grader stopped mid-batch, a kernel the grader timed out, a harness
killed from outside) runs no ``finally`` and no ``atexit``: its ``tempfile.mkdtemp`` folder stays
in /tmp for good. A folder from ``make(prefix)`` carries its owner's pid and start time in its
name; ``remove_orphans(prefix)``, which every maker of such a folder calls first, removes those
whose owner is gone. A pid that was reused is told apart by its start time. Imports nothing from
labkit.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

import psutil

_OWNER = re.compile(r"-p(\d+)t(\d+)-[^-]+$")


def _stamp(pid: int) -> str:
    return f"p{pid}t{int(psutil.Process(pid).create_time() * 100)}"


def make(prefix: str, mode: int = 0o700) -> Path:
    """A new folder ``/tmp/<prefix>p<pid>t<start>-XXXX`` of this process; orphans of ``prefix`` go first."""
    remove_orphans(prefix)
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}{_stamp(os.getpid())}-"))
    folder.chmod(mode)
    return folder


def _alive(pid: int, stamp: str) -> bool:
    try:
        return _stamp(pid) == stamp
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def remove_orphans(prefix: str) -> list[Path]:
    """Remove this user's ``prefix`` folders whose owning process has ended; returns them."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(prefix + "p*"):
        m = _OWNER.search(folder.name)
        try:
            mine = folder.is_dir() and folder.stat().st_uid == os.geteuid()
        except OSError:  # removed meanwhile by another process
            continue
        if m and mine and not _alive(int(m.group(1)), f"p{m.group(1)}t{m.group(2)}"):
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
        shutil.rmtree(path, ignore_errors=True)
