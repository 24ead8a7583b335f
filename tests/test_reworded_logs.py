"""Nothing but people read a task's log (issue 29): reword every line the tasks write there, and
the labs print the same lines, keep the same figures and kill the same worker at the same epoch.

The same small Lab 4 sweep, fault demo and Lab 3 cluster run twice, side by side, each in a driver
process of its own: as they are, and with every task's ``TaskRuntime.log`` replaced by one that reverses the
words of each message (a ``sitecustomize`` on the tasks' path: the fork server, where every task
starts, imports it first). Timings differ from run to run, so the printed lines are compared with
their numbers hidden, and the figures (losses, accuracies, weights, the resumed epoch) as they are.
"""

import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SITECUSTOMIZE = """
import os
if os.environ.get("REWORD_TASK_LOGS"):
    from labkit.tasks import runtime
    said = runtime.TaskRuntime.log
    def reworded(self, *parts):
        said(self, "~", " ".join(word[::-1] for word in " ".join(map(str, parts)).split()[::-1]))
    runtime.TaskRuntime.log = reworded
"""

DRIVER = """
import json, sys
from labkit.experiments import lenet_sweep, sparse_lr
lines = []
lenet = dict(epochs=2, train_limit=3000, test_limit=500, lr=0.05, seed=0)
idle = {k: 0.0 for k in lenet_sweep.RESOURCE_COLUMNS}
s = lenet_sweep.sweep(workers=(2,), batch_sizes=(50, 100), idle=idle, progress=False, log=lines.append, **lenet)
ft = lenet_sweep.fault_tolerance(2, 50, kill_after_epoch=1, reference=s, log=lines.append, progress=False, **lenet)
exp = sparse_lr.train(["sync:50"], workers=1, num_features=100_000, train_rows=20_000, test_rows=2_000,
                      samples=10_000, eval_every=5_000, progress=False)
table = s.table().drop(index="Idle")
print(json.dumps({
    "lines": lines,
    "sweep": {c: [table.loc[c, "val_loss"], table.loc[c, "val_accuracy"], s.find(*map(int, c.split(" x "))).train[
        "weights_sha256"]] for c in table.index},
    "fault": {k: ft["resumed"][k] for k in ("start_epoch", "restored_checkpointed_weights", "val_accuracy")},
    "killed": [ft["failure"]["task"], ft["failure"]["returncode"], ft["peer_failure"]["errors"]],
    "sparse": exp.summary()[["test_accuracy", "test_logloss", "global_steps"]].to_dict(),
    "logs": [str(t.log_path) for t in s.runs[0].result] + [str(t.log_path) for t in exp.result],
}))
"""


def _start(tmp_path, reword: bool) -> subprocess.Popen:
    where = tmp_path / ("reworded" if reword else "plain")
    where.mkdir()
    (where / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(where), *sys.path]),
        "LABKIT_RUNS": str(where / "runs"),
        "REWORD_TASK_LOGS": "1" if reword else "",
    }
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _runs(tmp_path) -> list[dict]:
    """Both drivers side by side (much of a run is waiting: a cluster's start, a killed worker's
    detection), each with its own runs folder; their figures do not depend on the timing."""
    drivers = [_start(tmp_path, reword) for reword in (False, True)]
    try:
        outputs = [d.communicate(timeout=1200) for d in drivers]
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.wait()
    for d, (out, err) in zip(drivers, outputs):
        assert d.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


def _hidden(line: str) -> str:
    """A printed line with its measured numbers (times, rates, losses) and its paths hidden."""
    return re.sub(r"\d+\.\d+|\d+ img/s|/\S+", "#", line)


def test_reworded_task_logs_change_nothing_the_labs_do(tmp_path):
    plain, reworded = _runs(tmp_path)
    for path in reworded["logs"]:  # the tasks did speak other words ...
        said = [ln for ln in open(path) if ln.startswith("[")]
        assert said and all("] ~ " in ln for ln in said), said[:3]
    assert not any("epoch 1/2:" in open(p).read() for p in reworded["logs"])
    assert any("epoch 1/2:" in open(p).read() for p in plain["logs"])
    # ... and the labs printed, measured and killed as they do otherwise
    assert [_hidden(x) for x in reworded["lines"]] == [_hidden(x) for x in plain["lines"]]
    assert any(x.startswith("2 x 50 | epoch 2/2:") for x in reworded["lines"])
    assert any(x.startswith("resumed | resumed from the checkpoint of epoch 1") for x in reworded["lines"])
    for key in ("sweep", "fault", "killed", "sparse"):
        assert reworded[key] == plain[key], key
    assert reworded["fault"]["start_epoch"] == 1 and reworded["fault"]["restored_checkpointed_weights"]
    assert reworded["killed"] == ["worker:1", -9, ["UnavailableError"]]
