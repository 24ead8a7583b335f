"""The grader's own work on one student's notebook is bounded, and counted against that student.

A run's cells cost what their code costs: 1,100 raw cells after a cell that prints 3 MB (saved
whole as each of them starts and ends, as papermill does unpaced, they take minutes) run in
seconds, and a run stopped in a cell after them names that cell. What the grader parses of
a student's file (reading and cleaning it, reading what its run left) happens in a child with a
CPU, memory and wall-clock limit: a file made to be expensive to parse ends there, with the reason
in its row, and the batch goes on. Tiny notebooks without a sandbox, no TensorFlow; the tests that
read a file or spin a child without a kernel are in the fast lane.
"""

from __future__ import annotations

import json
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_raw_cell

from labkit.grading.grade import GradeOptions, grade
from labkit.grading.run import limits, runner
from labkit.notebook.record import cell_name

NOTEBOOK_TIMEOUT = 240  # s: the old per-cell saving took longer than this for the notebook below
CELL_TIMEOUT = 20
RUBRIC = f"""
[defaults]
cell_timeout = {CELL_TIMEOUT}
notebook_timeout = {NOTEBOOK_TIMEOUT}
start_timeout = 120
memory_mb = 1500
check_memory_mb = 1024

[labs.b]
notebook = "b.ipynb"
title = "Bounds"
[[labs.b.checks]]
name = "done"
kind = "record"
points = 1
record = "done"
"""
RAW_CELLS = 1_100
FILLER = "a raw cell the kernel never sees; papermill used to save the whole notebook around it. "


def notebook(*tail: str, raw: int = RAW_CELLS, printed_mb: int = 3):
    """A code cell that prints ``printed_mb`` MB, ``raw`` raw cells (~145 bytes each), then ``tail``."""
    cells = [new_code_cell(f"import labkit\nprint('x' * {printed_mb * 2**20})")]
    cells += [new_raw_cell(f"{i} {FILLER}{FILLER}"[:145]) for i in range(raw)]
    cells += [new_code_cell(src) for src in tail]
    nb = new_notebook(cells=cells)
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def rows_of(outcome, student: str) -> dict:
    return {r["check"]: r for r in outcome.rows if r["student"] == student}


def class_folder(root, notebooks: dict):
    for student, nb in notebooks.items():
        (root / "subs" / student).mkdir(parents=True)
        path = root / "subs" / student / "b.ipynb"
        if isinstance(nb, str):
            path.write_text(nb)
        else:
            nbformat.write(nb, str(path))
    (root / "rubric.toml").write_text(RUBRIC)
    return root / "subs"


@pytest.mark.notebook
@pytest.mark.slow
def test_raw_cells_cost_a_run_nothing_and_a_stopped_run_names_its_cell(tmp_path):
    """1,100 raw cells (160 KB) after 3 MB of output: the run ends ``ok`` with its last cell's
    record, in a small share of the timeout the old saving ran into; a run stopped at its cell
    timeout after the same cells names the cell it was in (the runner's progress file)."""
    subs = class_folder(
        tmp_path,
        {
            "raw": notebook("labkit.record('done', 1)"),
            "hang": notebook("import time\ntime.sleep(10 * 60)", "labkit.record('done', 1)"),
        },
    )
    t0 = time.monotonic()
    outcome = grade(
        GradeOptions(tmp_path / "rubric.toml", subs, tmp_path / "out", parallel=1, sandbox="none"), log=lambda m: None
    )
    took = time.monotonic() - t0
    raw, hang = rows_of(outcome, "raw"), rows_of(outcome, "hang")
    assert raw["execution"]["status"] == "ok", raw["execution"]
    assert raw["done"]["status"] == "pass", raw["done"]  # the cell after the raw ones ran
    assert float(raw["execution"]["seconds"]) < NOTEBOOK_TIMEOUT / 2, raw["execution"]
    hung = 1 + RAW_CELLS  # the sleeping cell, as the submitted notebook numbers it
    assert hang["execution"]["status"] == "timeout", hang["execution"]
    assert f"{cell_name(hung)} ran past the {CELL_TIMEOUT} s cell timeout" in hang["execution"]["reason"]
    assert took < NOTEBOOK_TIMEOUT, f"the batch took {took:.0f} s"


def expensive_to_parse(cells: int = 2_000, outputs: int = 60) -> str:
    """A notebook within every cap (2,000 cells, about 7 MB) whose stored outputs are so many tiny
    objects that reading and validating it takes the grader seconds of CPU time."""
    tiny = {"output_type": "stream", "name": "stdout", "text": ""}
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "source": "x = 1",
        "outputs": [tiny] * outputs,
    }
    return json.dumps({"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": [cell] * cells})


