"""Run notebooks for grading, each in a sandbox of its own, N at a time, and say how each run ended.

Every notebook runs under its own runner process (``python -m labkit.grading.run.runner SPEC``)
that drives papermill. The runner is the grader's code and runs outside the sandbox; only the
kernel, and so everything the student's code starts, runs inside it (``labkit.grading.run.sandbox``)
as the run's own user. The two talk over Unix sockets, so the executed notebook is written where
the kernel cannot reach it. Each run has its own disk (``disks``), capped log (``logcap``) and
cgroup (``limits``); the runner reaps every descendant when it ends or its parent dies.

The grader's side: ``prepare`` gives a notebook its work folder and cleaned copy just before it
starts; ``LocalExecutor`` starts runners, enforces the timeout and the caps, and turns every
ending into a ``RunResult`` (``ok``, ``error``, ``timeout``, ``memory``, ...). A failed run never
stops the batch; ``release`` gives a run's uid and disk back once its page is written.

More in docs/internals.md, section labkit.grading (how runner and kernel talk, reaping, limits).
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from labkit.grading.run import disks, limits, logcap
from labkit.grading.run.executor import Executor, Ready
from labkit.grading.gradebook.report import NEVER_RAN
from labkit.grading.run.sandbox import Account, View, lease_account
from labkit.core.proc import OwnedProcess, own_descendants, tail, tree_memory
from labkit.notebook import execution
from labkit.notebook.record import cell_name, cell_tags

MAX_NOTEBOOK_BYTES = 16 * 2**20  # a submitted notebook past this is refused (outputs are stripped anyway)
DISK_POLL_S = 2.0  # how often a work folder on the host disk (``disks.Folders``) is measured
MAX_OUTPUT_BYTES = 256 * 2**20  # the largest executed notebook the runner writes (the grader reads 64 MB)
PROGRESS = "progress.json"  # in a run's private folder: the cell it is in (``Progress``)


class GraderFault(RuntimeError):
    """The grader's own folders or files failed, not the student's notebook: the command's error
    (exit 1), never a row of that student's."""


@dataclass
class Job:
    """One notebook to run: ``source`` is the submitted file, the rest are where things go."""

    student: str
    lab: object  # rubric.Lab
    source: Path
    executed: Path  # the executed notebook papermill writes
    workdir: Path  # fresh directory the kernel runs in (the only one it may write)
    log: Path  # runner + kernel stdout/stderr (TensorFlow noise lands here)
    private: Path | None = None  # the grader's own files for this run (cleaned input, spec, result)
    flags: list = field(default_factory=list)  # what the submitted file carried that a run must produce
    written_for: str = ""  # the kit version the notebook carries (``labs.stamp``), once cleaned
    account: Account | None = None  # who its sandboxed processes run as, from its start to its checks' end
    disk: object = None  # its disk (``disks.TmpfsDisk`` or ``disks.FolderDisk``), until ``release``

    @property
    def key(self) -> tuple:
        return (self.student, self.lab.key)

    @property
    def clean_input(self) -> Path:
        return self.private / self.source.name


@dataclass
class RunResult:
    status: str  # ok | error | timeout | memory | disk | dead-kernel | crashed | unreadable | refused | not-submitted
    reason: str = ""
    cell: int | None = None  # index (from 0) of the cell it stopped in, in the submitted notebook; shown as cell_name
    ename: str = ""
    evalue: str = ""
    seconds: float = 0.0
    killed: list = field(default_factory=list)  # pids the grader had to kill after the run

    @property
    def ran(self) -> bool:
        return self.status not in NEVER_RAN


