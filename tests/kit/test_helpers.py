"""The test suite's own helpers: what they report when the thing they check does not hold."""

import os
import re
import time

import nbformat
import pytest

import _netem_labs as netem_labs
from helpers import WaitTimeout, logged, wait_until, wait_while
from labkit.infra import netem


def _notebook(section_output: str):
    cell = nbformat.v4.new_code_cell("netem_section()")
    cell.id = "lab2-netem-run"
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=section_output)]
    return nbformat.v4.new_notebook(cells=[cell])


def test_a_lab_section_on_emulated_links_skips_with_the_reason_where_links_cannot_be_emulated(monkeypatch):
    monkeypatch.setattr(netem, "availability", lambda link=None: (None, "no CAP_NET_ADMIN and no user namespaces"))
    said = _notebook("skipped: cannot emulate network links here: no CAP_NET_ADMIN and no user namespaces.")
    with pytest.raises(pytest.skip.Exception, match="lab2-netem.*not checked: no CAP_NET_ADMIN and no user"):
        netem_labs.check_lab2(said, {})
    with pytest.raises(AssertionError, match="lab2-netem: neither ran nor said why it skipped"):
        netem_labs.check_lab2(_notebook("done"), {})


def test_wait_until_returns_what_came_and_says_what_it_waited_for_and_saw_last():
    values = iter([None, 0, [], "ready"])
    assert wait_until(lambda: next(values), 5, 0.01, "ready") == "ready"
    count = iter(range(1000))
    with pytest.raises(
        WaitTimeout, match=r"waited 0.05 s for the count to pass 10\^6 \(at \d+\); last seen: 0"
    ) as info:
        wait_until(
            lambda: max(0, next(count) - 10**6), 0.05, 0.01, lambda: f"the count to pass 10^6 (at {next(count)})"
        )
    assert isinstance(info.value, AssertionError)  # a test fails, saying so


def test_wait_while_returns_once_the_probe_is_empty_and_names_what_was_left():
    left = iter([[3, 4], [4], []])
    assert wait_while(lambda: next(left), 5, 0.01, "pids to end") == []
    with pytest.raises(WaitTimeout, match=r"waited 0 s for pids to end; last seen: \[7\]"):
        wait_while(lambda: [7], 0, 0.01, "pids to end")  # a bound already spent still looks once


def test_wait_until_checks_once_more_at_its_deadline_and_stops_at_an_exception():
    t0 = time.monotonic()
    calls = []
    with pytest.raises(WaitTimeout):
        wait_until(lambda: calls.append(time.monotonic() - t0), 0.2, 10, "never")
    assert len(calls) == 2 and calls[1] >= 0.2  # the interval is cut to the deadline, not slept past it
    with pytest.raises(RuntimeError, match="gone"):
        wait_until(lambda: (_ for _ in ()).throw(RuntimeError("gone")), 5, 0.01)


def test_logged_finds_a_line_once_the_log_holds_it(tmp_path):
    log = tmp_path / "worker-0.log"
    find = logged(log, "global step ")
    assert find() is None  # no log yet
    log.write_text("# cmd\n[worker:0 1.00s] global step 100: test loss 0.5\n")
    assert find() == "[worker:0 1.00s] global step 100: test loss 0.5"


GUARDED = """
import subprocess, sys

import pytest


def test_starts_a_process_that_loads_tensorflow():
    subprocess.run([sys.executable, "-c", "import tensorflow"], check=True)


def test_loads_tensorflow_here():
    import tensorflow  # noqa: F401


def test_starts_a_plain_process():
    subprocess.run([sys.executable, "-c", "import json"], check=True)


@pytest.mark.tensorflow
def test_marked_for_what_it_loads():
    subprocess.run([sys.executable, "-c", "import tensorflow"], check=True)
"""


def test_a_fast_test_that_loads_tensorflow_fails_and_says_which_marker_it_lacks(tmp_path):
    """The fast lane's guard (tests/conftest.py, tests/_guard), on a copy of it, with a stand-in
    ``tensorflow`` package (empty, so nothing real loads)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parents[1]
    shutil.copy(here / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(here / "_order.py", tmp_path / "_order.py")
    shutil.copytree(here / "_guard", tmp_path / "_guard")
    (tmp_path / "stand_in" / "tensorflow").mkdir(parents=True)
    (tmp_path / "stand_in" / "tensorflow" / "__init__.py").write_text("")
    (tmp_path / "test_guarded.py").write_text(GUARDED)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rf",
            "-W",
            "ignore",
            str(tmp_path / "test_guarded.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "stand_in")},
        timeout=120,
    )
    out = done.stdout
    assert "2 failed, 2 passed" in out, out
    assert re.search(
        r"_ test_starts_a_process_that_loads_tensorflow _+\na fast test \(it has none of the markers "
        r"cluster, notebook, kernel, tensorflow.*\) loaded .*: pid \d+ imported tensorflow \([^()]*python -c "
        r"import tensorflow\)",
        out,
    ), out
    assert re.search(r"_ test_loads_tensorflow_here _+\na fast test .*: this process imported tensorflow\.", out), out
    assert "Mark it with the one that says what it starts" in out
