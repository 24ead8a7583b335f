"""Submissions in from Canvas and Gradescope as they download, and grades out with nothing lost
or silently changed: the intake, late penalties, TA merges that refuse conflicts, the regrade
list, summary.html and the packed feedback pages.

Unit tests first (no notebook runs), then downloads of both LMSs (built here in their real
naming, ``_lms``) graded end to end on the workflow tests' tiny fixture lab, which imports no
TensorFlow.
"""

from __future__ import annotations

import csv
import json
import re
import sys
import subprocess
import zipfile
from pathlib import Path

import nbformat
import pytest

from _class import GROUPS, LATE_RUBRIC, PEOPLE, RUBRIC, filled, labs_of, nb_bytes, reference_notebooks
from _lms import CanvasFile, GradescopeSubmission, canvas_roster, canvas_zip, gradescope_zip, group_set
from _ta_scores import _scores
from helpers import runs_at_once, read_csv
from labkit.grading.judge import answers
from labkit.grading.gradebook import exports, report
from labkit.grading.submissions import intake, late
from labkit.grading.pages import stats
from labkit.grading.judge.rubric import RubricError
from labkit.grading.run.sandbox import SANDBOXES

NO_SANDBOX = SANDBOXES["bwrap"].unavailable()


# ------------------------------------------------------------------------------------- file names


@pytest.mark.parametrize(
    "filename, parts",
    [
        (
            "smithjohn_12345_67890_01_single_node_lr.ipynb",
            ("smithjohn", False, "12345", "67890", "01_single_node_lr.ipynb"),
        ),
        (
            "doejane_LATE_12346_67891_01_single_node_lr-1.ipynb",
            ("doejane", True, "12346", "67891", "01_single_node_lr-1.ipynb"),
        ),
        ("vanderberg_ann_555_777_lab 1 (2).ipynb", ("vanderberg_ann", False, "555", "777", "lab 1 (2).ipynb")),
    ],
)
def test_canvas_file_names_are_read_as_canvas_reads_them(filename, parts):
    got = intake.canvas_name(filename)
    assert (got.name, got.late, got.user_id, got.attachment_id, got.original) == parts
    assert got.prefix == filename[: filename.index(parts[3]) + len(parts[3])]


@pytest.mark.parametrize(
    "filename", ["01_single_node_lr.ipynb", "12345_67890_x.ipynb", "smith_12345_x.ipynb", "smith_12345_67890.ipynb"]
)
def test_other_names_are_not_canvas_names(filename):
    assert intake.canvas_name(filename) is None


def test_plain_names_drop_what_an_lms_or_a_browser_adds():
    assert intake.plain_name("01_single_node_lr-2.ipynb") == "01_single_node_lr.ipynb"
    assert intake.plain_name("01_single_node_lr (1).ipynb") == "01_single_node_lr.ipynb"
    assert intake.resubmission("01_single_node_lr-2.ipynb") == 2 and intake.resubmission("a.ipynb") == 0


def test_a_notebook_under_any_name_is_matched_by_its_cells(tmp_path):
    labs = labs_of(tmp_path)
    refs = intake.reference_ids(labs, reference_notebooks(tmp_path))
    lab, note = intake.match_lab("my lab.ipynb", filled("ann"), labs, refs)
    assert lab.key == "alpha" and "graded as alpha.ipynb, whose cells it holds" in note
    lab, note = intake.match_lab("alpha (1).ipynb", b"", labs, refs)
    assert lab.key == "alpha" and note == "submitted as 'alpha (1).ipynb', read as alpha.ipynb"
    assert intake.match_lab("other.ipynb", nb_bytes(nbformat.v4.new_notebook()), labs, refs)[0] is None
    assert intake.match_lab("report.pdf", b"%PDF", labs, refs)[0] is None


# ------------------------------------------------------------------------------------------ Canvas


def canvas_download(tmp: Path) -> Path:
    return canvas_zip(
        tmp / "submissions.zip",
        [
            CanvasFile("smithjohn", 12345, 67890, "alpha.ipynb", filled("ann")),
            CanvasFile("doejane", 12346, 67800, "alpha.ipynb", filled("bob")),  # her first upload
            CanvasFile("doejane", 12346, 67891, "alpha-1.ipynb", filled("cat"), late=True),  # the latest: late
            CanvasFile("roerick", 12347, 67892, "alpha (1).ipynb", filled("dan")),  # the browser's name
            CanvasFile("leelou", 12348, 67893, "my work.ipynb", filled("eve")),  # any name, alpha's cells
            CanvasFile("kimkay", 12349, 67894, "notes.pdf", b"%PDF-1.4"),  # not a notebook
            CanvasFile("kimkay", 12349, 67895, "beta.ipynb", filled("fay", "beta")),
        ],
    )


