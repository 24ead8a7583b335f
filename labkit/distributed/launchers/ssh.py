"""Tasks on other nodes, started over ssh::

    ssh -- HOST sh -c 'cd REMOTE_DIR && ... env TF_CONFIG=... REMOTE_PYTHON -m labkit.tasks.NAME ...'

The task's output streams back into the local log; result files are copied back with ``tar``
over ssh at the end; signals go to the pid the wrapper wrote, over ssh. Every ssh command of the
kit is built by ``SshOptions.argv`` (``-- HOST``: a host is never read as an option); its
options are ``ssh``, ``remote_dir``, ``remote_python`` and ``local_hosts``. A task whose launcher
dies, even by SIGKILL, is stopped by its wrapper, which sees the session's stdin close. Before
any task starts, ``precheck`` asks every node at once, and a failure of ssh or a node without
the kit says so, with the fix (``remote_failure_hint``).

More in docs/cluster.md, section 11 (the wrapper, the options) and Troubleshooting.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from labkit.wire.spec import Task, accepts
from labkit.wire.events import ENV as EVENTS_ENV
from labkit.distributed.launchers.base import ClusterTimeout, Launcher, Settings, TaskProcess
from labkit.core.proc import OwnedProcess, tail
from labkit.wire.protocol import ENV_RUN_DIR, ENV_TASK, TaskFailed, VersionSkew, task_file

# The kit's liveness options: a node whose network drops is noticed in about 15 s (ssh exits 255),
# not when TCP gives up. They go first in every ssh command, $LABKIT_SSH's included: ssh takes an
# option's first value, so a user's command cannot turn link-loss detection off.
LIVENESS = ("-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")
CONNECT = ("-o", "ConnectTimeout=10")  # a node that does not answer fails in 10 s, unless the user says otherwise
DEFAULT_SSH = ("ssh", "-o", "BatchMode=yes", *CONNECT, *LIVENESS)
REMOTE_TERM_GRACE_S = 10  # a remote task whose launcher is gone: SIGTERM, then SIGKILL after this
EVENTS_FD = 3  # a remote task's events: this descriptor, the ssh session's stdout


def default_ssh() -> list[str]:
    """``$LABKIT_SSH`` split like a shell would (e.g. ``ssh -i ~/.ssh/cloudlab -o BatchMode=yes``),
    else ``DEFAULT_SSH``."""
    return shlex.split(os.environ["LABKIT_SSH"]) if os.environ.get("LABKIT_SSH", "").strip() else list(DEFAULT_SSH)


def with_liveness(ssh: list[str]) -> list[str]:
    """``ssh`` with ``LIVENESS`` right after its ``ssh`` word (the first, if a wrapper runs ssh;
    else after the command's first word), once; and ``CONNECT`` after them if it sets no
    ConnectTimeout of its own."""
    words = list(ssh)
    first = lambda key: next((w.split("=", 1)[1] for w in words if w.removeprefix("-o").startswith(key + "=")), None)  # noqa: E731
    ours = [] if (first("ServerAliveInterval"), first("ServerAliveCountMax")) == ("5", "3") else list(LIVENESS)
    ours += [] if first("ConnectTimeout") else list(CONNECT)
    at = next((i for i, a in enumerate(words) if os.path.basename(a) == "ssh"), 0) + 1
    return words[:at] + ours + words[at:]


def default_remote_dir() -> str:
    """``$LABKIT_REMOTE_DIR``, else ``labkit`` (relative to the remote home)."""
    return os.environ.get("LABKIT_REMOTE_DIR", "").strip() or "labkit"


@dataclass(frozen=True)
class SshOptions:
    """How the kit reaches a node over ssh: the ssh command, the kit's directory there and its
    interpreter; ``argv`` builds every ssh command line the kit runs."""

    ssh: tuple[str, ...] = DEFAULT_SSH
    remote_dir: str = "labkit"
    remote_python: str = ".venv/bin/python"

    @classmethod
    def of(cls, ssh=None, remote_dir: str | None = None, remote_python: str | None = None) -> "SshOptions":
        """Options from arguments that may be None (then ``$LABKIT_SSH``, ``$LABKIT_REMOTE_DIR``,
        the defaults); ``ssh`` is an argv list or a string split as a shell would."""
        ssh = default_ssh() if ssh is None else shlex.split(ssh) if isinstance(ssh, str) else ssh
        if not ssh or not all(isinstance(a, (str, os.PathLike)) for a in ssh):
            raise ValueError(f"ssh must be a command, as a list (['ssh', '-i', 'KEY']) or a string; got {ssh!r}")
        return cls(
            tuple(with_liveness([str(a) for a in ssh])),
            str(remote_dir) if remote_dir else default_remote_dir(),
            str(remote_python or cls.remote_python),
        )

    def argv(self, host: str, command: str, *, in_kit: bool = True, timeout: float | None = None) -> list[str]:
        """``ssh ... -- HOST REMOTE``: ``command`` on ``host``, in the kit's directory (``in_kit``; a
        missing one says so and exits ``EXIT_NO_KIT``) or the remote home; with ``timeout``, the node
        itself stops it after that many seconds (coreutils ``timeout``: killing the local ssh client
        alone would leave it running there). ``--``: a host is never read as an option."""
        remote = f"{enter_kit(self.remote_dir)}\n{command}" if in_kit else command
        if timeout is not None:
            remote = f"timeout -k 10 {max(1, int(timeout))} sh -c {shlex.quote(remote)}"
        return [*self.ssh, "--", host, remote]

    def run(
        self,
        host: str,
        command: str,
        timeout: float,
        *,
        in_kit: bool = True,
        remote_timeout=None,
        input: bytes | None = None,
        text: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run ``argv(host, command, ...)`` and capture its output; ``timeout``: seconds to wait here."""
        return subprocess.run(
            self.argv(host, command, in_kit=in_kit, timeout=remote_timeout),
            input=input,
            capture_output=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
            text=text,
        )


