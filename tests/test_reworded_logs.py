"""Nothing but people read a task's log (issue 29). The whole run rewords every task's log lines
(``tests/_guard/sitecustomize.py``, which ``conftest.py`` loads into every process the suite starts):
so every cluster test that passes shows that the kit and the labs read no task's log lines. This
file checks that the rewording is on, in the places the labs depend on most: a small Lab 4 sweep, its
fault demo (a killed worker, detected and resumed from a checkpoint) and a Lab 3 cluster, in a driver
process of their own. Their tasks spoke other words, and the labs printed, measured and killed as
they do otherwise.
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

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


def test_every_task_log_is_reworded_and_the_labs_do_what_they_do(tmp_path):
    assert os.environ.get("LABKIT_TEST_REWORD") == "1"  # conftest.py: the whole run
    env = {**os.environ, "LABKIT_RUNS": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    for path in ran["logs"]:  # the tasks did speak other words ...
        said = [ln for ln in open(path) if ln.startswith("[")]
        assert said and all("] ~ " in ln for ln in said), said[:3]
        assert "epoch 1/2:" not in open(path).read()
    # ... and the labs printed, measured and killed as they do otherwise
    assert any(x.startswith("2 x 50 | epoch 2/2:") for x in ran["lines"])
    assert any(x.startswith("resumed | resumed from the checkpoint of epoch 1") for x in ran["lines"])
    assert ran["fault"]["start_epoch"] == 1 and ran["fault"]["restored_checkpointed_weights"]
    assert ran["killed"] == ["worker:1", -9, ["UnavailableError"]]
    for config, (loss, accuracy, weights) in ran["sweep"].items():
        assert loss > 0 and 0 < accuracy <= 1 and len(weights) == 64, config
    assert ran["sparse"]["global_steps"] and all(v > 0 for v in ran["sparse"]["global_steps"].values())
