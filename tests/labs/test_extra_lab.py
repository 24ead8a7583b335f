"""Adding a lab is adding a folder: a copy of Lab 1 under a new id, in a copy of the kit, is graded,
released and checked by the kit's own commands with no edit outside its folder."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
KEEP = ("labkit", "notebooks", "docs", "cloudlab", "pyproject.toml", "README.md", "Makefile", ".gitignore")


def kit_copy(root: Path) -> Path:
    """The kit's tracked files (what a course forks), without outputs or caches."""
    kit = root / "kit"
    kit.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "runs", "artifacts", ".ipynb_checkpoints")
    for name in KEEP:
        src = REPO / name
        (shutil.copytree(src, kit / name, ignore=skip) if src.is_dir() else shutil.copy2(src, kit / name))
    for extra in ("requirements.txt", "requirements-grader.txt", "requirements-profile.txt"):
        if (REPO / extra).is_file():
            shutil.copy2(REPO / extra, kit / extra)
    return kit


def add_lab(kit: Path, source: str = "lab1", new: str = "lab9") -> str:
    """``labkit/labs/<new>``: ``source``'s folder under a new id; every edit is inside it."""
    folder = kit / "labkit" / "labs" / new
    shutil.copytree(kit / "labkit" / "labs" / source, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (old,) = folder.glob("*.ipynb")
    name = f"0{new[3:]}_extra_{old.stem.split('_', 1)[1]}.ipynb"
    old.rename(folder / name)
    for path in [p for p in folder.rglob("*") if p.is_file() and p.suffix in (".py", ".toml", ".ipynb")]:
        text = re.sub(rf"(?<![A-Za-z0-9]){source}(?![0-9])", new, path.read_text()).replace(old.name, name)
        path.write_text(text)
    return name


def outside_the_folder(kit: Path) -> dict:
    """Every file of the kit but those of ``labkit/labs/lab9``, with its contents."""
    folder = kit / "labkit" / "labs" / "lab9"
    return {p: p.read_bytes() for p in kit.rglob("*") if p.is_file() and folder not in p.parents}


def run(kit: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(kit)}  # this copy's labkit, before the installed one
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args], cwd=kit, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
@pytest.mark.notebook
def test_a_new_lab_folder_is_graded_released_and_checked(tmp_path):
    kit = kit_copy(tmp_path)
    before = outside_the_folder(kit)
    name = add_lab(kit)
    assert outside_the_folder(kit) == before  # the new lab is its folder, and nothing else

    # make grade LAB=lab9 (the reference run; the sandbox is another test's: here the copy's kit
    # must be the one its kernel imports, which PYTHONPATH gives only an unsandboxed run)
    graded = run(kit, "grade", "--out", "out/reference", "--lab", "lab9", "--no-sandbox")
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    with open(kit / "out" / "reference" / "grades.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["lab"] == "lab9"]
    assert rows and all(r["status"] in ("pass", "ok", "pending") for r in rows), rows
    assert any(r["check"] == "sgd_step on the grader's batches" and r["status"] == "pass" for r in rows)

    # make release: the new lab's notebook, stripped, and its public rubric section
    released = run(kit, "release", "--out", str(tmp_path / "release"))
    assert released.returncode == 0, released.stderr[-3000:]
    student = tmp_path / "release"
    nb = nbformat.read(str(student / "notebooks" / name), as_version=4)
    assert any("raise NotImplementedError()" in c.source for c in nb.cells)
    assert "[labs.lab9]" in (student / "notebooks" / "rubric.toml").read_text()
    assert not list((student / "labkit" / "labs" / "lab9").glob("solution.py"))

    # make check LAB=9, in the student's kit: the lab is found, its notebook run, the stub named
    env = {**os.environ, "PYTHONPATH": str(student)}
    check = subprocess.run(
        [sys.executable, "-m", "labkit", "check", "--lab", "9", "--rubric", "notebooks/rubric.toml"],
        cwd=student,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = check.stdout + check.stderr
    assert check.returncode != 0 and name in out and "NotImplementedError" in out, out[-3000:]
