"""A term with many hands on one class's output folder, from downloads in the LMSs' real naming:
two graders at once, a display name shaped like a classmate's ids, a URL entry, case-different
anonymous ids, an exception full of terminal escapes, a page nested deeper than any sanitizer
likes, TA merges (one changing nothing), a rubric change, and Canvas's gradebook export with its
Manual Posting and Points Possible rows and its Test Student. After each step every student is
there once, as themselves, at the right grade; nothing a student wrote reaches the console or a
report raw. The workflow tests' tiny fixture labs (no TensorFlow).
"""

from __future__ import annotations

import csv
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from _class import filled
from _lms import CanvasEntry, CanvasFile, canvas_gradebook, canvas_zip
from _ta_scores import _write_rows
from _term import Term, cli
from helpers import read_csv
from labkit.grading.run.sandbox import SANDBOXES

NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
pytestmark = [
    pytest.mark.notebook,
    pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX} (.ci/run installs it)"),
]

PEOPLE = [
    ("Smith, John", "12345", "S1001", "jsmith"),
    ("Doe, Jane", "12346", "S1002", "jdoe"),
    ("Roe, Rick", "12347", "S1003", "rroe"),
    ("Kim, Kay", "12349", "S1005", "kkim"),
    ("Evil, Eve", "12351", "S1007", "eevil"),  # her display name in Canvas's files: Evil_12345_999999
    ("Nest, Ned", "12352", "S1008", "nnest"),
    ("Student, Test", "99999", "", ""),  # Canvas's test student: never a person of the class
]
FORGED = "\x1b[1A\x1b[2K[1/9] jsmith/alpha.ipynb: timeout, 0/6 points\n\x1b[32m[9/9] kkim: ok, 6/6\u202e"
ESC_AND_BIDI = ("\x1b", "\u202e")


def with_work(name: str, work: str) -> bytes:
    """``name``'s alpha with its work cell's solution replaced by ``work``."""
    nb = nbformat.reads(filled(name).decode(), as_version=4)
    for c in nb.cells:
        if c.get("id") == "a-work":
            c.source = work + "\nrecord('slope', slope)"
    return nbformat.writes(nb).encode()


def attacker() -> bytes:
    """An honest-looking alpha whose cell raises with escapes that would rewrite the console."""
    return with_work("ann", f"raise RuntimeError({FORGED!r})\nslope = 1.0")


def nested() -> bytes:
    """An alpha that shows HTML nested 30,000 deep (well within the output cap)."""
    depth = 30_000
    html = f"from IPython.display import HTML, display\ndisplay(HTML('<div>' * {depth} + 'deep' + '</div>' * {depth}))"
    return with_work("bob", f"{html}\nx = np.arange(3.0)\nslope = 2.0")


def inert(*paths: Path) -> None:
    for p in paths:
        text = p.read_text(errors="replace")
        assert not any(c in text for c in ESC_AND_BIDI), f"{p.name} holds a raw escape or bidi override"


def totals(out: Path) -> dict:
    return {r["student"]: r.get("alpha total", "") for r in read_csv(out / "final_grades.csv")}


