"""Feedback pages render once: a command that changes nothing renders nothing (nor draws
summary.html's figures again), a changed score renders that student's page alone, and a page removed, edited or whose record was forged is
rendered again. A page that fell back (its rendering failed) is not tried again until what it
shows changes.

The class is built from stored runs, as a batch leaves them (the gradebook's signed runs, the
manifest, the submitted and executed notebooks), on the workflow tests' fixture labs: no notebook
runs, so the module loads no kernel. Renders are counted where every page starts
(``render.Task.start``) and in the line ``write_reports`` logs.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_output

from labkit.grading.gradebook import legacy, publish
from labkit.grading.gradebook import store as gradebook
from labkit.grading.judge import answers
from labkit.grading.judge.rubric import load_rubric
from labkit.grading.kit.release import release_notebook
from labkit.grading.pages import cache, render
from labkit.grading.run import ledger
from labkit.grading.run.runner import Job
from _class import RUBRIC, alpha, beta

# A class built from stored runs and its pages rendered for real: 20-75 s, kept out of the fast lane
pytestmark = pytest.mark.slow

CLASS = ("ann", "bob", "cat")
BROKEN = ("cat", "beta")  # its executed notebook cannot be read: its page always falls back
UNSCORED = {("alpha", "answer Q2", "ann"): ("", "")}  # a TA's file that scores nothing: a merge that changes nothing


def _rows(student: str, lab, seconds: float) -> list[dict]:
    """A run's stored rows: it ended ok and passed every automatic check (answers: pending)."""
    rows = [{"check": "execution", "points": 0.0, "max": 0.0, "status": "ok", "reason": "", "seconds": seconds}]
    for c in lab.checks:
        analysis = c.spec.get("kind") == "analysis"
        rows.append(
            {
                "check": c.name,
                "points": 0.0 if analysis else float(c.points),
                "max": float(c.points),
                "status": "pending" if analysis else "pass",
                "reason": "awaiting a TA's score" if analysis else "",
                "seconds": "",
            }
        )
    return [{"student": student, "lab": lab.key, **r} for r in rows]


def _filled(student: str, lab: str):
    """The released notebook of ``lab`` as ``student`` answered it."""
    nb, _ = release_notebook(alpha() if lab == "alpha" else beta(), f"{lab}.ipynb")
    for c in nb.cells:
        if "analysis" in (c.metadata.get("tags") or []):
            c.source = f"{student} answers {c.id}: the squares are never negative, so the mean is not either."
    return nb


def stored_run(job: Job, seconds: float) -> dict:
    """A run's outcome as the batch holds it when the run ends, before the gradebook's JSON has
    made its tuples lists and its keys text."""
    return {
        "fingerprint": {"notebook": hashlib.sha256(job.source.read_bytes()).hexdigest(), "lab": job.lab.key},
        "rows": _rows(job.student, job.lab, seconds),
        "records": {"slope": 2.0, "shape": (3, 4)},
        "values": {"slope": 2.0, 0: (1, 2)},
        "input": True,
        "executed": True,
    }


def graded_class(root: Path, students=CLASS, broken=BROKEN) -> Path:
    """An output folder as a batch leaves it for ``students`` x (alpha, beta), before its reports."""
    (root / "rubric.toml").write_text(RUBRIC)
    rub = load_rubric(root / "rubric.toml")
    labs = list(rub.labs.values())
    nbs, out = root / "notebooks", root / "out"
    nbs.mkdir(parents=True)
    nbformat.write(alpha(), str(nbs / "alpha.ipynb"))
    nbformat.write(beta(), str(nbs / "beta.ipynb"))
    jobs = []
    with legacy.open_class(out) as db:
        db.claim(gradebook.CLASS)
        for n, student in enumerate(students):
            for lab in labs:
                stem = Path(lab.notebook).stem
                job = Job(
                    student,
                    lab,
                    root / "subs" / student / lab.notebook,
                    out / student / lab.notebook,
                    out / ".work" / student / stem,
                    out / student / f"{stem}.log",
                    out / ".grader" / student / stem,
                )
                nb = _filled(student, lab.key)
                for path in (job.source, job.clean_input):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    nbformat.write(nb, str(path))
                code = next(c for c in nb.cells if c.cell_type == "code")
                code.outputs = [new_output("stream", name="stdout", text=f"{student} ran {lab.key}\n")]
                job.executed.parent.mkdir(parents=True, exist_ok=True)
                if (student, lab.key) == broken:
                    job.executed.write_text("{ not a notebook")
                else:
                    nbformat.write(nb, str(job.executed))
                stored = stored_run(job, 1.0 + n)
                db.record_run(student, lab.key, stored)
                ledger.save_outcome(job, stored)
                jobs.append(job)
    book = publish.Book(out, labs, jobs, title="Grades: a class", notebooks=str(nbs))
    book.questions = {
        (lab.key, name): q for lab in labs for name, q in answers.questions(lab, nbs / lab.notebook).items()
    }
    book.save(RUBRIC)
    return out