class SshLauncher(Launcher):
    name = "ssh"
    files_here = False  # they are on the node until collect() copies them back
    OPTIONS = ("ssh", "remote_dir", "remote_python", "local_hosts", "check_versions")

    def __init__(self, settings: Settings):
        super().__init__(settings)
        o = settings.options
        self.options = SshOptions.of(o.get("ssh"), o.get("remote_dir"), o.get("remote_python"))
        self._t0 = time.monotonic()
        self._probed: dict[str, float] = {}  # task -> when its node was last asked whether it listens
        self._checked: set[str] = set()  # hosts that passed ``preflight``
        self._spawned: list[TaskProcess] = []  # every task spawned, for ``lost_hosts``

    def task_run_dir(self, task: Task) -> str:
        return self.settings.remote_run

    def task_env(self, task: Task) -> dict[str, str]:
        """Events on descriptor 3, which ``remote_command`` joins to the session's stdout: they come
        home as the task writes them, apart from its log (the session's stderr)."""
        return {EVENTS_ENV: f"fd:{EVENTS_FD}"}

    def command(self, task: Task, env: dict[str, str], argv_tail: list[str]) -> tuple[list[str], str]:
        o, run = self.options, self.settings.remote_run
        pid_file = f"{run}/{task_file(task.type, task.index, '.pid')}"
        remote = remote_command(o.remote_dir, run, pid_file, env, [o.remote_python, *argv_tail])
        argv = o.argv(task.host, remote, in_kit=False)  # the wrapper enters the kit itself
        return argv, shlex.join(argv)

    def spawn(self, tp: TaskProcess) -> OwnedProcess:
        """The ssh client gets a pipe as stdin that only this process holds: once we are gone,
        however we went, the task's wrapper on its node reads end-of-file and stops it. Its
        stdout is the task's events, its stderr the task's log (``remote_command``)."""
        proc = OwnedProcess(tp.argv, tp.log_path, stdin=subprocess.PIPE, stdout_path=tp.events_path).start()
        _arm(proc)
        self._spawned.append(tp)
        return proc

    def returncode(self, rc: int) -> int:
        return remote_returncode(rc)

    # --------------------------------------------------------------------------- signals
    def signal(self, tps: list[TaskProcess], sig: int) -> None:
        lost = lost_hosts(self._spawned)  # any task's broken session: a node's other tasks too
        for host, group in _by_host(tps).items():
            if host not in lost:  # its tasks stop by themselves: their session's stdin closed (remote_command)
                self._remote_signal(host, group, sig)

    def stop(self, tps: list[TaskProcess], sig: int) -> None:
        """On the nodes only: a task's ssh client ends by itself once the task has written its
        result (after SIGKILL, the Cluster kills the clients that are left)."""
        self.signal(tps, sig)

    def _remote_signal(self, host: str, tps: list[TaskProcess], sig: int) -> None:
        """Send ``sig`` to tasks on ``host``, by the pids their wrappers wrote; a pid is signalled
        only while its environment still names this run's task (the pid may be reused)."""
        run = self.settings.remote_run

        def one(tp: TaskProcess) -> str:
            pid_file = shlex.quote(f"{run}/{tp.file('.pid')}")
            mine = [shlex.quote(f"{ENV_RUN_DIR}={run}"), shlex.quote(f"{ENV_TASK}={tp.task.name}")]
            return (
                f"p=$(cat {pid_file} 2>/dev/null) && grep -qsxzF {mine[0]} /proc/$p/environ && "
                f"grep -qsxzF {mine[1]} /proc/$p/environ && kill -{int(sig)} $p"
            )

        script = "; ".join(f"{{ {one(tp)}; }}" for tp in tps) + "; true"
        try:
            self.options.run(host, script, timeout=15)
        except (subprocess.TimeoutExpired, OSError) as e:
            print(f"labkit: could not signal tasks on {node_label(host)}: {e}", file=sys.stderr)

    # ---------------------------------------------------------------------------- files
    def collect(self, tps: list[TaskProcess]) -> list[str]:
        """Copy the hosts' result and hello files into the local run directory."""
        notes, run, lost = [], self.settings.remote_run, lost_hosts(self._spawned)
        for host in sorted(_by_host(tps)):
            if host in lost:  # another ssh would wait out a dead link (ConnectTimeout, or TCP's minutes)
                notes.append(f"did not copy results back from {node_label(host)}: its ssh connection was lost")
                continue
            try:
                out = self.options.run(host, f"tar -cf - -C {shlex.quote(run)} .", timeout=120, text=False)
            except (subprocess.TimeoutExpired, OSError) as e:
                notes.append(f"could not copy results back from {node_label(host)}: {e}")
                continue
            if out.returncode != 0:
                notes.append(
                    f"could not copy results back from {node_label(host)}: {out.stderr.decode(errors='replace').strip()}"
                )
                continue
            with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.11.4
                tar.extractall(tmp, **safe)
                for f in Path(tmp).glob("*.json"):
                    shutil.copyfile(f, self.settings.run_dir / f.name)
        return notes

    def hellos(self, tps: list[TaskProcess]) -> dict[str, dict]:
        out = {}
        for host, group in _by_host(tps).items():
            names = [f"{self.settings.remote_run}/{tp.file('.hello.json')}" for tp in group]
            done = self.options.run(host, "cat " + " ".join(map(shlex.quote, names)) + " 2>/dev/null; true", timeout=30)
            for line in done.stdout.splitlines():
                if line.strip():
                    h = _parse_hello(line, host)
                    out[h["task"]] = h
        return out

    # ------------------------------------------------------------------------- reports
    def where(self, tp: TaskProcess) -> str:
        return f" on {node_label(tp.task.host)}"

    def failure_hint(self, tp: TaskProcess, log_tail: str) -> str:
        return remote_failure_hint(
            tp.task.host,
            tp.returncode,
            log_tail,
            self.options.remote_dir,
            self.options.remote_python,
            started=_started(tp),
        )

    def local_pid(self, tp: TaskProcess) -> int | None:
        return None  # the local child is its ssh client

    def ready(self, task: Task) -> bool:
        """Whether the task's server accepts connections from here. One that does not is asked
        of its node every ``PROBE_EVERY_S``: a server that listens there while this machine cannot
        reach it is a firewall, a ``ClusterTimeout`` that says so at once, not at the start timeout."""
        if accepts(task.host, task.port):
            return True
        now = time.monotonic()
        if now - self._probed.setdefault(task.name, now) >= PROBE_EVERY_S:
            self._probed[task.name] = now
            if self._listening(task.host, [task]) and not accepts(task.host, task.port, timeout=2):  # not just up
                raise ClusterTimeout(
                    now - self._t0, [task.name], what="bring every server up", detail=blocked_hint([task])
                )
        return False

    def unready_hint(self, tps: list[TaskProcess]) -> str:
        """A server that listens on its node but cannot be reached from here: a firewall."""
        blocked = [t for host, group in _by_host(tps).items() for t in self._listening(host, [tp.task for tp in group])]
        return blocked_hint(blocked) if blocked else ""

    def _listening(self, host: str, tasks: list[Task]) -> list[Task]:
        """Which of ``tasks`` listen on ``host``, asked of the node over ssh (its /proc/net/tcp*:
        TCP sockets in state 0A, listening); none if it cannot tell."""
        ports = " ".join(f":{t.port:04X} " for t in tasks)
        script = (
            f'for p in {ports}; do grep -qs " 0*[0-9A-F]*$p.* 0A " /proc/net/tcp /proc/net/tcp6 && echo $p; done; true'
        )
        try:
            out = self.options.run(host, script, timeout=20, in_kit=False).stdout
        except (subprocess.TimeoutExpired, OSError):
            return []
        listening = {int(w.strip(":"), 16) for w in out.split()}
        return [t for t in tasks if t.port in listening]

    # ------------------------------------------------------------------------- before the start
    def precheck(self, tps: list[TaskProcess]) -> None:
        """Every node of these tasks is asked at once (``preflight``), before any task starts, a
        local one included: one that ssh cannot reach, or without the kit, is an ``Unreachable``
        naming each such node and ssh's reason within ssh's connect timeout, not after the other
        tasks have started; a wrong .venv is a ``VersionSkew`` with the fix."""
        first: dict[str, str] = {}  # host -> its first task
        for tp in tps:
            first.setdefault(tp.task.host, tp.task.name)
        hosts = [h for h in first if h not in self._checked]
        if not hosts:
            return
        versions = self.settings.options.get("check_versions", True)
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            found = list(pool.map(lambda h: preflight(self.options, h, versions), hosts))
        problems = {first[h]: p for h, p in zip(hosts, found) if p}
        if problems:
            raise Unreachable(problems)
        self._checked.update(hosts)