def test_a_term_with_many_hands(tmp_path):
    t0 = time.monotonic()
    term = Term(tmp_path)
    roster = canvas_gradebook(tmp_path / "gradebook.csv", PEOPLE, {"Alpha (901)": "6", "Beta (902)": "2"})
    batch = canvas_zip(
        tmp_path / "b1.zip",
        [
            CanvasFile("smithjohn", 12345, 67890, "alpha.ipynb", filled("ann")),
            CanvasFile("doejane", 12346, 67891, "alpha.ipynb", filled("bob"), late=True),
            CanvasEntry("roerick", 12347, "link"),
            CanvasFile("kimkay", 12349, 67893, "alpha.ipynb", attacker()),
            CanvasFile("evil_12345_999999", 12351, 67894, "alpha.ipynb", filled("cat")),
            CanvasFile("nestned", 12352, 67895, "alpha.ipynb", nested()),
        ],
    )

    # two graders on one folder, started together: the second waits for the first, naming it
    args = [sys.executable, "-m", "labkit", "grade", batch, "--out", term.out, "--rubric", tmp_path / "rubric.toml"]
    args += ["--notebooks", term.notebooks, "-j", "1", "--roster", roster]
    first = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    second = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out1, err1 = first.communicate(timeout=600)
    out2, err2 = second.communicate(timeout=600)
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    assert f"pid {first.pid}" in err2 and "wait" in err2, err2
    assert "unreadable" not in out1 + out2
    with sqlite3.connect(term.out / "gradebook.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    # nothing a student wrote reached the console or a report raw; the forged lines are no lines
    for text in (out1, err1, out2, err2):
        assert not any(c in text for c in ESC_AND_BIDI)
    progress = [x for x in out1.splitlines() if x.startswith("[")]
    assert len(progress) == 6 and sum(x.split()[1].startswith("jsmith/") for x in progress) == 1, out1
    inert(term.out / "grades.csv", term.out / "summary.md", term.out / "final_grades.csv")

    # everyone once, as themselves: Eve's display name took nobody, Rick's link is his row
    rows = {(r["student"], r["check"]): r for r in term.rows()}
    runs = sorted(s for s, c in rows if c == "execution")
    assert runs == ["eevil", "jdoe", "jsmith", "kkim", "nnest", "rroe"], runs
    assert rows[("rroe", "execution")]["status"] == "not-a-notebook"
    assert "link" in rows[("rroe", "execution")]["reason"]
    assert rows[("kkim", "execution")]["status"] != "ok"
    got = totals(term.out)
    assert float(got["jsmith"]) == 3.0 and float(got["eevil"]) == 3.0  # each their own notebook's automatic points
    assert float(got["jdoe"]) == 3.0 - 1.5  # Canvas's LATE: one day at 25% of 6 points

    # the nested page was written, flattened within its limits, and says so
    page = (term.out / "nnest" / "alpha.html").read_text()
    assert "deep" in page
    summary = (term.out / "summary.md").read_text()
    assert "Manual Posting" not in summary and "Student, Test" not in summary

    # Canvas's export: its own columns, Points Possible as it gave them, no Manual Posting or Test Student
    r = cli("grade-export", "--out", term.out, "--roster", roster)
    assert r.returncode == 0, r.stderr
    with open(term.out / "canvas.csv", newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0][-1] == "Alpha (901)"  # the lab graded, under the column Canvas gave it (no Beta yet)
    assert lines[1][0].strip() == "Points Possible" and lines[1][-1] == "6"
    ids = sorted(x[1] for x in lines[2:])
    assert "99999" not in ids and "" not in ids and "12351" in ids and "12345" in ids

    # TAs score both questions; the same files merged again change nothing and render nothing, in seconds
    r = cli("grade-answers", "--out", term.out)
    assert r.returncode == 0, r.stderr
    files = []
    for q, points in (("q1", "2"), ("q2", "1")):
        scored = read_csv(term.out / "answers" / "alpha" / f"answer-{q}.csv")
        for row in scored:
            if row.get("student"):
                row["score"] = points
        files.append(tmp_path / f"ta-{q}.csv")
        _write_rows(files[-1], scored)
    r = cli("grade-merge", *files, "--out", term.out)
    assert r.returncode == 0, r.stderr
    got = totals(term.out)
    assert float(got["jsmith"]) == 6.0 and float(got["eevil"]) == 6.0 and float(got["jdoe"]) == 6.0 - 1.5
    before = {p: p.read_bytes() for p in term.out.rglob("*.html")}
    start = time.monotonic()
    r = cli("grade-merge", *files, "--out", term.out)
    again = time.monotonic() - start
    assert r.returncode == 0, r.stderr
    assert "feedback pages: 0 rendered" in r.stdout, r.stdout
    assert {p: p.read_bytes() for p in term.out.rglob("*.html")} == before
    assert again < 60, f"a merge that changed nothing took {again:.0f} s"

    # a late penalty changed after grading is applied at export, without running anything
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(rubric.read_text().replace("per_day = 0.25", "per_day = 0.5"))
    r = cli("grade-export", "--out", term.out, "--roster", roster)
    assert r.returncode == 0, r.stderr
    with open(term.out / "canvas.csv", newline="") as f:
        jane = next(x for x in csv.DictReader(f) if x["ID"] == "12346")
    assert float(jane["Alpha (901)"]) == 6.0 - 3.0  # one day late at 50% of 6 points now

    # a second class through its own folder: anonymous ids that differ only in case are two people
    anon = canvas_zip(
        tmp_path / "anon.zip",
        [
            CanvasFile("", 0, 70001, "alpha.ipynb", filled("ann"), anonymous_id="AbCdE"),
            CanvasFile("", 0, 70002, "alpha.ipynb", filled("bob"), anonymous_id="abcde"),
        ],
    )
    r = term.grade(anon, out=tmp_path / "second")
    assert r.returncode == 0, r.stderr
    people = [r["student"] for r in term.rows(tmp_path / "second") if r["check"] == "execution"]
    assert len(people) == 2 and len(set(people)) == 2, people  # neither merged into the other
    assert {p.split("-")[0] for p in people} == {"anon_AbCdE", "anon_abcde"}, people  # each keeps its case

    seconds = time.monotonic() - t0
    print(f"\nterm with many hands: {seconds:.0f} s; the merge that changed nothing: {again:.1f} s")
