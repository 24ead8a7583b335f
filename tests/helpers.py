"""What several test files check the same way: lab notebooks (stored clean, run under papermill,
their figures and stderr), notebooks built cell by cell for the grader, and processes left behind.
(A real Jupyter kernel for a test is ``_kernel.py``; the shared fixtures are in ``conftest.py``.)"""

from __future__ import annotations

import ast
import csv
import functools
import json
import os
import re
import signal
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell

from labkit.notebook.record import read_records

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"  # the course rubric
LABS = Path(__file__).resolve().parents[1] / "labkit" / "labs"  # a folder per lab: its notebook, lab.toml
NOBODY = 65534

# Lab 1 graded at test size: 2 epochs on 5000 images, no idle baselines, its accuracy bars set for
# that (an honest run passes, at about half the rubric's time). The rubric's own text, cut.
SMALL_LAB1 = [
    (
        "[labs.lab1.parameters]\nepochs = 5\ntrain_limit = 20000\nidle_s = 0.5",
        "[labs.lab1.parameters]\nepochs = 2\ntrain_limit = 5000\nidle_s = 0.0",
    ),
    (
        'record = "core_test_accuracy"\nmin = 0.85\npartial_min = 0.75',
        'record = "core_test_accuracy"\nmin = 0.78\npartial_min = 0.7',
    ),
    (
        'record = "keras_test_accuracy"\nmin = 0.85\npartial_min = 0.75',
        'record = "keras_test_accuracy"\nmin = 0.78\npartial_min = 0.7',
    ),
]


@functools.lru_cache(maxsize=None)
def runs_share_limits() -> str:
    """Why this user's grader runs one notebook at a time ('' where it may run several): a normal user
    with no cgroup of its own (``limits.shared``; the grader refuses ``-j 2`` there, and says why)."""
    from labkit.grading.run import limits

    return limits.shared(limits.best_backend())


def runs_at_once(n: int) -> int:
    """``n`` notebooks at a time where the grader allows it for this user, else 1."""
    return 1 if runs_share_limits() else n


def whole_rubric() -> str:
    """The course's rubric as one file, as a test edits it: notebooks/rubric.toml with each lab
    folder's lab.toml as its [labs.NAME] section (its folder named), comments kept."""
    text = (NOTEBOOKS / "rubric.toml").read_text().replace('lab_folders = "kit"\n', "")
    for toml in sorted(LABS.glob("*/lab.toml")):
        key = toml.parent.name
        body = re.sub(r"^\[\[", f"[[labs.{key}.", toml.read_text(), flags=re.M)
        body = re.sub(r"^\[(?!\[)", f"[labs.{key}.", body, flags=re.M)
        text += f"\n[labs.{key}]\nfolder = {json.dumps(str(toml.parent))}\n{body}"
    return text


def small_rubric(root: Path, cuts=()) -> Path:
    """``root``/rubric.toml: the repository's rubric with Lab 1 at test size (``SMALL_LAB1``) and
    ``cuts`` (pairs of old and new text) applied; each cut must find its text."""
    text = whole_rubric()
    for old, new in [*SMALL_LAB1, *cuts]:
        assert old in text, old
        text = text.replace(old, new, 1)
    (root / "rubric.toml").write_text(text)
    return root / "rubric.toml"


# ------------------------------------------------------------------------------------ lab notebooks


def tagged(nb, tag: str) -> list:
    """The cells of ``nb`` tagged ``tag``."""
    return [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]


def check_stored_clean(path: Path, analysis: int, figures=()):
    """``path`` is a valid notebook stored without outputs or execution counts, with exactly one
    ``parameters`` cell whose every assignment papermill reads, ``analysis`` answer cells and one
    cell per tag in ``figures``; returns it."""
    from papermill.inspection import inspect_notebook

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    (parameters,) = tagged(nb, "parameters")
    # papermill skips a line holding a second "=" (in its comment too) with only a logged warning;
    # passing that parameter then warns "Passed unknown parameter"
    assigned = [
        t.id
        for node in ast.parse(parameters.source).body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    ]
    read = list(inspect_notebook(str(path)))
    assert read == assigned, f"papermill does not read {[n for n in assigned if n not in read]} in {path.name}"
    assert len(tagged(nb, "analysis")) == analysis
    for tag in figures:
        assert len(tagged(nb, tag)) == 1, tag
    return nb


