"""The instructor's commands: OUT for every grading target of make, one student regraded with
everyone else's runs left as they were, a group's answer scored once, a comment-only edit of a
merged TA file merged, and the gradebook's views, which count as grades.csv and final_grades.csv do.

Unit tests first (no notebook runs), then one class of 3 students graded end to end on the
workflow tests' tiny lab ``beta`` (it imports no TensorFlow): 3 runs, then 1 for the regrade.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
from pathlib import Path

import nbformat
import pytest

from helpers import read_csv
from labkit.grading.gradebook import store
from labkit.grading.gradebook.store import Gradebook
from labkit.grading.judge import answers
from _class import RUBRIC, alpha, beta, reference_notebooks, student_notebooks
from _ta_scores import _scores

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------- make's OUT


def _make_lines(*args: str) -> dict[str, list[str]]:
    """{subcommand: its arguments} of the ``python -m labkit grade...`` lines ``make -n`` prints."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = {}
    for line in done.stdout.splitlines():
        words = shlex.split(line)
        if "labkit" in words and words[words.index("labkit") + 1].startswith("grade"):
            at = words.index("labkit") + 1
            out[words[at]] = words[at + 1 :]
    return out


def _out_of(argv: list[str]) -> str:
    return argv[argv.index("--out") + 1]


def test_out_and_student_reach_every_grading_target_of_make():
    targets = ("grade", "grade-answers", "grade-merge", "grade-export", "grade-deliver")
    given = _make_lines(*targets, "SUBMISSIONS=subs", "SCORES=x.csv", "OUT=out/fall-b", "STUDENT=ann")
    assert set(given) == set(targets)
    assert {t: _out_of(a) for t, a in given.items()} == {t: "out/fall-b" for t in targets}
    assert given["grade"][given["grade"].index("--student") + 1] == "ann"
    default = _make_lines(*targets, "SUBMISSIONS=subs", "SCORES=x.csv")
    assert {_out_of(a) for a in default.values()} == {"out/grade"} and "--student" not in default["grade"]
    reference = _make_lines("grade", "OUT=out/fall-b")  # the self-check never goes into a class's folder
    assert _out_of(reference["grade"]) == "out/reference"


# ----------------------------------------------------------------------------- a group's answer


def _items(texts: dict[str, str], groups: dict[str, list[str]]) -> list[dict]:
    """Graded items of lab alpha, one per student, answering 'answer Q1' with ``texts``."""
    from labkit.grading.judge.rubric import Score

    out = []
    for student, text in texts.items():
        a = answers.Answer(text=text, cells=[3], found=True)
        out.append(
            {
                "student": student,
                "lab": "alpha",
                "records": {},
                "answers": {"answer Q1": a},
                "scores": {"answer Q1": Score(0.0, 2.0, "pending", "awaiting a TA's score", a.sha)},
                "group": groups.get(student, []),
            }
        )
    return out


Q1 = answers.Question("alpha", "answer Q1", 2.0, ["a-ans1"], text="Why?", key="Because.")