@pytest.fixture
def counted(monkeypatch):
    """The feedback pages each command starts (paths under the output folder), by command."""
    started: list[str] = []
    start = render.Task.start

    def count(task):
        started.append(task.path.parent.name + "/" + task.path.name)
        return start(task)

    monkeypatch.setattr(render.Task, "start", count)
    return started


def _command(started: list, fn) -> tuple[Counter, list[str]]:
    """(the pages ``fn`` started, what it logged)."""
    before, log = len(started), []
    fn(log.append)
    return Counter(started[before:]), log


def _logged_renders(log: list[str]) -> int:
    return int(next(m.group(1) for ln in log if (m := re.match(r"feedback pages: (\d+) rendered", ln))))


def _scores(out: Path, path: Path, given: dict) -> Path:
    """A TA's file: ``given`` {(lab, check, student): (score, comment)}, each row starting from the
    score the gradebook holds now (its ``base``), as ``grade-answers`` exports it."""
    held = answers.read_scores(out)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lab", "check", "student", "base", "score", "comment"])
        for (lab, check, student), (score, comment) in given.items():
            w.writerow([lab, check, student, answers.version(held.get((lab, check, student))), score, comment])
    return path


def _merge(out: Path, *files: Path):
    return lambda log: publish.merge_scores(out, [str(f) for f in files], log=log)


def _page(out: Path, student: str, lab: str) -> Path:
    return out / student / f"{lab}.html"


def test_a_merge_renders_only_the_pages_whose_scores_changed(tmp_path, counted):
    out = graded_class(tmp_path)
    first, log = _command(counted, lambda log: publish.Book.load(out).write_reports(log))
    every = {f"{s}/{lab}.html" for s in CLASS for lab in ("alpha", "beta")}
    assert set(first) == every and max(first.values()) == 1 and _logged_renders(log) == len(every)
    assert "The executed notebook is not shown: rendering it failed" in _page(out, *BROKEN).read_text()

    q1 = {("alpha", "answer Q1", s): ("1", "") for s in CLASS}
    scored = _scores(out, tmp_path / "ta1.csv", q1)
    started, log = _command(counted, _merge(out, scored))
    assert started == Counter(f"{s}/alpha.html" for s in CLASS), started  # each alpha page shows its new score
    assert "scored by a TA" in _page(out, "bob", "alpha").read_text()

    summary = (out / "summary.html").stat()
    started, log = _command(counted, _merge(out, scored))  # the same file again: nothing changes
    assert started == Counter() and _logged_renders(log) == 0, log
    assert any("3 unchanged" in ln for ln in log), log
    assert (out / "summary.html").stat().st_mtime_ns == summary.st_mtime_ns  # nor are its figures drawn again

    pages = {p: p.read_bytes() for p in out.glob("*/*.html")}
    raised = _scores(out, tmp_path / "ta2.csv", {("alpha", "answer Q1", "bob"): ("2", "clear now")})
    started, log = _command(counted, _merge(out, raised))
    assert started == Counter({"bob/alpha.html": 1}) and _logged_renders(log) == 1, started
    assert "clear now" in _page(out, "bob", "alpha").read_text()
    assert (out / "summary.html").stat().st_mtime_ns != summary.st_mtime_ns  # a mean TA score changed
    assert {p: p.read_bytes() for p in out.glob("*/*.html") if p != _page(out, "bob", "alpha")} == {
        p: b for p, b in pages.items() if p != _page(out, "bob", "alpha")
    }