MAX_CELLS = 2000  # a lab notebook has about 60; 40,000 tagged cells made the answers quadratic
MAX_DEPTH = 64  # JSON nesting: a notebook needs about 10; 100,000 stopped the class
MAX_SOURCE_CHARS = 2_000_000  # all cells' text (a lab's notebook holds under 50,000 characters)
REFUSED = "not a notebook the grader runs"  # how check_readable's refusals start (over a cap)
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_readable(path: Path) -> str | None:
    """Why ``path`` is not a notebook papermill can run, or None when it is. The caps (size,
    nesting, cells, text) are checked before the work they would make expensive: the file is
    parsed once, its depth measured without recursion, and only a notebook within them is
    validated. A message that starts with REFUSED is a refusal (``prepare``)."""
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        return f"not a notebook the grader runs: {size / 2**20:.1f} MB, over the {MAX_NOTEBOOK_BYTES // 2**20} MB cap"
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except UnicodeDecodeError as e:
        return f"not a readable notebook: not UTF-8 text ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return f"not a readable notebook: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    except RecursionError:
        return f"not a notebook the grader runs: its JSON is nested deeper than the {MAX_DEPTH}-level cap"
    why = _shape(raw)
    if why:
        return why
    if not any(
        isinstance(c, dict) and c.get("cell_type") == "code" and "".join(_text(c.get("source"))).strip()
        for c in raw["cells"]
    ):
        return "an empty notebook: no code cell with any code in it"
    return _validate(raw)


def _shape(raw) -> str | None:
    """Why the parsed JSON ``raw`` is not a version-4 notebook within the caps, or None."""
    if not isinstance(raw, dict):
        return "not a readable notebook: JSON, but not a version-4 notebook (not an object with 'cells')"
    if raw.get("nbformat") != 4:
        version = raw.get("nbformat")
        return (
            f"not a readable notebook: nbformat {version}; save it from JupyterLab (format 4)"
            if isinstance(version, int)
            else "not a readable notebook: JSON, but no nbformat version"
        )
    if not isinstance(raw.get("cells"), list):
        return "not a readable notebook: JSON, but not a version-4 notebook (no 'cells' list)"
    if len(raw["cells"]) > MAX_CELLS:
        return f"not a notebook the grader runs: {len(raw['cells'])} cells, over the {MAX_CELLS}-cell cap"
    depth, where = _depth(raw)
    if depth > MAX_DEPTH:
        return f"not a notebook the grader runs: its JSON is nested deeper than the {MAX_DEPTH}-level cap ({where})"
    chars = sum(len(t) for c in raw["cells"] if isinstance(c, dict) for t in _text(c.get("source")))
    if chars > MAX_SOURCE_CHARS:
        return (
            f"not a notebook the grader runs: {chars} characters of cell text, over the {MAX_SOURCE_CHARS} "
            f"character cap"
        )
    bad = _surrogate(raw)
    if bad:
        return (
            f"not a readable notebook: {bad} holds a lone UTF-16 surrogate (an escape like \\ud800 that is "
            f"no character); save it from JupyterLab again"
        )
    return None


def _text(source) -> list:
    """A cell's source as the list of strings it is made of (nothing that is not text)."""
    if isinstance(source, str):
        return [source]
    return [s for s in source if isinstance(s, str)] if isinstance(source, list) else []


def _depth(raw) -> tuple[int, str]:
    """(the deepest nesting of ``raw``, up to one past MAX_DEPTH, and where), without recursion."""
    cells = raw.get("cells")
    stack, deepest, where = [(raw, 1, "its metadata")], 0, ""
    while stack and deepest <= MAX_DEPTH:
        node, level, at = stack.pop()
        if level > deepest:
            deepest, where = level, at
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            if isinstance(child, (dict, list)):
                stack.append((child, level + 1, cell_name(key) if node is cells else at))
    return deepest, where


def _surrogate(raw) -> str:
    """Where ``raw`` holds a string no UTF-8 file can (a lone surrogate): "cell N", "its
    metadata", or '' when none does."""
    stack = [({k: v for k, v in raw.items() if k != "cells"}, "its metadata")]
    stack += [(c, cell_name(i)) for i, c in enumerate(raw["cells"])]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                return where
        elif isinstance(node, dict):
            stack += [(k, where) for k in node] + [(v, where) for v in node.values()]
        elif isinstance(node, list):
            stack += [(v, where) for v in node]
    return ""


