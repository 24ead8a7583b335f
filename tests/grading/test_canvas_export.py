"""canvas.csv as Canvas takes it, without running a notebook: a class's gradebook is built from
stored runs (as a batch leaves them), then ``grade-export`` and the reports every command rebuilds
are run on it. Canvas's own export (``_lms.canvas_gradebook``) carries its Manual Posting and
Points Possible rows and the Test Student; each lab's column is ``Title (id)`` or no canvas.csv
is written; Canvas's points are checked against the rubric's (refused, or scaled when asked); a
rubric edited after grading is applied (late penalty) or refused as stale (points, checks).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from _lms import canvas_gradebook
from labkit import cli
from labkit.grading.gradebook import exports
from labkit.grading.gradebook.legacy import intake_ids
from labkit.grading.gradebook.publish import Book
from labkit.grading.judge.rubric import load_rubric
from labkit.grading.run import ledger
from labkit.grading.run.runner import Job

RUBRIC = """
[labs.lab1]
notebook = "lab1.ipynb"
title = "Lab 1"
[[labs.lab1.checks]]
name = "loss recorded"
kind = "record"
points = 10
records = ["loss"]
[[labs.lab1.checks]]
name = "accuracy recorded"
kind = "record"
points = 9
records = ["accuracy"]
"""
COLUMN = "Lab 1 (5501)"
# (display name, Canvas user id, SIS User ID, SIS Login ID, lab1's points, late)
CLASS = [
    ("Smith, John", "12345", "S1", "jsmith", 19.0, False),
    ("Doe, Jane", "12346", "S2", "jdoe", 10.0, True),
    ("Roe, Rick", "12347", "S3", "rroe", 9.0, False),
]
TEST_STUDENT = ("Student, Test", "99999", "", "", 19.0, False)
HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", COLUMN]


def _rows(student: str, points: float) -> list[dict]:
    run = {"student": student, "lab": "lab1", "points": 0, "max": 0, "reason": "", "seconds": 1}
    first = min(points, 10.0)
    return [
        {**run, "check": "execution", "status": "ok"},
        {**run, "check": "loss recorded", "points": first, "max": 10.0, "status": "pass" if first else "fail"},
        {**run, "check": "accuracy recorded", "points": points - first, "max": 9.0, "status": "pass"},
    ]


def graded(root: Path, people=CLASS) -> Path:
    """A class graded under ``root/notebooks/rubric.toml``: each student's stored run, signed in
    the gradebook, and what Canvas's download said of them (their user id, the LATE mark)."""
    rubric = root / "notebooks" / "rubric.toml"
    rubric.parent.mkdir(parents=True, exist_ok=True)
    rubric.write_text(RUBRIC)
    lab = load_rubric(rubric).labs["lab1"]
    out = root / "out"
    jobs = [
        Job(
            s[1],
            lab,
            *(p / s[1] / n for p, n in ((root, "lab1.ipynb"), (out, "lab1.ipynb"))),
            out / ".work" / s[1],
            out / s[1] / "lab1.log",
            out / ".grader" / s[1] / "lab1",
        )
        for s in people
    ]
    intake = {
        uid: {
            "person": {"lms": "canvas", "id": uid, "name": name, "canvas_user_id": uid},
            "labs": {"lab1": {"late": True, "marker": "LATE"} if late else {}},
        }
        for name, uid, *_, late in people
    }
    book = Book(out, [lab], jobs, title="Grades: submissions.zip", intake=intake)
    book.save(RUBRIC, rubric)
    with book.gradebook() as db:
        for name, uid, *_, points, _late in people:
            handle = db.identify(intake_ids(intake[uid]["person"], uid), uid, name)
            db.record_run(
                handle,
                "lab1",
                {"fingerprint": {"lab": ledger.lab_hash(lab), "notebook": uid}, "rows": _rows(handle, points)},
            )
    return out


def run(*argv) -> int:
    """A labkit command in this process: its exit code (what it said is in capsys)."""
    return cli.main([str(a) for a in argv])


def rebuild(out: Path) -> None:
    """The tables every command rebuilds (``grade``, ``grade-merge``, ``grade-deliver``: ``write_reports``
    writes them so, then the pages)."""
    book = Book.load(out)
    book.write_tables(book.rows(), log=print)


