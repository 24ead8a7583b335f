"""Prepare a cluster's nodes over ssh, check them, and collect what they measured.

    python -m labkit nodes setup --hosts hosts.txt      # make cluster-setup HOSTS=hosts.txt
    python -m labkit nodes check --hosts hosts.txt      # reachable, kit installed, same versions?
    python -m labkit nodes csv runs/lab2/<run> --out out/nodes   # one resource CSV per task and node

``setup`` does, on every host of the hosts file, with the launcher's ssh command and remote
directory (``$LABKIT_SSH``, ``$LABKIT_REMOTE_DIR``): copy this kit (tracked and untracked,
unignored files, as one ``tar`` stream: the nodes need no git), install it (``make setup``),
fetch the data, and check that TensorFlow, keras, labkit and Python match this machine
(``VersionSkew``). Nodes that share one directory are installed once. Every failure names the
host, the step, the exit code, the end of the output and the likely fix (``NodeError``).

More in docs/cluster.md, sections 3 (setup, its options) and 4 (data) and 7 (the CSVs).
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import tarfile
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from labkit.distributed.launch import VersionSkew, check_versions, local_addresses
from labkit.distributed.launchers.ssh import (
    EXIT_NO_KIT,
    SshOptions,
    missing_line,
    node_label,
    remote_failure_hint,
    remote_returncode,
)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = ".venv/bin/python"
DEFAULT_INSTALL = "make setup"
DEFAULT_DATASETS = ("mnist", "a9a")
TOKEN = ".labkit-setup"  # a setup's token in a kit's directory: the hosts that see it share that directory
_SKIP_DIRS = {".git", ".venv", "data", "runs", "out", "release", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}
# The node's versions; its Python's even where the kit does not import there (a .venv made with
# another Python, without the kit's packages): that is what VersionSkew then shows.
_VERSIONS = (
    "import json, platform, socket\n"
    "v = {'python': platform.python_version()}\n"
    "try:\n    from labkit.wire.protocol import versions\n    v = versions()\n"
    "except Exception as e:\n    v['error'] = f'{type(e).__name__}: {e}'\n"
    "print(json.dumps({'host': socket.gethostname(), 'versions': v}))"
)


class NodeError(RuntimeError):
    """One step failed on one node."""

    def __init__(self, host: str, step: str, returncode, output: str, hint: str = ""):
        self.host, self.step, self.returncode, self.output = host, step, returncode, output
        last = "\n".join(output.strip().splitlines()[-15:]) or "(no output)"
        super().__init__(f"{node_label(host)}: {step} failed (exit {returncode}){'; ' + hint if hint else ''}\n{last}")


@dataclass
class Node:
    """What ``setup``/``check`` found on one host."""

    host: str
    shares_with: str | None = None  # another host whose remote directory is the same one
    steps: list[str] = field(default_factory=list)
    hostname: str | None = None
    versions: dict | None = None


class Remote:
    """Run commands in the kit's directory on a host, over the configured ssh."""

    def __init__(self, ssh=None, remote_dir: str | None = None, remote_python: str = DEFAULT_PYTHON):
        self.options = SshOptions.of(ssh, remote_dir, remote_python)
        o = self.options  # what the steps and messages name:
        self.ssh, self.remote_dir, self.remote_python = o.ssh, o.remote_dir, o.remote_python

    def run(
        self, host: str, command: str, step: str, timeout: float, stdin: bytes | None = None, in_dir: bool = True
    ) -> str:
        """Run ``command`` (in the remote directory unless ``in_dir=False``); its output, or ``NodeError``.
        The node stops it at ``timeout``: a pip install must not run on under the next attempt's feet."""
        try:
            done = self.options.run(
                host, command, timeout + 30, in_kit=in_dir, remote_timeout=timeout, input=stdin, text=False
            )
        except subprocess.TimeoutExpired:
            raise NodeError(host, step, "timeout", "", f"no answer within {timeout + 30:.0f} s") from None
        except OSError as e:
            raise NodeError(host, step, "-", str(e), f"cannot run the ssh command {self.ssh[0]!r}") from None
        out = (done.stdout + done.stderr).decode("utf-8", "replace")
        if done.returncode == 124:  # coreutils timeout stopped it
            raise NodeError(host, step, "timeout", out, f"did not finish within {timeout:.0f} s, so it was stopped")
        if done.returncode != 0:
            hint = remote_failure_hint(
                host, remote_returncode(done.returncode), out, self.remote_dir, self.remote_python
            )
            raise NodeError(host, step, done.returncode, out, hint)
        return done.stdout.decode("utf-8", "replace")


