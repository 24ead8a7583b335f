"""``make grade JOBS=N SLURM=PARTITION``: -j does not apply under Slurm, and the grader says so
before it starts, instead of ignoring it."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_jobs_with_slurm_is_refused_with_what_to_do_instead(tmp_path):
    make = subprocess.run(
        ["make", "-n", "grade", "SUBMISSIONS=subs", "JOBS=2", "SLURM=debug"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "-j 2 --slurm debug" in make.stdout, make.stdout + make.stderr  # what make runs
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "labkit",
            "grade",
            str(tmp_path / "subs"),
            "--out",
            str(tmp_path / "out"),
            "-j",
            "2",
            "--slurm",
            "debug",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "-j 2 (JOBS) does not apply with --slurm (SLURM)" in done.stderr, done.stderr
    assert "--cpus-per-task=N" in done.stderr and not (tmp_path / "out").exists()