def test_a_page_removed_or_edited_or_its_record_forged_renders_again(tmp_path, counted):
    out = graded_class(tmp_path)
    _command(counted, lambda log: publish.Book.load(out).write_reports(log))
    nothing = _scores(out, tmp_path / "none.csv", UNSCORED)
    rebuild = _merge(out, nothing)
    assert _command(counted, rebuild)[0] == Counter()

    _page(out, "ann", "alpha").unlink()
    page = _page(out, "bob", "beta")
    page.write_text(page.read_text().replace("What to do next", "Nothing to do: full marks"))
    started, _ = _command(counted, rebuild)
    assert started == Counter({"ann/alpha.html": 1, "bob/beta.html": 1}), started
    assert _page(out, "ann", "alpha").is_file() and "full marks" not in page.read_text()

    # a record is the grader's: one with another key, or another student's, is not trusted
    record = out / ".grader" / "ann" / "beta" / cache.RECORD
    forged = json.loads(record.read_text())
    record.write_text(json.dumps({**forged, "key": "0" * 64}))
    (out / ".grader" / "bob" / "alpha" / cache.RECORD).write_text(
        (out / ".grader" / "cat" / "alpha" / cache.RECORD).read_text()
    )
    started, _ = _command(counted, rebuild)
    assert started == Counter({"ann/beta.html": 1, "bob/alpha.html": 1}), started
    assert _command(counted, rebuild)[0] == Counter()


def test_a_page_that_fell_back_is_tried_again_only_when_what_it_shows_changes(tmp_path, counted):
    out = graded_class(tmp_path)
    first, _ = _command(counted, lambda log: publish.Book.load(out).write_reports(log))
    broken = f"{BROKEN[0]}/{BROKEN[1]}.html"
    assert first[broken] == 1
    fallback = _page(out, *BROKEN).read_bytes()
    assert b"rendering it failed" in fallback

    nothing = _merge(out, _scores(out, tmp_path / "none.csv", UNSCORED))
    started, _ = _command(counted, nothing)
    assert started == Counter() and _page(out, *BROKEN).read_bytes() == fallback  # not tried again

    scored = _scores(out, tmp_path / "ta.csv", {("beta", "answer Q1", BROKEN[0]): ("1", "")})
    started, _ = _command(counted, _merge(out, scored))
    assert started == Counter({broken: 1}), started  # its rows changed: tried again (and it falls back again)
    assert b"scored by a TA" in _page(out, *BROKEN).read_bytes()
    assert _command(counted, nothing)[0] == Counter()


def test_a_page_rendered_as_its_run_ended_is_not_rendered_again_by_the_reports(tmp_path, counted):
    """As a batch does: each run's page rendered as the run ends, from its outcome as the batch
    holds it, then every report from the gradebook: the page is the same page."""
    out = graded_class(tmp_path, students=CLASS[:2], broken=("bob", "alpha"))
    book = publish.Book.load(out)
    ta = answers.read_scores(out)
    held = book.stored()
    tasks = []
    for job in book.jobs:
        stored = stored_run(job, 1.0 + CLASS.index(job.student))
        assert json.loads(json.dumps(stored, default=str)) == held[job.key]  # the gradebook's copy of it
        tasks.append(book.page_task(job, book.job_rows(job, stored, ta)[0], stored, force=True))
    batch, _ = _command(counted, lambda log: render.run(tasks, 2))
    assert len(batch) == 4 and "rendering it failed" in _page(out, "bob", "alpha").read_text()
    started, log = _command(counted, lambda log: book.write_reports(log))
    assert started == Counter() and _logged_renders(log) == 0, log  # the fallback page too