def run_notebook(path: Path, workdir: Path, parameters: dict, timeout: float):
    """Execute ``path`` under papermill in ``workdir`` with ``parameters`` (``timeout`` seconds a
    cell); returns the executed notebook and its records. As the grader does, the kernel gets
    ``LABKIT_RUNS=workdir/runs``, so its cluster runs stay inside ``workdir``."""
    from labkit.notebook import execution

    out = workdir / "out.ipynb"
    before = os.environ.get("LABKIT_RUNS")
    os.environ["LABKIT_RUNS"] = str(workdir / "runs")  # the kernel inherits it
    try:
        execution.execute(
            path,
            out,
            parameters=parameters,
            cwd=workdir,
            kernel="python3",
            cell_timeout=timeout,
            start_timeout=120,
        )
    finally:
        if before is None:
            del os.environ["LABKIT_RUNS"]
        else:
            os.environ["LABKIT_RUNS"] = before
    nb = nbformat.read(out, as_version=4)
    return nb, read_records(nb)


def stderr(nb) -> str:
    """Everything the executed notebook's cells wrote to stderr."""
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stderr")


def check_executed(nb, figures, not_in_stderr=()) -> None:
    """Each cell tagged in ``figures`` (exactly one per tag) shows a PNG, and stderr holds no
    traceback and none of ``not_in_stderr``."""
    for tag in figures:
        (cell,) = tagged(nb, tag)
        assert any("image/png" in o.get("data", {}) for o in cell.outputs), tag
    err = stderr(nb)
    for text in ("Traceback", *not_in_stderr):
        assert text not in err, err


# ------------------------------------------------------------------------- notebooks for the grader


def cell(source: str, tags=(), markdown: bool = False, **fields):
    """A code (or Markdown) cell with ``tags``; ``fields`` as nbformat's ``new_code_cell`` takes them."""
    c = new_markdown_cell(source, **fields) if markdown else new_code_cell(source, **fields)
    if tags:
        c.metadata.tags = list(tags)
    return c


