"""Run notebooks for grading, each in isolation, N at a time, and say how each run ended.

Every notebook runs in its own runner process (``python -m labkit.grading.runner SPEC``)
that papermill drives, in a fresh working directory holding a copy of the notebook, so a
submission's files (artifacts, ``runs/``) are its own. The runner

- caps every process it starts at ``memory_mb`` of data segment (``RLIMIT_DATA``, which
  the kernel and any cluster task inherit; unlike ``RLIMIT_AS`` it ignores the address
  space TensorFlow reserves but never touches), so a runaway allocation is a
  ``MemoryError`` in the cell that made it;
- becomes a child subreaper, so processes the notebook orphans stay in its tree, and
  kills that tree when papermill returns;
- pins the kernel's five ZMQ ports to a block of ports owned by its worker slot, so
  parallel kernels never race each other for the same free port ("Address already in use");
  a cluster a notebook starts picks its own free ports, and moves if it loses one.

The grader's side (``run_all``) starts runners, enforces the whole-notebook timeout and a
cap on the tree's total RSS by killing the process tree, sweeps any process that still
carries the run's token in its environment, and turns every ending into a ``RunResult``
with a status and a reason: ``ok``, ``error``, ``timeout``, ``memory``, ``dead-kernel``,
``crashed``, ``unreadable`` or ``not-submitted``. A failed run never stops the batch.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from labkit.grading.report import NEVER_RAN
from labkit.grading.rubric import cell_tags
from labkit.proc import OwnedProcess, kill_tree, tail

TOKEN_VAR = "LABKIT_GRADE_TOKEN"
PORT_SPAN = 20                   # ports per worker slot; a kernel needs 5
PORT_RANGE = (20000, 32000)      # below Linux's ephemeral range, where outgoing sockets take ports


@dataclass
class Job:
    """One notebook to run: ``source`` is the submitted file, the rest are where things go."""
    student: str
    lab: object                  # rubric.Lab
    source: Path
    executed: Path               # the executed notebook papermill writes
    workdir: Path                # fresh directory the kernel runs in
    log: Path                    # runner + kernel stdout/stderr (TensorFlow noise lands here)

    @property
    def key(self) -> tuple:
        return (self.student, self.lab.key)


@dataclass
class RunResult:
    status: str                  # ok | error | timeout | memory | dead-kernel | crashed | unreadable | not-submitted
    reason: str = ""
    cell: int | None = None      # index of the cell it stopped in, counted in the submitted notebook
    ename: str = ""
    evalue: str = ""
    seconds: float = 0.0
    killed: list = field(default_factory=list)   # pids the grader had to kill after the run

    @property
    def ran(self) -> bool:
        return self.status not in NEVER_RAN


def check_readable(path: Path) -> str | None:
    """Why ``path`` is not a notebook papermill can run, or None when it is."""
    import nbformat

    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except UnicodeDecodeError as e:
        return f"not a readable notebook: not UTF-8 text ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return f"not a readable notebook: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list) or raw.get("nbformat") != 4:
        return "not a readable notebook: JSON, but not a version-4 notebook (no 'cells' list or nbformat != 4)"
    try:
        nbformat.reads(json.dumps(raw), as_version=4)
    except Exception as e:  # nbformat raises several types for malformed documents
        return f"not a readable notebook: {type(e).__name__}: {_one_line(str(e))}"
    return None


def prepare(job: Job) -> RunResult | None:
    """Give ``job`` a fresh working directory with a copy of its notebook; a RunResult when it cannot run."""
    if not job.source.is_file():
        folder = job.source.parent
        found = sorted(p.name for p in folder.glob("*.ipynb")) if folder.is_dir() else []
        hint = f" (found: {', '.join(found)})" if found else ""
        return RunResult("not-submitted", f"no {job.source.name} in {folder.name}/{hint}")
    why = check_readable(job.source)
    if why:
        return RunResult("unreadable", why)
    if job.workdir.exists():
        shutil.rmtree(job.workdir)
    job.workdir.mkdir(parents=True)
    shutil.copy2(job.source, job.workdir / job.source.name)
    for p in (job.executed, job.log):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.unlink(missing_ok=True)
    return None


# ---------------------------------------------------------------------------------------------
# The grader's side: start runners, watch them, end them.

class _Running:
    def __init__(self, job: Job, slot: int, port_base: int):
        self.job, self.lab = job, job.lab
        self.token = uuid.uuid4().hex
        spec = {"input": str((job.workdir / job.source.name).resolve()), "output": str(job.executed.resolve()),
                "workdir": str(job.workdir.resolve()), "parameters": dict(job.lab.parameters),
                "kernel": job.lab.kernel, "cell_timeout": job.lab.cell_timeout,
                "start_timeout": job.lab.start_timeout, "memory_mb": job.lab.memory_mb,
                "ports": [port_base + slot * PORT_SPAN, PORT_SPAN], "log": str(job.log.resolve())}
        self.spec_path = job.log.resolve().with_suffix(".spec.json")   # the runner's cwd is the workdir
        self.result_path = job.log.resolve().with_suffix(".result.json")
        self.result_path.unlink(missing_ok=True)
        self.spec_path.write_text(json.dumps(spec, indent=1))
        # cluster runs (labkit.launch) go under the submission's own directory, where verifiers look
        env = {**os.environ, TOKEN_VAR: self.token, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
               "LABKIT_RUNS": str(job.workdir.resolve() / "runs")}
        self.proc = OwnedProcess([sys.executable, "-m", "labkit.grading.runner", self.spec_path, self.result_path],
                                 job.log, env=env, cwd=job.workdir)
        self.t0 = time.monotonic()
        self.proc.start()

    def poll(self) -> RunResult | None:
        """The result once the run has ended (by itself, by timeout or by the memory cap)."""
        elapsed = time.monotonic() - self.t0
        if self.proc.poll() is not None:
            return self._finish(self._read_result())
        if elapsed > self.lab.notebook_timeout:
            self.proc.kill()
            cell = self._running_cell()
            return self._finish(RunResult(
                "timeout", f"the notebook ran past its {self.lab.notebook_timeout:g} s limit {_where(cell)}; "
                           f"its processes were killed", cell))
        rss = _tree_rss(self.proc.pid)
        if rss > self.lab.memory_mb * 2**20:
            self.proc.kill()
            cell = self._running_cell()
            with open(self.job.log, "a") as f:
                f.write(f"\n[grader] process tree RSS {rss / 2**20:.0f} MB > limit {self.lab.memory_mb:g} MB: killed\n")
            return self._finish(RunResult(
                "memory", f"the notebook's processes used more than {self.lab.memory_mb:g} MB {_where(cell)}; "
                          f"they were killed", cell))
        return None

    def _read_result(self) -> RunResult:
        try:
            return RunResult(**json.loads(self.result_path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            last = next((ln for ln in reversed(tail(self.job.log, 20).splitlines()) if ln.strip()), "")
            return RunResult("crashed", f"the grader's runner exited with code {self.proc.poll()} "
                                        f"{_where(self._running_cell())}: {_one_line(last)}",
                             cell=self._running_cell())

    def _running_cell(self) -> int | None:
        return running_cell(self.job.executed, self.job.workdir / self.job.source.name, bool(self.lab.parameters))

    def _finish(self, result: RunResult) -> RunResult:
        self.proc.kill()
        result.killed = sweep(self.token)
        if result.killed:
            with open(self.job.log, "a") as f:
                f.write(f"\n[grader] killed processes that had left the notebook's tree: {result.killed}\n")
        result.seconds = round(time.monotonic() - self.t0, 1)
        self.spec_path.unlink(missing_ok=True)
        self.result_path.unlink(missing_ok=True)
        return result

    def kill(self) -> None:
        self.proc.kill()
        sweep(self.token)


def run_all(jobs: list[Job], parallel: int = 1, on_done=None, poll: float = 0.25) -> dict:
    """Run ``jobs`` (already ``prepare``d), ``parallel`` at a time; ``on_done(job, result)`` as each ends.

    Returns {job.key: RunResult}. Interrupting (Ctrl-C) kills every running notebook's tree.
    """
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, not {parallel}")
    pending, running, results = list(jobs), {}, {}
    free = list(range(parallel))
    port_base = random.randrange(PORT_RANGE[0], PORT_RANGE[1] - parallel * PORT_SPAN, PORT_SPAN)
    try:
        while pending or running:
            while pending and free:
                slot = free.pop(0)
                running[slot] = _Running(pending.pop(0), slot, port_base)
            time.sleep(poll)
            for slot, run in list(running.items()):
                result = run.poll()
                if result is not None:
                    del running[slot]
                    free.append(slot)
                    results[run.job.key] = result
                    if on_done:
                        on_done(run.job, result)
    finally:
        for run in running.values():
            run.kill()
    return results


def sweep(token: str) -> list[int]:
    """Kill every process of ours whose environment carries ``token``: what escaped the tree."""
    me = os.getpid()
    found = []
    for p in psutil.process_iter(["pid", "uids"]):
        try:
            if p.pid != me and p.info["uids"] and p.info["uids"].real == os.getuid() \
                    and p.environ().get(TOKEN_VAR) == token:
                found.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for pid in found:
        kill_tree(pid, grace=1.0)
    return found


def _tree_rss(pid: int) -> int:
    total = 0
    try:
        procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


# ---------------------------------------------------------------------------------------------
# Cells: map papermill's executed notebook back to the cells the student submitted.

def running_cell(executed: Path, source: Path, injected: bool) -> int | None:
    """The submitted-notebook index of the last cell papermill started, from its saved progress."""
    import nbformat

    try:
        nb = nbformat.read(str(executed), as_version=4)
    except (OSError, ValueError):
        return None
    cells = [c for c in nb.cells if "papermill-error-cell-tag" not in cell_tags(c)]
    started = [i for i, c in enumerate(cells) if c.get("metadata", {}).get("papermill", {}).get("start_time")]
    return source_index(source, started[-1], injected) if started else None


def source_index(source: Path, executed_index: int, injected: bool = True) -> int | None:
    """Papermill inserts an ``injected-parameters`` cell after the ``parameters`` cell (or at
    the top) when it has parameters to inject; undo that shift. None for the injected cell itself."""
    import nbformat

    if not injected:
        return executed_index
    cells = nbformat.read(str(source), as_version=4).cells
    tags = [cell_tags(c) for c in cells]
    if any("injected-parameters" in t for t in tags):  # papermill replaces it in place: no shift
        return executed_index
    at = next((i + 1 for i, t in enumerate(tags) if "parameters" in t), 0)
    if executed_index == at:
        return None
    return executed_index - 1 if executed_index > at else executed_index


def _where(cell: int | None) -> str:
    return f"(in cell {cell})" if cell is not None else "(while starting the kernel)"


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# The runner process.

MEMORY_ENAMES = ("MemoryError", "_ArrayMemoryError", "ResourceExhaustedError")
OOM_SIGNS = ("std::bad_alloc", "Cannot allocate memory", "MemoryError", "out of memory")


def _limit_memory(mb: float) -> None:
    import resource

    limit = int(mb * 2**20)
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def _own_the_tree() -> None:
    """Orphaned descendants are re-parented to this runner instead of init, the runner gets
    SIGTERM when the grader dies, and SIGTERM/SIGHUP unwind it (so ``main`` kills its tree).
    The first two are Linux-only; elsewhere the grader's tree kill still applies."""
    def unwind(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, unwind)
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the grader died before we could ask
        raise KeyboardInterrupt("the grader is gone")