class Unreachable(TaskFailed):
    """Nodes that cannot run their tasks, found before any task started: each with what is wrong
    (ssh's own reason, or the kit's absence) and the fix. A ``TaskFailed``, so what catches a
    failed start catches it; ``problems`` maps a task of each such node to (exit code, message)."""

    def __init__(self, problems: dict[str, tuple]):
        self.problems = dict(problems)
        task, (returncode, _) = next(iter(self.problems.items()))
        super().__init__(task, returncode, "")

    def _message(self) -> str:
        lines = "".join(f"\n  {message}" for _, message in self.problems.values())
        return f"no task was started: {len(self.problems)} node(s) cannot run their tasks{lines}"


PREFLIGHT_S = 60  # a node that connects but does not answer the preflight within this is named
PROBE_EVERY_S = 3.0  # a task server this machine cannot reach is asked of its node this often


def blocked_hint(tasks: list[Task]) -> str:
    where = ", ".join(f"{t.name} on {t.address} ({node_label(t.host)}, port {t.port})" for t in tasks)
    return (
        f"the server of {where} listens on its node, but this machine cannot connect to it: a firewall "
        f"drops the task ports there; open them to the experiment LAN (docs/cluster.md, section 5)"
    )


# A node's Python and the versions of the kit's packages there, read without importing them
PREFLIGHT_DISTS = ("tensorflow", "tensorflow-cpu", "keras", "numpy", "labkit")
_PREFLIGHT = (
    "import json, sys\nfrom importlib import metadata\nv = {'python': '%d.%d' % sys.version_info[:2]}\n"
    f"for d in {PREFLIGHT_DISTS!r}:\n"
    "    try:\n        v[d] = metadata.version(d)\n    except metadata.PackageNotFoundError:\n        pass\n"
    "print(json.dumps(v))"
)