def kit_files(root: Path = REPO) -> list[str]:
    """The kit's files, relative to ``root``: git's tracked and not-ignored untracked files,
    else (no git) every file outside build, data and output folders."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout.decode()
        files = [f for f in out.split("\0") if f and f != TOKEN and (root / f).is_file()]
        if files:
            return files
    except (OSError, subprocess.SubprocessError):
        pass
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.name != TOKEN and not _SKIP_DIRS.intersection(p.relative_to(root).parts)
    )


def kit_tarball(root: Path = REPO, files=None) -> bytes:
    """``files`` of ``root`` (default: ``kit_files``) as one tar stream."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in kit_files(root) if files is None else files:
            tar.add(root / f, arcname=f, recursive=False)
    return buf.getvalue()


def _nodes(hosts, say) -> list[Node]:
    """The remote hosts of a hosts file or list, once each. This machine's own addresses are
    left out: the launcher runs its tasks here, with this Python, without ssh."""
    from labkit.wire.spec import parse_host, read_hosts_file

    names = read_hosts_file(hosts) if isinstance(hosts, (str, Path)) else [str(h) for h in hosts]
    if not names:
        raise ValueError("no hosts given; pass a hosts file (one host per line, see docs/cluster.md)")
    here, out = local_addresses(), []
    for h in names:  # 'host:port' lines place tasks; setup needs only the host
        host = parse_host(h)[0]
        if host in here:
            say(host, "this machine: its tasks run here, with this Python; nothing to set up")
        elif host not in [n.host for n in out]:
            out.append(Node(host))
    return out


def _printer(log):
    lock = threading.Lock()

    def say(host: str, message: str) -> None:
        if log is not None:
            with lock:
                log(f"[{host}] {message}")

    return say


def setup(
    hosts,
    *,
    ssh=None,
    remote_dir: str | None = None,
    remote_python: str = DEFAULT_PYTHON,
    install: str = DEFAULT_INSTALL,
    datasets=DEFAULT_DATASETS,
    data_mirror: str | None = None,
    copy: bool = True,
    keep=(),
    log=print,
    install_timeout: float = 3600,
) -> list[Node]:
    """Copy, install, fetch data and check on every host (see the module docstring).
    Raises ``NodeError`` (naming the first node that cannot be reached or copied to, else every
    node whose install, data fetch or check failed) or ``VersionSkew``."""
    remote = Remote(ssh, remote_dir, remote_python)
    say = _printer(log)
    nodes = _nodes(hosts, say)
    session = uuid.uuid4().hex
    local = _local_token(session)  # a node whose directory is this kit's sees it
    try:
        _copy(nodes, remote, {"this machine": local}, session, _kit_tarballs(keep) if copy else None, keep, say)
    finally:
        if local:
            (REPO / TOKEN).unlink(missing_ok=True)

    def prepare(node: Node) -> Node:
        if install == DEFAULT_INSTALL and _drop_other_venv(remote, node.host):
            say(node.host, f"removed its .venv, made with another Python than this machine's {_python()}")
        if install:
            say(node.host, f"installing: {install}")
            remote.run(node.host, install, "install", timeout=install_timeout)
            node.steps.append("install")
        if datasets:
            mirror = f" --mirror {shlex.quote(str(data_mirror))}" if data_mirror else ""
            args = "".join(f" --dataset {shlex.quote(d)}" for d in datasets)
            out = remote.run(
                node.host,
                f"{shlex.quote(remote.remote_python)} -m labkit data fetch{args}{mirror}",
                "fetch the data",
                timeout=1800,
            )
            node.steps.append("data")
            for line in out.strip().splitlines()[-len(datasets) :]:
                say(node.host, line)
        return node

    _parallel(prepare, [n for n in nodes if not n.shares_with])
    _check(nodes, remote, say)
    return nodes