def test_a_groups_answer_is_one_row_and_its_score_is_every_members(tmp_path):
    same = "Our group says the squares are never negative."
    items = _items(
        {"ann": same, "bob": same, "cat": "Mine alone.", "dan": same, "eve": "Eve changed it since."},
        {"ann": ["bob", "eve"], "bob": ["ann", "eve"], "eve": ["ann", "bob"]},  # dan wrote the same, alone
    )
    (task,) = answers.export(tmp_path, items, {("alpha", "answer Q1"): Q1})
    sheet = tmp_path / "answers" / "alpha" / "answer-q1.csv"
    answers.write_page(**task.args)  # the TA's page, rendered here (no kernel): the group is named once
    page = task.path.read_text()
    assert page.count("group: ann; bob") == 1 and page.count("Our group says") == 2  # dan's row, and the group's
    assert f"make grade-merge OUT={tmp_path} SCORES={sheet}" in page
    assert answers.merge_command(Path("out/grade/answers/lab1/q.html")) == (
        "make grade-merge SCORES=out/grade/answers/lab1/q.csv"
    )
    rows = [r for r in read_csv(sheet) if r["student"] not in answers.NOTE_ROWS]
    assert [(r["student"], r["members"]) for r in rows] == [
        ("ann", "ann; bob"),  # eve's answer differs now: her own row
        ("cat", ""),
        ("dan", ""),
        ("eve", ""),
    ]
    assert "a group's answer: the score given is each of its 2 members'" in rows[0]["notes"]

    current = {("alpha", "answer Q1", it["student"]): it["answers"]["answer Q1"].sha for it in items}
    groups = answers.groups_of(items)
    table = csv_rows(sheet.read_text())
    for r in table:
        if r["student"] == "ann":
            r["score"], r["comment"] = "1.5", "clear"
    ta = write_rows(tmp_path / "ta1.csv", table)
    lines = answers.merge(tmp_path, [ta], {("alpha", "answer Q1"): Q1}, current, groups=groups)
    assert lines == [f"{ta}: 2 score(s) merged"]
    held = answers.read_scores(tmp_path)
    assert {k[2]: (v["score"], v["comment"]) for k, v in held.items()} == {
        "ann": ("1.5", "clear"),
        "bob": ("1.5", "clear"),
    }

    # a second TA who scores bob on his own (an earlier export's row) scores the group: a conflict for both
    other = _scores(
        tmp_path / "ta2.csv", [("alpha", "answer Q1", "bob", current[("alpha", "answer Q1", "bob")], "", "0.5", "thin")]
    )
    with pytest.raises(answers.ScoresError) as e:
        answers.merge(tmp_path, [ta, other], {("alpha", "answer Q1"): Q1}, current, groups=groups)
    assert "2 conflict(s), nothing merged" in str(e.value)
    assert "alpha/answer Q1/ann: ta1.csv row 4 gives 1.5 ('clear'), ta2.csv row 2 gives 0.5" in str(e.value)
    assert "alpha/answer Q1/bob: ta1.csv row 4 gives 1.5 ('clear'), ta2.csv row 2 gives 0.5" in str(e.value)
    assert answers.read_scores(tmp_path)[("alpha", "answer Q1", "bob")]["score"] == "1.5"


def csv_rows(text: str) -> list[dict]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


def write_rows(path: Path, rows: list[dict]) -> Path:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


# --------------------------------------------------------------------------- comment-only merges

Q = {("alpha", "answer Q1"): Q1}
NOW = {("alpha", "answer Q1", s): "sha" + s for s in ("ann", "bob")}


def test_a_merged_file_merged_again_with_only_a_comment_changed_updates_the_comment(tmp_path):
    mine = tmp_path / "answer-q1.csv"
    _scores(
        mine,
        [("alpha", "answer Q1", "ann", "shaann", "", "1", "ok"), ("alpha", "answer Q1", "bob", "shabob", "", "2", "")],
    )
    answers.merge(tmp_path, [mine], Q, NOW)
    _scores(
        mine,
        [
            ("alpha", "answer Q1", "ann", "shaann", "", "1", "ok, but cite the figure"),
            ("alpha", "answer Q1", "bob", "shabob", "", "2", ""),
        ],
    )
    assert answers.merge(tmp_path, [mine], Q, NOW) == [f"{mine}: 1 score(s) merged, 1 unchanged"]
    held = answers.read_scores(tmp_path)[("alpha", "answer Q1", "ann")]
    assert (held["score"], held["comment"]) == ("1", "ok, but cite the figure")
    with Gradebook(tmp_path) as db:
        assert [r["comment"] for r in db.ta_history("ann", "alpha", "answer Q1")] == ["ok", "ok, but cite the figure"]

    other = tmp_path / "second-ta.csv"  # another TA agrees on the points: the student reads both comments
    _scores(other, [("alpha", "answer Q1", "ann", "shaann", "", "1", "see me")])
    answers.merge(tmp_path, [other], Q, NOW)
    assert answers.read_scores(tmp_path)[("alpha", "answer Q1", "ann")]["comment"] == "ok, but cite the figure / see me"
    assert answers.merge(tmp_path, [other], Q, NOW) == [f"{other}: 0 score(s) merged, 1 unchanged"]

    _scores(mine, [("alpha", "answer Q1", "ann", "shaann", "", "2", "changed my mind")])  # points: still a conflict
    with pytest.raises(answers.ScoresError, match=r"1 conflict\(s\), nothing merged"):
        answers.merge(tmp_path, [mine], Q, NOW)
    assert answers.read_scores(tmp_path)[("alpha", "answer Q1", "ann")]["score"] == "1"