def test_a_canvas_download_is_laid_out_per_student_through_the_roster(tmp_path):
    labs = labs_of(tmp_path)
    roster = exports.read_roster(canvas_roster(tmp_path / "roster.csv", PEOPLE))
    got = intake.import_download(
        canvas_download(tmp_path), tmp_path / "subs", labs, reference_notebooks(tmp_path), roster, log=lambda m: None
    )
    subs = tmp_path / "subs"
    assert sorted(p.name for p in subs.iterdir() if p.is_dir()) == ["jdoe", "jsmith", "kkim", "llee", "rroe"]
    assert (subs / "jdoe" / "alpha.ipynb").read_bytes() == filled("cat")  # the latest upload counts
    rec = json.loads((subs / intake.RECORD).read_text())
    assert rec == got.record and rec["lms"] == "canvas"
    jdoe = rec["students"]["jdoe"]
    assert jdoe["person"]["canvas_user_id"] == "12346" and jdoe["person"]["roster"]["Student"] == "Doe, Jane"
    info = jdoe["labs"]["alpha"]
    assert (
        info["late"] and info["marker"] == "Canvas's LATE mark" and info["canvas_prefix"] == "doejane_LATE_12346_67891"
    )
    assert "the latest of 2 files for this lab; not graded: doejane_12346_67800_alpha.ipynb" in info["notes"]
    assert rec["students"]["rroe"]["labs"]["alpha"]["notes"] == ["submitted as 'alpha (1).ipynb', read as alpha.ipynb"]
    assert "whose cells it holds" in rec["students"]["llee"]["labs"]["alpha"]["notes"][0]
    assert list(rec["students"]["kkim"]["labs"]) == ["beta"]
    assert any("kimkay_12349_67894_notes.pdf" in n and "not a notebook" in n for n in rec["notes"])
    assert not rec["students"]["jsmith"]["labs"]["alpha"]["late"]


def test_without_a_roster_canvas_names_the_students(tmp_path):
    labs = labs_of(tmp_path)
    intake.import_download(
        canvas_download(tmp_path), tmp_path / "subs", labs, reference_notebooks(tmp_path), log=lambda m: None
    )
    assert sorted(p.name for p in (tmp_path / "subs").iterdir() if p.is_dir()) == [
        "doejane",
        "kimkay",
        "leelou",
        "roerick",
        "smithjohn",
    ]


def test_an_archive_cannot_write_outside_its_import(tmp_path):
    labs = labs_of(tmp_path)
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("smithjohn_12345_67890_alpha.ipynb", filled("ann"))
        zf.writestr("../evil_1_2_alpha.ipynb", b"{}")
        zf.writestr("/abs_3_4_alpha.ipynb", b"{}")
        link = zipfile.ZipInfo("link_5_6_alpha.ipynb")
        link.external_attr = 0o120777 << 16
        zf.writestr(link, "/etc/passwd")
    got = intake.import_download(bad, tmp_path / "subs", labs, reference_notebooks(tmp_path), log=lambda m: None)
    assert list(got.students) == ["smithjohn"]
    assert not (tmp_path / "evil_1_2_alpha.ipynb").exists() and not Path("/abs_3_4_alpha.ipynb").exists()
    notes = " ".join(got.record["notes"])
    assert "a path out of the archive" in notes and "a symbolic link" in notes
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("mine")
    with pytest.raises(intake.IntakeError, match="not empty and no import wrote it"):
        intake.import_download(bad, tmp_path / "mine", labs, tmp_path, log=lambda m: None)


# -------------------------------------------------------------------------------------- Gradescope


def gradescope_download(tmp: Path) -> Path:
    return gradescope_zip(
        tmp / "export.zip",
        [
            GradescopeSubmission(
                111,
                [("John Smith", "jsmith@uni.edu", "S1001")],
                "2024-10-01 06:58:05.746365000 Z",
                {"alpha.ipynb": filled("ann")},
            ),
            GradescopeSubmission(
                112,
                [("Jane Doe", "jdoe@uni.edu", "S1002")],
                "2024-10-01 05:00:00.000000000 Z",
                {"alpha.ipynb": filled("bob")},
            ),
            GradescopeSubmission(
                113,
                [("Jane Doe", "jdoe@uni.edu", "S1002")],
                "2024-10-03 01:30:00.000000000 Z",
                {"alpha.ipynb": filled("cat")},
            ),  # resubmitted, 25.5 h late
            GradescopeSubmission(
                114,
                [("Rick Roe", "rroe@uni.edu", "S1003"), ("Lou Lee", "llee@uni.edu", "S1004")],
                "2024-10-02 00:00:00.000000000 Z",
                {"work/alpha (1).ipynb": filled("dan")},
            ),
        ],
    )


