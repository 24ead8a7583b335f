"""Fixtures several test files share, and the fast lane's marker and guard. (Shared checks are in
``helpers.py``; what several test files build is in a module named for it, ``_class.py``,
``_lms.py``, ...: a test file imports no other, ``test_tests_layout.py``.)"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# The suite keeps its bytecode even where PYTHONDONTWRITEBYTECODE is set: pytest
# keeps each test file it rewrote for its asserts, and Python each kit module, in __pycache__ (ignored by
# git). Otherwise every pytest process of every run (xdist's workers, each `make test-fast`) rewrites and
# compiles the ~90 test files again: 3 CPU-s each. The processes the tests start keep the setting, and
# read what is there.
sys.dont_write_bytecode = False

from _order import longest_first  # noqa: E402

import labkit.grading  # noqa: E402, F401  (first of the kit: it keeps nbformat's import fast in this process, see labkit/grading/__init__.py)


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    """A module's own runs root: ``LABKIT_RUNS`` points there while the module's tests run, so
    clusters, TensorBoard runs and notebooks under test write nothing into the repository."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("runs")
        mp.setenv("LABKIT_RUNS", str(path))
        yield path


@pytest.fixture(autouse=True)
def _environment_as_it_was():
    """Every test leaves ``os.environ`` as it found it: a variable one test sets (a notebook's
    ``launch.use`` sets ``LABKIT_LAUNCHER``, say) must not change how later tests run their clusters."""
    import os

    saved = dict(os.environ)
    yield
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    os.environ.update({k: v for k, v in saved.items() if os.environ.get(k) != v})


@pytest.fixture(autouse=True)
def _no_host_names_learnt():
    """Every test starts with no node name learnt from a hosts file another test of this process
    read (``spec.HOST_NAMES``, what an error calls an address)."""
    from labkit.wire import spec

    spec.HOST_NAMES.clear()


def pytest_configure(config):
    """Ctrl-C as a terminal gives it, whoever started the run: a shell without job control
    starts a background command (``make test &``) with SIGINT ignored, which every child inherits;
    the tests that interrupt a cluster, a kernel or the grader would then wait for nothing."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _suite_tmp(config)
    _reword_every_task_log()


def _reword_every_task_log() -> None:
    """Every process the run starts loads ``_guard/sitecustomize.py``, and every task it starts
    writes its log lines reworded (that file says why); this process too, which runs clusters in
    some tests. Set once, by the first process of the run; xdist's workers inherit it."""
    if os.environ.get("LABKIT_TEST_REWORD"):
        return
    os.environ["LABKIT_TEST_REWORD"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(GUARD), os.environ.get("PYTHONPATH")]))
    import runpy

    runpy.run_path(str(GUARD / "sitecustomize.py"))  # this process started before the variable was set


SUITE_TMP = "LABKIT_SUITE_TMP"  # set by the run that made the folder; xdist's workers inherit it


def _suite_tmp(config) -> None:
    """The suite's own /tmp: ``TMPDIR`` for this process and every process it starts (kernels,
    clusters, graders), a folder under the machine's /tmp with /tmp's mode, removed when the run
    ends. What TensorFlow leaves behind (autograph writes its generated code to ``tempfile`` and
    never removes it) and pytest's own ``tmp_path`` folders go with it: nothing of the suite stays
    in /tmp. Made once, by the first process of the run (the xdist controller)."""
    if os.environ.get(SUITE_TMP):
        return
    folder = tempfile.mkdtemp(prefix="labkit-suite-")
    os.chmod(folder, 0o1777)  # as /tmp: the emulated nodes' accounts and the sandboxes' users write here too
    os.environ[SUITE_TMP] = os.environ["TMPDIR"] = folder
    tempfile.tempdir = folder
    config.add_cleanup(lambda: _remove_suite_tmp(folder))


def _remove_suite_tmp(folder: str) -> None:
    left = []
    shutil.rmtree(folder, onerror=lambda fn, path, exc: left.append(f"{path} ({exc[1]})"))
    if left:
        print(
            f"\nthe suite's temporary folder {folder} kept {len(left)} path(s): {'; '.join(left[:5])}", file=sys.stderr
        )


# ------------------------------------------------------------------------------------ the fast lane
# ``make test-fast`` runs the tests marked ``fast``: every test that carries none of the markers
# below (pyproject.toml says what each means). A test that loads TensorFlow or a Jupyter kernel, in
# this process or in one it starts, must carry one of them: a fast test that does fails, naming the
# process, so the lane stays fast as tests are added. Processes a fast test starts load
# ``_guard/sitecustomize.py`` (on PYTHONPATH), which notes such a process; this process's own imports
# are watched too. Fast tests run first, in ``make test`` as well: before anything loads TensorFlow
# here or starts the fork server, so the guard sees each one, and a failure among them shows early.
HEAVY = ("cluster", "notebook", "kernel", "tensorflow", "browser", "slurm", "cloudlab", "slow")
WATCHED = ("tensorflow", "ipykernel")  # as in _guard/sitecustomize.py, which the processes load
GUARD = Path(__file__).resolve().parent / "_guard"
_guard: dict = {}  # while a fast test runs: its notes folder, this process's watched imports, the environment before


@pytest.hookimpl(tryfirst=True)  # before -m selects by the fast marker, and before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    groups, fast = [], []
    for item in items:
        fast.append(not any(item.get_closest_marker(name) for name in HEAVY))
        if fast[-1]:
            item.add_marker(pytest.mark.fast)
        marker = item.get_closest_marker("xdist_group")  # a test's own group, else the file's (below)
        groups.append((marker.kwargs.get("name") or marker.args[0]) if marker else _group(item))
        if marker is None:
            item.add_marker(pytest.mark.xdist_group(groups[-1]))
    known = _test_seconds(config)
    items[:] = [items[i] for i in longest_first(groups, fast, [known.get(item.nodeid, 0.0) for item in items])]