def local_versions() -> dict:
    """What ``_PREFLIGHT`` prints on a node, for this process."""
    from importlib import metadata

    out = {"python": "%d.%d" % sys.version_info[:2]}
    for dist in PREFLIGHT_DISTS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue  # left out, as _PREFLIGHT leaves it out on the node (tensorflow or tensorflow-cpu)
    return out


def preflight(options: SshOptions, host: str, versions: bool = True) -> tuple | None:
    """Whether ``host`` can run the kit's tasks, asked over ssh: None if so, else (exit code, what
    is wrong there and the fix): ssh's own reason, or no kit (``remote_failure_hint``). With
    ``versions``, ``VersionSkew`` if its kit runs another Python or other packages than this
    machine, with the fix that works: a .venv made with another Python keeps it through ``make
    setup``, so it is removed first."""
    py = shlex.quote(options.remote_python)
    missing = shlex.quote(missing_line(options.remote_python))
    command = f"test -x {py} || {{ echo {missing} >&2; exit {EXIT_NO_KIT}; }}; {py} -I -c {shlex.quote(_PREFLIGHT)}"
    try:
        done = options.run(host, command, timeout=PREFLIGHT_S)
    except subprocess.TimeoutExpired:
        return "timeout", (
            f"{node_label(host)} did not answer over ssh within {PREFLIGHT_S} s: it is overloaded, or its "
            f"disk or network hangs; `ssh {host} true` from here shows it"
        )
    except OSError as e:
        return "-", f"cannot run the ssh command {options.ssh[0]!r} for {node_label(host)}: {e}"
    if done.returncode in (255, EXIT_NO_KIT):
        hint = remote_failure_hint(host, done.returncode, done.stderr, options.remote_dir, options.remote_python)
        if hint:
            return done.returncode, hint
    if not versions:
        return None
    try:
        there = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (IndexError, ValueError):
        there = None
    here = local_versions()
    if not isinstance(there, dict) or there == here:
        return None
    differ = [k for k in sorted(set(here) | set(there)) if here.get(k) != there.get(k)]
    show = lambda v: ", ".join(f"{k} {v.get(k, 'none')}" for k in differ)  # noqa: E731
    fix = (
        f"its .venv was made with Python {there.get('python')}: on that node, `cd {options.remote_dir} && "
        f"rm -rf .venv && make setup PYTHON=python{here['python']}`, or `make cluster-setup HOSTS=<hosts file>` "
        f"from here, which does the same"
        if there.get("python") != here.get("python")
        else "reinstall the kit there from this checkout: `make cluster-setup HOSTS=<hosts file>`"
    )
    raise VersionSkew(
        f"{node_label(host)} runs other versions than this machine ({show(there)}; here: {show(here)}), "
        f"which makes its tasks fail (a missing package, or TensorFlow failing in obscure ways): {fix}; "
        f"or pass check_versions=False to run anyway"
    )