def test_a_gradescope_export_is_laid_out_by_its_metadata(tmp_path):
    labs = labs_of(tmp_path)
    roster = exports.read_roster(canvas_roster(tmp_path / "roster.csv", PEOPLE))
    got = intake.import_download(
        gradescope_download(tmp_path),
        tmp_path / "subs",
        labs,
        reference_notebooks(tmp_path),
        roster,
        due="2024-10-02T00:00:00+00:00",
        log=lambda m: None,
    )
    rec = got.record
    assert rec["lms"] == "gradescope" and sorted(rec["students"]) == ["jdoe", "jsmith", "llee", "rroe"]
    assert (tmp_path / "subs" / "jdoe" / "alpha.ipynb").read_bytes() == filled("cat")
    jdoe = rec["students"]["jdoe"]["labs"]["alpha"]
    assert jdoe["late"] and jdoe["late_seconds"] == pytest.approx(25.5 * 3600)
    assert jdoe["submitted_at"].startswith("2024-10-03T01:30:00") and "after the due date" in jdoe["marker"]
    assert "the latest of 2 files" in jdoe["notes"][-1]
    assert not rec["students"]["jsmith"]["labs"]["alpha"]["late"]
    assert not rec["students"]["rroe"]["labs"]["alpha"]["late"]  # exactly at the due date
    assert (tmp_path / "subs" / "llee" / "alpha.ipynb").read_bytes() == filled("dan")  # a group: each graded
    assert "a group submission with Lou Lee" in rec["students"]["rroe"]["labs"]["alpha"]["notes"]
    assert rec["students"]["jsmith"]["person"]["sid"] == "S1001"


def canvas_group_download(tmp: Path) -> Path:
    """A group assignment's download: one file per group, named after the group and carrying the
    user id of the member who handed it in (Group 3 by Rick Roe, uploaded twice; Group 4 by Jane Doe,
    late); Kay Kim, in no group, alone."""
    return canvas_zip(
        tmp / "groups.zip",
        [
            CanvasFile("group3", 12347, 81000, "alpha.ipynb", filled("ann")),
            CanvasFile("group3", 12347, 81002, "alpha-1.ipynb", filled("bob")),
            CanvasFile("group4", 12346, 81001, "alpha.ipynb", filled("cat"), late=True),
            CanvasFile("kimkay", 12349, 81003, "alpha.ipynb", filled("dan")),
        ],
    )


def test_a_canvas_group_file_is_laid_out_for_every_member_of_its_group(tmp_path):
    from labkit.grading.submissions.groups import read_group_set

    members = read_group_set(group_set(tmp_path / "groups.csv", GROUPS))
    got = intake.import_download(
        canvas_group_download(tmp_path),
        tmp_path / "subs",
        labs_of(tmp_path),
        reference_notebooks(tmp_path),
        exports.read_roster(canvas_roster(tmp_path / "roster.csv", PEOPLE)),
        log=lambda m: None,
        groups=members,
    )
    students = got.record["students"]
    assert sorted(students) == ["jdoe", "jsmith", "kkim", "llee", "rroe"]  # John and Lou handed in nothing themselves
    for s in ("jsmith", "rroe", "llee"):
        assert (tmp_path / "subs" / s / "alpha.ipynb").read_bytes() == filled("bob")  # the group's latest upload
    assert students["jsmith"]["labs"]["alpha"]["group"] == ["llee", "rroe"]
    assert (
        "a group submission with Rick Roe, Lou Lee (Group 3 in Canvas's group set)"
        in (students["jsmith"]["labs"]["alpha"]["notes"])
    )
    assert students["jdoe"]["labs"]["alpha"]["late"] and "group" not in students["kkim"]["labs"]["alpha"]
    assert students["rroe"]["person"]["name"] == "Rick Roe"  # not the group's name the file carries


def test_a_group_set_without_canvas_ids_is_refused_with_what_to_give(tmp_path):
    from labkit.grading.submissions.groups import read_group_set

    bad = tmp_path / "groups.csv"
    bad.write_text("Student,Group\nRick Roe,Group 3\n")
    with pytest.raises(ValueError, match="no canvas_user_id, group_name column; give Canvas's group set CSV"):
        read_group_set(bad)


