"""What the kit reads besides its Python ships with it: every file under labkit/ that git tracks
is in pyproject.toml's package-data (so a wheel and an sdist carry it), and the student kit that
``make release`` writes holds each lab's recorded traces where the reader finds them."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from labkit.experiments import traces

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "labkit"


def tracked_data_files() -> set[Path]:
    """The files under labkit/ that git tracks and that are not Python."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "labkit"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout, so the tracked files are unknown ({e})")
    return {REPO / f for f in listed.splitlines() if not f.endswith(".py") and (REPO / f).is_file()}


def packaged(patterns: list[str]) -> set[Path]:
    """The files package-data's ``patterns`` take, as setuptools applies them: globs relative to the package."""
    return {p for pattern in patterns for p in PACKAGE.glob(pattern) if p.is_file()}


def test_every_data_file_of_the_kit_is_in_its_package_data():
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["labkit"]
    data = tracked_data_files()
    assert {traces.path(name) for name in traces.names()} <= data  # the labs' recorded runs are among them
    missing = sorted(str(p.relative_to(REPO)) for p in data - packaged(patterns))
    assert missing == [], f"add these to [tool.setuptools.package-data] in pyproject.toml: {missing}"


def test_the_student_kit_reads_each_labs_traces_from_its_own_copy(tmp_path):
    from labkit.grading.kit.release import student_package

    student_package(tmp_path)
    code = (
        "import json, labkit.experiments.traces as t\n"
        "from labkit.labs.lab5 import experiment\n"
        "print(json.dumps([t.LABS.as_posix(), t.names(), sorted(experiment.recorded_failure())]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    labs, names, failure = json.loads(done.stdout.splitlines()[-1])
    assert labs == (tmp_path / "labkit" / "labs").as_posix()
    assert names == traces.names()
    assert {"provenance", "steps", "kills"} <= set(failure)
