"""The grader as a user without privileges (``nobody``, when the tests run as root; the current
user otherwise): the same sandbox in an unprivileged user namespace, the same disk cap in a
mount namespace of its own, the same capped log and read-only /proc, the runs as that user
(it cannot switch), its signing key in its own home. The root case is what every other grading
test runs; this file is the other one. Without a cgroup of its own the grader runs one notebook
at a time (``limits.shared``; tests/grading/test_hostile_files.py checks that ``-j 2`` is refused)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest

from helpers import NOBODY, WRITABLE, as_nobody, cell
from labkit.grading.run.sandbox import SANDBOXES

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.notebook,
    pytest.mark.skipif(
        SANDBOXES["bwrap"].unavailable() is not None, reason=f"{SANDBOXES['bwrap'].unavailable()} (.ci/run installs it)"
    ),
]

RUBRIC = textwrap.dedent("""\
    [defaults]
    disk_mb = 32
    notebook_timeout = 240
    [labs.who]
    notebook = "who.ipynb"
    [[labs.who.checks]]
    name = "recorded"
    kind = "record"
    points = 1
    record = "uid"
""")
WHO = WRITABLE + textwrap.dedent("""\
    import json, os, sys
    import labkit
    labkit.record('uid', os.getuid())
    print('WHO', json.dumps({'uid': os.getuid(), 'writable': writable()}))
    fd = getattr(sys.stderr, '_original_stdstream_copy', None) or 2
    os.write(fd, b'FLOOD-START\\n')
    for _ in range(50):
        os.write(fd, b'z' * 2**20)
    os.write(fd, b'FLOOD-END\\n')""")
FILL = "open('fill', 'wb').write(b'x' * 64 * 2**20)   # twice the disk"


def test_the_grader_as_an_unprivileged_user(tmp_path):
    if os.geteuid() == 0 and not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("needs setpriv and unshare (util-linux) to become user nobody")
    root = Path(tempfile.mkdtemp(prefix="labkit-unprivileged-"))  # tmp_path is root's alone
    try:
        for student, code in (("alice", WHO), ("mallory", FILL)):
            (root / "subs" / student).mkdir(parents=True)
            nbformat.write(
                nbformat.v4.new_notebook(cells=[cell("seed = 0", ["parameters"]), cell(code)]),
                str(root / "subs" / student / "who.ipynb"),
            )
        (root / "rubric.toml").write_text(RUBRIC)
        (root / "home").mkdir()
        (root / "data").mkdir()
        if os.geteuid() == 0:
            for p in [root, *root.rglob("*")]:
                os.lchown(p, NOBODY, NOBODY)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(root / "home"),
            "LANG": "C.UTF-8",
            "LABKIT_DATA": str(root / "data"),
        }
        check = subprocess.run(
            [*as_nobody(), sys.executable, "-c", "import labkit.grading.grade, papermill"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        if check.returncode != 0:
            pytest.skip(f"user nobody cannot run this checkout's Python: {check.stderr.strip().splitlines()[-1:]}")
        done = subprocess.run(
            [
                *as_nobody(),
                sys.executable,
                "-m",
                "labkit",
                "grade",
                str(root / "subs"),
                "--out",
                str(root / "out"),
                "--rubric",
                str(root / "rubric.toml"),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "labkit:" not in done.stderr, done.stderr  # the runs' disks were held (no host-folder fallback)
        rows = {(r["student"], r["check"]): r for r in _csv(root / "out" / "grades.csv")}
        assert rows[("alice", "execution")]["status"] == "ok", rows
        assert rows[("alice", "recorded")]["status"] == "pass"
        mallory = rows[("mallory", "execution")]
        assert mallory["status"] == "disk" and "filled its 32 MB of disk" in mallory["reason"], mallory

        nb = nbformat.read(str(root / "out" / "alice" / "who.ipynb"), as_version=4)
        text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        seen = json.loads(next(ln for ln in text.splitlines() if ln.startswith("WHO ")).split(" ", 1)[1])
        assert seen["uid"] == (NOBODY if os.geteuid() == 0 else os.geteuid()) and seen["writable"] == []

        from labkit.grading.run import logcap

        log = (root / "out" / "alice" / "who.log").read_bytes()
        assert len(log) <= logcap.HEAD + logcap.TAIL + 4096 and b"FLOOD-END" in log[-logcap.TAIL :]
        key = root / "home" / ".config" / "labkit" / "grader.key"
        assert key.stat().st_uid == (NOBODY if os.geteuid() == 0 else os.geteuid())
        assert oct(key.stat().st_mode & 0o777) == "0o600"
        assert [p for p in (root / "out" / ".work").rglob("*") if p.is_file()] == []
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _csv(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_run_without_a_namespace_for_its_disk_is_stopped_past_it(tmp_path):
    """Where no disk can be held (``--no-sandbox``, a Slurm node's runs), the work folder is a
    host folder whose size the grader polls: past ``disk_mb`` the run is stopped, a `disk` row."""
    from labkit.grading.grade import GradeOptions, grade

    (tmp_path / "subs" / "s").mkdir(parents=True)
    spill = "import time\nfor i in range(8):\n    open(f'spill{i}', 'wb').write(b'x' * 8 * 2**20)\ntime.sleep(60)"
    nbformat.write(
        nbformat.v4.new_notebook(cells=[cell("seed = 0", ["parameters"]), cell(spill)]),
        str(tmp_path / "subs" / "s" / "who.ipynb"),
    )
    (tmp_path / "rubric.toml").write_text(RUBRIC)
    outcome = grade(
        GradeOptions(tmp_path / "rubric.toml", tmp_path / "subs", tmp_path / "out", sandbox="none"), log=lambda m: None
    )
    run = next(r for r in outcome.rows if r["check"] == "execution")
    assert run["status"] == "disk" and "wrote more than its 32 MB of disk (in cell 2)" in run["reason"], run
    assert run["seconds"] < 30 and not (tmp_path / "out" / ".work" / "s" / "who").exists()