def _validate(raw) -> str | None:
    import nbformat

    try:
        nbformat.reads(json.dumps(raw), as_version=4)
    except Exception as e:  # nbformat raises several types for malformed documents
        return f"not a readable notebook: {type(e).__name__}: {_one_line(str(e))}"
    return None


def clean_copy(source: Path, dest: Path, kernel: str = "python3") -> tuple[list[str], str]:
    """Write ``source`` without anything a run produces (outputs, execution counts, outputs
    smuggled into Markdown cells) to ``dest``, for the rubric's ``kernel`` (the notebook's own
    kernelspec is not the student's to choose); returns what was there, cell by cell, and the
    kit version it was written against."""
    import nbformat

    from labkit.labs import stamp
    from labkit.notebook.record import pre_baked

    nb = nbformat.read(str(source), as_version=4)
    flags = pre_baked(nb)
    nbformat.write(execution.clean(nb, kernel), str(dest))
    return flags, stamp.written_for(nb)


def prepare(job: Job) -> RunResult | None:
    """Give ``job`` a fresh working directory and a cleaned copy of its notebook; a RunResult when it cannot run."""
    if job.source.is_symlink() or job.source.parent.is_symlink():
        return RunResult(
            "refused", f"{job.source.parent.name}/{job.source.name} is a symbolic link; submit the notebook file itself"
        )
    if not job.source.is_file():
        folder = job.source.parent
        found = sorted(p.name for p in folder.glob("*.ipynb")) if folder.is_dir() else []
        hint = f" (found: {', '.join(found)})" if found else ""
        return RunResult("not-submitted", f"no {job.source.name} in {folder.name}/{hint}")
    try:
        why = grader_side(job, "reading it", check_readable, job.source)
    except limits.OverBudget as e:
        why = f"{REFUSED}: {e}"
    except (OSError, ValueError, RecursionError, MemoryError) as e:  # whatever the file does, its row
        why = f"not a readable notebook: {type(e).__name__}: {_one_line(e)}"
    if why:
        return RunResult("refused" if why.startswith(REFUSED) else "unreadable", why)
    _grader_folders(job)
    try:
        job.flags, job.written_for = grader_side(
            job, "cleaning it", clean_copy, job.source, job.clean_input, job.lab.kernel
        )
    except limits.OverBudget as e:
        job.clean_input.unlink(missing_ok=True)
        return RunResult("refused", f"{REFUSED}: {e}")
    except (OSError, ValueError, RecursionError, MemoryError) as e:  # UnicodeEncodeError is a ValueError
        job.clean_input.unlink(missing_ok=True)
        return RunResult("unreadable", f"not a notebook the grader can clean: {type(e).__name__}: {_one_line(e)}")
    return None


READ_CPU_S = 60.0  # CPU seconds of the grader's own work on one notebook, per step (a 16 MB one reads in ~15)
READ_WALL_FACTOR = 3.0  # its wall-clock backstop, as a page's (``render.WALL_FACTOR``): a busy machine


def grader_side(job: Job, what: str, fn, *args):
    """``fn(*args)``, work of the grader's own on ``job``'s files (reading, cleaning, examining
    them), in a child with limits counted against that student (``limits.bounded``): READ_CPU_S
    of CPU time, the lab's ``check_memory_mb`` and a wall-clock backstop. ``OverBudget`` says
    ``what`` went past which; the batch goes on. The parsers are imported here first, once, so
    no child spends its budget on them."""
    import nbconvert.preprocessors  # noqa: F401 - imported once, before the fork
    import nbformat  # noqa: F401

    try:
        return limits.bounded(
            fn, *args, cpu_s=READ_CPU_S, memory_mb=job.lab.check_memory_mb, wall_s=READ_CPU_S * READ_WALL_FACTOR
        )
    except limits.OverBudget as e:
        raise limits.OverBudget(f"{what} {e}, past the grader's limit for one notebook") from None