def _copy(nodes: list[Node], remote: Remote, tokens: dict, session: str, tarballs, keep, say) -> None:
    """Copy the kit (``tarballs``: outside and inside the ``keep`` folders; None: no copy) to each
    node in order, but to one whose directory shows an earlier node's token (or this kit's, in
    ``tokens``): that directory is already set up."""
    for node in nodes:
        token = f"labkit-setup {session} {node.host}"
        seen = remote.run(
            node.host,
            f"mkdir -p {shlex.quote(remote.remote_dir)} && cd {shlex.quote(remote.remote_dir)}"
            f" && (cat {TOKEN} 2>/dev/null || true) && echo {shlex.quote(token)} > {TOKEN}",
            "connect",
            timeout=60,
            in_dir=False,
        ).strip()
        node.shares_with = next((h for h, t in tokens.items() if t and t == seen), None)
        tokens[node.host] = token
        if node.shares_with:
            say(node.host, f"{remote.remote_dir} is the same directory as on {node.shares_with}: set up once")
            continue
        if tarballs is not None:
            remote.run(node.host, "tar -xf -", "copy the kit", timeout=300, stdin=tarballs[0])
            if keep:
                remote.run(node.host, "tar --skip-old-files -xf -", "copy the kit", timeout=300, stdin=tarballs[1])
            node.steps.append("copy")
            kept = f"; in {', '.join(keep)} only the files it lacked" if keep else ""
            say(node.host, f"copied the kit ({len(tarballs[0]) / 1e6:.1f} MB) into {remote.remote_dir}{kept}")


def _local_token(session: str) -> str:
    """Write this kit's setup token (``.labkit-setup``, as on the nodes) and return it: a node
    whose remote directory is this one (a shared home) then reads it, and is left alone."""
    token = f"labkit-setup {session} this machine"
    try:
        (REPO / TOKEN).write_text(token + "\n")
    except OSError:  # a kit this user cannot write to is no node's remote directory either
        return ""
    return token


def _kit_tarballs(keep) -> tuple[bytes, bytes]:
    """The kit as two tar streams: its files outside the ``keep`` folders, and those inside them."""
    keep = [str(k).strip("/") for k in keep]
    files = kit_files(REPO)
    inside = lambda f: any(f == k or f.startswith(k + "/") for k in keep)  # noqa: E731
    return kit_tarball(REPO, [f for f in files if not inside(f)]), kit_tarball(REPO, [f for f in files if inside(f)])


def _python() -> str:
    import sys

    return "%d.%d" % sys.version_info[:2]


def _drop_other_venv(remote: Remote, host: str) -> bool:
    """Remove ``host``'s .venv if another Python made it: ``make setup`` would keep it (it only
    checks that .venv/bin/python runs), and its packages are not the kit's for this Python."""
    py = shlex.quote(remote.remote_python)
    out = remote.run(
        host,
        f"v=$({py} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null) || exit 0; "
        f'[ "$v" = {_python()} ] || {{ rm -rf .venv && echo removed; }}',
        "check the .venv's Python",
        timeout=120,
    )
    return "removed" in out


def check(
    hosts, *, ssh=None, remote_dir: str | None = None, remote_python: str = DEFAULT_PYTHON, log=print
) -> list[Node]:
    """Every host answers over ssh, has the kit installed, and runs the versions this machine
    runs; ``NodeError`` or ``VersionSkew`` (with every node's versions) otherwise."""
    say = _printer(log)
    nodes = _nodes(hosts, say)
    _check(nodes, Remote(ssh, remote_dir, remote_python), say)
    return nodes


