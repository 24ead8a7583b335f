"""Launcher start-up and teardown, against a bare ``import tensorflow`` timed in the same run.

Start-up: from ``Cluster.start()`` until every server of 1 ps + 3 workers accepts
connections. Its floor is four processes importing TensorFlow at once on the same
cores, so that is measured too. Teardown: from the last worker having written its
result until no task process is left (the ps shuts down through its done queue).
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time

from labkit.bench import entry, ratio
from labkit.proc import OwnedProcess

IMPORT = [sys.executable, "-c", "import tensorflow"]


def _imports(n: int, log_dir: str) -> float:
    """Seconds until ``n`` concurrent ``import tensorflow`` processes have all finished."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    with contextlib.ExitStack() as owned:  # a failure or timeout kills the other imports too
        t = time.monotonic()
        procs = [owned.enter_context(OwnedProcess(IMPORT, os.path.join(log_dir, f"import-{i}.log"), env=env))
                 for i in range(n)]
        for p in procs:
            if p.wait(timeout=300) != 0:
                raise RuntimeError(f"`python -c 'import tensorflow'` failed:\n{p.log_tail()}")
        return time.monotonic() - t


def _cluster(runs_dir: str) -> tuple[float, float, dict]:
    from labkit import cluster
    from labkit.launch import Cluster

    spec = cluster.local(ps=1, workers=3)
    c = Cluster(spec, "ps_sgd", lab="bench", run_dir=os.path.join(runs_dir, f"run-{time.time_ns()}"),
                steps=100, train_limit=2000, test_limit=500, eval_every=0)
    with c:
        result = c.wait(timeout=600)
    server_up = max(t.result["timings"]["server_up_s"] for t in result)
    return result.startup_s, result.teardown_s, {"server_up_s": server_up,
                                                  "ended": ", ".join(f"{t.name} {t.ended}" for t in result)}


def run(quick: bool = False) -> dict:
    reps = 1 if quick else 3
    one, four, startup, teardown, ends = [], [], [], [], ""
    with tempfile.TemporaryDirectory(prefix="labkit-bench-launcher-") as runs_dir:
        for _ in range(reps):  # interleaved, so that load drifts hit every contender alike
            one.append(_imports(1, runs_dir))
            four.append(_imports(4, runs_dir))
            s, t, info = _cluster(runs_dir)
            startup.append(s)
            teardown.append(t)
            ends = info["ended"]
    med = statistics.median
    rows = [
        {"measure": "import tensorflow, 1 process", "seconds": med(one)},
        {"measure": "import tensorflow, 4 processes at once (slowest)", "seconds": med(four)},
        {"measure": "cluster start-up, 1 ps + 3 workers (start() until every server is up)", "seconds": med(startup)},
        {"measure": "teardown (last worker done until no task is left)", "seconds": med(teardown)},
    ]
    return {
        "title": "Launcher: start-up and teardown (1 ps + 3 workers, ps_sgd)",
        "rows": rows,
        "ratios": [
            ratio("start-up / bare import", med(startup) / med(one), "<= 2.5"),
            ratio("start-up / 4 concurrent imports (launcher overhead)", med(startup) / med(four), ""),
            ratio("teardown, seconds", med(teardown), "<= 2"),
        ],
        "notes": [f"median of {reps} interleaved repetitions on {os.cpu_count()} cores; how the tasks ended: {ends}",
                  "the floor for start-up is the 4-concurrent-import row: every task imports TensorFlow itself"],
    }


if __name__ == "__main__":
    entry(run)
