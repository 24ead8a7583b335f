"""The kit's own harnesses (``python -m labkit bench``, ``monitor``, ...) die with what they
started, whatever signal ends them, and a harness whose reader goes away ends quietly.

The chain under test is the one that outlived ``kill`` before: the bench harness starts a
benchmark process, which starts a harness of its own (here ``labkit monitor``, as
``bench.grading`` starts the grader's runner), which starts a long-running command (the
notebook's tasks). A signal goes to the top process only."""

import os
import signal
import subprocess
import sys

import psutil
import pytest

from helpers import alive, wait_until, wait_while
from labkit.core import scratch

CHAIN_BENCH = """
import sys
from labkit.bench import entry
from labkit.core.proc import OwnedProcess


def run(quick=False):
    cmd = [sys.executable, "-m", "labkit", "monitor", "--out", sys.argv[-1] + "-monitor", "--", "sleep", "600"]
    with OwnedProcess(cmd, sys.argv[-1] + "-monitor.log") as monitor:
        monitor.wait()
    return {"title": "chain", "rows": [], "ratios": []}


if __name__ == "__main__":
    entry(run)
"""

HARNESS = """
import sys
from labkit import bench, cli
bench.BENCHMARKS.refer("chain", "chain_bench:run")
sys.exit(cli.main(["bench", "chain", "--out", sys.argv[1]]))
"""


def _chain(top: int, timeout: float = 120) -> list[int]:
    """The pids under ``top`` once the innermost command (sleep 600) runs."""
    seen = []

    def running():
        seen[:] = psutil.Process(top).children(recursive=True)
        try:
            if any(p.cmdline()[:2] == ["sleep", "600"] for p in seen):
                return [p.pid for p in seen]
        except psutil.NoSuchProcess:
            pass
        return None

    return wait_until(running, timeout, 0.05, lambda: f"the chain to start: {[p.cmdline()[:4] for p in seen]}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signalled_harness_leaves_nothing_running(tmp_path, sig):
    (tmp_path / "chain_bench.py").write_text(CHAIN_BENCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(tmp_path / "out")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids = _chain(harness.pid)
        assert len(pids) >= 3  # the benchmark, the monitor, sleep
        os.kill(harness.pid, sig)
        harness.wait(timeout=60)
        wait_while(
            lambda: alive(pids),
            30,
            0.05,
            lambda: (
                f"{sig.name} of the harness to end its chain; left: "
                f"{[psutil.Process(p).cmdline() for p in alive(pids)]}"
            ),
        )
    finally:
        harness.kill()
        harness.wait()
        for pid in alive(locals().get("pids", [])):
            psutil.Process(pid).kill()
    if sig != signal.SIGKILL:  # it unwound, as on Ctrl-C, rather than dying where it stood
        assert harness.returncode != -sig, harness.stderr.read()
    # its scratch folder: removed by the harness as it unwound, or, killed, by the next maker of one
    left = scratch.remove_orphans("labkit-bench-chain-")
    assert len(left) == (1 if sig == signal.SIGKILL else 0), left


def test_output_into_a_closed_pipe_ends_quietly():
    """``python -m labkit cluster ... | head -1``: head leaves, the rest of the output has no reader."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "labkit", "cluster", "--mode", "cs744", "--print-commands"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    cli.stdout.close()  # the reader is gone before the first line
    err = cli.stderr.read().decode()
    assert cli.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