def lines(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def roster(root: Path, points: str = "19", people=CLASS + [TEST_STUDENT]) -> Path:
    return canvas_gradebook(root / "canvas_export.csv", [p[:4] for p in people], {COLUMN: points})


# ---------------------------------------------------------------------------------------- the roster


def test_canvas_own_rows_and_the_test_student_are_not_people(tmp_path):
    got = exports.read_canvas_export(roster(tmp_path))
    assert [r["SIS Login ID"] for r in got.students] == ["jsmith", "jdoe", "rroe"]
    assert got.skipped == ["Manual Posting", "Points Possible", "the Test Student (ID 99999)"]
    assert got.points == {COLUMN: 19.0} and got.test_ids == ["99999"]
    assert exports.read_roster(tmp_path / "canvas_export.csv") == got.students
    # a row with no ID is nobody, whatever its Student cell says; a student named like a marker is a student
    assert exports.not_a_person({"Student": "", "ID": "", COLUMN: "Manual Posting"}) == "Manual Posting"
    assert exports.not_a_person({"Student": "Ghost", "ID": "", "SIS Login ID": "g"}) == "a row with no ID"
    assert exports.not_a_person({"Student": "Possible, Points", "ID": "7"}) == ""
    # a roster kept before these rows were told apart: they are left out where it is read
    kept = [(None, {"Student": "", "ID": "", COLUMN: "Manual Posting"}), ("12345", got.students[0])]
    assert exports.people_only(kept) == kept[1:]


# ---------------------------------------------------------------------------------------- the column


def test_every_writer_gives_the_assignment_column_or_writes_no_canvas_csv(tmp_path, capsys):
    out = graded(tmp_path)
    # what `make grade` and `grade-merge` rebuild: no roster, no canvas_assignment: no canvas.csv
    (out / "canvas.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section,Lab 1\n")  # one written before
    rebuild(out)
    said = capsys.readouterr().out
    assert not (out / "canvas.csv").exists()
    assert "canvas.csv not written (the one written before is removed)" in said
    assert "'Lab 1' is not a Canvas column (Title (assignment id))" in said and "--column lab1=" in said
    assert (out / "final_grades.csv").is_file()  # the other reports are written all the same
    assert (
        "## canvas.csv not written (1 lab(s) refused)\n\n- lab1: 'Lab 1' is not a Canvas column"
        in (out / "summary.md").read_text()
    )
    code = run("grade-export", "--out", out)
    assert code == 2 and not (out / "canvas.csv").exists()
    assert "canvas_assignment" in capsys.readouterr().err
    # named once (--column), kept: grade-export and every later rebuild write Canvas's own column
    assert run("grade-export", "--out", out, "--column", f"lab1={COLUMN}") == 0
    assert lines(out / "canvas.csv")[0] == HEADER
    rebuild(out)
    assert lines(out / "canvas.csv")[0] == HEADER


def test_a_roster_names_the_column_and_its_own_rows_stay_out_of_the_export_and_the_summary(tmp_path, capsys):
    out = graded(tmp_path, CLASS + [TEST_STUDENT])
    code = run("grade-export", "--out", out, "--roster", roster(tmp_path, people=CLASS + [TEST_STUDENT, ABSENT]))
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "3 of its 4 student(s) are in the gradebook" in said.out
    assert "not people: Manual Posting, Points Possible, the Test Student (ID 99999)" in said.out
    assert "Canvas's Test Student (Student View), not a person" in said.out
    assert lines(out / "canvas.csv") == [
        HEADER,
        ["    Points Possible", "", "", "", "", "19"],
        ["Smith, John", "12345", "S1", "jsmith", "1", "19"],
        ["Doe, Jane", "12346", "S2", "jdoe", "1", "10"],
        ["Roe, Rick", "12347", "S3", "rroe", "1", "9"],
    ]
    summary = (out / "summary.md").read_text()
    missing = summary.split("## Did not submit (1 on the roster)")[1].split("##")[0]
    assert [ln for ln in missing.splitlines() if ln.startswith("| ") and "student" not in ln] == [
        "| Absent, Abe | aabsent | lab1 |"
    ]


ABSENT = ("Absent, Abe", "12350", "S6", "aabsent", 0.0, False)


# ---------------------------------------------------------------------------------------- points possible


def test_other_points_in_canvas_are_refused_with_both_numbers_or_scaled_when_asked(tmp_path, capsys):
    out = graded(tmp_path)
    code = run("grade-export", "--out", out, "--roster", roster(tmp_path, points="18"))
    err = capsys.readouterr().err
    assert code == 2 and not (out / "canvas.csv").exists()
    assert f"'{COLUMN}' is worth 18 points in Canvas (the roster's Points Possible) and lab1 19 in the rubric" in err
    assert "--scale-to-canvas" in err and "SCALE_TO_CANVAS=1" in err
    assert err.startswith("error: canvas.csv was not written (1 problem(s)):\n  lab1: not exported (")
    assert run("grade-export", "--out", out, "--scale-to-canvas") == 0
    assert "lab1: scaled from the rubric's 19 points to Canvas's 18" in capsys.readouterr().out
    assert [ln[5] for ln in lines(out / "canvas.csv")[1:]] == ["18", "18", "9.47", "8.53"]
    # agreed for these two numbers: a later rebuild scales too; Canvas's points changed again: refused again
    rebuild(out)
    assert [ln[5] for ln in lines(out / "canvas.csv")[1:]] == ["18", "18", "9.47", "8.53"]
    assert run("grade-export", "--out", out, "--roster", roster(tmp_path, points="20")) == 2
    assert "worth 20 points in Canvas" in capsys.readouterr().err and not (out / "canvas.csv").exists()


# ---------------------------------------------------------------------------------------- a changed rubric


def test_a_late_penalty_added_after_grading_is_applied_at_export(tmp_path, capsys):
    out = graded(tmp_path)
    assert run("grade-export", "--out", out, "--roster", roster(tmp_path)) == 0
    assert [ln[5] for ln in lines(out / "canvas.csv")[2:]] == ["19", "10", "9"]
    rubric = tmp_path / "notebooks" / "rubric.toml"
    rubric.write_text(RUBRIC.replace('title = "Lab 1"\n', 'title = "Lab 1"\nlate_penalty = { flat = 0.2 }\n'))
    assert run("grade-export", "--out", out) == 0
    said = capsys.readouterr().out
    assert "lab1's late penalty changed (none -> 20% of the lab's points) since it was graded: applied" in said
    assert [ln[5] for ln in lines(out / "canvas.csv")[2:]] == ["19", "6.2", "9"]  # 10 - 20% of 19
    assert "12346 lab1: 10 -> 6.2" in said  # the regrade list
    rubric.unlink()  # moved away: not an edit; the copy graded with stands, and that is said
    assert run("grade-export", "--out", out) == 0
    assert "the copy the class was graded with (.grader/rubric.toml) is used" in capsys.readouterr().out
    assert [ln[5] for ln in lines(out / "canvas.csv")[2:]] == ["19", "10", "9"]


@pytest.mark.parametrize(
    "edit, why",
    [
        (("points = 9\n", "points = 8\n"), "check 'accuracy recorded': 9 -> 8 points; 19 -> 18 points in all"),
        (('records = ["accuracy"]\n', 'records = ["accuracy", "f1"]\n'), "check 'accuracy recorded' changed"),
    ],
)
def test_a_changed_check_makes_the_export_refuse_as_stale_naming_what_changed(tmp_path, capsys, edit, why):
    out = graded(tmp_path)
    assert run("grade-export", "--out", out, "--roster", roster(tmp_path)) == 0
    rubric = tmp_path / "notebooks" / "rubric.toml"
    rubric.write_text(RUBRIC.replace(*edit))
    capsys.readouterr()
    assert run("grade-export", "--out", out) == 2
    err = capsys.readouterr().err
    assert f"changed since it was graded ({why})" in err and "make grade SUBMISSIONS=" in err
    assert not (out / "canvas.csv").exists()
    rubric.write_text(RUBRIC)  # put back: the stored scores are the rubric's again
    assert run("grade-export", "--out", out) == 0 and (out / "canvas.csv").is_file()


def test_a_run_scored_under_an_earlier_rubric_is_stale(tmp_path, capsys):
    out = graded(tmp_path)
    book = Book.load(out)
    with book.gradebook() as db:
        stored = db.latest_run("12346", "lab1")
        db.record_run("12346", "lab1", {**stored, "fingerprint": {**stored["fingerprint"], "lab": "an-older-one"}})
    assert run("grade-export", "--out", out, "--column", f"lab1={COLUMN}") == 2
    assert "1 of its run(s) were scored under an earlier rubric" in capsys.readouterr().err
