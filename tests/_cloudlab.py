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


def profile_repository(folder):
    """``make release``'s student kit in ``folder``/release, committed, and its clone in
    ``folder``/repository, as CloudLab clones a profile's repository onto every node
    (``/local/repository``); returns the clone."""
    import subprocess
    from pathlib import Path

    from labkit.grading.kit.release import release

    out = Path(folder) / "release"
    release(Path(__file__).resolve().parents[1] / "notebooks", out, log=lambda *_: None)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the course's kit"]):
        subprocess.run([*GIT, *args], cwd=out, check=True, capture_output=True)
    clone = out.parent / "repository"
    subprocess.run(["git", "clone", "-q", str(out), str(clone)], check=True, capture_output=True)
    return clone


GIT = ["git", "-c", "user.name=TA", "-c", "user.email=ta@example.edu"]

STAND_INS = {
    # CloudLab's geni-get: the experiment's creator and its key pair
    "geni-get": '#!/bin/sh\ncase "$1" in user_urn) echo "urn:publicid:IDN+emulab.net+user+ta" ;; '
    'key) cat "$(dirname "$0")/experiment_key" ;; *) exit 1 ;; esac\n',
    # pip's download of the pinned wheels (the nodes reach no PyPI): `make setup` finds this
    # machine's .venv linked in, installed after the kit's requirements (a copy of the kit is newer)
    "make": '#!/bin/sh\nfor a; do [ "$a" = setup ] && dir=$kit; done\n'
    'if [ -n "${dir:-}" ]; then [ -e "$dir/.venv" ] || ln -s "$LABKIT_TEST_VENV" "$dir/.venv"; '
    'touch -r "$dir/.venv/.labkit-installed" "$dir"/requirements*.txt "$dir/pyproject.toml"; fi\n'
    'exec /usr/bin/make "$@"\n',
}


@contextlib.contextmanager
def stand_ins():
    """A folder every node's account can read, with the stand-ins and the experiment's key."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    tools = Path(tempfile.mkdtemp(prefix="labkit-test-startup-"))
    try:
        key = ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-C", "experiment"]
        subprocess.run([*key, "-f", str(tools / "experiment_key")], check=True)
        for name, text in STAND_INS.items():
            (tools / name).write_text(text)
            (tools / name).chmod(0o755)
        tools.chmod(0o755)
        yield tools
    finally:
        shutil.rmtree(tools)


def boot(lab, nodes, repository, tools, mirror: str, log: str, *args: str, timeout: float = 600) -> dict:
    """``startup.sh`` as the profile runs it (root, from the profile repository) on ``nodes`` at
    once, as CloudLab boots an experiment's nodes, for the account ``ta``; the nodes reach no
    internet, so the data comes from the course mirror ``mirror``, and CloudLab's ``geni-get``
    and the wheels' download have the stand-ins above. Returns each node's exit code, output and
    log (``log``: a path on the node)."""
    import shlex
    import subprocess
    import sys

    env = {"PATH": f"{tools}:{os.environ['PATH']}", "LABKIT_TEST_VENV": sys.prefix, "kit": f"{lab.home_dir}/labkit"}
    command = (
        f"bash {shlex.quote(str(repository))}/startup.sh --nodes {len(lab.names)} --log {log} "
        f"--mirror {shlex.quote(mirror)} --repository {shlex.quote(str(repository))} {shlex.join(args)}"
    )
    runs = {
        n: subprocess.Popen(
            lab.command(n, f"{command} --node {n}", user=False, env=env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for n in nodes
    }
    done = {}
    for n, run in runs.items():
        try:
            out, _ = run.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
            raise
        path = lab.path(n, log)
        done[n] = (run.returncode, out, path.read_text() if path.exists() else "")
    return done
