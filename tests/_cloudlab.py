"""Emulated CloudLab nodes for tests (``labkit.cloudlab_local``): a fixture factory that skips,
saying why, where they cannot run, and checks afterwards that nothing of them is left."""
from __future__ import annotations

import contextlib
import os

import pytest

from labkit.cloudlab_local import LocalCloudLab, unavailable


@contextlib.contextmanager
def cloudlab(nodes: int = 4, link: str = "1gbit", **kwargs):
    """``nodes`` emulated nodes with sshd, up for the block; then nothing of them is left
    (processes in their namespaces, the log folder)."""
    why = unavailable()
    if why:
        pytest.skip(f"no emulated CloudLab nodes here: {why}")
    lab = LocalCloudLab(nodes, link, **kwargs)
    with lab:
        yield lab
    assert not lab.leftovers(), f"left behind by the emulated nodes: {lab.leftovers()}"
    assert not lab.log_dir.exists(), f"{lab.log_dir} was left behind"


def user_exists_here(name: str) -> bool:
    """Whether this machine (not a node) has an account ``name``."""
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def mounts_here() -> str:
    with open(f"/proc/{os.getpid()}/mounts") as f:
        return f.read()