def _grader_folders(job: Job) -> None:
    """``job``'s work and private folders made anew (the private one closed to runs), and no
    executed notebook or log of an earlier run; GraderFault when the grader cannot make them."""
    try:
        for d in (job.workdir, job.private):
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
        job.private.chmod(0o700)  # the grader's own: no run's user may read or write it
        job.private.parent.parent.chmod(0o700)
        for p in (job.executed, job.log):
            p.parent.mkdir(parents=True, exist_ok=True)
            p.unlink(missing_ok=True)
    except OSError as e:
        raise GraderFault(
            f"the grader could not make its own folders for {job.student}/{job.source.name} "
            f"({type(e).__name__}: {e}), so it stopped, recording nothing for that notebook; once the cause "
            f"is fixed (a full disk, a folder there the grader may not change), grading again runs it"
        ) from e


# ---------------------------------------------------------------------------------------------
# The grader's side: start runners, watch them, end them.


KIT_PREFIX = "labkit-student-kit-"  # a batch's copy of the student kit in /tmp (labkit.core.scratch)


@dataclass
class Setup:
    """How this batch runs notebooks: the sandbox, the limits backend, and what a kernel sees."""

    sandbox: object  # sandbox.Bubblewrap or sandbox.Unconfined
    backend: str  # limits backend ("cgroup1", ...)
    student_kit: Path | None = None  # the student's view of labkit, bound over the real package
    package: Path | None = None  # the real package directory
    data: list[Path] = field(default_factory=list)  # dataset folders, read-only
    data_env: dict = field(default_factory=dict)  # LABKIT_DATA for the kernel
    keep_work: bool = False  # leave work folders on the host disk (a Slurm node's runs)

    def view(self, cwd: Path, rw: list[Path], scratch: Path, env: dict, ro=(), job: Job | None = None) -> View:
        overlays = [(self.student_kit, self.package)] if self.student_kit else []
        view = View(
            cwd=cwd, env={**self.data_env, **env}, scratch=scratch, ro=[*self.data, *ro], rw=rw, overlays=overlays
        )
        if job is not None:
            view.account = job.account or Account()
            view.tmp_bytes = view.file_bytes = int(job.lab.disk_mb * 2**20)
            view.processes = int(job.lab.max_processes)
        return view

    def disks(self):
        """Where this batch's runs get their disks: tmpfs file systems in a namespace the grader
        holds, or host folders (unsandboxed runs, a Slurm node's, or where no namespace can be made)."""
        if not self.sandbox.confined or self.keep_work:
            return disks.Folders(keep=self.keep_work)
        try:
            return disks.Holder()
        except OSError as e:
            print(f"labkit: {e}; each run's disk is a host folder whose size the grader polls", file=sys.stderr)
            return disks.Folders()


def provision(job: Job, setup: Setup, holder) -> None:
    """Give ``job`` its account and disk (once; its checks reuse them)."""
    if job.account is None:
        job.account = lease_account() if setup.sandbox.confined else Account()
    if job.disk is None:
        size = job.lab.disk_mb * 2**20
        if isinstance(holder, disks.Holder):
            job.disk = holder.open(job.workdir.resolve(), size, job.account.uid, job.account.gid)
        else:
            job.disk = holder.open_folder(
                job.workdir.resolve(), job.private.resolve() / "checks", size, job.account.owner
            )


def release(job: Job) -> None:
    """After the grader has read what it needs: remove the run's disk, give its uid back."""
    try:
        if job.disk is not None:
            job.disk.close()
    except OSError as e:  # the batch goes on; the namespace's end frees the disk at the latest
        print(f"labkit: could not remove the disk of {job.student}/{job.lab.notebook}: {e}", file=sys.stderr)
    finally:
        job.disk = None
        if job.account is not None:
            job.account.release()