def test_grade_import_lays_out_a_download_to_look_at_first(tmp_path):
    labs_of(tmp_path)
    nbs = reference_notebooks(tmp_path)
    r = _cli(
        "grade-import",
        gradescope_download(tmp_path),
        "--into",
        tmp_path / "subs",
        "--rubric",
        tmp_path / "rubric.toml",
        "--notebooks",
        nbs,
        "--due",
        "2024-10-02T00:00:00Z",
    )
    assert r.returncode == 0, r.stderr
    assert "imported 4 notebook(s) of 4 student(s) from Gradescope's download export.zip" in r.stdout
    assert "make grade SUBMISSIONS=" in r.stdout and (tmp_path / "subs" / "S1002" / "alpha.ipynb").is_file()
    r = _cli("grade-import", tmp_path / "nothing.zip", "--into", tmp_path / "x", "--rubric", tmp_path / "rubric.toml")
    assert r.returncode == 2 and "error:" in r.stderr


def test_a_broken_metadata_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "export.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("assignment_1_export/submission_metadata.yml", "submission_1: [unclosed")
    with pytest.raises(intake.IntakeError, match="not readable YAML"):
        intake.import_download(bad, tmp_path / "subs", labs_of(tmp_path), tmp_path, log=lambda m: None)


def test_the_layouts_are_told_apart(tmp_path):
    assert intake.detect(canvas_download(tmp_path)) == "canvas"
    assert intake.detect(gradescope_download(tmp_path)) == "gradescope"
    (tmp_path / "folders" / "ann").mkdir(parents=True)
    assert intake.detect(tmp_path / "folders") == "folders"
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("alpha.ipynb", b"{}")
    with pytest.raises(intake.IntakeError, match="neither Canvas's download"):
        intake.detect(other)


def test_a_misnamed_notebook_in_a_student_folder_is_found(tmp_path):
    labs = labs_of(tmp_path)
    refs = intake.reference_ids(labs, reference_notebooks(tmp_path))
    folder = tmp_path / "ann"
    folder.mkdir()
    (folder / "alpha (1).ipynb").write_bytes(filled("ann"))
    (folder / "alpha (2).ipynb").write_bytes(filled("bob"))
    (folder / "whatever.ipynb").write_bytes(filled("cat", "beta"))
    src, note = intake.find_notebook(folder, labs[0], labs, refs)
    assert src.name == "alpha (2).ipynb" and "the latest of 2 (not graded: alpha (1).ipynb)" in note
    src, note = intake.find_notebook(folder, labs[1], labs, refs)
    assert src.name == "whatever.ipynb" and "graded as beta.ipynb" in note


# -------------------------------------------------------------------------------------- late work


def test_the_late_policy_is_validated_and_applied(tmp_path):
    alpha_lab, beta_lab = labs_of(tmp_path, LATE_RUBRIC)
    assert beta_lab.late_penalty is None and alpha_lab.late_penalty == late.Policy(per_day=0.25, max=0.5)
    info = {"late": True, "late_seconds": 25.5 * 3600, "marker": "Gradescope's :created_at is after the due date"}
    row = late.row("ann", alpha_lab, info, earned=5.0)
    assert row["points"] == -3.0 and row["status"] == "late" and "counts 2 day(s): -3 points" in row["reason"]
    assert late.row("ann", alpha_lab, info, earned=1.0)["points"] == -1.0  # never below 0
    marked = late.row("ann", alpha_lab, {"late": True, "marker": "Canvas's LATE mark"}, earned=6.0)
    assert marked["points"] == -1.5 and "1 day (the LMS marks it late without saying by how much)" in marked["reason"]
    free = late.row("ann", beta_lab, info, earned=2.0)
    assert free["points"] == 0 and "submitted late by 25.5 h" in free["reason"] and "no late penalty" in free["reason"]
    assert late.row("ann", alpha_lab, {"late": False}, 6.0) is None
    flat = late.parse({"flat": 0.2, "grace_hours": 1}, "x")
    assert flat.fraction(1800) == (0.0, "within the 1 hour(s) of grace") and flat.fraction(7200)[0] == 0.2
    default = RUBRIC.replace("[defaults]\n", "[defaults]\nlate_penalty = { flat = 0.1 }\n")
    assert all(lab.late_penalty == late.Policy(flat=0.1) for lab in labs_of(tmp_path, default))


@pytest.mark.parametrize(
    "value, message",
    [
        ("0.1", "late_penalty must be a table"),
        ("{ per_day = 0.1, flat = 0.2 }", "exactly one of per_day and flat"),
        ("{ max = 0.5 }", "exactly one of per_day and flat"),
        ("{ per_day = 10 }", "is a fraction of the lab's points, 0 to 1"),
        ("{ per_day = -0.1 }", "must be a number >= 0"),
        ("{ per_hour = 0.1 }", "unknown key(s) ['per_hour']"),
    ],
)
def test_a_bad_late_policy_names_what_to_write(tmp_path, value, message):
    with pytest.raises(RubricError, match=re.escape(message)):
        labs_of(tmp_path, RUBRIC.replace("[labs.alpha]\n", f"[labs.alpha]\nlate_penalty = {value}\n"))


def test_the_repo_rubric_header_documents_the_late_policy():
    header = (Path(__file__).resolve().parents[2] / "notebooks" / "rubric.toml").read_text().split("\n[defaults]\n")[0]
    assert "late_penalty = { per_day" in header and "flat" in header


# ------------------------------------------------------------------------------------- TA merges


Q = {("alpha", "answer Q1"): answers.Question("alpha", "answer Q1", 2.0, ["a-ans1"])}
NOW = {("alpha", "answer Q1", s): "sha" + s for s in ("ann", "bob")}


def test_two_tas_who_disagree_are_a_conflict_until_one_file_is_preferred(tmp_path):
    a = _scores(
        tmp_path / "ta_a.csv",
        [
            ("alpha", "answer Q1", "ann", "shaann", "", "2", "clear"),
            ("alpha", "answer Q1", "bob", "shabob", "", "1", ""),
        ],
    )
    b = _scores(tmp_path / "ta_b.csv", [("alpha", "answer Q1", "ann", "shaann", "", "1", "vague")])
    with pytest.raises(answers.ScoresError) as e:
        answers.merge(tmp_path, [a, b], Q, NOW)
    assert "1 conflict(s), nothing merged" in str(e.value) and "alpha/answer Q1/ann" in str(e.value)
    assert "ta_a.csv row 2 gives 2 ('clear'), ta_b.csv row 2 gives 1 ('vague')" in str(e.value)
    assert "--prefer FILE" in str(e.value) and not (tmp_path / answers.SCORES_FILE).exists()
    lines = answers.merge(tmp_path, [a, b], Q, NOW, prefer=b)
    assert lines == [
        f"{a}: 1 score(s) merged, 1 conflict(s) lost (--prefer ta_b.csv)",
        f"{b}: 1 score(s) merged, 1 conflict(s) won (--prefer)",
    ]
    held = answers.read_scores(tmp_path)
    assert (held[("alpha", "answer Q1", "ann")]["score"], held[("alpha", "answer Q1", "bob")]["score"]) == ("1", "1")
    with pytest.raises(answers.ScoresError, match="not one of the files being merged"):
        answers.merge(tmp_path, [a], Q, NOW, prefer=tmp_path / "other.csv")


def test_an_old_file_merged_again_cannot_restore_old_scores(tmp_path):
    first = _scores(tmp_path / "first.csv", [("alpha", "answer Q1", "ann", "shaann", "", "1", "")])
    assert answers.merge(tmp_path, [first], Q, NOW) == [f"{first}: 1 score(s) merged"]
    assert answers.merge(tmp_path, [first], Q, NOW) == [f"{first}: 0 score(s) merged, 1 unchanged"]
    base = answers.version(answers.read_scores(tmp_path)[("alpha", "answer Q1", "ann")])
    later = _scores(tmp_path / "later.csv", [("alpha", "answer Q1", "ann", "shaann", base, "2", "regraded")])
    assert answers.merge(tmp_path, [later], Q, NOW) == [f"{later}: 1 score(s) merged"]  # exported after: an update
    with pytest.raises(
        answers.ScoresError,
        match=r"first.csv row 2 gives 1; ta_scores.csv holds 2 \('regraded'\) "
        r"\(from later.csv, merged .*\), given after the file was exported",
    ):
        answers.merge(tmp_path, [first], Q, NOW)
    no_base = _scores(tmp_path / "hand.csv", [("alpha", "answer Q1", "ann", "shaann", "", "0", "")], base=False)
    with pytest.raises(answers.ScoresError, match="the file has no base column"):
        answers.merge(tmp_path, [no_base], Q, NOW)
    stale = _scores(tmp_path / "stale.csv", [("alpha", "answer Q1", "ann", "shaold", base, "0", "")])
    with pytest.raises(answers.ScoresError, match="scored an earlier version of the answer"):
        answers.merge(tmp_path, [stale], Q, NOW)
    assert answers.read_scores(tmp_path)[("alpha", "answer Q1", "ann")]["score"] == "2"
    answers.merge(tmp_path, [first], Q, NOW, prefer=first)  # the instructor's word
    assert answers.read_scores(tmp_path)[("alpha", "answer Q1", "ann")]["score"] == "1"


# --------------------------------------------------------------------------- exports and the reports


class _Lab:
    def __init__(self, key, checks, most=3.0, manual=()):
        self.key, self.title, self.notebook, self.max_points = key, key.title(), f"{key}.ipynb", most
        self.checks = [
            type(
                "C",
                (),
                {"name": c, "kind": "analysis" if c in manual else "record", "points": 1.0, "manual": c in manual},
            )
            for c in checks
        ]


def _row(student, check, points, most, status, lab="alpha", reason=""):
    return {
        "student": student,
        "lab": lab,
        "check": check,
        "points": points,
        "max": most,
        "status": status,
        "reason": reason,
        "seconds": "",
    }


def test_a_late_row_counts_in_every_total_and_the_regrade_list_names_changes(tmp_path):
    labs = [_Lab("alpha", ["auto", "answer Q1"], 2.0, manual=("answer Q1",))]
    rows = [
        _row("ann", "execution", 0, 0, "ok"),
        _row("ann", "auto", 1, 1, "pass"),
        _row("ann", "answer Q1", 1, 1, "pass"),
        _row("ann", "late", -0.5, 0, "late", reason="submitted late"),
        _row("bob", "execution", 0, 0, "ok"),
        _row("bob", "auto", 1, 1, "pass"),
        _row("bob", "answer Q1", 0, 1, "pending"),
    ]
    table, fields = exports.wide(rows, labs)
    assert "alpha late" in fields and table[0]["alpha late"] == -0.5 and table[0]["alpha total"] == 1.5
    out, _, _ = exports.canvas(rows, labs, people={"ann": {"canvas_user_id": "12345", "name": "Ann A"}})
    assert out[1] == {"Student": "Ann A", "ID": "12345", "Alpha": "1.5"} and out[2]["Alpha"] == ""
    assert report.totals(rows)[("ann", "alpha")] == [1.5, 2.0, 0.0]
    (tmp_path / ".grader").mkdir()
    assert exports.changes(tmp_path, rows, labs) == ("", [])
    exports.save_exported(tmp_path, rows, labs, "2024-10-05T10:00:00")
    rows[-1] = _row("bob", "answer Q1", 1, 1, "pass")
    rows[3] = _row("ann", "late", -1.0, 0, "late")
    when, changed = exports.changes(tmp_path, rows, labs)
    assert when == "2024-10-05T10:00:00" and changed == [
        {"student": "ann", "lab": "alpha", "exported": "1.5", "now": "1"},
        {"student": "bob", "lab": "alpha", "exported": "", "now": "2"},
    ]
    report.write_summary(
        rows,
        labs,
        tmp_path / "s.md",
        regrades=(when, changed),
        missing=[{"name": "Absent, Abe", "login": "aabsent", "labs": ["alpha"]}],
    )
    text = (tmp_path / "s.md").read_text()
    assert "## Changed since the export of 2024-10-05T10:00:00 (2)" in text and "| bob | alpha | (blank) | 2 |" in text
    assert "## Late work (1)" in text and "## Did not submit (1 on the roster)" in text
    assert "| Absent, Abe | aabsent | alpha |" in text and "| ann | alpha | late" not in text.split("## Not passed")[1]


def test_summary_html_plots_each_lab_and_escapes_what_students_wrote(tmp_path):
    labs = [_Lab("alpha", ["auto", "answer Q1"], 2.0, manual=("answer Q1",))]
    rows = []
    for i, s in enumerate(["ann", "bob", "<script>alert(1)</script>", "dan"]):
        rows += [
            _row(s, "execution", 0, 0, "ok"),
            _row(s, "auto", float(i % 2), 1, "pass" if i % 2 else "fail"),
            _row(s, "answer Q1", 0.5 if i else 0, 1, "partial" if i else "pending"),
        ]
    rows += [
        _row("eve", "execution", 0, 0, "not-submitted"),
        _row("eve", "auto", 0, 1, "not-run"),
        _row("eve", "answer Q1", 0, 1, "not-run"),
    ]
    table, totals = stats.lab_table(rows, labs[0])
    assert len(totals) == 4  # eve's notebook never ran: no evidence about a check
    assert table[0]["pass"] == 0.5 and table[1]["mean"] == 0.5 and table[1]["scored"] == 3 and table[1]["pending"] == 1
    labs[0].checks[1].name = "Q1 <b>bold</b>"
    stats.write_html(rows, labs, tmp_path / "summary.html", "Grades: <subs>")
    page = (tmp_path / "summary.html").read_text()
    assert page.count('src="data:image/png;base64,') == 2 and "<script" not in page and "<b>bold" not in page
    assert "Grades: &lt;subs&gt;" in page and "Content-Security-Policy" in page


# ------------------------------------------------------------------------------ graded end to end

needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX} (.ci/run installs it)")


