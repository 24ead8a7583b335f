"""Launcher start-up and teardown, against a bare ``import tensorflow`` timed in the same run.

Start-up: from ``Cluster.start()`` until every server of 1 ps + 3 workers accepts
connections, both ways the local launcher starts tasks: forked from its fork server
(``labkit.distributed.launchers.forkserver``, TensorFlow imported there once; the default) and as
processes of their own (``launcher_options={"forkserver": False}``), whose floor is four
processes importing TensorFlow at once on the same cores, measured too. The fork server
is started before the first timed cluster: its one import is the bare-import row.
Teardown: from the last worker having written its result until no task process is left
(the ps shuts down through its done queue).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time

from labkit.bench import entry, ratio
from labkit.core.proc import OwnedProcess

IMPORT = [sys.executable, "-c", "import tensorflow"]


def _imports(n: int, log_dir: str) -> float:
    """Seconds until ``n`` concurrent ``import tensorflow`` processes have all finished."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    with contextlib.ExitStack() as owned:  # a failure or timeout kills the other imports too
        t = time.monotonic()
        procs = [
            owned.enter_context(OwnedProcess(IMPORT, os.path.join(log_dir, f"import-{i}.log"), env=env))
            for i in range(n)
        ]
        for p in procs:
            if p.wait(timeout=300) != 0:
                raise RuntimeError(f"`python -c 'import tensorflow'` failed:\n{p.log_tail()}")
        return time.monotonic() - t


def _cluster(runs_dir: str, forked: bool) -> tuple[float, float, dict]:
    from labkit.wire import spec as cluster
    from labkit.distributed.launch import Cluster

    spec = cluster.local(ps=1, workers=3)
    c = Cluster(
        spec,
        "ps_sgd",
        args={"steps": 100, "train_limit": 2000, "test_limit": 500, "eval_every": 0},
        lab="bench",
        run_dir=os.path.join(runs_dir, f"run-{time.time_ns()}"),
        launcher_options={"forkserver": forked},
    )
    with c:
        result = c.wait(timeout=600)
    server_up = max(t.result["timings"]["server_up_s"] for t in result)
    return (
        result.startup_s,
        result.teardown_s,
        {"server_up_s": server_up, "ended": ", ".join(f"{t.name} {t.ended}" for t in result)},
    )


def run(quick: bool = False) -> dict:
    from labkit.distributed.launchers import forkserver

    reps = 1 if quick else 3
    one, four, forked, own, teardown, ends = [], [], [], [], [], ""
    forkserver.get()  # its one import of TensorFlow, before the timed clusters (timed as the bare import)
    with tempfile.TemporaryDirectory(prefix="labkit-bench-launcher-") as runs_dir:
        for _ in range(reps):  # interleaved, so that load drifts hit every contender alike
            one.append(_imports(1, runs_dir))
            four.append(_imports(4, runs_dir))
            s, t, info = _cluster(runs_dir, forked=True)
            forked.append(s)
            teardown.append(t)
            ends = info["ended"]
            own.append(_cluster(runs_dir, forked=False)[0])
    med = statistics.median
    rows = [
        {"measure": "import tensorflow, 1 process", "seconds": med(one)},
        {"measure": "import tensorflow, 4 processes at once (slowest)", "seconds": med(four)},
        {
            "measure": "cluster start-up, tasks forked from the fork server (start() until every server is up)",
            "seconds": med(forked),
        },
        {"measure": "cluster start-up, each task a process of its own (forkserver=False)", "seconds": med(own)},
        {"measure": "teardown, forked tasks (last worker done until no task is left)", "seconds": med(teardown)},
    ]
    return {
        "title": "Launcher: start-up and teardown (1 ps + 3 workers, ps_sgd)",
        "rows": rows,
        "ratios": [
            ratio("start-up, forked / bare import", med(forked) / med(one), "<= 0.5"),
            ratio("start-up, own processes / bare import", med(own) / med(one), "<= 2.5"),
            ratio("start-up, own processes / 4 concurrent imports (launcher overhead)", med(own) / med(four), ""),
            ratio("start-up, own processes / forked", med(own) / med(forked), ""),
            ratio("teardown, seconds", med(teardown), "<= 2"),
        ],
        "notes": [
            f"median of {reps} interleaved repetitions on {os.cpu_count()} cores; how the forked tasks ended: {ends}",
            "forked tasks share the fork server's one import of TensorFlow (made before the first timed "
            "cluster); tasks of their own each import it, so their floor is the 4-concurrent-import row",
        ],
    }


if __name__ == "__main__":
    entry(run)