# ------------------------------------------------------------------------- side by side (make test)
# ``make test`` runs the suite in worker processes side by side (pytest-xdist, ``-n 2 --dist
# loadgroup``); a plain ``pytest tests/test_x.py`` runs in one process, as before. Every test
# joins a group, and one worker runs a group's tests in order:
# - a file's heavy tests are one group, so a module-scoped fixture runs once per run, not once per
#   worker; its fast tests another, which the workers take first (collection order), before
#   anything loads TensorFlow in them (the fast guard above watches each worker as it does one
#   process; ``make test-fast`` runs in one process);
# - tests that take something of the machine one at a time (emulated nodes and their 10.10.1.0/24
#   LAN, a Slurm, an sshd on 127.0.0.2-3, shaped links) are the group ``system``, one after another
#   on one worker: every test marked ``system``, ``cloudlab`` or ``slurm``, or in a file named
#   below. A new file of such tests needs only one of those markers;
# - tests of your own that must not overlap each other: ``@pytest.mark.xdist_group("name")``.
# Every test has a ceiling (pytest-timeout, ``timeout`` in pyproject.toml): a hang fails that
# test, naming it, instead of the whole run; a test that needs longer says so with
# ``@pytest.mark.timeout(seconds)``. A file's expensive setup (a graded class, an executed lab) is a
# module-scoped fixture: its heavy tests share one worker, so it runs once per run.
SYSTEM_GROUP = "system"
SYSTEM_MARKERS = ("system", "cloudlab", "slurm")
SYSTEM_FILES = ("test_multihost.py", "test_netem.py", "test_netem_launcher.py")


def _group(item) -> str:
    if any(item.get_closest_marker(m) for m in SYSTEM_MARKERS) or item.path.name in SYSTEM_FILES:
        return SYSTEM_GROUP
    return item.path.name + (":fast" if item.get_closest_marker("fast") else "")


# ------------------------------------------------------------------- longest first (make test)
# xdist hands a worker that runs low the next group in collection order (``--no-loadscope-reorder``
# in the Makefile; by default xdist orders groups by their number of tests, which put Lab 5's one
# three-minute test last, alone on one worker while the other had finished). So the fast groups go
# first (the guard above), then the heavy groups longest first: a group's seconds are its tests',
# each as this checkout's last run of it took (pytest's cache) or, where none has run it, as
# tests/test_seconds.json records it (``make test-order`` copies the cache there). A test neither
# knows counts 0 s.
SECONDS_KEY = "labkit/test-seconds"
SECONDS_FILE = Path(__file__).resolve().parent / "test_seconds.json"
_measured: dict = {}  # node id -> seconds its setup, call and teardown took in this run


def _test_seconds(config) -> dict:
    """node id -> seconds: the recorded ones, where this checkout's runs have timed a test their own."""
    try:
        seconds = json.loads(SECONDS_FILE.read_text())
    except (OSError, ValueError):
        seconds = {}
    cache = getattr(config, "cache", None)
    return {**seconds, **((cache.get(SECONDS_KEY, None) or {}) if cache is not None else {})}


def pytest_runtest_logreport(report):
    """Each test's seconds (on xdist's controller its node id ends in ``@group``: not part of the key);
    only where ``pytest_sessionfinish`` writes them, not in xdist's workers."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    nodeid = report.nodeid.rsplit("@", 1)[0]
    _measured[nodeid] = _measured.get(nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    """The tests this run timed, into pytest's cache for the next run's order (in one process, or
    on xdist's controller, which sees every worker's reports)."""
    cache = getattr(session.config, "cache", None)
    if _measured and cache is not None and not hasattr(session.config, "workerinput"):
        known = dict(cache.get(SECONDS_KEY, None) or {})
        known.update({t: round(s, 2) for t, s in _measured.items()})
        cache.set(SECONDS_KEY, dict(sorted(known.items())))


def _imports(event: str, args: tuple) -> None:
    if event == "import" and args[0] in WATCHED and "imported" in _guard:
        _guard["imported"].append(args[0])


sys.addaudithook(_imports)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """Before a fast test's fixtures start anything: its processes load the guard and note in a folder of its own."""
    if item.get_closest_marker("fast") is not None:
        notes = Path(tempfile.mkdtemp(prefix="labkit-guard-"))
        _guard.update(
            notes=notes, imported=[], environ={k: os.environ.get(k) for k in ("LABKIT_TEST_GUARD", "PYTHONPATH")}
        )
        os.environ["LABKIT_TEST_GUARD"] = str(notes)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(GUARD), os.environ.get("PYTHONPATH")]))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A fast test that passed fails if it, or a process it started, loaded TensorFlow or a Jupyter kernel."""
    result = yield
    if "notes" in _guard:
        found = [f"this process imported {name}" for name in _guard["imported"]]
        found += [
            f"pid {n.name.split('-')[0]} imported {n.name.split('-', 1)[1]} ({n.read_text()})"
            for n in sorted(_guard["notes"].iterdir())
        ]
        if found:
            pytest.fail(
                f"a fast test (it has none of the markers {', '.join(HEAVY)}) loaded TensorFlow or a "
                f"Jupyter kernel: {'; '.join(found)}. Mark it with the one that says what it starts "
                f"(pyproject.toml).",
                pytrace=False,
            )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        if "notes" in _guard:
            for key, value in _guard["environ"].items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            shutil.rmtree(_guard["notes"], ignore_errors=True)
            _guard.clear()
