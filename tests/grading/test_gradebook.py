"""The class's gradebook (``labkit.grading.gradebook.store``) case by case, without running a notebook:
who a person is, a roster that never creates anyone, writes a SIGKILL cannot corrupt, signed
runs, the earlier layout imported once, the exports Canvas takes, TA merges, and the LMSs'
anonymous and group downloads. (``test_gradebook_term.py`` runs the whole term end to end.)"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from _lms import GradescopeSubmission, gradescope_zip
from labkit.grading.judge import answers
from labkit.grading.gradebook import exports, legacy
from labkit.grading.submissions import intake
from labkit.grading.run import ledger
from labkit.grading.gradebook import store as gradebook
from labkit.grading.gradebook.store import Gradebook, GradebookError
from _class import PEOPLE, filled, labs_of, reference_notebooks
from _ta_scores import _scores

ROSTER = [
    {
        "Student": display,
        "ID": str(uid),
        "SIS User ID": sis,
        "SIS Login ID": login,
        "Section": "1",
        "Alpha (901)": "",
        "Beta (902)": "",
    }
    for display, uid, sis, login in PEOPLE
]


# ------------------------------------------------------------------------------------------ people


def test_a_person_is_the_lms_id_whatever_folder_names_them(tmp_path):
    with Gradebook(tmp_path) as db:
        first = db.identify({"canvas_user_id": "12345", "folder": "smithjohn"}, "smithjohn", "smithjohn")
        again = db.identify({"canvas_user_id": "12345", "sis_login_id": "jsmith", "folder": "jsmith"}, "jsmith")
        assert first == again == "smithjohn" and len(db.people()) == 1
        other = db.identify({"canvas_user_id": "12346", "folder": "smithjohn"}, "smithjohn")  # a namesake
        assert other == "smithjohn-2" and len(db.people()) == 2
        assert db.ids_of(db.person("smithjohn")["id"])["folder"] == ["jsmith", "smithjohn"]


def test_a_roster_names_the_people_there_and_creates_nobody(tmp_path):
    with Gradebook(tmp_path) as db:
        db.identify({"canvas_user_id": "12345", "folder": "smithjohn"}, "smithjohn")
        db.identify({"gradescope_sid": "S1002", "folder": "S1002"}, "S1002")  # Gradescope's :sid is the SIS User ID
        got = db.attach_roster(ROSTER, "roster.csv")
        assert sorted(got["matched"]) == ["S1002", "smithjohn"] and len(got["unmatched"]) == 4
        assert [p["handle"] for p in db.people()] == ["S1002", "smithjohn"]
        assert db.person("smithjohn")["name"] == "Smith, John" and db.roster_of("S1002")["SIS Login ID"] == "jdoe"
        # the roster's ids now find the same person from either LMS
        assert db.identify({"sis_login_id": "jsmith"}, "jsmith") == "smithjohn"
        assert db.identify({"canvas_user_id": "12346", "folder": "jdoe"}, "jdoe") == "S1002"
        given = db.roster_rows()
        assert [h for h, _ in given] == ["smithjohn", "S1002", None, None, None, None]


def test_the_reference_self_check_never_enters_a_class_gradebook(tmp_path):
    with Gradebook(tmp_path) as db:
        db.claim(gradebook.CLASS)
        db.identify({"folder": "ann"}, "ann")
        with pytest.raises(GradebookError, match="out/reference"):
            db.claim(gradebook.REFERENCE)
        assert db.get("kind") == gradebook.CLASS


# ------------------------------------------------------------------------------------------- writes

WRITER = textwrap.dedent("""
    import sys
    from labkit.grading.gradebook.store import Gradebook
    db = Gradebook(sys.argv[1])
    rows = [{"check": f"c{i}", "points": 1.0, "max": 1.0, "status": "pass", "reason": "x" * 2000} for i in range(50)]
    n = 0
    while True:
        n += 1
        db.record_run(f"s{n % 40}", "alpha", {"fingerprint": {"n": n}, "rows": rows})
        print(n, flush=True)
