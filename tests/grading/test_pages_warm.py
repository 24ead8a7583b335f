"""Pages forked from the warm renderer (``labkit.grading.pages.warm``): the page is the one a fresh
interpreter writes, each page keeps its own CPU limit and log, and the server and its pages end
with the grader, however it ends, leaving nothing in /tmp."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _pages import _executed, _task
from helpers import alive, wait_until
from labkit.grading.pages import feedback, limited, render, warm

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the warm renderer forks (Linux and macOS)")


@pytest.fixture
def fresh_server():
    warm.stop()
    yield
    warm.stop()


def test_a_forked_page_is_the_page_a_fresh_interpreter_writes(tmp_path, fresh_server, monkeypatch):
    executed = _executed(tmp_path / "ex.ipynb")
    with warm.session():  # one server for the session's pages, stopped at its end
        render.run([_task(tmp_path, "warm", executed)])
        server = warm.get()
        assert server is not None and server.running, warm.failed()
        assert list(server.exits.values()) == [0]  # the page went through the server
    assert not server.running and not server.dir.exists()
    monkeypatch.setenv(warm.DISABLE, "1")
    assert warm.get() is None
    render.run([_task(tmp_path, "cold", executed)])
    monkeypatch.delenv(warm.DISABLE)
    render.run([_task(tmp_path, "warm2", executed)])
    page, cold, again = ((tmp_path / f"{n}.html").read_text() for n in ("warm", "cold", "warm2"))
    assert "is not shown" not in page and "<math" in page and "x_{29}" not in page  # formulas became MathML
    nonces = [set(re.findall(r"lk[0-9a-f]{12}", p)) for p in (page, cold, again)]
    assert all(len(n) == 1 for n in nonces) and len(set.union(*nonces)) == 3  # each page draws its own token
    same = [re.sub(r"lk[0-9a-f]{12}", "lk-token", p) for p in (page, cold, again)]
    assert same[0] == same[1] == same[2]


def test_each_forked_page_keeps_its_own_cpu_limit_and_log(tmp_path, fresh_server, monkeypatch):
    # the wall-clock backstop far off, so that on a busy machine the CPU limit is what ends the slow page
    monkeypatch.setattr(render, "WALL_FACTOR", 30.0)
    slow = _executed(tmp_path / "slow.ipynb", rows=60_000)  # seconds of CPU to render
    quick = _executed(tmp_path / "quick.ipynb")
    tasks = [_task(tmp_path, "slow", slow, timeout=1), _task(tmp_path, "quick", quick)]
    t0 = time.monotonic()
    with warm.session():
        render.run(tasks, parallel=2)
        assert warm.get() is not None and len(warm.get().exits) == 2  # both forked; the server still serves
    assert "rendering it needed more than 1 s of CPU time" in (tmp_path / "slow.html").read_text()
    assert "is not shown" not in (tmp_path / "quick.html").read_text()
    assert "Traceback" not in (tmp_path / "logs" / "quick.log").read_text()  # each page writes its own log
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "own-interpreter"])
def test_a_page_that_stops_working_is_ended_by_the_wall_clock(tmp_path, fresh_server, monkeypatch, forked):
    """The CPU limit cannot end a page that uses no CPU (here one stopped by SIGSTOP, as a page
    that waits, or one on a machine too busy to run it). The backstop, ``WALL_FACTOR`` x its CPU
    limit on the clock, ends it and writes the fallback page, naming the time."""
    if not forked:
        monkeypatch.setenv(warm.DISABLE, "1")
    monkeypatch.setattr(render, "WALL_FACTOR", 1.0)  # the backstop at 1 s, not 3 s, for a 1 s CPU limit
    slow = _executed(tmp_path / "slow.ipynb", rows=200_000)  # seconds of CPU to render: still running below
    with warm.session():
        rendering = _task(tmp_path, "stopped", slow, timeout=1).start()
        assert (warm.get() is not None) == forked, warm.failed()
        os.kill(rendering.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        wait_until(rendering.poll, 60, 0.1, "the backstop to end the stopped page")
    seconds, backstop = time.monotonic() - t0, 1 * render.WALL_FACTOR
    page = (tmp_path / "stopped.html").read_text()
    assert f"rendering it took longer than {backstop:g} s" in page, page[-500:]
    assert seconds < backstop + 15, seconds  # (the clock started at the stop, just after the deadline was set)
    assert not alive([rendering.proc.pid])


GRADER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from _pages import _executed, _task
    from labkit.grading.pages import warm
    tmp = Path(sys.argv[1])
    page = _task(tmp, "slow", _executed(tmp / "slow.ipynb", rows=200_000)).start()
    server = warm.get()
    print(server.process.pid, page.proc.pid, server.dir, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_server_and_its_pages_end_with_the_grader(tmp_path, fresh_server, how):
    grader = subprocess.Popen(
        [sys.executable, "-c", GRADER, str(tmp_path), str(Path(__file__).resolve().parents[1])],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        server, page, folder = grader.stdout.readline().split()
        assert alive([int(server), int(page)]) == [int(server), int(page)]
        grader.send_signal(how)
        grader.wait(30)
        wait_until(
            lambda: not alive([int(server), int(page)]), 30, 0.1, "the page server and its page to end with the grader"
        )
    finally:
        grader.kill()
        grader.wait()
    # the grader ran no atexit (a signal's default action): the next server started here removes its folder
    assert warm.get() is not None, warm.failed()
    assert not os.path.exists(folder)


def test_only_the_graders_own_module_level_functions_are_page_writers():
    assert limited.is_writer(render.reference(feedback.write_feedback))
    for ref in ("os:system", "labkit.gradingx:f", "labkit.grading.pages.feedback:write_feedback.<locals>.f"):
        assert not limited.is_writer(ref)
        with pytest.raises(ValueError, match="not a page writer of labkit.grading"):
            limited.writer(ref)
    with pytest.raises(ValueError, match="a page writer is a module-level function of labkit.grading"):
        render.reference(lambda: None)