def _by_host(tps: list[TaskProcess]) -> dict[str, list[TaskProcess]]:
    out: dict[str, list[TaskProcess]] = {}
    for tp in tps:
        out.setdefault(tp.task.host, []).append(tp)
    return out


def remote_command(
    remote_dir: str, run: str, pid_file: str, env: dict[str, str], argv: list[str], grace: float = REMOTE_TERM_GRACE_S
) -> str:
    """The command ssh runs on a task's node: ``sh -c SCRIPT``, whatever the login shell.

    The script starts the task in the background, its output on the session's stderr (the
    task's log here) and its events (``task_env``) on the session's stdout, writes its pid (what
    ``stop()`` and ``kill()`` signal), and watches the session's stdin: the launcher writes one line when
    it starts the ssh client and then holds the pipe open, so end-of-file means the
    launcher or its ssh client is gone (SIGKILL included), and the task gets SIGTERM (it
    writes its result), then SIGKILL after ``grace`` s. An ssh whose stdin was never
    connected (``ssh -n``) sends no line, and the watch stays off. The script exits with
    the task's status, so a task killed by signal N ends ssh with 128 + N, where ssh's own
    failures are 255."""
    q = shlex.quote
    task = "env " + " ".join(f"{k}={q(v)}" for k, v in env.items()) + " " + shlex.join(argv)
    script = "\n".join(
        [
            enter_kit(remote_dir),
            f"command -v {q(argv[0])} >/dev/null 2>&1 || {{ echo {q(missing_line(argv[0]))} >&2; exit {EXIT_NO_KIT}; }}",
            f"mkdir -p {q(run)} || exit 1",
            "exec 3<&0",
            f"{task} </dev/null {EVENTS_FD}>&1 1>&2 &",
            "task=$!",
            f"echo $task > {q(pid_file)}",
            "( if read -r _; then while read -r _; do :; done; kill -TERM $task; "
            f"sleep {int(grace)}; kill -KILL $task; fi ) <&3 >/dev/null 2>&1 &",
            "watch=$!",
            "exec 3<&-",
            "wait $task; rc=$?",
            "kill $watch 2>/dev/null",
            "exit $rc",
        ]
    )
    return f"sh -c {q(script)}"