class _Running:
    def __init__(self, job: Job, setup: Setup, holder):
        self.job, self.lab, self.setup = job, job.lab, setup
        self.token = uuid.uuid4().hex
        provision(job, setup, holder)
        self.group = limits.open_group(
            self.token[:16], self.lab.memory_mb * 2**20, self.lab.max_processes, backends=[setup.backend]
        )
        work = job.workdir.resolve()
        view = setup.view(
            work,
            [work, job.disk.ipc],
            job.private.resolve(),
            {
                "LABKIT_RUNS": str(work / "runs"),
                "PYTHONUNBUFFERED": "1",
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "LABKIT_GRADED": "1",
            },
            job=job,
        )
        prefix, env = setup.sandbox.command(["KERNEL"], view)
        spec = {
            "input": str(job.clean_input.resolve()),
            "output": str(job.executed.resolve()),
            "workdir": str(work),
            "parameters": dict(job.lab.parameters),
            "kernel": job.lab.kernel,
            "cell_timeout": job.lab.cell_timeout,
            "start_timeout": job.lab.start_timeout,
            "memory_mb": job.lab.memory_mb,
            "max_processes": job.lab.max_processes,
            "ipc": str(job.disk.ipc),
            "owner": job.account.owner if setup.sandbox.confined else None,
            "kernel_prefix": prefix[:-1],
            "group": [str(p) for p in self.group.procs],
            "log": str(job.log.resolve()),
            "progress": str(job.private.resolve() / PROGRESS),
            "parent": os.getpid(),
        }
        self.spec_path = job.private.resolve() / "spec.json"
        self.result_path = job.private.resolve() / "result.json"
        self.spec_path.write_text(json.dumps(spec, indent=1))
        if setup.sandbox.confined:  # the runner itself is ours: it needs no more than a path
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(job.private.resolve()),
                "LANG": "C.UTF-8",
                "PYTHONUNBUFFERED": "1",
            }
        cmd = self.group.enter_command(
            [
                *job.disk.prefix,
                sys.executable,
                "-m",
                "labkit.grading.run.runner",
                str(self.spec_path),
                str(self.result_path),
            ]
        )
        self.proc = OwnedProcess(cmd, job.log, env=env, cwd=job.private)
        self.t0 = self.measured = time.monotonic()
        self.proc.start()

    def poll(self) -> RunResult | None:
        """The result once the run has ended (by itself, by timeout or by the memory cap)."""
        elapsed = time.monotonic() - self.t0
        if self.proc.poll() is not None:
            return self._finish(self._read_result())
        if elapsed > self.lab.notebook_timeout:
            return self._killed("timeout", f"the notebook ran past its {self.lab.notebook_timeout:g} s limit")
        if self.job.disk.polled and time.monotonic() - self.measured > DISK_POLL_S:
            self.measured = time.monotonic()
            if self.job.disk.over():
                return self._killed("disk", f"the notebook wrote more than its {self.lab.disk_mb:g} MB of disk")
        over_memory = f"the notebook's processes used more than {self.lab.memory_mb:g} MB"
        if self.group.oom_kills():  # the kernel killed a process at the group's memory limit: the run is over
            return self._killed("memory", over_memory, "they were killed")
        if self.group.backend == "rlimit":  # no cgroup: cap the tree's RSS and memfds by polling
            held = tree_memory(self.proc.pid)
            if held > self.lab.memory_mb * 2**20:
                note = f"process tree RSS and memfds {held / 2**20:.0f} MB > limit {self.lab.memory_mb:g} MB: killed"
                return self._killed("memory", over_memory, "they were killed", log_note=note)
        return None

    def _read_result(self) -> RunResult:
        try:
            result = RunResult(**json.loads(self.result_path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            last = next((ln for ln in reversed(tail(self.job.log, 20).splitlines()) if ln.strip()), "")
            result = RunResult(
                "crashed",
                f"the grader's runner exited with code {self.proc.poll()} "
                f"{_where(self._running_cell())}: {_one_line(last)}",
                cell=self._running_cell(),
            )
        if result.status in ("dead-kernel", "error", "crashed") and self.group.oom_kills():
            result = RunResult(
                "memory",
                f"the notebook's processes used more than {self.lab.memory_mb:g} MB "
                f"{_where(result.cell)}; the kernel's OOM killer ended "
                f"{self.group.oom_kills()} of them",
                result.cell,
                result.ename,
                result.evalue,
            )
        elif result.status == "error" and self.group.task_limit_hits():
            result.reason += (
                f" (the run reached its limit of {self.lab.max_processes:g} processes and threads, so a fork failed)"
            )
        elif result.status in ("error", "dead-kernel", "crashed") and self.job.disk.full():
            result.status = "disk"
            result.reason += (
                f" (the run filled its {self.lab.disk_mb:g} MB of disk: disk_mb in the rubric; what it "
                f"wrote is removed after the grader's checks)"
            )
        return result

    def _killed(
        self, status: str, what: str, killed: str = "its processes were killed", log_note: str = ""
    ) -> RunResult:
        """Stop the run past a limit and end it with ``status``: the reason says ``what`` the notebook
        did, at the cell it was running, and that it was ``killed``; ``log_note`` goes to the job's log."""
        self.stop()
        cell = self._running_cell()
        if log_note:
            with open(self.job.log, "a") as f:
                f.write(f"\n[grader] {log_note}\n")
        return self._finish(RunResult(status, f"{what} {_where(cell)}; {killed}", cell))

    def _running_cell(self) -> int | None:
        return Progress(self.job.private / PROGRESS).cell()

    def stop(self) -> None:
        """End the runner and everything in the run's group."""
        self.proc.kill(grace=2.0)
        self.group.kill()

    def _finish(self, result: RunResult) -> RunResult:
        self.proc.kill(grace=2.0)
        result.killed = self.group.kill()
        if result.killed:
            with open(self.job.log, "a") as f:
                f.write(f"\n[grader] killed processes still running after the run: {result.killed}\n")
        self.group.close()
        result.seconds = round(time.monotonic() - self.t0, 1)
        return result

    def kill(self) -> None:
        self.stop()
        self.group.close()


class LocalExecutor(Executor):
    """Each notebook under a runner process here (``_Running``), ``parallel`` at a time, and
    what is in flight within the memory available when the batch starts; its timeout, memory
    and disk are enforced as it is polled. The runs' disks come from one holder
    (``Setup.disks``), made at the first start and closed with the executor."""

    name = "local"

    def __init__(self, setup: Setup, parallel: int = 1, log=print):
        import psutil

        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, not {parallel}")
        why = limits.shared(setup.backend)
        if parallel > 1 and why:
            from labkit.grading.run.executor import ExecutorError

            raise ExecutorError(
                f"-j {parallel} refused: {why}. Grade with -j 1, as root, or under a delegated "
                f"cgroup (systemd-run --user --scope -p Delegate=yes ...)"
            )
        self.setup, self.slots, self.holder = setup, parallel, None
        self.memory_mb = psutil.virtual_memory().available / 2**20

    def describe(self) -> str:
        return f"{self.slots} at a time"

    def start(self, jobs: list[Job]) -> list:
        if self.holder is None:
            self.holder = self.setup.disks()
        handles = []
        try:
            for job in jobs:
                handles.append(self._start(job))
        except BaseException:  # Ctrl-C halfway: the batch never gets these handles, so end them here
            self.kill(handles)
            raise
        return handles

    def _start(self, job: Job):
        try:
            return _Running(job, self.setup, self.holder)
        except OSError as e:  # no cgroup or uid left, a full disk: this notebook's row, not the batch
            return Ready(RunResult("crashed", f"the grader could not start the run: {type(e).__name__}: {e}"))

    def poll(self, handle) -> RunResult | None:
        return handle.poll()

    def kill(self, handles: list) -> None:
        for handle in handles:
            handle.kill()

    def close(self) -> None:
        if self.holder is not None:
            self.holder.close()
            self.holder = None


# ---------------------------------------------------------------------------------------------
# Cells: map papermill's executed notebook back to the cells the student submitted.


def numbering(source: Path, injected: bool):
    """executed index -> the submitted notebook's index of that cell (None for papermill's
    injected-parameters cell). Papermill inserts that cell after the ``parameters`` cell (or at
    the top) when it has parameters to inject, and replaces a cell already tagged so in place."""
    import nbformat

    if not injected:
        return lambda i: i
    tags = [cell_tags(c) for c in nbformat.read(str(source), as_version=4).cells]
    if any("injected-parameters" in t for t in tags):  # replaced in place: no shift
        return lambda i: i
    at = next((i + 1 for i, t in enumerate(tags) if "parameters" in t), 0)
    return lambda i: None if i == at else i - 1 if i > at else i


def source_index(source: Path, executed_index: int, injected: bool = True) -> int | None:
    """The submitted notebook's index of the executed notebook's cell ``executed_index`` (``numbering``)."""
    return numbering(source, injected)(executed_index)


class Progress:
    """The cell a run is in, kept by its runner in a small file of the grader's (written whole,
    then renamed) as each cell starts: what the grader says of a run it stops, read at no cost
    however large the executed notebook is (which ``paced`` saves only now and then)."""

    def __init__(self, path):
        self.path = Path(path)

    def mark(self, cell: int | None) -> None:
        """The submitted notebook's ``cell`` started (None: papermill's injected-parameters cell)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"cell": cell}))
        os.replace(tmp, self.path)

    def cell(self) -> int | None:
        """The last cell that started; None before any did (or the injected one)."""
        try:
            cell = json.loads(self.path.read_text()).get("cell")
        except (OSError, ValueError, AttributeError):
            return None
        return cell if isinstance(cell, int) and not isinstance(cell, bool) else None


def _where(cell: int | None) -> str:
    return f"(in {cell_name(cell)})" if cell is not None else "(while starting the kernel)"


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# The runner process.

MEMORY_ENAMES = ("MemoryError", "_ArrayMemoryError", "ResourceExhaustedError")
OOM_SIGNS = ("std::bad_alloc", "Cannot allocate memory", "MemoryError", "out of memory")


def kill_descendants(rounds: int = 200) -> list[int]:
    """SIGKILL every descendant of this process until none is left (a subreaper gets the orphans
    of what it kills, so a process that forked in between is found in the next round)."""
    killed = []
    me = psutil.Process()
    for _ in range(rounds):
        try:
            kids = me.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        if not kids:
            break
        for p in kids:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:  # a zombie is dead already: only reaped below
                    p.kill()
                    killed.append(p.pid)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(kids, timeout=0.5)
        while True:  # reap the orphans re-parented to us, or they stay listed as zombies
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
    return killed


_CAPTURE: logcap.Capture | None = None  # this runner's capped log, flushed however it ends


def _teardown(signum, frame) -> None:
    """SIGTERM/SIGHUP, or the grader died: kill everything the notebook started, then exit."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    try:
        left = kill_descendants()
        print(f"[runner] stopped by signal {signum}; killed {len(left)} process(es)", file=sys.stderr, flush=True)
    finally:
        if _CAPTURE is not None:
            _CAPTURE.finish(wait=0.5)
        os._exit(130)


def _own_the_tree(parent: int) -> None:
    """Orphaned descendants are re-parented to this runner instead of init, the runner gets
    SIGTERM when the grader dies, and SIGTERM/SIGHUP end the run at once (``_teardown``). The
    first two are Linux-only; elsewhere the grader's group kill still applies."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _teardown)
    own_descendants(parent, signal.SIGTERM)  # a grader gone before we could ask: SIGTERM now, _teardown


def _kernel_manager_class(prefix: list[str], ipc: str, owner=None):
    from jupyter_client.manager import AsyncKernelManager

    class SandboxedKernelManager(AsyncKernelManager):
        """A kernel started through the sandbox's command line, reached over Unix sockets in
        ``ipc``; its connection file (0600) belongs to the run's user (``owner``), who must read it."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.transport = "ipc"
            self.ip = f"{ipc}/k"
            self.connection_file = f"{ipc}/kernel.json"

        def write_connection_file(self, **kwargs):
            super().write_connection_file(**kwargs)
            if owner:
                os.chown(self.connection_file, *owner)

        def format_kernel_cmd(self, extra_arguments=None):
            return [*prefix, *super().format_kernel_cmd(extra_arguments)]

    return SandboxedKernelManager


def _execute(spec: dict) -> RunResult:
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    from labkit.grading.run import paced

    src = Path(spec["input"])
    progress, number = Progress(spec["progress"]), numbering(src, bool(spec["parameters"]))
    try:
        execution.execute(
            src,
            spec["output"],
            parameters=spec["parameters"],
            kernel=spec["kernel"],
            cwd=spec["workdir"],
            cell_timeout=spec["cell_timeout"],
            start_timeout=spec["start_timeout"],
            kernel_manager_class=_kernel_manager_class(spec["kernel_prefix"], spec["ipc"], spec.get("owner")),
            engine_name=paced.NAME,
            started=lambda i: progress.mark(number(i)),
        )
        return RunResult("ok")
    except PapermillExecutionError as e:
        cell = number(e.cell_index)
        where = cell_name(cell) if cell is not None else "the injected parameters cell"
        evalue = _one_line(e.evalue)
        exc = f"{e.ename}: {evalue}" if evalue else e.ename
        if e.ename in MEMORY_ENAMES:
            return RunResult(
                "memory", f"{where} ran out of memory (limit {spec['memory_mb']:g} MB): {exc}", cell, e.ename, evalue
            )
        return RunResult("error", f"{where} raised {exc}", cell, e.ename, evalue)
    except CellTimeoutError:
        cell = progress.cell()
        return RunResult("timeout", f"{cell_name(cell)} ran past the {spec['cell_timeout']:g} s cell timeout", cell)
    except DeadKernelError as e:
        cell = progress.cell()
        if any(sign in tail(spec["log"], 40) for sign in OOM_SIGNS):  # e.g. C++ code aborting on bad_alloc
            return RunResult(
                "memory", f"the kernel died {_where(cell)} out of memory (limit {spec['memory_mb']:g} MB)", cell
            )
        return RunResult("dead-kernel", f"the kernel died {_where(cell)}: {_one_line(e)}", cell)
    except Exception as e:  # kernel failed to start, missing kernelspec, ...: report it, never hang
        cell = progress.cell()
        if isinstance(e, OSError) and e.errno == errno.EFBIG:  # papermill's copy of the notebook, at RLIMIT_FSIZE
            return RunResult(
                "disk",
                f"the notebook's outputs grew past {MAX_OUTPUT_BYTES // 2**20} MB {_where(cell)}, "
                f"more than the grader keeps of a run; print less",
                cell,
            )
        return RunResult(
            "crashed",
            f"the notebook could not run {_where(cell)}: {type(e).__name__}: {_one_line(e)}",
            cell,
            type(e).__name__,
            _one_line(e),
        )


def main(argv=None) -> int:
    global _CAPTURE
    spec_path, result_path = (argv or sys.argv[1:])[:2]
    spec = json.loads(Path(spec_path).read_text())
    _CAPTURE = logcap.Capture(spec["log"])  # from here on, what the runner and the kernel print is capped
    _own_the_tree(spec["parent"])
    limits.limit_self(spec["memory_mb"] * 2**20, spec.get("max_processes"))
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]  # the kernel sets its own (the run's disk) below this
    resource.setrlimit(
        resource.RLIMIT_FSIZE,
        (MAX_OUTPUT_BYTES if hard == resource.RLIM_INFINITY else min(MAX_OUTPUT_BYTES, hard), hard),
    )
    try:
        result = _execute(spec)
    finally:
        left = kill_descendants()
        if left:
            print(f"[runner] killed processes the notebook left running: {left}", file=sys.stderr)
    Path(result_path).write_text(json.dumps(asdict(result)))
    _CAPTURE.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