@pytest.mark.notebook
def test_a_file_expensive_to_parse_hits_its_own_limit_and_the_batch_goes_on(tmp_path, monkeypatch):
    """With the grader's CPU budget for one notebook at 1 s, the file made to be expensive to
    parse is refused with that reason in its row, in about that time; the honest classmate
    beside it is read, run and scored."""
    monkeypatch.setattr(runner, "READ_CPU_S", 1.0)
    monkeypatch.setattr(runner, "READ_WALL_FACTOR", 60.0)  # a busy machine's 1 s of CPU is not cut short by the clock
    subs = class_folder(
        tmp_path, {"costly": expensive_to_parse(), "honest": notebook("labkit.record('done', 1)", raw=0, printed_mb=0)}
    )
    outcome = grade(
        GradeOptions(tmp_path / "rubric.toml", subs, tmp_path / "out", parallel=1, sandbox="none"), log=lambda m: None
    )
    costly, honest = rows_of(outcome, "costly"), rows_of(outcome, "honest")
    assert costly["execution"]["status"] == "refused", costly["execution"]
    assert "reading it needed more than 1 s of CPU time" in costly["execution"]["reason"], costly["execution"]
    assert "the grader's limit for one notebook" in costly["execution"]["reason"]
    assert honest["execution"]["status"] == "ok" and honest["done"]["status"] == "pass", honest


def test_an_executed_notebook_expensive_to_read_is_that_students_rows(tmp_path, monkeypatch):
    """What a run left is read in the same bounds (``scoring.examined``): an executed notebook
    made of tiny outputs ends its reading at the CPU limit, and the batch's boundary turns that
    into this notebook's rows, with the reason, rather than the batch's end."""
    from labkit.grading.judge import scoring
    from labkit.grading.judge.rubric import load_rubric
    from labkit.grading.run.batch import Batch, Flight
    from labkit.grading.run.runner import Job, RunResult

    monkeypatch.setattr(runner, "READ_CPU_S", 1.0)
    monkeypatch.setattr(runner, "READ_WALL_FACTOR", 60.0)
    (tmp_path / "rubric.toml").write_text(RUBRIC)
    lab = load_rubric(tmp_path / "rubric.toml").labs["b"]
    executed = tmp_path / "executed.ipynb"
    executed.write_text(expensive_to_parse())
    job = Job(
        "costly", lab, tmp_path / "b.ipynb", executed, tmp_path / "work", tmp_path / "b.log", tmp_path / "private"
    )
    with pytest.raises(limits.OverBudget, match="reading its executed notebook needed more than 1 s of CPU time"):
        scoring.examined(job, RunResult("ok"))
    flight = Flight(job)
    Batch(executor=None, setup=None, sink=object()).ended(flight, RunResult("ok"))
    assert "reading its executed notebook needed more than 1 s of CPU time" in flight.evidence.problem
    assert flight.evidence.scores["done"].status == "grader-error", flight.evidence.scores


def spin(seconds: float) -> str:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    return "spun"


def grow(mb: int) -> int:
    return len(bytearray(mb * 2**20))


def test_bounded_work_says_which_limit_ended_it():
    """``limits.bounded``: the value when within its limits, the exception it raised, and
    ``OverBudget`` naming CPU time, memory (more than the grader held) or wall-clock time."""
    assert limits.bounded(spin, 0.1, cpu_s=5, memory_mb=64, wall_s=60) == "spun"
    assert limits.bounded(grow, 16, cpu_s=5, memory_mb=64, wall_s=60) == 16 * 2**20
    with pytest.raises(ValueError, match="not a number"):
        limits.bounded(int, "not a number", cpu_s=5, memory_mb=64, wall_s=60)
    with pytest.raises(limits.OverBudget, match="needed more than 1 s of CPU time"):
        limits.bounded(spin, 30, cpu_s=1, memory_mb=64, wall_s=60)
    with pytest.raises(limits.OverBudget, match="needed more than 64 MB"):
        limits.bounded(grow, 256, cpu_s=5, memory_mb=64, wall_s=60)
    t0 = time.monotonic()
    with pytest.raises(limits.OverBudget, match="took longer than 1 s"):
        limits.bounded(time.sleep, 30, cpu_s=5, memory_mb=64, wall_s=1)
    assert time.monotonic() - t0 < 15