EXIT_NO_KIT = 127  # what a node's shell says when the kit's directory or interpreter is missing


def _started(tp: TaskProcess) -> bool:
    """Whether the task ran on its node: its ``started`` event came back over the session (sent
    before TensorFlow's import, so a busy node's task may not have logged a line yet)."""
    return tp.said_started


# What ssh says when a session it had opened breaks (ServerAlive timeout, the node's sshd or link gone)
SESSION_LOST = ("not responding.", "closed by remote host", "Broken pipe", "Connection reset by peer")


def lost_hosts(tps: list[TaskProcess]) -> set[str]:
    """The hosts a task's ssh session to broke while it ran (ssh's 255 with a ``SESSION_LOST``
    line in its log): the teardown sends nothing more there."""
    return {
        tp.task.host for tp in tps if tp.poll() == 255 and any(said in tail(tp.log_path, 20) for said in SESSION_LOST)
    }


def missing_line(path: str) -> str:
    """The line a node's command prints, exiting ``EXIT_NO_KIT``, when ``path`` (the kit's
    directory or interpreter) is not there: what ``remote_failure_hint`` looks for."""
    return f"labkit: {path}: No such file or directory"


def enter_kit(remote_dir: str) -> str:
    """A shell line: ``cd`` into the kit on a node, or say it is missing and exit ``EXIT_NO_KIT``."""
    return (
        f"cd {shlex.quote(remote_dir)} 2>/dev/null || {{ echo {shlex.quote(missing_line(remote_dir))} >&2; "
        f"exit {EXIT_NO_KIT}; }}"
    )


