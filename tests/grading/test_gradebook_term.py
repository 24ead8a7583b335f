"""A whole term in one class's gradebook, from downloads in the LMSs' real naming (``_lms``):
every student exactly once, at the right grade, after each step.

batch 1 (Canvas, no roster) -> the Canvas export with the roster given only now -> the reference
self-check -> batch 2 (late work, with the roster) -> two TAs' merges (one real conflict, one
comment-only difference) -> an export sent -> a Gradescope group submission -> an anonymous-grading
download -> an export that leaves someone out (refused, not sent) -> batch 3 (a regrade, a new
student, a .py hand-in) killed with SIGKILL mid-batch, then resumed -> the Canvas export, whose
regrade list names every grade changed since the last export sent, and whose columns are the
roster's. The workflow tests' tiny fixture labs (no TensorFlow), one notebook at a time where
the order matters.
"""

from __future__ import annotations

import csv
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from _class import filled
from _lms import CanvasFile, GradescopeSubmission, canvas_zip, gradescope_zip
from _ta_scores import _write_rows
from _term import PEOPLE, ROSTER_HEADER, Term, cli, roster
from helpers import read_csv
from labkit.grading.run.sandbox import SANDBOXES

NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
pytestmark = [
    pytest.mark.notebook,
    pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX} (.ci/run installs it)"),
]


def broken_alpha() -> bytes:
    """A resubmission whose work fails: ``slope`` is recorded negative."""
    nb = nbformat.reads(filled("bob").decode(), as_version=4)
    for c in nb.cells:
        if c.get("id") == "a-work":
            c.source = c.source.replace("slope = avg_sq(x)", "slope = -avg_sq(x)")
    return nbformat.writes(nb).encode()


def canvas_rows(path: Path) -> tuple[list[str], dict]:
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    return lines[0], {ln[1]: dict(zip(lines[0], ln)) for ln in lines[2:]}


BATCH1 = [
    CanvasFile("smithjohn", 12345, 67890, "alpha.ipynb", filled("ann")),
    CanvasFile("doejane", 12346, 67891, "alpha.ipynb", filled("bob")),
    CanvasFile("roerick", 12347, 67892, "alpha (1).ipynb", filled("cat")),
]
LATE = CanvasFile("leelou", 12348, 67893, "alpha-1.ipynb", filled("dan"), late=True)
PENDING = 3.0  # alpha's automatic points; its 3 points of answers await a TA


