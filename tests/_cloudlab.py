"""Emulated CloudLab nodes for tests (``labkit.infra.cloudlab_local``): a fixture factory that skips,
saying why, where they cannot run, and checks afterwards that nothing of them is left."""

from __future__ import annotations

import contextlib
import os

import pytest

from labkit.infra.cloudlab_local import LocalCloudLab, unavailable


@contextlib.contextmanager
def cloudlab(nodes: int = 4, link: str = "1gbit", **kwargs):
    """``nodes`` emulated nodes with sshd, up for the block; then nothing of them is left
    (processes in their namespaces, the log folder). The nodes see the kit's checkout, its venv
    and the course's data mirror (``LABKIT_DATA_MIRROR``, a folder) wherever this clone is, even
    under a folder only root may enter (``LocalCloudLab``'s ``expose``)."""
    why = why_not()
    if why:
        pytest.skip(f"no emulated CloudLab nodes here: {why}")
    mirror = os.environ.get("LABKIT_DATA_MIRROR", "")
    expose = [*kwargs.pop("expose", ()), *([mirror] if mirror and "://" not in mirror else [])]
    lab = LocalCloudLab(nodes, link, expose=expose, **kwargs)
    with lab:
        yield lab
    assert not lab.leftovers(), f"left behind by the emulated nodes: {lab.leftovers()}"
    assert not lab.log_dir.exists(), f"{lab.log_dir} was left behind"


def why_not() -> str:
    """Why emulated nodes cannot run here, and what to do ('' if they can)."""
    why = unavailable()
    if why and os.geteuid() != 0:
        why += ": run the tests as root to include them (sudo make test)"
    return why


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


def checkout(lab, mirror: str, node: str = "node0") -> None:
    """The kit's checkout in the account's ``~/labkit`` on ``node`` (this checkout's files, as
    ``git clone`` gives them), its ``.venv`` a link to this machine's (the stand-in for ``make
    setup``: make's stamp says it is up to date), and the data from the course mirror ``mirror``."""
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    from labkit.distributed import nodes

    venv = shlex.quote(sys.prefix)
    copy = subprocess.run(
        lab.command(
            node,
            f"mkdir -p labkit && tar -xf - -C labkit && ln -s {venv} labkit/.venv && "
            "cd labkit && touch -r .venv/.labkit-installed requirements*.txt pyproject.toml",
        ),
        input=nodes.kit_tarball(Path(__file__).resolve().parents[1]),
        capture_output=True,
        timeout=120,
    )
    assert copy.returncode == 0, copy.stderr.decode()
    done = lab.sh(node, f"cd labkit && make data DATA_MIRROR={shlex.quote(mirror)}", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
