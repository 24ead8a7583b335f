"""Fixtures several test files share. (Shared checks are in ``helpers.py``.)"""
import pytest

import labkit  # noqa: F401  (first: it keeps nbformat's import fast in this process, see labkit/__init__.py)


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


def pytest_configure(config):
    """Ctrl-C as a terminal gives it, whoever started the run: a shell without job control
    starts a background command (``make test &``) with SIGINT ignored, which every child inherits;
    the tests that interrupt a cluster, a kernel or the grader would then wait for nothing."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