# ------------------------------------------------------------------------------- the views


def test_a_gradebook_of_an_earlier_version_gets_the_views(tmp_path):
    with sqlite3.connect(tmp_path / store.FILE) as raw:  # version 1's results, without the answer columns
        raw.execute(
            "CREATE TABLE results (run INTEGER NOT NULL, check_name TEXT NOT NULL, points REAL, max REAL, "
            "status TEXT, reason TEXT, PRIMARY KEY (run, check_name))"
        )
        raw.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        raw.execute("INSERT INTO meta VALUES ('version', '1')")
    with Gradebook(tmp_path) as db:
        rows = [
            {"student": "ann", "lab": "alpha", "check": c, "points": p, "max": m, "status": s, "reason": ""}
            for c, p, m, s in (("execution", 0, 0, "ok"), ("slope", 2, 2, "pass"), ("answer Q1", 0, 2, "pending"))
        ]
        db.record_run("ann", "alpha", {"rows": rows})  # a run recorded as version 1 did: no answers kept
        views = {r[0] for r in db.db.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
        assert set(store.VIEWS) <= views and db.get("version") == str(store.VERSION)
        assert [tuple(r) for r in db.db.execute("SELECT student, points, max, pending, status FROM lab_totals")] == [
            ("ann", 2.0, 4.0, 2.0, "pending")
        ]
        db.ta_scores({("alpha", "answer Q1", "ann"): {"score": "1", "answer_sha": "x"}})
        assert db.db.execute("SELECT total, status FROM term_totals").fetchone()[:] == (3.0, "graded")
        assert db.db.execute("SELECT count(*) FROM pending_answers").fetchone()[0] == 0
        assert db.integrity() == "ok"


# ----------------------------------------------------------------------- the class, end to end

BETA_LATE = RUBRIC.replace("[labs.beta]\n", "[labs.beta]\nlate_penalty = { flat = 0.25 }\n")
CLASS = ("ann", "bob", "cat")


def _write_class(root: Path) -> dict:
    nbs = reference_notebooks(root)
    subs = root / "subs"
    for name in CLASS:
        (subs / name).mkdir(parents=True)
        _, b = student_notebooks(name, alpha(), beta())
        nbformat.write(b, str(subs / name / "beta.ipynb"))
    (subs / "intake.json").write_text(  # as the intake records a late file
        json.dumps(
            {
                "lms": "folder",
                "students": {"cat": {"person": {}, "labs": {"beta": {"late": True, "late_seconds": 7200}}}},
            }
        )
    )
    (root / "rubric.toml").write_text(BETA_LATE)
    return {"notebooks": nbs, "subs": subs, "rubric": root / "rubric.toml", "out": root / "out"}


def _grade(k: dict, **kw):
    from labkit.grading.grade import GradeOptions, grade

    log: list[str] = []
    done = grade(
        GradeOptions(k["rubric"], k["subs"], k["out"], parallel=1, notebooks=k["notebooks"], sandbox="none", **kw),
        log=log.append,
    )
    return done, log


def _runs(out: Path) -> dict[str, list[int]]:
    with Gradebook(out) as db:
        got: dict[str, list[int]] = {}
        for handle, run in db.db.execute(
            "SELECT people.handle, runs.id FROM runs JOIN people ON people.id = runs.person ORDER BY runs.id"
        ):
            got.setdefault(handle, []).append(run)
        return got


def _submitted(out: Path) -> dict[str, int]:
    with Gradebook(out) as db:
        return {
            h: n
            for h, n in db.db.execute(
                "SELECT people.handle, count(*) FROM submissions JOIN people ON people.id = submissions.person "
                "GROUP BY people.handle"
            )
        }


def _views_match_the_reports(out: Path) -> None:
    """Every view says what grades.csv and final_grades.csv say."""
    grades = {(r["student"], r["lab"], r["check"]): r for r in read_csv(out / "grades.csv")}
    final = {r["student"]: r for r in read_csv(out / "final_grades.csv")}
    with Gradebook(out) as db:
        q = db.db.execute
        checks = {(r["student"], r["lab"], r["check_name"]): r for r in q("SELECT * FROM check_scores")}
        labs = {(r["student"], r["lab"]): r for r in q("SELECT * FROM lab_totals")}
        terms = {r["student"]: r for r in q("SELECT * FROM term_totals")}
        pending = {(r["student"], r["lab"], r["check_name"]) for r in q("SELECT * FROM pending_answers")}
    graded = {k: r for k, r in grades.items() if k[2] not in ("execution", "late")}
    assert set(checks) == set(graded)
    for key, r in graded.items():
        assert (checks[key]["points"], checks[key]["status"]) == (float(r["points"]), r["status"]), key
    assert pending == {k for k, r in graded.items() if r["status"] == "pending"}
    assert set(terms) == set(final) and set(labs) == {(s, "beta") for s in final}
    for s, row in final.items():
        assert labs[(s, "beta")]["total"] == float(row["beta total"]), s
        assert float(grades.get((s, "beta", "late"), {"points": 0})["points"]) == labs[(s, "beta")]["late"]
        t = terms[s]
        assert (t["total"], t["possible"], t["pending"]) == (
            float(row["total"]),
            float(row["possible"]),
            float(row["pending"]),
        )
        assert t["status"] == row["status"]


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """The class graded, its answers exported and two of them scored by a TA."""
    from labkit.grading.gradebook.publish import export_answers, merge_scores

    k = _write_class(tmp_path_factory.mktemp("instructor"))
    first, _ = _grade(k)
    assert sorted(first.ran) == [(s, "beta") for s in CLASS]
    export_answers(k["out"], log=lambda _: None)
    sheet = k["out"] / "answers" / "beta" / "answer-q1.csv"
    table = read_csv(sheet)
    for r in table:
        r.update(
            {"ann": {"score": "1", "comment": "right"}, "cat": {"score": "0.5", "comment": "half"}}.get(
                r["student"], {}
            )
        )
    merge_scores(k["out"], [write_rows(sheet, table)], log=lambda _: None)
    k["runs"] = _runs(k["out"])
    return k


@pytest.mark.notebook
def test_the_views_count_as_the_reports_do(klass):
    grades = {(r["student"], r["check"]): r for r in read_csv(klass["out"] / "grades.csv")}
    assert grades[("ann", "answer Q1")]["status"] == "pass" and grades[("bob", "answer Q1")]["status"] == "pending"
    assert float(grades[("cat", "late")]["points"]) < 0  # a late row, a TA's score and a pending answer: all counted
    _views_match_the_reports(klass["out"])


@pytest.mark.notebook
def test_one_student_is_regraded_and_everyone_else_is_left_as_graded(klass):
    from labkit.grading.grade import GradeError

    cat = klass["subs"] / "cat" / "beta.ipynb"
    nb = nbformat.read(str(cat), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("cat's later edit: a full batch would run this file again"))
    nbformat.write(nb, str(cat))
    before, handed_in = (klass["out"] / "grades.csv").read_text(), _submitted(klass["out"])
    with pytest.raises(GradeError, match=r"--student zed: no such student .*\(3 there: ann, bob, cat\)"):
        _grade(klass, student="zed")
    assert _runs(klass["out"]) == klass["runs"]
    for who in ("bob", "cat"):  # a file no lab takes: said of bob's folder only
        nbformat.write(nbformat.v4.new_notebook(), str(klass["subs"] / who / "scratch.ipynb"))
    again, log = _grade(klass, student="bob")
    assert any("bob/scratch.ipynb" in ln for ln in log) and not any("cat/" in ln for ln in log)
    assert again.ran == [("bob", "beta")] and "regrading bob only: every other student stays as graded" in log
    runs = _runs(klass["out"])
    assert _submitted(klass["out"]) == handed_in  # cat's new file is not even recorded: not this batch's
    assert {s: runs[s] for s in ("ann", "cat")} == {s: klass["runs"][s] for s in ("ann", "cat")}
    assert runs["bob"][:-1] == klass["runs"]["bob"] and runs["bob"][-1] > max(max(v) for v in klass["runs"].values())
    mine = [ln for ln in before.splitlines() if ln.startswith("bob,")]
    after = (klass["out"] / "grades.csv").read_text()
    assert [ln for ln in after.splitlines() if not ln.startswith("bob,")] == [
        ln for ln in before.splitlines() if not ln.startswith("bob,")
    ]
    assert len([ln for ln in after.splitlines() if ln.startswith("bob,")]) == len(mine)
    _views_match_the_reports(klass["out"])