def test_a_term_in_one_gradebook(tmp_path):
    t0 = time.monotonic()
    term = Term(tmp_path)

    # batch 1: a Canvas download, no roster: the students as Canvas names them
    r = term.grade(canvas_zip(tmp_path / "b1.zip", BATCH1))
    assert r.returncode == 0, r.stderr
    term.once({("smithjohn", "alpha"): PENDING, ("doejane", "alpha"): PENDING, ("roerick", "alpha"): PENDING})

    # the roster given at export time finds every student by Canvas's user id (its ID column)
    r = cli("grade-export", "--out", term.out, "--roster", term.roster)
    assert r.returncode == 0, r.stderr
    header, people = canvas_rows(term.out / "canvas.csv")
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Alpha (901)"]
    assert {k: v["SIS Login ID"] for k, v in people.items()} == {"12345": "jsmith", "12346": "jdoe", "12347": "rroe"}

    # the reference self-check: refused by the class's gradebook, which it leaves as it was; its own folder works
    before = (term.out / "grades.csv").read_bytes()
    r = term.grade(None, "--lab", "alpha")
    assert r.returncode == 2 and "out/reference" in r.stderr and "the class is unchanged" in r.stderr
    r = term.grade(None, "--lab", "alpha", out=tmp_path / "reference")
    assert r.returncode == 0, r.stderr + r.stdout
    assert (term.out / "grades.csv").read_bytes() == before
    assert {x["student"] for x in term.rows(tmp_path / "reference")} == {"reference"}

    # batch 2: Canvas's whole download again, one more (late) student, with the roster: nobody doubles
    r = term.grade(canvas_zip(tmp_path / "b2.zip", [*BATCH1, LATE]), "--roster", term.roster)
    assert r.returncode == 0, r.stderr
    assert "kept 3 notebook(s)" in r.stdout and "[1/1] llee/alpha.ipynb" in r.stdout  # new: the roster's name
    term.once(
        {
            ("smithjohn", "alpha"): PENDING,
            ("doejane", "alpha"): PENDING,
            ("roerick", "alpha"): PENDING,
            ("llee", "alpha"): PENDING - 1.5,
        }
    )  # Canvas's LATE: one day at 25% of 6 points

    # two TAs: one real conflict (doejane), one comment-only difference (smithjohn)
    r = cli("grade-answers", "--out", term.out)
    assert r.returncode == 0, r.stderr
    q1, q2 = (term.out / "answers" / "alpha" / f"answer-q{i}.csv" for i in (1, 2))
    a_rows, b_rows = read_csv(q1), read_csv(q1)
    for row in a_rows[2:]:
        row["score"], row["comment"] = "2", ("clear" if row["student"] == "smithjohn" else "")
    for row in b_rows[2:]:
        row["score"], row["comment"] = {"smithjohn": ("2", "well argued"), "doejane": ("1", "vague")}.get(
            row["student"], ("", "")
        )
    ta_a, ta_b = tmp_path / "ta_a.csv", tmp_path / "ta_b.csv"
    _write_rows(ta_a, a_rows)
    _write_rows(ta_b, b_rows)
    q2_rows = read_csv(q2)
    for row in q2_rows[2:]:
        row["score"] = "1"
    _write_rows(q2, q2_rows)
    r = cli("grade-merge", ta_a, ta_b, q2, "--out", term.out)
    assert r.returncode == 2 and "1 conflict(s), nothing merged" in r.stderr and "alpha/answer Q1/doejane" in r.stderr
    assert "smithjohn" not in r.stderr
    r = cli("grade-merge", ta_a, ta_b, q2, "--out", term.out, "--prefer", ta_a)
    assert r.returncode == 0, r.stderr
    graded = {("smithjohn", "alpha"): 6, ("doejane", "alpha"): 6, ("roerick", "alpha"): 6, ("llee", "alpha"): 4.5}
    term.once(graded)
    smith = next(x for x in term.rows() if (x["student"], x["check"]) == ("smithjohn", "answer Q1"))
    assert "clear" in smith["reason"] and "well argued" in smith["reason"]
    r = cli("grade-export", "--out", term.out)  # sent: the regrade list starts here
    assert r.returncode == 0, r.stderr

    # a Gradescope group (Rick Roe and Lou Lee, whose :sid is the roster's SIS User ID), no due date
    group = GradescopeSubmission(
        501,
        [("Rick Roe", "rroe@uni.edu", "S1003"), ("Lou Lee", "llee@uni.edu", "S1004")],
        "2024-10-02 00:00:00.000000000 Z",
        {"beta.ipynb": filled("cat", "beta")},
    )
    r = term.grade(gradescope_zip(tmp_path / "gs.zip", [group]))
    assert r.returncode == 0, r.stderr
    assert "lateness was not computed" in r.stdout
    assert "[1/1] llee/beta.ipynb" in r.stdout and "credited to roerick too" in r.stdout  # run once
    graded.update({("roerick", "beta"): 1, ("llee", "beta"): 1})  # beta's answer awaits a TA
    term.once(graded)
    assert all({x["student_a"], x["student_b"]} != {"roerick", "llee"} for x in read_csv(term.out / "similarity.csv"))

    # anonymous grading: Canvas's anon_ names, into a gradebook of their own
    anon = tmp_path / "anon.zip"
    with zipfile.ZipFile(anon, "w") as zf:
        zf.writestr("anon_Xk3Qa_70001_alpha.ipynb", filled("ann"))
        zf.writestr("LATE_anon_P9zQ2_70002_alpha-1.ipynb", filled("bob"))
    r = term.grade(anon, out=tmp_path / "anonymous")
    assert r.returncode == 0, r.stderr
    term.once({("anon_Xk3Qa", "alpha"): PENDING, ("anon_P9zQ2", "alpha"): PENDING - 1.5}, tmp_path / "anonymous")
    r = cli("grade-deliver", "--out", tmp_path / "anonymous")
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(tmp_path / "anonymous" / "deliver" / "canvas" / "alpha.zip") as zf:
        assert sorted(zf.namelist()) == [
            "LATE_anon_P9zQ2_70002_feedback-alpha.html",
            "anon_Xk3Qa_70001_feedback-alpha.html",
        ]

    # an export whose roster lacks Lou Lee: it names her, exits non-zero, and is not counted as sent
    r = cli("grade-export", "--out", term.out, "--roster", roster(tmp_path / "short.csv", PEOPLE[:3] + PEOPLE[4:]))
    assert r.returncode == 2 and "llee" in r.stderr and "not as an export to send" in r.stderr

    # batch 3: Jane resubmits (late, and worse), Kay is new, Abe hands in a .py; killed mid-batch, then resumed
    b3 = canvas_zip(
        tmp_path / "b3.zip",
        [
            *BATCH1,
            LATE,
            CanvasFile("doejane", 12346, 67999, "alpha-2.ipynb", broken_alpha(), late=True),
            CanvasFile("kimkay", 12349, 68000, "alpha.ipynb", filled("ann")),
            CanvasFile("absentabe", 12350, 68001, "alpha.py", b"print('my lab')\n"),
        ],
    )
    args = [
        sys.executable,
        "-u",
        "-m",
        "labkit",
        "grade",
        str(b3),
        "--out",
        str(term.out),
        "--rubric",
        str(tmp_path / "rubric.toml"),
        "--notebooks",
        str(term.notebooks),
        "-j",
        "1",
        "--roster",
        str(term.roster),
    ]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:  # killed once one notebook has run (Abe's row, which runs nothing, may come first)
        for line in first.stdout:
            lines.append(line)
            if line.startswith("[") and (" doejane/" in line or " kkim/" in line):
                break
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    done = next((x.split()[1].split("/")[0] for x in lines if x.startswith("[") and "aabsent" not in x), None)
    assert done in ("doejane", "kkim"), "".join(lines)
    with sqlite3.connect(term.out / "gradebook.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    r = term.grade(b3, "--roster", term.roster)
    assert r.returncode == 0, r.stderr
    ran = [x.split()[1].split("/")[0] for x in r.stdout.splitlines() if x.startswith("[")]
    assert done not in ran and {"doejane", "kkim"} - {done} <= set(ran), r.stdout  # only what had not finished
    rows = {(x["student"], x["lab"], x["check"]): x for x in term.rows()}
    jane_auto = sum(float(rows[("doejane", "alpha", c)]["points"]) for c in ("slope recorded", "figure"))
    assert rows[("doejane", "alpha", "slope recorded")]["status"] != "pass" and jane_auto < PENDING
    # her answers are as the TAs scored them (3 points); late once more
    graded.update({("doejane", "alpha"): jane_auto + 3 - 1.5, ("kkim", "alpha"): PENDING, ("aabsent", "alpha"): 0})
    term.once(graded)
    abe = rows[("aabsent", "alpha", "execution")]
    assert abe["status"] == "not-a-notebook" and "received alpha.py" in abe["reason"] and "alpha.ipynb" in abe["reason"]
    assert "received alpha.py" in (term.out / "aabsent" / "alpha.html").read_text()

    # the export: Canvas's own columns, everyone once, and what changed since the last export sent
    r = cli("grade-export", "--out", term.out, "--roster", term.roster)
    assert r.returncode == 0, r.stderr
    header, people = canvas_rows(term.out / "canvas.csv")
    assert header == ROSTER_HEADER
    assert sorted(people) == ["12345", "12346", "12347", "12348", "12349", "12350"]
    assert people["12345"]["Alpha (901)"] == "6" and people["12348"]["Beta (902)"] == ""
    changed = {line.split(":")[0].strip() for line in r.stdout.splitlines() if line.startswith("  ")}
    assert changed == {"doejane alpha", "kkim alpha", "aabsent alpha", "roerick beta", "llee beta"}, r.stdout

    seconds = time.monotonic() - t0
    size = sum(p.stat().st_size for p in term.out.rglob("*") if p.is_file())
    print(f"\nterm: {seconds:.0f} s; output folder {size / 2**20:.1f} MB, {size / 6 / 2**10:.0f} KB per student")
