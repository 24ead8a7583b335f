"""Nothing but people read a task's log. The whole run rewords every task's log lines
(``tests/_guard/sitecustomize.py``, which ``conftest.py`` loads into every process the suite starts):
so every cluster test that passes shows that the kit and the labs read no task's log lines. Lab 4's
sweep and its fault demo (a killed worker, detected and resumed from a checkpoint) pass so in
``test_lenet_cluster.py`` and ``test_notebook_04.py``, Lab 3's clusters in ``test_sparse_cluster.py``
and ``test_notebook_03.py``, each once. This file checks that the rewording is on where those do not
look: in a driver process of its own, whose small Lab 3 cluster's tasks spoke other words while the
lab summed their steps as it does otherwise.
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DRIVER = """
import json
from labkit.labs.lab3 import experiment as sparse_lr
exp = sparse_lr.train(["sync:50"], workers=1, num_features=10_000, train_rows=2_000, test_rows=500,
                      samples=1_000, eval_every=500, progress=False)
print(json.dumps({
    "sparse": exp.summary()[["test_accuracy", "global_steps"]].to_dict(),
    "logs": [str(t.log_path) for t in exp.result],
}))
"""


def test_every_task_log_is_reworded_in_a_driver_process_of_its_own(tmp_path):
    assert os.environ.get("LABKIT_TEST_REWORD") == "1"  # conftest.py: the whole run
    env = {**os.environ, "LABKIT_RUNS": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    for path in ran["logs"]:  # the tasks did speak other words ...
        said = [ln for ln in open(path) if ln.startswith("[")]
        assert said and all("] ~ " in ln for ln in said), said[:3]
    # ... and the lab summed its steps as it does otherwise
    assert ran["sparse"]["global_steps"] and all(v > 0 for v in ran["sparse"]["global_steps"].values())