def remote_returncode(ssh_returncode: int) -> int:
    """A remote task's return code as a local one's: ``remote_command``'s script ends ssh with
    128 + N when the task died of signal N, which becomes -N; ssh's own 255 and the task's
    exit codes stay."""
    sig = ssh_returncode - 128
    if ssh_returncode != 255 and sig > 0 and sig in signal.valid_signals():
        return -sig
    return ssh_returncode


def _arm(proc: OwnedProcess) -> None:
    """Write the line that arms ``remote_command``'s stdin watch; the pipe then stays open."""
    try:
        proc.popen.stdin.write(b"\n")
        proc.popen.stdin.flush()
    except OSError:  # ssh exited at once (a bad host, say): poll() reports that
        pass


def _parse_hello(line: str, host: str) -> dict:
    """One line of a remote task's hello file, or a ``VersionSkew`` that says what to do: a
    node that writes something else runs another kit (or something else wrote there)."""
    try:
        hello = json.loads(line)
        if isinstance(hello, dict) and isinstance(hello.get("task"), str):
            return hello
        problem = "it has no task name"
    except json.JSONDecodeError as e:
        problem = f"it is not JSON ({e.msg})"
    raise VersionSkew(
        f"a task on {host} wrote a hello the launcher cannot read ({problem}): {line.strip()[:120]!r}; "
        f"the kit there is likely another version: reinstall it with `make cluster-setup "
        f"HOSTS=<hosts file>` (docs/cluster.md), or pass check_versions=False to run anyway"
    )


# ssh's own reason for a failed login (its last words before exit 255), checked in this order:
# (what ssh prints, what it means on NODE, what to do about it)
SSH_REASONS = (
    (
        "REMOTE HOST IDENTIFICATION HAS CHANGED",
        "its host key changed since ~/.ssh/known_hosts learned it (the "
        "node was reinstalled, or another machine has its address)",
        "`ssh-keygen -R {host}`, then `ssh-keyscan -H {host} >> ~/.ssh/known_hosts` (docs/cluster.md section 2)",
    ),
    (
        "Host key verification failed",
        "its host key is not in ~/.ssh/known_hosts, and BatchMode cannot ask",
        "`ssh-keyscan -H {host} >> ~/.ssh/known_hosts` (docs/cluster.md section 2)",
    ),
    (
        "Connection refused",
        "nothing accepts ssh there: its sshd is not running",
        "start it on the node (`sudo "
        "systemctl start ssh`, from the portal's console), or check the node's state on the portal",
    ),
    (
        "No route to host",
        "unreachable host: no route to it (its link is down, or the address is not on this network)",
        "check the hosts file's addresses (the experiment LAN's) and the node's link",
    ),
    (
        "Network is unreachable",
        "unreachable host: this machine has no network to its address",
        "use the experiment LAN's addresses in the hosts file",
    ),
    (
        "Connection timed out",
        "unreachable host: it does not answer on its ssh port (down, or a firewall drops ssh)",
        "check the node on the portal and its firewall",
    ),
    (
        "Could not resolve hostname",
        "its name does not resolve here",
        "use the addresses of the hosts file (`getent hosts node1 ...`)",
    ),
    (
        "Permission denied",
        "it refused the login: the account does not exist there, or its ~/.ssh/authorized_keys lacks your key",
        "check the user (`-l NAME` in LABKIT_SSH) and the keys (docs/cluster.md section 2)",
    ),
)


def ssh_reason(log_tail: str) -> tuple[str, str, str] | None:
    """ssh's line that says why it failed, with what it means and the fix; None if it said nothing known."""
    lines = [ln.strip() for ln in log_tail.splitlines() if not ln.startswith("#")]
    for said, means, fix in SSH_REASONS:
        line = next((ln for ln in lines if said in ln), None)
        if line:
            return line, means, fix
    return None