def _check(nodes: list[Node], remote: Remote, say) -> None:
    py = shlex.quote(remote.remote_python)

    def versions(node: Node) -> Node:
        missing = shlex.quote(missing_line(remote.remote_python))
        out = remote.run(
            node.host,
            f"test -x {py} || {{ echo {missing} >&2; exit {EXIT_NO_KIT}; }}; {py} -c {shlex.quote(_VERSIONS)}",
            "check versions",
            timeout=120,
        )
        try:
            info = json.loads(out.strip().splitlines()[-1])
            node.hostname, node.versions = info["host"], info["versions"]
        except (IndexError, ValueError, KeyError, TypeError) as e:
            raise NodeError(
                node.host,
                "check versions",
                0,
                out,
                f"unexpected output ({type(e).__name__}: {e}); run the command by hand to see why",
            ) from None
        return node

    try:
        _parallel(versions, nodes)
    except NodeError:  # the nodes that answered are still named, as ok, before the error
        for n in nodes:
            if n.versions is not None and "error" not in n.versions:
                say(n.host, _ok(n))
        raise
    check_versions({n.host: {"host": n.hostname, "versions": n.versions} for n in nodes})
    broken = [n for n in nodes if "error" in n.versions]
    if broken:
        n = broken[0]
        raise NodeError(
            n.host,
            "check versions",
            1,
            n.versions["error"],
            "the kit does not import there: its .venv is incomplete; run `make cluster-setup` again",
        )
    for n in nodes:
        say(n.host, _ok(n))


def _ok(n: Node) -> str:
    return f"ok: {n.hostname}, " + ", ".join(f"{k} {v}" for k, v in n.versions.items())


def _parallel(fn, nodes: list[Node]) -> None:
    """``fn(node)`` on every node at once; every failure is reported, in one ``NodeError``."""
    if not nodes:
        return
    errors = []
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        for node, future in [(n, pool.submit(fn, n)) for n in nodes]:
            try:
                future.result()
            except NodeError as e:
                errors.append(e)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        first = errors[0]
        raise NodeError(
            ", ".join(e.host for e in errors),
            first.step,
            first.returncode,
            "\n".join(str(e).splitlines()[0] for e in errors),
        )  # each node's error and hint


def resource_csvs(run_dir, out, dstat: bool = False) -> list[Path]:
    """One CSV per task of a finished cluster run, named ``<host>_<task>.csv``, from the
    samples each task took on its own node (the launcher copied them back). ``dstat=True``
    writes dstat's ``--output`` layout. Returns the paths written."""
    from labkit.distributed.launch import ClusterResult
    from labkit.measure.monitor import ResourceSampler

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(
            f"{run_dir} does not exist; a lab's cluster runs are under runs/<lab>/ next to its notebook "
            f"(notebooks/runs/ in JupyterLab, runs/ for papermill run from the kit's folder): "
            f"`ls -d notebooks/runs/*/* runs/*/*/*` lists them"
        )
    if not (run_dir / "cluster.json").is_file():
        raise ValueError(
            f"{run_dir} is not a finished cluster run (no cluster.json); pass a run directory such as runs/lab2/<run>"
        )
    result = ClusterResult.load(run_dir)
    out = Path(out)
    written = []
    for t in result:
        if not t.result or not t.result.get("samples"):
            continue
        host = (t.result.get("address") or t.host).rpartition(":")[0] or t.host
        path = out / f"{host}_{t.name.replace(':', '-')}.csv"
        written.append(ResourceSampler.from_dict(t.result["samples"]).to_csv(path, dstat=dstat))
    if not written:
        raise ValueError(f"no task of {run_dir} wrote resource samples; see the task logs there")
    return written


__all__ = ["NodeError", "Node", "Remote", "VersionSkew", "check", "kit_files", "resource_csvs", "setup"]