""")


def test_a_sigkill_mid_write_leaves_a_sound_gradebook_that_resumes(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        for line in p.stdout:
            if int(line) >= 30:
                break
        time.sleep(0.05)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
    with sqlite3.connect(tmp_path / gradebook.FILE) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        runs = raw.execute("SELECT count(*) FROM runs").fetchone()[0]
        # every run has all its results, or is not there: each write is one transaction
        assert raw.execute("SELECT count(*) FROM results").fetchone()[0] == 50 * runs and runs >= 30
    with Gradebook(tmp_path) as db:  # and it goes on
        db.record_run(
            "s1",
            "alpha",
            {"fingerprint": {"n": 0}, "rows": [{"check": "c", "points": 0, "max": 1, "status": "fail", "reason": ""}]},
        )
        assert db.latest_run("s1", "alpha")["fingerprint"] == {"n": 0} and db.run_count() == runs + 1


def test_a_run_someone_else_wrote_is_never_read_back(tmp_path):
    rows = [{"check": "execution", "points": 0, "max": 0, "status": "ok", "reason": ""}]
    with Gradebook(tmp_path) as db:
        db.record_run("ann", "alpha", {"fingerprint": {"n": 1}, "rows": rows})
        db.record_run("ann", "alpha", {"fingerprint": {"n": 2}, "rows": rows})
    with sqlite3.connect(tmp_path / gradebook.FILE) as raw:  # a forged grade in the newest run
        body = json.loads(raw.execute("SELECT outcome FROM runs ORDER BY id DESC").fetchone()[0])
        body["rows"][0]["points"] = 100
        raw.execute("UPDATE runs SET outcome = ? WHERE id = (SELECT max(id) FROM runs)", (json.dumps(body),))
    with Gradebook(tmp_path) as db:
        assert db.latest_run("ann", "alpha")["fingerprint"] == {"n": 1}
        assert db.latest_run("bob", "alpha") is None


def test_ta_scores_keep_their_history_and_exports_whether_they_were_sent(tmp_path):
    with Gradebook(tmp_path) as db:
        db.identify({"folder": "ann"}, "ann")
        q1 = ("alpha", "answer Q1", "ann")
        assert db.ta_scores({q1: {"score": "1", "comment": "vague", "source": "a.csv"}}) == 1
        assert db.ta_scores({q1: {"score": "1", "comment": "vague", "source": "a.csv"}}) == 0
        assert db.ta_scores({q1: {"score": "2", "comment": "regraded", "source": "b.csv"}}) == 1
        assert [(h["score"], h["current"]) for h in db.ta_history("ann", "alpha", "answer Q1")] == [("1", 0), ("2", 1)]
        assert db.last_sent() is None
        db.exported("canvas.csv", {("ann", "alpha"): "5"}, sent=True)
        db.exported("canvas.csv", {("ann", "alpha"): "6"}, sent=False, note="left out: bob")
        assert db.last_sent()[1] == {("ann", "alpha"): "5"}


# ----------------------------------------------------------------------------- the earlier layout


def test_an_output_folder_of_the_earlier_layout_is_imported_once_with_nothing_lost(tmp_path):
    from labkit.grading.gradebook.publish import Book
    from labkit.grading.run.runner import Job

    labs = labs_of(tmp_path)
    out = tmp_path / "out"
    jobs = [
        Job(
            s,
            labs[0],
            tmp_path / s / "alpha.ipynb",
            out / s / "alpha.ipynb",
            out / ".work" / s / "alpha",
            out / s / "alpha.log",
            out / ".grader" / s / "alpha",
        )
        for s in ("smithjohn", "ann")
    ]
    person = {
        "lms": "canvas",
        "id": "12345",
        "name": "smithjohn",
        "canvas_user_id": "12345",
        "canvas_name": "smithjohn",
    }
    book = Book(
        out,
        labs[:1],
        jobs,
        title="Grades: old",
        intake={"smithjohn": {"person": person, "labs": {"alpha": {"late": True, "marker": "LATE"}}}},
    )
    book.save((tmp_path / "rubric.toml").read_text())
    for job in jobs:
        ledger.save_outcome(
            job,
            {
                "fingerprint": {"notebook": job.student},
                "rows": [
                    {
                        "student": job.student,
                        "lab": "alpha",
                        "check": "execution",
                        "points": 0,
                        "max": 0,
                        "status": "ok",
                        "reason": "",
                        "seconds": 1,
                    }
                ],
            },
        )
    (out / answers.SCORES_FILE).write_text(
        "lab,check,student,score,max,comment,answer_sha,source,given\n"
        "alpha,answer Q1,ann,2,2,good,abc,ta.csv,2024-10-01\n"
    )
    (out / ".grader" / exports.EXPORTED).write_text(
        json.dumps({"when": "2024-10-05", "scores": [["ann", "alpha", "3"]]})
    )
    db = legacy.open_class(out)
    try:
        assert db.get("kind") == gradebook.CLASS and [p["handle"] for p in db.people()] == ["ann", "smithjohn"]
        assert db.latest_run("smithjohn", "alpha")["fingerprint"] == {"notebook": "smithjohn"} and db.run_count() == 2
        assert db.ta_history("ann", "alpha", "answer Q1")[0]["comment"] == "good"
        assert db.last_sent()[1] == {("ann", "alpha"): "3"}
        assert db.submissions("smithjohn")[0]["late"] == 1
        # the person is the Canvas id: a roster's name for them is the same student
        assert db.identify({"canvas_user_id": "12345", "folder": "jsmith"}, "jsmith") == "smithjohn"
    finally:
        db.close()
    again = legacy.open_class(out)  # once: opening it again imports nothing more
    try:
        assert again.run_count() == 2 and len(again.people()) == 2
    finally:
        again.close()


# ------------------------------------------------------------------------------------------ exports


class _Lab:
    def __init__(self, key, title, canvas_assignment=""):
        self.key, self.title, self.canvas_assignment, self.max_points = key, title, canvas_assignment, 3.0
        self.checks = [type("C", (), {"name": "auto", "points": 3.0})]


def _rows(student, lab, points):
    return [
        {
            "student": student,
            "lab": lab,
            "check": "execution",
            "points": 0,
            "max": 0,
            "status": "ok",
            "reason": "",
            "seconds": "",
        },
        {
            "student": student,
            "lab": lab,
            "check": "auto",
            "points": points,
            "max": 3.0,
            "status": "pass",
            "reason": "",
            "seconds": "",
        },
    ]


def test_each_lab_is_the_rosters_own_assignment_column_and_a_new_one_is_refused():
    labs = [_Lab("alpha", "Alpha"), _Lab("beta", "Beta", canvas_assignment="Beta (902)"), _Lab("gamma", "Gamma")]
    cols = exports.lab_columns(labs, ROSTER)
    assert cols.names == {"alpha": "Alpha (901)", "beta": "Beta (902)", "gamma": "Gamma"}
    assert list(cols.refused) == ["gamma"] and "would create a new assignment" in cols.refused["gamma"]
    assert "--new-assignment" in cols.refused["gamma"]
    assert exports.lab_columns(labs, ROSTER, allow_new=True).refused == {}
    asked = exports.lab_columns(labs, ROSTER, {"gamma": "Gamma (903)"})
    assert "is not an assignment column of the roster" in asked.refused["gamma"]
    bare = exports.lab_columns(labs[:1], None)
    assert "Title (assignment id)" in bare.refused["alpha"]
    assert exports.lab_columns([_Lab("alpha", "A", "Alpha (901)")], None).refused == {}


def test_the_canvas_file_matches_by_the_lms_ids_and_names_whom_it_leaves_out():
    labs = [_Lab("alpha", "Alpha")]
    rows = _rows("smithjohn", "alpha", 3) + _rows("zed", "alpha", 1)
    table, fields, notes = exports.canvas(rows, labs, ROSTER, people={"smithjohn": {"canvas_user_id": "12345"}})
    assert fields[-1] == "Alpha (901)" and table[1]["SIS Login ID"] == "jsmith" and table[1]["Alpha (901)"] == "3"
    assert exports.left_out(notes) == ["zed"] and len(table) == 2


# ---------------------------------------------------------------------------------------- TA merges

Q = {("alpha", "answer Q1"): answers.Question("alpha", "answer Q1", 2.0, ["a-ans1"])}
NOW = {("alpha", "answer Q1", s): "sha" + s for s in ("ann", "bob", "cat")}


def test_same_points_with_other_comments_is_no_conflict_and_prefer_keeps_both_comments(tmp_path):
    a = _scores(
        tmp_path / "a.csv",
        [
            ("alpha", "answer Q1", "ann", "shaann", "", "2", "clear"),
            ("alpha", "answer Q1", "bob", "shabob", "", "2", "ok"),
            ("alpha", "answer Q1", "cat", "shacat", "", "1", ""),
        ],
    )
    b = _scores(
        tmp_path / "b.csv",
        [
            ("alpha", "answer Q1", "ann", "shaann", "", "2", "well argued"),
            ("alpha", "answer Q1", "bob", "shabob", "", "1", "thin"),
        ],
    )
    with pytest.raises(answers.ScoresError) as e:
        answers.merge(tmp_path, [a, b], Q, NOW)
    assert "1 conflict(s)" in str(e.value) and "alpha/answer Q1/bob" in str(e.value) and "/ann" not in str(e.value)
    lines = answers.merge(tmp_path, [a, b], Q, NOW, prefer=b)
    assert lines[1] == f"{b}: 2 score(s) merged, 1 conflict(s) won (--prefer)"
    held = answers.read_scores(tmp_path)
    assert held[("alpha", "answer Q1", "ann")]["comment"] == "well argued / clear"  # the other TA's too
    assert (held[("alpha", "answer Q1", "bob")]["score"], held[("alpha", "answer Q1", "bob")]["comment"]) == (
        "1",
        "thin",
    )
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    c = _scores(fresh / "c.csv", [("alpha", "answer Q1", "cat", "shacat", "", "1", "see me")])
    d = _scores(fresh / "d.csv", [("alpha", "answer Q1", "cat", "shacat", "", "1", "")])
    answers.merge(fresh, [c, d], Q, NOW)  # no conflict; the comment given is kept
    assert answers.read_scores(fresh)[("alpha", "answer Q1", "cat")]["comment"] == "see me"


def test_the_gradebook_holds_the_ta_scores_and_ta_scores_csv_is_only_its_view(tmp_path):
    """A merge writes the gradebook in one transaction; ``ta_scores.csv`` is rebuilt from it. Lost
    or hand-edited, the CSV changes no score, and the next merge writes it again."""
    a = _scores(tmp_path / "a.csv", [("alpha", "answer Q1", "ann", "shaann", "", "2", "clear")])
    answers.merge(tmp_path, [a], Q, NOW)
    view = tmp_path / answers.SCORES_FILE
    assert "clear" in view.read_text()
    view.write_text(view.read_text().replace(",2,", ",0,"))  # a hand edit
    assert answers.read_scores(tmp_path)[("alpha", "answer Q1", "ann")]["score"] == "2"
    view.unlink()
    assert answers.read_scores(tmp_path)[("alpha", "answer Q1", "ann")]["comment"] == "clear"
    assert answers.merge(tmp_path, [a], Q, NOW) == [f"{a}: 0 score(s) merged, 1 unchanged"]
    assert view.is_file() and "clear" in view.read_text()
    with Gradebook(tmp_path) as db:
        (only,) = db.ta_history("ann", "alpha", "answer Q1")
        assert (only["max"], only["answer_sha"], only["source"]) == ("2", "shaann", "a.csv")


def test_a_gradebook_of_the_first_version_gets_the_ta_score_columns_it_lacks(tmp_path):
    with sqlite3.connect(tmp_path / gradebook.FILE) as raw:
        raw.execute(
            "CREATE TABLE ta_scores (id INTEGER PRIMARY KEY, person INTEGER NOT NULL, lab TEXT NOT NULL, "
            "check_name TEXT NOT NULL, score TEXT NOT NULL, comment TEXT NOT NULL DEFAULT '', "
            "source TEXT NOT NULL DEFAULT '', at TEXT NOT NULL, current INTEGER NOT NULL DEFAULT 1)"
        )
        raw.execute("INSERT INTO ta_scores (person, lab, check_name, score, at) VALUES (1, 'alpha', 'q', '1', 'then')")
    with Gradebook(tmp_path) as db:
        row = db.db.execute("SELECT max, answer_sha, score FROM ta_scores").fetchone()
        assert tuple(row) == ("", "", "1") and db.integrity() == "ok"


# ------------------------------------------------------------------------------------------- intake


def test_canvas_anonymous_grading_names_are_read_as_canvas_writes_them(tmp_path):
    got = intake.canvas_name("LATE_anon_P9zQ2_70002_alpha-1.ipynb")
    assert (got.anonymous_id, got.attachment_id, got.late, got.original, got.user_id) == (
        "P9zQ2",
        "70002",
        True,
        "alpha-1.ipynb",
        "",
    )
    assert got.prefix == "LATE_anon_P9zQ2_70002"
    plain = intake.canvas_name("anon_12345_67890_01_x.ipynb")  # an all-digit anonymous id is still one
    assert (plain.anonymous_id, plain.attachment_id, plain.original) == ("12345", "67890", "01_x.ipynb")
    labs = labs_of(tmp_path)
    zf_path = tmp_path / "anon.zip"
    with zipfile.ZipFile(zf_path, "w") as zf:
        zf.writestr("anon_Xk3Qa_70001_alpha.ipynb", filled("ann"))
        zf.writestr("LATE_anon_P9zQ2_70002_alpha-1.ipynb", filled("bob"))
    rec = intake.import_download(
        zf_path, tmp_path / "subs", labs, reference_notebooks(tmp_path), log=lambda m: None
    ).record
    assert sorted(rec["students"]) == ["anon_P9zQ2", "anon_Xk3Qa"]
    late = rec["students"]["anon_P9zQ2"]
    assert late["labs"]["alpha"]["late"] and late["labs"]["alpha"]["canvas_prefix"] == "LATE_anon_P9zQ2_70002"
    assert late["person"]["canvas_anon_id"] == "P9zQ2" and "canvas_user_id" not in late["person"]


def test_a_gradescope_group_names_its_members_and_no_due_date_is_said(tmp_path):
    labs = labs_of(tmp_path)
    download = gradescope_zip(
        tmp_path / "gs.zip",
        [
            GradescopeSubmission(
                7,
                [("Rick Roe", "rroe@uni.edu", "S1003"), ("Lou Lee", "llee@uni.edu", "S1004")],
                "2024-10-02 00:00:00.000000000 Z",
                {"alpha.ipynb": filled("dan")},
            )
        ],
    )
    said = []
    rec = intake.import_download(
        download, tmp_path / "subs", labs, reference_notebooks(tmp_path), log=said.append
    ).record
    assert rec["students"]["S1003"]["labs"]["alpha"]["group"] == ["S1004"]
    assert rec["students"]["S1004"]["labs"]["alpha"]["group"] == ["S1003"]
    assert intake.NO_DUE in rec["notes"] and any("lateness was not computed" in s for s in said)


def test_a_file_that_is_not_a_notebook_is_recorded_as_received(tmp_path):
    from _lms import CanvasFile, canvas_zip

    labs = labs_of(tmp_path)
    download = canvas_zip(
        tmp_path / "c.zip",
        [
            CanvasFile("kimkay", 12349, 1, "alpha.py", b"print(1)\n"),
            CanvasFile("smithjohn", 12345, 2, "alpha.ipynb", filled("ann")),
        ],
    )
    rec = intake.import_download(
        download, tmp_path / "subs", labs, reference_notebooks(tmp_path), log=lambda m: None
    ).record
    assert rec["students"]["kimkay"]["received"] == [{"file": "alpha.py", "why": "'alpha.py' is not a notebook"}]
    assert rec["students"]["kimkay"]["labs"] == {}


# ------------------------------------------------------------------------------------ output size


def _flooded(path: Path, outputs: list) -> Path:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("print('x' * 10**6)", id="c1"), new_code_cell("pass", id="c2")])
    nb.cells[0].outputs = outputs
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="small\n")]
    nbformat.write(nb, str(path))
    return path


def test_a_stored_notebook_is_cut_to_the_rubric_size_with_a_note_where_cut(tmp_path):
    import nbformat

    from labkit.grading.run import stored

    flood = "line of output\n" * 40000  # about 560 KB
    image = {"image/png": "A" * 300_000, "text/plain": "<Figure>"}
    path = _flooded(
        tmp_path / "run.ipynb",
        [
            nbformat.v4.new_output("stream", name="stderr", text=flood),
            nbformat.v4.new_output("display_data", data=image),
        ],
    )
    before = path.stat().st_size
    said = stored.cut(path, tmp_path / "none.ipynb", output_kb=64)
    nb = nbformat.read(str(path), as_version=4)
    outs = nb.cells[0].outputs
    assert path.stat().st_size < 200 * 1024 < before and "cut from" in said
    assert len(outs[0].text) <= 64 * 1024 and "stored notebook keeps its first 64 KB" in outs[1].text
    assert "image/png" not in outs[2].data and "labkit grader" in outs[3].text
    assert nb.cells[1].outputs[0].text == "small\n"  # what was small stays as it was
    assert stored.cut(path, tmp_path / "none.ipynb", output_kb=64) == ""  # once cut, nothing more
    # the whole notebook has a cap too: the last outputs go first, with a note
    many = _flooded(
        tmp_path / "many.ipynb", [nbformat.v4.new_output("stream", name="stdout", text="y" * 30_000) for _ in range(40)]
    )
    said = stored.cut(many, tmp_path / "none.ipynb", output_kb=64, most=256 * 1024)
    assert many.stat().st_size <= 256 * 1024 and "output(s) left out" in said
    assert "the stored copy keeps at most 256 KB" in nbformat.read(str(many), as_version=4).cells[0].outputs[0].text


def test_a_notebook_too_large_to_read_is_kept_as_submitted_with_a_note(tmp_path, monkeypatch):
    import nbformat

    from labkit.grading.judge import scoring
    from labkit.grading.run import stored

    monkeypatch.setattr(scoring, "MAX_EXECUTED_BYTES", 100 * 1024)
    source = _flooded(tmp_path / "source.ipynb", [])
    path = _flooded(tmp_path / "run.ipynb", [nbformat.v4.new_output("stream", name="stderr", text="z" * 400_000)])
    said = stored.cut(path, source, output_kb=1024)
    nb = nbformat.read(str(path), as_version=4)
    assert "over the 100 KB the grader reads; its outputs were not kept" in said
    assert nb.cells[0].outputs[0].text.startswith("[labkit grader: the executed notebook was")
    assert path.stat().st_size < 10 * 1024