def read_csv(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------------ waiting


class WaitTimeout(AssertionError):
    """What a test waited for did not come in time (an ``AssertionError``: the test fails, saying so)."""


def wait_until(predicate, timeout: float, interval: float = 0.1, message="the condition"):
    """Call ``predicate()`` every ``interval`` seconds until it returns something true, and return
    that. After ``timeout`` seconds (one last call at the deadline) raise ``WaitTimeout`` naming
    ``message``, what was awaited (a string, or a callable that gives it then: a log tail, say),
    and the last value ``predicate`` returned. An exception ``predicate`` raises (an assertion that
    what runs is still alive, a skip) ends the wait at once."""
    return _poll(predicate, bool, timeout, interval, message)


def wait_while(probe, timeout: float, interval: float = 0.1, message="the condition"):
    """Call ``probe()`` every ``interval`` seconds while it returns something true (processes still
    running, leftovers, jobs) and return its last, false value; after ``timeout`` seconds raise
    ``WaitTimeout`` naming ``message`` and what ``probe`` still returned."""
    return _poll(probe, lambda value: not value, timeout, interval, message)


def _poll(probe, done, timeout: float, interval: float, message):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            what = message() if callable(message) else message
            raise WaitTimeout(f"waited {timeout:g} s for {what}; last seen: {value!r}")
        time.sleep(min(interval, left))


def said(text: str) -> str:
    """``text`` as a task's log holds it in this run: the suite rewords every task's log line
    (``_guard/sitecustomize.py``: its words reversed, each word reversed, i.e. the whole line), so a
    test that looks for what a task said looks for this."""
    return text[::-1] if os.environ.get("LABKIT_TEST_REWORD") else text


def logged(path: Path, text: str):
    """A predicate for ``wait_until``: the line of the log at ``path`` that holds ``text``, once one does."""

    def find():
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return next((line for line in lines if text in line), None)

    return find


# -------------------------------------------------------------------------------------- processes


def alive(pids) -> list[int]:
    """Those of ``pids`` still running (a zombie, dead but not yet reaped by its parent, is not)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def children(pid: int | None = None, recursive: bool = True) -> list:
    """The processes below ``pid`` (default: this one), without its fork server
    (``labkit.distributed.launchers.forkserver``): the local launcher's, which ends with the process that
    started it and is meant to outlive the clusters it forked."""
    try:
        procs = psutil.Process(pid).children(recursive=recursive)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in procs:
        try:
            if "labkit.distributed.launchers.forkserver" not in p.cmdline():
                out.append(p)
        except psutil.NoSuchProcess:
            pass  # gone meanwhile
    return out


def kill_and_expect_task_failed(c, task: str = "worker:1", timeout: float = 60):
    """SIGKILL ``task`` of the running cluster ``c``; ``c.wait`` must raise ``TaskFailed`` naming it
    with the signal. Returns the exception and the seconds the launcher took to notice."""
    from labkit.distributed.launch import TaskFailed

    c.kill(task)
    t0 = time.monotonic()
    with pytest.raises(TaskFailed) as info:
        c.wait(timeout=timeout)
    elapsed = time.monotonic() - t0
    assert info.value.task == task and info.value.returncode == -signal.SIGKILL
    return info.value, elapsed


# Code for a sandboxed process (a notebook's cell, the probe): ``writable(tops)`` lists every path
# under ``tops`` that opens for writing. Links are left out: /proc/<pid>/fd/N and cwd lead to the
# process's own files, not to /proc's.
WRITABLE = """
def writable(tops=('/proc', '/sys')):
    import os
    found = []
    for top in tops:
        for folder, dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                if os.path.islink(path):
                    continue
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
                except OSError:
                    continue
                os.close(fd)
                found.append(path)
    return found
"""


def data_mirror() -> str:
    """``LABKIT_DATA_MIRROR``, where emulated nodes fetch the datasets; the test skips without it."""
    mirror = os.environ.get("LABKIT_DATA_MIRROR")
    if not mirror:
        pytest.skip("LABKIT_DATA_MIRROR is not set: the nodes fetch the data from it (see README, Data)")
    return mirror


def hidden_verdict(check: str, fn, folder: Path, **args):
    """Hidden check ``check``'s verdict on ``fn``, the student's one function: its probe run here, in
    this process, on the rubric's ``args`` (the grader runs it in a sandbox), then its judge."""
    from labkit.grading.judge import hidden, probe

    h = hidden.HIDDEN[check]
    (name,) = h.functions
    return hidden.decide(check, args, probe.outputs(h, {name: fn}, args, folder), folder)


def hidden_on_notebooks(check: str, notebook: Path, folder: Path, **args):
    """Hidden check ``check`` on ``notebook``'s own functions, as the grader's probe takes them from
    the notebook: it passes. Then on the released notebook's, whose starting point raises
    NotImplementedError. Returns the released notebook, for the test's look at its cells."""
    from labkit.grading.judge import hidden, probe
    from labkit.grading.kit.release import release_notebook

    h = hidden.HIDDEN[check]
    fns, _ = probe.load_functions(notebook, list(h.functions))
    v = hidden.decide(check, args, probe.outputs(h, fns, args, folder), folder)
    assert v.ok, v.reason
    student, _ = release_notebook(nbformat.read(notebook, as_version=4), notebook.name)
    released = folder / "student.ipynb"
    nbformat.write(student, released)
    fns, _ = probe.load_functions(released, list(h.functions))
    with pytest.raises(NotImplementedError):
        probe.outputs(h, fns, args, folder)
    return student


def as_nobody() -> list[str]:
    """The start of a command line that runs the rest as user nobody, who then reads this checkout,
    its venv and its Python wherever they are; [] when the tests do not run as root. As root: a
    mount namespace of its own, where any folder only root may enter on the way to them (a
    ``mktemp -d`` folder, /root) is covered and they are bound back, read-only
    (``cloudlab_local.expose_lines``, as an emulated node sees the kit). Nothing outside it changes."""
    import shlex
    import sys
    import tempfile

    from labkit.infra.cloudlab_local import expose_lines

    if os.geteuid() != 0:
        return []
    checkout = str(NOTEBOOKS.parent)
    aside = tempfile.mkdtemp(prefix="labkit-aside-")  # emptied and removed by the lines below
    paths = [sys.base_prefix, sys.prefix, os.path.realpath(sys.executable), checkout]
    lines = [*expose_lines(paths, aside, covered_anyway=()), f"rmdir {shlex.quote(aside)}", 'exec "$@"']
    become = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all"]
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-ec", "\n".join(lines), "sh", *become]


# ------------------------------------------------------------------------------- built once a run


def once_per_run(name: str, build) -> Path:
    """The folder ``build(folder)`` filled, built once in this whole run whichever process asks
    first (xdist's workers share the suite's /tmp, ``LABKIT_SUITE_TMP``, made by ``conftest.py``):
    the others wait on its lock and get the same folder. A build that raised leaves no mark, so the
    next asker builds again and sees the error itself."""
    import fcntl
    import shutil
    import tempfile

    root = Path(os.environ.get("LABKIT_SUITE_TMP") or tempfile.gettempdir()) / "once"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


# ------------------------------------------------------------------------------- import graphs


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted: the import
    cycles of ``graph`` (module -> the modules it imports), for the import and dependency checks."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out
