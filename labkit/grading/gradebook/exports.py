"""Gradebook exports, written next to ``grades.csv`` (which stays one row per check).

``final_grades.csv`` has one row per student in Otter-Grader's layout (a column per check, each
lab's execution status and total, then the term's total, pending points and status).
``canvas.csv`` is Canvas's gradebook import format, one column per lab, with students matched
to the roster by SIS Login ID, SIS User ID or ID; a lab awaiting a TA is left blank.
``lab_columns`` is the one decision of each lab's column and of what refuses it (a column Canvas
would make a new assignment of, other points than the rubric's, a stale rubric); while one lab
is refused, no ``canvas.csv`` is written.

A lab's ``late`` row counts in its total in both files. ``changes`` lists every lab score that
differs from what ``grade-export`` last wrote: the regrade list.
More in docs/gradebook.md, section Exports.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from labkit.grading.gradebook.report import EXECUTION, LATE, PENDING, write_csv, write_text

CANVAS_ID_FIELDS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
POINTS_POSSIBLE = "    Points Possible"  # as Canvas writes it in its own exports
ASSIGNMENT = re.compile(r"^(?P<title>.+) \((?P<id>[0-9]+)\)$")  # Canvas's own column header: Title (assignment id)


def _index(rows: list[dict]) -> dict:
    return {(r["student"], r["lab"], r["check"]): r for r in rows}


def wide(rows: list[dict], labs: list) -> tuple[list[dict], list[str]]:
    """(one dict per student, the column names) in final_grades.csv's layout."""
    by = _index(rows)
    fields = ["student"]
    late = {r["lab"] for r in rows if r["check"] == LATE}
    for lab in labs:
        fields += (
            [f"{lab.key} {EXECUTION}"]
            + [f"{lab.key}: {c.name}" for c in lab.checks]
            + ([f"{lab.key} {LATE}"] if lab.key in late else [])
            + [f"{lab.key} total"]
        )
    fields += ["total", "possible", "pending", "percent_correct", "status"]
    out = []
    for student in sorted({r["student"] for r in rows}):
        row, total, possible, pending, incomplete = {"student": student}, 0.0, 0.0, 0.0, False
        for lab in labs:
            possible += lab.max_points
            run = by.get((student, lab.key, EXECUTION))
            if run is None:
                incomplete = True
                continue
            row[f"{lab.key} {EXECUTION}"] = run["status"]
            lab_total = 0.0
            for c in lab.checks:
                r = by.get((student, lab.key, c.name))
                if r is None:
                    continue
                if r["status"] == PENDING:
                    row[f"{lab.key}: {c.name}"] = PENDING
                    pending += r["max"]
                else:
                    row[f"{lab.key}: {c.name}"] = r["points"]
                lab_total += r["points"]
            penalty = by.get((student, lab.key, LATE))
            if penalty is not None:
                row[f"{lab.key} {LATE}"] = penalty["points"]
                lab_total += penalty["points"]
            row[f"{lab.key} total"] = lab_total
            total += lab_total
        row.update(
            total=total,
            possible=possible,
            pending=pending,
            percent_correct=round(100 * total / possible, 2) if possible else 0.0,
            status="incomplete" if incomplete else PENDING if pending else "graded",
        )
        out.append(row)
    return out, fields


def write_wide(rows: list[dict], labs: list, path: Path) -> None:
    table, fields = wide(rows, labs)
    write_csv(table, path, fields)


MARKERS = ("points possible", "manual posting", "muted")  # the Student (or score) cell of Canvas's own rows
TEST_STUDENT = ("student, test", "test student")  # Canvas's Student View user, as its exports name it


def _plain(text) -> str:
    return " ".join(str(text or "").split()).lower()


