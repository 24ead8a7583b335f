"""Who a Canvas file is: a display name cannot make a student someone else, anonymous ids keep
their case, and a URL or text entry is its student's.

A display name may hold ``_<digits>`` (``Evil_12345_999999``), so a Canvas file name may read as
several students; the intake takes only the reading the roster's user ids, the lab's file name and
the student's other files support, and grades as no one a name that still reads two ways.
Intake only (no notebook runs): the downloads are built in Canvas's own naming (``_lms``).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from _lms import CanvasEntry, CanvasFile, canvas_roster, canvas_zip
from _class import filled, labs_of, reference_notebooks
from labkit.grading.gradebook import exports
from labkit.grading.gradebook import store as gradebook
from labkit.grading.gradebook.publish import Book
from labkit.grading.gradebook.report import NOT_NOTEBOOK
from labkit.grading.run.runner import Job
from labkit.grading.submissions import intake

EVIL = "evil_12345_999999"  # Canvas's name of the display name Evil_12345_999999
VICTIM = CanvasFile("victimvic", 12345, 70000, "alpha.ipynb", filled("ann"))
PEOPLE = [("Victim, Vic", 12345, "S1", "vvic"), ("Evil_12345_999999", 22222, "S2", "evil")]


def _import(tmp: Path, files: list, people: list | None = None) -> dict:
    roster = exports.read_roster(canvas_roster(tmp / "roster.csv", people)) if people else None
    said = []
    rec = intake.import_download(
        canvas_zip(tmp / "download.zip", files),
        tmp / "subs",
        labs_of(tmp),
        reference_notebooks(tmp),
        roster,
        log=said.append,
    ).record
    rec["said"] = said
    return rec


def _graded(tmp: Path, rec: dict) -> dict[str, bytes]:
    """{student: the alpha notebook laid out for them}."""
    return {
        s: (tmp / "subs" / s / "alpha.ipynb").read_bytes() for s, v in rec["students"].items() if "alpha" in v["labs"]
    }


def test_a_name_with_digits_reads_every_way_and_canvas_own_reading_is_the_takeover():
    got = intake.canvas_readings(f"{EVIL}_22222_70001_my work.ipynb")
    assert [(r.name, r.user_id, r.attachment_id, r.original) for r in got] == [
        ("evil", "12345", "999999", "22222_70001_my work.ipynb"),
        ("evil_12345", "999999", "22222", "70001_my work.ipynb"),
        (EVIL, "22222", "70001", "my work.ipynb"),
    ]
    assert intake.canvas_name(f"{EVIL}_22222_70001_my work.ipynb").user_id == "12345"  # the first ids: the victim
    # Canvas's ids have no leading zero: a lab's 01_ is never one
    assert len(intake.canvas_readings("smithjohn_12345_67890_01_single_node_lr.ipynb")) == 1


def test_with_a_roster_the_victim_and_the_attacker_are_each_graded_as_themselves(tmp_path):
    evil = CanvasFile(EVIL, 22222, 70001, "my work.ipynb", filled("bob"))  # any name: matched by its cells
    rec = _import(tmp_path, [VICTIM, evil], PEOPLE)
    assert _graded(tmp_path, rec) == {"vvic": filled("ann"), "evil": filled("bob")}
    assert rec["students"]["evil"]["person"]["canvas_user_id"] == "22222"
    assert "ambiguous" not in rec and not any("not graded" in n for n in rec["notes"])
    note = " ".join(rec["students"]["evil"]["labs"]["alpha"]["notes"])
    assert "also reads as user 12345 (evil)" in note and "read as user 22222" in note


def test_with_a_roster_an_attacker_on_it_takes_no_one_who_did_not_submit(tmp_path):
    evil = CanvasFile(EVIL, 22222, 70001, "my work.ipynb", filled("bob"))
    rec = _import(tmp_path, [evil], PEOPLE)
    assert _graded(tmp_path, rec) == {"evil": filled("bob")}
    assert not (tmp_path / "subs" / "vvic").exists()


def test_without_a_roster_the_name_that_reads_two_ways_is_refused_naming_both(tmp_path):
    evil = CanvasFile(EVIL, 22222, 70001, "my work.ipynb", filled("bob"))
    rec = _import(tmp_path, [VICTIM, evil])
    assert _graded(tmp_path, rec) == {"victimvic": filled("ann")}  # the victim is themselves; no one else is
    assert rec["students"]["victimvic"]["person"]["canvas_user_id"] == "12345"
    (ambiguous,) = rec["ambiguous"]
    assert ambiguous["file"] == evil.zip_name
    assert {(r["name"], r["user_id"]) for r in ambiguous["readings"]} == {("evil_12345", "999999"), (EVIL, "22222")}
    note = next(n for n in rec["notes"] if evil.zip_name in n)
    assert note.startswith("not graded") and "reads 2 ways" in note
    assert "user 999999 (evil_12345)" in note and f"user 22222 ({EVIL})" in note
    assert any("NOT graded" in s for s in rec["said"])


def test_without_a_roster_the_lab_file_name_settles_it(tmp_path):
    evil = CanvasFile(EVIL, 22222, 70001, "alpha.ipynb", filled("bob"))
    rec = _import(tmp_path, [evil])  # the victim did not submit: nothing else names user 12345
    assert _graded(tmp_path, rec) == {EVIL: filled("bob")}
    assert rec["students"][EVIL]["person"]["canvas_user_id"] == "22222"


def test_a_student_off_the_roster_cannot_take_a_classmate_who_is_on_it(tmp_path):
    evil = CanvasFile(EVIL, 22222, 70001, "my work.ipynb", filled("bob"))
    rec = _import(tmp_path, [evil], PEOPLE[:1])  # only the victim on the roster, who did not submit
    assert _graded(tmp_path, rec) == {}
    assert rec["ambiguous"][0]["file"] == evil.zip_name
    assert {r["user_id"] for r in rec["ambiguous"][0]["readings"]} == {"12345", "22222"}


def test_a_students_other_files_keep_them_one_person(tmp_path):
    # the lab file settles evil_12345_999999 as user 22222; their other file's readings follow it
    files = [
        CanvasFile(EVIL, 22222, 70001, "alpha.ipynb", filled("bob")),
        CanvasFile(EVIL, 22222, 70002, "notes.pdf", b"%PDF-1.4"),
    ]
    rec = _import(tmp_path, files)
    assert list(rec["students"]) == [EVIL] and "ambiguous" not in rec
    assert rec["students"][EVIL]["received"][0]["file"] == "notes.pdf"


def test_anonymous_ids_that_differ_only_in_case_are_two_students(tmp_path):
    files = [
        CanvasFile("", 0, 70001, "alpha.ipynb", filled("ann"), anonymous_id="AbCdE"),
        CanvasFile("", 0, 70002, "alpha.ipynb", filled("bob"), anonymous_id="abcde", late=True),
        CanvasFile("", 0, 70003, "alpha.ipynb", filled("cat"), anonymous_id="Xk3Qa"),
    ]
    rec = _import(tmp_path, files)
    by_id = {v["person"]["canvas_anon_id"]: s for s, v in rec["students"].items()}
    assert set(by_id) == {"AbCdE", "abcde", "Xk3Qa"}
    assert by_id["Xk3Qa"] == "anon_Xk3Qa"  # a suffix only where case alone tells two apart
    assert by_id["AbCdE"].startswith("anon_AbCdE-") and by_id["abcde"].startswith("anon_abcde-")
    assert len({s.lower() for s in rec["students"]}) == 3  # apart on a file system that ignores case
    graded = _graded(tmp_path, rec)
    assert graded[by_id["AbCdE"]] == filled("ann") and graded[by_id["abcde"]] == filled("bob")
    assert rec["students"][by_id["abcde"]]["labs"]["alpha"]["canvas_prefix"] == "LATE_anon_abcde_70002"

    with gradebook.Gradebook(tmp_path / "out") as db:
        one = db.identify({"canvas_anon_id": "AbCdE", "folder": by_id["AbCdE"]}, by_id["AbCdE"])
        two = db.identify({"canvas_anon_id": "abcde", "folder": by_id["abcde"]}, by_id["abcde"])
        assert one != two and len(db.people()) == 2
        assert db.ids_of(db.person(one)["id"])["canvas_anon_id"] == ["AbCdE"]
        assert db.identify({"canvas_anon_id": "abcde"}, "whoever") == two  # found again, by the exact id


def test_a_gradebook_that_kept_an_anonymous_id_as_given_still_finds_its_student(tmp_path):
    with gradebook.Gradebook(tmp_path) as db:
        first = db.identify({"canvas_anon_id": "AbCdE"}, "anon_AbCdE")
    con = sqlite3.connect(gradebook.path_of(tmp_path))  # as an earlier version wrote it: the id as given
    con.execute("UPDATE ids SET value = 'AbCdE' WHERE kind = 'canvas_anon_id'")
    con.commit()
    con.close()
    with gradebook.Gradebook(tmp_path) as db:
        assert db.identify({"canvas_anon_id": "AbCdE"}, "x") == first
        assert db.identify({"canvas_anon_id": "abcde"}, "anon_abcde") != first
        assert db.integrity() == "ok"


def test_url_and_text_entries_are_their_students_and_say_what_the_lab_expects(tmp_path):
    files = [
        CanvasEntry("victimvic", 12345, "link"),
        CanvasEntry("evil", 22222, "text", late=True),
        CanvasEntry("", 0, "link", anonymous_id="Q7pLm"),
    ]
    assert intake.detect(canvas_zip(tmp_path / "only.zip", files)) == "canvas"
    rec = _import(tmp_path, files, PEOPLE)
    assert not any("not named as Canvas names" in n for n in rec["notes"])
    assert set(rec["students"]) == {"vvic", "evil", "anon_Q7pLm"}
    assert rec["students"]["vvic"]["received"][0]["file"] == "a website URL entry (link.html)"
    assert rec["students"]["evil"]["received"][0]["file"] == "a text entry (text.html)"
    assert rec["students"]["evil"]["person"]["canvas_user_id"] == "22222"
    assert all((tmp_path / "subs" / s).is_dir() and not v["labs"] for s, v in rec["students"].items())

    lab = labs_of(tmp_path)[0]
    folder = tmp_path / "subs" / "vvic"
    job = Job("vvic", lab, folder / lab.notebook, folder / "x", folder / "w", folder / "log")
    book = Book(
        tmp_path / "out", [lab], [job], intake=json.loads((tmp_path / "subs" / intake.RECORD).read_text())["students"]
    )
    rows = [{"student": "vvic", "lab": lab.key, "check": "execution", "points": 0.0, "max": 0.0,
             "status": "not-submitted", "reason": "no alpha.ipynb in vvic/"}]  # fmt: skip
    (row,) = book._with_intake(job, rows)
    assert row["status"] == NOT_NOTEBOOK
    assert "received a website URL entry (link.html), not a notebook; the grader expects alpha.ipynb" in row["reason"]


def test_an_uploaded_file_named_like_an_entry_is_read_by_the_roster(tmp_path):
    # a file the student named link.html: smithjohn (12345) uploaded it, or smithjohn_12345 sent a URL
    upload = CanvasFile("victimvic", 12345, 70009, "link.html", b"<a href='x'>x</a>")
    assert len(intake.canvas_readings(upload.zip_name)) == 2
    rec = _import(tmp_path, [upload], PEOPLE)
    assert rec["students"]["vvic"]["received"] == [{"file": "link.html", "why": "'link.html' is not a notebook"}]


def test_a_group_named_with_digits_is_read_by_its_group_set(tmp_path):
    from _class import GROUPS
    from _lms import group_set
    from labkit.grading.submissions.groups import read_group_set

    team = CanvasFile("team_7", 12347, 81000, "my work.ipynb", filled("bob"))  # Group "Team_7", handed in by Rick
    members = read_group_set(group_set(tmp_path / "groups.csv", GROUPS))
    got = intake.import_download(
        canvas_zip(tmp_path / "download.zip", [team]),
        tmp_path / "subs",
        labs_of(tmp_path),
        reference_notebooks(tmp_path),
        log=lambda m: None,
        groups=members,
    ).record
    assert _graded(tmp_path, got) == {s: filled("bob") for s in ("jsmith", "rroe", "llee")}
    assert "ambiguous" not in got
    alone = _import(tmp_path, [team])  # no group set, no roster: user 7 or user 12347?
    assert alone["ambiguous"][0]["file"] == team.zip_name and _graded(tmp_path, alone) == {}


def test_a_canvas_user_id_is_matched_to_the_roster_id_alone(tmp_path):
    # Vic's SIS User ID has the digits of Evil's Canvas id: Evil's file is Evil's
    people = [("Victim, Vic", 12345, "22222", "vvic"), ("Evil, Eve", 22222, "S2", "evil")]
    rec = _import(tmp_path, [CanvasFile("evileve", 22222, 70001, "alpha.ipynb", filled("bob"))], people)
    assert _graded(tmp_path, rec) == {"evil": filled("bob")}


def test_the_note_on_an_ambiguous_name_says_what_to_do(tmp_path):
    evil = CanvasFile(EVIL, 22222, 70001, "my work.ipynb", filled("bob"))
    note = next(n for n in _import(tmp_path, [evil])["notes"] if evil.zip_name in n)
    assert ".../courses/<course>/users/<user id>" in note and "give the roster" in note
    with_roster = next(n for n in _import(tmp_path, [evil], PEOPLE[:1])["notes"] if evil.zip_name in n)
    assert "reads 2 ways" in with_roster and "give the roster" not in with_roster