def node_label(host: str, hosts_file: str = "/etc/hosts") -> str:
    """``host`` as the hosts file names it: ``node2 (10.10.1.3)`` for an address that a hosts file
    the kit read (``labkit.wire.spec.HOST_NAMES``: the TA's, even where the address is wrong)
    or else CloudLab's ``/etc/hosts`` lists as ``10.10.1.3 node2-link-0 node2`` (its last,
    shortest name); a name, or an address neither lists, as it is."""
    from labkit.wire.spec import HOST_NAMES

    if HOST_NAMES.get(host, host) != host:
        return f"{HOST_NAMES[host]} ({host})"
    try:
        with open(hosts_file) as f:
            for line in f:
                fields = line.split("#", 1)[0].split()
                if len(fields) > 1 and fields[0] == host:
                    return f"{fields[-1]} ({host})"
    except OSError:
        return host  # no hosts file to read: the address is all there is to name the node by
    return host


def remote_failure_hint(
    host: str, returncode: int, log_tail: str, remote_dir: str, remote_python: str, started: bool = False
) -> str:
    """What a remote task's failure most likely means, and the fix ('' if the evidence says
    nothing more than the exit itself). Each hint needs its own evidence: a signal (the task
    was killed on its node); ssh's exit code 255 (``started``: after the task had started, or ssh
    says a session it had opened broke, ``SESSION_LOST``: the connection broke; else ssh's own
    reason, ``SSH_REASONS``); exit ``EXIT_NO_KIT`` with the node's ``missing_line`` for the kit's
    directory or interpreter; an import error for one of the kit's modules or its packages."""
    guide = "see docs/cluster.md"
    node = node_label(host)
    started = started or any(said in log_tail for said in SESSION_LOST)
    if returncode is not None and returncode < 0:
        if returncode == -signal.SIGKILL:
            return (
                f"something on {node} killed it: most often the kernel's OOM killer (`sudo dmesg | grep -i oom` "
                f"there), or a person; give it more memory (fewer tasks on that node, smaller batches), {guide}"
            )
        return (
            f"it got {signal.Signals(-returncode).name} on {node}: the node shut down, or a person stopped it, {guide}"
        )
    if returncode == 255 and started:
        return (
            f"the ssh connection to {node} ended while the task ran: the node rebooted, its network "
            f"dropped or sshd was stopped; the task's log there ends here, {guide}"
        )
    if returncode == 255:
        reason = ssh_reason(log_tail)
        if reason:
            line, means, fix = reason
            return f"ssh to {node} failed: {means} (ssh said: {line}); {fix.format(host=host)}"
        return (
            f"ssh to {node} failed: unreachable host, unknown host key or no key login; check that "
            f"`ssh -o BatchMode=yes {host} true` works without a prompt, {guide}"
        )
    lines = log_tail.splitlines()
    if (
        returncode == EXIT_NO_KIT
        and not started
        and any(ln.strip() in (missing_line(remote_dir), missing_line(remote_python)) for ln in lines)
    ):
        return (
            f"the kit is not installed on {node}: no {remote_dir}/{remote_python}; run "
            f"`make cluster-setup HOSTS=<hosts file>` or `python -m labkit nodes setup`, {guide}"
        )
    if any(ln.startswith("ModuleNotFoundError: No module named 'labkit") for ln in lines):
        return (
            f"the kit on {node} lacks a module this launcher uses: it is older or incomplete; "
            f"reinstall it with `make cluster-setup HOSTS=<hosts file>`, {guide}"
        )
    missing = next((ln for ln in lines if ln.startswith("ModuleNotFoundError: No module named ")), None)
    if missing:
        return (
            f"the kit's .venv on {node} lacks a package it needs ({missing.split(': ', 1)[1]}): it was "
            f"made with another Python than its packages, or its install broke; `make cluster-setup "
            f"HOSTS=<hosts file>` makes it again with this machine's Python version, {guide}"
        )
    return ""