def not_a_person(row: dict) -> str:
    """What a row of Canvas's gradebook export is when it is not a student ('' for a student):
    its ``Points Possible`` and ``Manual Posting`` (once ``Muted``) rows, a row with no ID, or
    the Test Student (Student View), whom Canvas lists with the class."""
    name = _plain(row.get("Student"))
    ids = [(row.get(k) or "").strip() for k in ("ID", "SIS User ID", "SIS Login ID")]
    no_id = not (row.get("ID") or "").strip() if "ID" in row else not any(ids)
    if any(m in name for m in MARKERS[:2]) or name == MARKERS[2]:
        return next(m for m in MARKERS if m in name).title()
    if no_id:
        marker = next((m for m in MARKERS if any(_plain(v) == m for v in row.values())), "")
        return marker.title() if marker else "a row with no ID"
    if name in TEST_STUDENT:
        return f"the Test Student (ID {ids[0] or ids[1] or ids[2]})"
    return ""


@dataclass
class CanvasExport:
    """Canvas's gradebook export, read: its students, each assignment's points, what is not a person."""

    students: list[dict]
    points: dict = field(default_factory=dict)  # {assignment column: Canvas's points possible}
    skipped: list = field(default_factory=list)  # what the rows that are not people are
    test_ids: list = field(default_factory=list)  # the Test Student's IDs: graded, they are nobody


