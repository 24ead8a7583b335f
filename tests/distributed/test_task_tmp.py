"""What a run leaves in the machine's temporary folder: nothing. Each task's temporary files
(TensorFlow's autograph writes some) go to a folder inside its run, removed when it ends, and
the launcher's fork server removes its own folder."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.cluster, pytest.mark.tensorflow]


def test_a_run_leaves_nothing_in_tmp_and_no_task_folder_in_the_run(tmp_path):
    machine_tmp, runs = tmp_path / "tmp", tmp_path / "runs"
    machine_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(machine_tmp), "LABKIT_RUNS": str(runs)}
    # a Keras strategy's training: autograph writes a file per converted function
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "labkit",
            "run",
            "strategy_train",
            "--ps",
            "0",
            "--workers",
            "2",
            "--lab",
            "tmp",
            "--args",
            "--epochs 1 --train-limit 500 --test-limit 100 --model mlp",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert list(machine_tmp.iterdir()) == [], sorted(p.name for p in machine_tmp.iterdir())
    (run,) = (runs / "tmp").iterdir()
    assert {p.name for p in run.glob("*.json")} >= {"worker-0.json", "worker-1.json"}
    assert not list(run.glob("*.tmp")), sorted(p.name for p in run.iterdir())