def _free_ports(base: int, span: int, count: int = 5) -> list[int] | None:
    ports = []
    for port in range(base, base + span):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    return None


def _kernel_manager_class(base: int, span: int):
    from jupyter_client.manager import AsyncKernelManager

    class PinnedPortsKernelManager(AsyncKernelManager):
        """A kernel manager whose ports come from this worker slot's own block."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            ports = _free_ports(base, span)
            if ports:  # else fall back to jupyter_client's random free ports
                self.cache_ports = False
                self.shell_port, self.iopub_port, self.stdin_port, self.hb_port, self.control_port = ports

    return PinnedPortsKernelManager


def _execute(spec: dict) -> RunResult:
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    src, out, injected = Path(spec["input"]), Path(spec["output"]), bool(spec["parameters"])
    try:
        pm.execute_notebook(src, out, parameters=spec["parameters"], kernel_name=spec["kernel"],
                            cwd=spec["workdir"], execution_timeout=spec["cell_timeout"],
                            start_timeout=spec["start_timeout"], progress_bar=False, log_output=False,
                            kernel_manager_class=_kernel_manager_class(*spec["ports"]),
                            shutdown_kernel="immediate")
        return RunResult("ok")
    except PapermillExecutionError as e:
        cell = source_index(src, e.cell_index, injected)
        where = f"cell {cell}" if cell is not None else "the injected parameters cell"
        evalue = _one_line(e.evalue)
        exc = f"{e.ename}: {evalue}" if evalue else e.ename
        if e.ename in MEMORY_ENAMES:
            return RunResult("memory", f"{where} ran out of memory (limit {spec['memory_mb']:g} MB): {exc}",
                             cell, e.ename, evalue)
        return RunResult("error", f"{where} raised {exc}", cell, e.ename, evalue)
    except CellTimeoutError:
        cell = running_cell(out, src, injected)
        return RunResult("timeout", f"cell {cell} ran past the {spec['cell_timeout']:g} s cell timeout", cell)
    except DeadKernelError as e:
        cell = running_cell(out, src, injected)
        if any(sign in tail(spec["log"], 40) for sign in OOM_SIGNS):  # e.g. C++ code aborting on bad_alloc
            return RunResult("memory", f"the kernel died {_where(cell)} out of memory "
                                       f"(limit {spec['memory_mb']:g} MB)", cell)
        return RunResult("dead-kernel", f"the kernel died {_where(cell)}: {_one_line(e)}", cell)
    except Exception as e:  # kernel failed to start, missing kernelspec, ...: report it, never hang
        cell = running_cell(out, src, injected)
        return RunResult("crashed", f"the notebook could not run {_where(cell)}: {type(e).__name__}: "
                                    f"{_one_line(e)}", cell, type(e).__name__, _one_line(e))


def main(argv=None) -> int:
    spec_path, result_path = (argv or sys.argv[1:])[:2]
    spec = json.loads(Path(spec_path).read_text())
    _limit_memory(spec["memory_mb"])
    try:
        _own_the_tree()
        result = _execute(spec)
    except KeyboardInterrupt as e:  # SIGTERM/SIGHUP: the grader is stopping us (or died)
        print(f"[runner] stopped ({e}); killing the notebook's processes", file=sys.stderr)
        return 130
    finally:
        left = [p.pid for p in psutil.Process().children(recursive=True)]
        if left:
            print(f"[runner] killing processes the notebook left running: {left}", file=sys.stderr)
            kill_tree(os.getpid(), grace=2.0, include_self=False)
    Path(result_path).write_text(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