def read_canvas_export(path: Path) -> CanvasExport:
    """A Canvas gradebook export (or any CSV with its student columns)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"roster {path}: cannot read it as a CSV file: {e}") from None
    if not rows or not any(k in rows[0] for k in ("SIS Login ID", "SIS User ID", "ID")):
        raise ValueError(
            f"roster {path}: expected Canvas's gradebook export, with a SIS Login ID, SIS User ID or "
            f"ID column (Grades > Export in Canvas)"
        )
    out = CanvasExport([])
    for row in rows:
        what = not_a_person(row)
        if not what:
            out.students.append(row)
            continue
        out.skipped.append(what)
        if what == "Points Possible":
            out.points = {k: float(v) for k, v in row.items() if k and ASSIGNMENT.match(k.strip()) and _number(v)}
        elif what.startswith("the Test Student"):
            out.test_ids.append((row.get("ID") or "").strip())
    return out


def _number(text) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def read_roster(path: Path) -> list[dict]:
    """The students of a Canvas gradebook export (``read_canvas_export``): its own rows are not people."""
    return read_canvas_export(path).students


def people_only(rows: list) -> list:
    """``rows`` (roster rows, or (handle, row) pairs) without Canvas's own rows: a roster kept
    before they were told apart holds them."""
    return [r for r in rows if not not_a_person(r[1] if isinstance(r, tuple) else r)]


def roster_index(roster: list[dict]) -> dict:
    """{SIS Login ID, SIS User ID or ID, lower case: the roster's row}: how a student is found."""
    keys = {}
    for person in roster:
        for column in ("SIS Login ID", "SIS User ID", "ID"):
            value = (person.get(column) or "").strip().lower()
            if value:
                keys.setdefault(value, person)
    return keys


def lab_scores(rows: list[dict], labs: list, scaled: dict | None = None) -> dict[tuple, str]:
    """{(student, lab): the score Canvas gets}: the lab's points with its late penalty (scaled to
    Canvas's points where ``scaled`` {lab: (rubric's, Canvas's)} says), or '' while it is not
    graded or an answer awaits a TA."""
    by, scaled = _index(rows), scaled or {}
    out = {}
    for s in sorted({r["student"] for r in rows}):
        for lab in labs:
            got = [by.get((s, lab.key, c.name)) for c in lab.checks]
            if all(r is None for r in got):
                continue
            if any(r is None or r["status"] == PENDING for r in got):
                out[(s, lab.key)] = ""
                continue
            late = by.get((s, lab.key, LATE))
            total = sum(r["points"] for r in got) + (late["points"] if late else 0.0)
            if lab.key in scaled:
                kit, theirs = scaled[lab.key]
                total = round(total * theirs / kit, 2)
            out[(s, lab.key)] = f"{total:g}"
    return out


def assignment_columns(roster: list[dict] | None) -> list[str]:
    """The roster's assignment columns, as Canvas heads them (``Lab 1 (12345)``)."""
    return [k for k in (roster[0] if roster else {}) if k and ASSIGNMENT.match(k.strip())]


@dataclass
class Columns:
    """What canvas.csv is for each lab: its column, the points its Points Possible row gives,
    the labs whose scores are scaled to Canvas's points, and the labs refused (with why): while
    one is, canvas.csv is not written."""

    names: dict  # {lab key: column}
    refused: dict = field(default_factory=dict)  # {lab key: why}
    points: dict = field(default_factory=dict)  # {lab key: the points possible canvas.csv gives}
    scaled: dict = field(default_factory=dict)  # {lab key: (the rubric's points, Canvas's)}


@dataclass
class Canvas:
    """What Canvas holds beyond the roster's students, and what the instructor agreed to."""

    points: dict = field(default_factory=dict)  # {assignment column: points possible}, its Points Possible row
    scale: dict = field(default_factory=dict)  # {lab key: [rubric's, Canvas's]}: scale these scores
    stale: dict = field(default_factory=dict)  # {lab key: why its stored scores are not the rubric's now}


def lab_columns(
    labs: list,
    roster: list[dict] | None,
    columns: dict | None = None,
    allow_new: bool = False,
    canvas: Canvas | None = None,
) -> Columns:
    """The one decision of canvas.csv's header. A lab's column is ``--column LAB=NAME``, else
    the rubric's ``canvas_assignment``, else the roster's assignment whose title is the lab's
    title (or key); without a roster, the lab's title. A name that is not a column of the roster
    (or, with no roster, not of Canvas's ``Title (id)`` form) would create a new assignment:
    refused unless ``allow_new``. A lab worth other points in Canvas (the roster's Points
    Possible row) is refused with both numbers unless ``canvas.scale`` agreed to these two; a
    lab whose stored scores are stale (``canvas.stale``) is refused with why."""
    columns, have, canvas = columns or {}, assignment_columns(roster), canvas or Canvas()
    by_title = {}
    for name in have:
        by_title.setdefault(ASSIGNMENT.match(name.strip())["title"].strip().lower(), []).append(name)
    out = Columns({})
    for lab in labs:
        asked = columns.get(lab.key) or getattr(lab, "canvas_assignment", "") or ""
        found = [asked] if asked else (by_title.get(lab.title.strip().lower()) or by_title.get(lab.key.lower()) or [])
        if len(found) > 1:
            out.refused[lab.key] = (
                f"the roster has {len(found)} assignments titled {lab.title!r} ({', '.join(found)}); "
                f"name one with canvas_assignment in the rubric or --column {lab.key}=..."
            )
            continue
        name = out.names[lab.key] = found[0] if found else lab.title
        why = _new_assignment(lab, name, roster, have) if not allow_new else ""
        why = why or _points(lab, name, canvas, out) or canvas.stale.get(lab.key, "")
        if why:
            out.refused[lab.key] = why
    return out


def _new_assignment(lab, name: str, roster: list[dict] | None, have: list[str]) -> str:
    """Why ``name`` would make Canvas create a new assignment ('' when it would not)."""
    if roster is not None and name not in have:
        return (
            f"{name!r} is not an assignment column of the roster (it has: {', '.join(have) or 'none'}), so Canvas "
            f"would create a new assignment; name the lab's column with canvas_assignment = 'Title (id)' in the "
            f"rubric or --column {lab.key}='Title (id)', or ask for a new assignment with --new-assignment"
        )
    if roster is None and not ASSIGNMENT.match(name):
        return (
            f"{name!r} is not a Canvas column (Title (assignment id)), so Canvas would create a new assignment; "
            f"give the roster (Canvas's gradebook export: grade-export --roster FILE, ROSTER=), or "
            f"canvas_assignment = 'Title (id)' in the rubric, or --column {lab.key}='Title (id)'"
        )
    return ""


def _points(lab, name: str, canvas: Canvas, out: Columns) -> str:
    """Why the lab's points and Canvas's differ ('' when they agree, or scaling was agreed:
    ``out.scaled`` then says so); sets the points canvas.csv gives for it."""
    theirs, mine = canvas.points.get(name), lab.max_points
    out.points[lab.key] = mine if theirs is None else theirs
    if theirs is None or abs(theirs - mine) < 1e-9:
        return ""
    if list(canvas.scale.get(lab.key) or ()) == [mine, theirs] and mine > 0 and theirs > 0:
        out.scaled[lab.key] = (mine, theirs)
        return ""
    return (
        f"{name!r} is worth {theirs:g} points in Canvas (the roster's Points Possible) and {lab.key} "
        f"{mine:g} in the rubric, so each score would read as out of {theirs:g}; make them agree (the "
        f"assignment's points in Canvas, then export the roster again, or the rubric), or scale the scores to "
        f"Canvas's {theirs:g} points with grade-export --scale-to-canvas (make grade-export SCALE_TO_CANVAS=1)"
    )


def scale_asked(labs: list, cols: Columns, canvas: Canvas) -> dict:
    """{lab key: [the rubric's points, Canvas's]} for each lab Canvas gives other points: what
    ``--scale-to-canvas`` agrees to (and only to these two numbers)."""
    out = {}
    for lab in labs:
        theirs = canvas.points.get(cols.names.get(lab.key, ""))
        if theirs is not None and abs(theirs - lab.max_points) >= 1e-9 and lab.max_points > 0 and theirs > 0:
            out[lab.key] = [lab.max_points, theirs]
    return out


def match_roster(students, roster: list[dict], people: dict | None = None) -> dict[str, dict]:
    """{student: the roster's row} by the student's name as SIS Login ID, SIS User ID or ID,
    else by the LMS's ids the intake kept (``people``: Canvas's user id is the roster's ID,
    Gradescope's sid its SIS User ID, its email its SIS Login ID)."""
    keys, people = roster_index(roster), people or {}
    out = {}
    for s in students:
        ids = people.get(s) or {}
        for value in (ids.get("canvas_user_id"), ids.get("sid"), ids.get("email"), s):
            if value and str(value).strip().lower() in keys:
                out[s] = keys[str(value).strip().lower()]
                break
    return out


def canvas(
    rows: list[dict],
    labs: list,
    roster: list[dict] | None = None,
    columns: dict | None = None,
    people: dict | None = None,
    matched: dict | None = None,
    lab_names: Columns | None = None,
    test_ids: list | None = None,
) -> tuple[list[dict], list[str], list[str]]:
    """(rows, column names, notes) of the Canvas import file. ``people``: {student: the
    LMS's ids} from the intake, used to find them in the roster and for students without one;
    ``matched``: {student: roster row} as the gradebook found them (default ``match_roster``);
    ``lab_names``: the labs' columns (default ``lab_columns``, a new assignment allowed: the
    writer, not this table, refuses one); ``test_ids``: Canvas's Test Student, left out."""
    people_ids, tests = people or {}, {str(t) for t in test_ids or () if t}
    cols = lab_names or lab_columns(labs, roster, columns, allow_new=True)
    labs = [lab for lab in labs if lab.key not in cols.refused]
    names = cols.names
    scores = lab_scores(rows, labs, cols.scaled)
    students = sorted({r["student"] for r in rows})
    notes, people = [f"{lab}: not exported ({why})" for lab, why in cols.refused.items()], {}
    notes += [
        f"{lab}: scaled from the rubric's {kit:g} points to Canvas's {theirs:g} (as agreed with --scale-to-canvas)"
        for lab, (kit, theirs) in cols.scaled.items()
        if lab not in cols.refused
    ]
    for s in [s for s in students if s in tests or str((people_ids.get(s) or {}).get("canvas_user_id")) in tests]:
        students.remove(s)
        notes.append(f"{s}: Canvas's Test Student (Student View), not a person: not in canvas.csv")
    if roster is None:
        people = {s: _unrostered(s, people_ids.get(s) or {}) for s in students}
    else:
        found = matched if matched is not None else match_roster(students, roster, people_ids)
        for s in students:
            if s in found:
                people[s] = {k: found[s].get(k, "") for k in CANVAS_ID_FIELDS}
            else:
                notes.append(f"{s}: not in the roster (no SIS Login ID, SIS User ID or ID {s!r}); left out")
    points = {names[lab.key]: f"{cols.points.get(lab.key, lab.max_points):g}" for lab in labs}
    out = [{"Student": POINTS_POSSIBLE, **points}]
    waiting = {(r["student"], r["lab"]) for r in rows if r["status"] == PENDING}
    blank = 0
    for s in students:
        if s not in people:
            continue
        row = dict(people[s])
        for lab in labs:
            row[names[lab.key]] = scores.get((s, lab.key), "")
            blank += (s, lab.key) in waiting
        out.append(row)
    if blank:
        notes.append(f"{blank} lab score(s) left blank: answers await a TA (merge their scores, then export again)")
    return out, CANVAS_ID_FIELDS + [names[lab.key] for lab in labs], notes


def left_out(notes: list[str]) -> list[str]:
    """The students ``canvas`` left out (its notes name them)."""
    return [n.split(":", 1)[0] for n in notes if n.endswith("; left out")]


def _unrostered(student: str, person: dict) -> dict:
    """Canvas's student columns without a roster: the LMS's own ids where the intake has them."""
    if person.get("canvas_user_id"):
        return {"Student": person.get("name") or student, "ID": person["canvas_user_id"]}
    if person.get("sid"):
        return {"Student": person.get("name") or student, "SIS User ID": person["sid"]}
    return {"Student": student, "SIS Login ID": student}


NOT_WRITTEN = "canvas.csv not written"  # how every refusal's note begins


def write_canvas(path: Path, export: tuple[list[dict], list[str], list[str]], cols: Columns) -> list[str]:
    """canvas.csv from ``export``, what ``canvas`` made with the labs' columns ``cols``, when
    every lab has its column; else it is not written, and one written before is removed (it would
    be read as current). Returns the notes: what was left out, scaled, or refused."""
    table, fields, notes = export
    if not cols.refused:
        write_csv(table, path, fields)
        return notes
    removed = path.is_file()
    path.unlink(missing_ok=True)
    return notes + [
        f"{NOT_WRITTEN}{' (the one written before is removed)' if removed else ''}: Canvas would not take it as "
        f"meant while {', '.join(cols.refused)} is refused (said above)"
    ]


# ---------------------------------------------------------------------------------------------
# The regrade list: what changed since the last export

EXPORTED = "exported.json"


def save_exported(out: Path, rows: list[dict], labs: list, when: str, scaled: dict | None = None) -> None:
    """Keep the lab scores ``grade-export`` just wrote, to list what changes after."""
    scores = lab_scores(rows, labs, scaled)
    data = {"when": when, "scores": [[s, lab, v] for (s, lab), v in sorted(scores.items())]}
    write_text(Path(out) / ".grader" / EXPORTED, json.dumps(data))


def changes(
    out: Path, rows: list[dict], labs: list, sent: tuple | None = None, scaled: dict | None = None
) -> tuple[str, list[dict]]:
    """(when the last export was, [{student, lab, exported, now}] for every lab score that differs
    from it); ('', []) before the first export. ``sent``: (when, {(student, lab): score}) of
    the last export sent, as the gradebook keeps it (default: ``.grader/exported.json``)."""
    if sent is not None:
        data, before = {"when": sent[0]}, dict(sent[1])
    else:
        try:
            data = json.loads((Path(out) / ".grader" / EXPORTED).read_text())
            before = {(s, lab): v for s, lab, v in data["scores"]}
        except (OSError, ValueError, KeyError, TypeError):
            return "", []
    now = lab_scores(rows, labs, scaled)
    keys = sorted(set(before) | set(now))
    return data.get("when", ""), [
        {"student": s, "lab": lab, "exported": before.get((s, lab)), "now": now.get((s, lab))}
        for s, lab in keys
        if before.get((s, lab)) != now.get((s, lab)) and any(lab == x.key for x in labs)
    ]