def _cli(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labkit", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def canvas_class(tmp_path_factory):
    """The Canvas download above (alpha from five students, beta from one), graded with the roster."""
    root = tmp_path_factory.mktemp("canvas")
    (root / "rubric.toml").write_text(LATE_RUBRIC)
    nbs = reference_notebooks(root)
    roster = canvas_roster(root / "roster.csv", PEOPLE, {"Alpha (901)": "6", "Beta (902)": "2"})
    download = canvas_download(root)
    r = _cli(
        "grade",
        download,
        "--out",
        root / "out",
        "--rubric",
        root / "rubric.toml",
        "--notebooks",
        nbs,
        "--roster",
        roster,
        "-j",
        str(runs_at_once(2)),
    )
    return {"root": root, "out": root / "out", "run": r, "roster": roster, "notebooks": nbs, "download": download}


@needs_sandbox
@pytest.mark.notebook
def test_a_canvas_download_is_graded_end_to_end(canvas_class):
    r, out = canvas_class["run"], canvas_class["out"]
    assert r.returncode == 0, r.stderr
    assert "imported 5 notebook(s) of 5 student(s) from Canvas's download submissions.zip" in r.stdout
    rows = {(x["student"], x["lab"], x["check"]): x for x in read_csv(out / "grades.csv")}
    assert {s for s, _, _ in rows} == {"jsmith", "jdoe", "rroe", "llee", "kkim"}
    assert rows[("rroe", "alpha", "execution")]["status"] == "ok"
    assert "submitted as 'alpha (1).ipynb'" in rows[("rroe", "alpha", "execution")]["reason"]
    assert "whose cells it holds" in rows[("llee", "alpha", "execution")]["reason"]
    penalty = rows[("jdoe", "alpha", "late")]
    assert penalty["status"] == "late" and float(penalty["points"]) < 0 and "Canvas's LATE mark" in penalty["reason"]
    assert rows[("kkim", "alpha", "execution")]["status"] == "not-submitted"  # kkim sent beta only
    summary = (out / "summary.md").read_text()
    assert "## Late work (1)" in summary and "## Did not submit" in summary
    assert "| Absent, Abe | aabsent | alpha, beta |" in summary and "| Kim, Kay | kkim | alpha |" in summary
    assert "kimkay_12349_67894_notes.pdf" in summary
    assert (out / "summary.html").read_text().count("data:image/png;base64,") == 4
    with open(out / "canvas.csv", newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "Alpha (901)",
        "Beta (902)",
    ]  # the roster's
    assert {ln[3] for ln in lines[2:]} == {"jsmith", "jdoe", "rroe", "llee", "kkim"}


@needs_sandbox
@pytest.mark.notebook
def test_only_the_labs_submitted_are_graded_and_a_later_batch_adds_to_the_class(canvas_class, tmp_path):
    out = canvas_class["out"]
    before = {(x["student"], x["lab"], x["check"]): x for x in read_csv(out / "grades.csv")}
    # a late student alone, in a folder of their own: graded into the same output folder
    late_one = tmp_path / "late"
    (late_one / "aabsent").mkdir(parents=True)
    (late_one / "aabsent" / "alpha.ipynb").write_bytes(filled("fay"))
    r = _cli(
        "grade",
        late_one,
        "--out",
        out,
        "--rubric",
        canvas_class["root"] / "rubric.toml",
        "--notebooks",
        canvas_class["notebooks"],
    )
    assert r.returncode == 0, r.stderr
    assert "adding to the 5 student(s) graded in" in r.stdout and "[1/1] aabsent/alpha.ipynb" in r.stdout
    after = {(x["student"], x["lab"], x["check"]): x for x in read_csv(out / "grades.csv")}
    assert {k: v for k, v in after.items() if k[0] != "aabsent"} == before  # everyone else as they were
    assert ("aabsent", "beta", "execution") not in after  # only the lab submitted
    canvas = {ln[3]: ln for ln in csv.reader(open(out / "canvas.csv", newline=""))}
    assert set(canvas) >= {"jsmith", "jdoe", "rroe", "llee", "kkim", "aabsent"} and canvas["aabsent"][6] == ""
    summary = (out / "summary.md").read_text()
    assert "| Absent, Abe | aabsent | beta |" in summary
    assert summary.startswith(f"# Grades: {canvas_class['download']}, {late_one}\n")  # the class: both batches
    # one lab alone: its export has no column of labs nobody submitted
    only = tmp_path / "only"
    (only / "ann").mkdir(parents=True)
    (only / "ann" / "alpha.ipynb").write_bytes(filled("ann"))
    r = _cli(
        "grade",
        only,
        "--out",
        tmp_path / "out2",
        "--rubric",
        canvas_class["root"] / "rubric.toml",
        "--notebooks",
        canvas_class["notebooks"],
        "--roster",
        canvas_class["roster"],
    )
    assert r.returncode == 0, r.stderr
    assert next(csv.reader(open(tmp_path / "out2" / "canvas.csv")))[5:] == ["Alpha (901)"]


@needs_sandbox
@pytest.mark.notebook
def test_the_pages_are_packed_per_student_and_for_canvas(canvas_class):
    out = canvas_class["out"]
    r = _cli("grade-deliver", "--out", out)
    assert r.returncode == 0, r.stderr
    assert "Re-Upload Submissions" in r.stdout
    with zipfile.ZipFile(out / "deliver" / "students" / "jdoe.zip") as zf:
        assert zf.namelist() == ["jdoe/alpha.html", "jdoe/beta.html"]  # beta's says it was not submitted
        assert "jdoe: alpha" in zf.read("jdoe/alpha.html").decode()
        assert "not-submitted" in zf.read("jdoe/beta.html").decode()
    with zipfile.ZipFile(out / "deliver" / "canvas" / "alpha.zip") as zf:
        names = sorted(zf.namelist())
    assert (
        "doejane_LATE_12346_67891_feedback-alpha.html" in names and "smithjohn_12345_67890_feedback-alpha.html" in names
    )
    for name in names:  # what Canvas's re-upload reads: the user id, then the submitted file's attachment id
        uid, aid = [p for p in name.split("_") if p.isdigit()][:2]
        assert (uid, aid) in {
            ("12345", "67890"),
            ("12346", "67891"),
            ("12347", "67892"),
            ("12348", "67893"),
            ("12349", "67895"),
        }, name


@needs_sandbox
@pytest.mark.notebook
def test_a_canvas_group_file_runs_once_and_every_member_gets_its_grade(tmp_path):
    labs_of(tmp_path)
    r = _cli(
        "grade",
        canvas_group_download(tmp_path),
        "--out",
        tmp_path / "out",
        "--rubric",
        tmp_path / "rubric.toml",
        "--notebooks",
        reference_notebooks(tmp_path),
        "--roster",
        canvas_roster(tmp_path / "roster.csv", PEOPLE),
        "--groups",
        group_set(tmp_path / "groups.csv", GROUPS),
        "-j",
        str(runs_at_once(2)),
    )
    assert r.returncode == 0, r.stderr
    assert "running 3 notebook(s)" in r.stdout  # the group's file once, Jane's and Kay's
    for member in ("llee", "rroe"):
        assert f"{member}/alpha.ipynb: the group's file, run once as jsmith's: credited to {member} too" in r.stdout
    rows = {(x["student"], x["check"]): x for x in read_csv(tmp_path / "out" / "grades.csv")}
    assert {s for s, _ in rows} == {"jsmith", "rroe", "llee", "jdoe", "kkim"}
    scores = {
        s: sorted((c, x["points"], x["status"]) for (who, c), x in rows.items() if who == s)
        for s in ("jsmith", "rroe", "llee")
    }
    assert scores["jsmith"] == scores["rroe"] == scores["llee"]
    assert rows[("llee", "execution")]["status"] == "ok", (rows[("llee", "execution")], r.stdout[-3000:])
    pairs = read_csv(tmp_path / "out" / "similarity.csv") if (tmp_path / "out" / "similarity.csv").exists() else []
    assert all({x["student_a"], x["student_b"]} - {"jsmith", "rroe", "llee"} for x in pairs)


@needs_sandbox
@pytest.mark.notebook
def test_a_gradescope_export_is_graded_end_to_end(tmp_path):
    (tmp_path / "rubric.toml").write_text(LATE_RUBRIC)
    nbs = reference_notebooks(tmp_path)
    r = _cli(
        "grade",
        gradescope_download(tmp_path),
        "--out",
        tmp_path / "out",
        "--rubric",
        tmp_path / "rubric.toml",
        "--notebooks",
        nbs,
        "--due",
        "2024-10-02T00:00:00Z",
        "-j",
        str(runs_at_once(2)),
    )
    assert r.returncode == 0, r.stderr
    rows = {(x["student"], x["lab"], x["check"]): x for x in read_csv(tmp_path / "out" / "grades.csv")}
    assert {s for s, _, _ in rows} == {"S1001", "S1002", "S1003", "S1004"}  # no roster: Gradescope's sid
    assert rows[("S1002", "alpha", "late")]["points"] == "-3"  # 2 days at 25%, of 6 points, capped at 50%
    assert "by 25.5 h" in rows[("S1002", "alpha", "late")]["reason"]
    assert rows[("S1004", "alpha", "execution")]["status"] == "ok"
    assert not (tmp_path / "out" / "canvas.csv").exists()  # no Canvas column named: none written
    r = _cli("grade-export", "--out", tmp_path / "out", "--column", "alpha=Alpha (901)")
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "out" / "canvas.csv", newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0][5:] == ["Alpha (901)"] and {ln[2] for ln in lines[2:]} == {"S1001", "S1002", "S1003", "S1004"}
