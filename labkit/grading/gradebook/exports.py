"""Gradebook exports, written next to ``grades.csv`` (which stays one row per check):

- ``final_grades.csv``: one row per student, Otter-Grader's ``final_grades.csv`` layout: a
  column per check (``<lab>: <check>``, its points, or ``pending`` while a TA has not scored
  it), each lab's ``<lab> execution`` status and ``<lab> total``, then ``total``, ``possible``,
  ``pending`` (points awaiting a TA), ``percent_correct`` and ``status`` (``graded``,
  ``pending``, or ``incomplete`` when a lab's notebook has not been graded yet: a stopped batch);
- ``canvas.csv``: Canvas's gradebook import format: ``Student``, ``ID``, ``SIS User ID``,
  ``SIS Login ID``, ``Section``, one column per lab, and a ``Points Possible`` row. A lab whose
  answers still await a TA is left blank (Canvas leaves a blank cell's grade as it is), and
  the export says so. Students are matched to a roster (Canvas's own gradebook export:
  ``grade-export --roster FILE``) by SIS Login ID, SIS User ID or ID, else written with the
  folder name as SIS Login ID. ``--column LAB=NAME`` names a lab's column as Canvas knows the
  assignment (``Lab 1 (12345)``); a name Canvas does not know becomes a new assignment.
  Without a roster, students the LMS named (``intake``) carry Canvas's user id as ``ID`` or
  Gradescope's sid as ``SIS User ID``.

A lab's ``late`` row (``late``: late work) counts in its total in both files. ``grade-export`` keeps what it
wrote (``.grader/exported.json``); ``changes`` lists every lab score that differs from it since:
the regrade list ``summary.md`` shows and ``grade-export`` prints.
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


def read_roster(path: Path) -> list[dict]:
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
    return [
        r
        for r in rows
        if (r.get("Student") or "").strip() != POINTS_POSSIBLE.strip()
        and "Points Possible" not in (r.get("Student") or "")
    ]


def roster_index(roster: list[dict]) -> dict:
    """{SIS Login ID, SIS User ID or ID, lower case: the roster's row}: how a student is found."""
    keys = {}
    for person in roster:
        for column in ("SIS Login ID", "SIS User ID", "ID"):
            value = (person.get(column) or "").strip().lower()
            if value:
                keys.setdefault(value, person)
    return keys


def lab_scores(rows: list[dict], labs: list) -> dict[tuple, str]:
    """{(student, lab): the score Canvas gets}: the lab's points with its late penalty, or ''
    while it is not graded or an answer awaits a TA."""
    by = _index(rows)
    out = {}
    for s in sorted({r["student"] for r in rows}):
        for lab in labs:
            got = [by.get((s, lab.key, c.name)) for c in lab.checks]
            if all(r is None for r in got):
                continue
            if any(r is None or r["status"] == PENDING for r in got):
                out[(s, lab.key)] = ""
            else:
                late = by.get((s, lab.key, LATE))
                out[(s, lab.key)] = f"{sum(r['points'] for r in got) + (late['points'] if late else 0.0):g}"
    return out


ASSIGNMENT = re.compile(r"^(?P<title>.+) \((?P<id>[0-9]+)\)$")  # Canvas's own column header: Title (assignment id)


def assignment_columns(roster: list[dict] | None) -> list[str]:
    """The roster's assignment columns, as Canvas heads them (``Lab 1 (12345)``)."""
    return [k for k in (roster[0] if roster else {}) if k and ASSIGNMENT.match(k.strip())]


@dataclass
class Columns:
    """Each lab's column in canvas.csv, and the labs refused one (a column that would make Canvas
    create a new assignment, which only ``allow_new`` accepts)."""

    names: dict  # {lab key: column}
    refused: dict = field(default_factory=dict)  # {lab key: why}


def lab_columns(labs: list, roster: list[dict] | None, columns: dict | None = None, allow_new: bool = False) -> Columns:
    """The column of each lab: ``--column LAB=NAME``, else the rubric's ``canvas_assignment``,
    else the roster's assignment whose title is the lab's title (or key). Without a roster, the
    lab's title. A name that is not a column of the roster (or, with no roster, not of Canvas's
    ``Title (id)`` form) would create a new assignment: refused unless ``allow_new``."""
    columns, have = columns or {}, assignment_columns(roster)
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
        name = found[0] if found else lab.title
        out.names[lab.key] = name
        if allow_new:
            continue
        if roster is not None and name not in have:
            out.refused[lab.key] = (
                f"{name!r} is not an assignment column of the roster (it has: {', '.join(have) or 'none'}), so Canvas "
                f"would create a new assignment; name the lab's column with canvas_assignment = 'Title (id)' in the "
                f"rubric or --column {lab.key}='Title (id)', or ask for a new assignment with --new-assignment"
            )
        elif roster is None and not ASSIGNMENT.match(name):
            out.refused[lab.key] = (
                f"{name!r} is not a Canvas column (Title (assignment id)), so Canvas would create a new assignment; "
                f"give the roster (Canvas's gradebook export), or canvas_assignment in the rubric, or --new-assignment"
            )
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
) -> tuple[list[dict], list[str], list[str]]:
    """(rows, column names, notes) of the Canvas import file. ``people``: {student: the
    LMS's ids} from the intake, used to find them in the roster and for students without one;
    ``matched``: {student: roster row} as the gradebook found them (default ``match_roster``);
    ``lab_names``: the labs' columns (default ``lab_columns``, a new assignment allowed: the
    export, not this table, refuses one)."""
    people_ids = people or {}
    cols = lab_names or lab_columns(labs, roster, columns, allow_new=True)
    labs = [lab for lab in labs if lab.key not in cols.refused]
    names = cols.names
    scores = lab_scores(rows, labs)
    students = sorted({r["student"] for r in rows})
    notes, people = [f"{lab}: no column ({why})" for lab, why in cols.refused.items()], {}
    if roster is None:
        people = {s: _unrostered(s, people_ids.get(s) or {}) for s in students}
    else:
        found = matched if matched is not None else match_roster(students, roster, people_ids)
        for s in students:
            if s in found:
                people[s] = {k: found[s].get(k, "") for k in CANVAS_ID_FIELDS}
            else:
                notes.append(f"{s}: not in the roster (no SIS Login ID, SIS User ID or ID {s!r}); left out")
    out = [{"Student": POINTS_POSSIBLE, **{names[lab.key]: f"{lab.max_points:g}" for lab in labs}}]
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


def write_canvas(
    rows: list[dict],
    labs: list,
    path: Path,
    roster: list[dict] | None = None,
    columns: dict | None = None,
    people: dict | None = None,
    matched: dict | None = None,
    lab_names: Columns | None = None,
) -> list[str]:
    table, fields, notes = canvas(rows, labs, roster, columns, people, matched, lab_names)
    write_csv(table, path, fields)
    return notes


# ---------------------------------------------------------------------------------------------
# The regrade list: what changed since the last export

EXPORTED = "exported.json"


def save_exported(out: Path, rows: list[dict], labs: list, when: str) -> None:
    """Keep the lab scores ``grade-export`` just wrote, to list what changes after."""
    scores = lab_scores(rows, labs)
    data = {"when": when, "scores": [[s, lab, v] for (s, lab), v in sorted(scores.items())]}
    write_text(Path(out) / ".grader" / EXPORTED, json.dumps(data))


def changes(out: Path, rows: list[dict], labs: list, sent: tuple | None = None) -> tuple[str, list[dict]]:
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
    now = lab_scores(rows, labs)
    keys = sorted(set(before) | set(now))
    return data.get("when", ""), [
        {"student": s, "lab": lab, "exported": before.get((s, lab)), "now": now.get((s, lab))}
        for s, lab in keys
        if before.get((s, lab)) != now.get((s, lab)) and any(lab == x.key for x in labs)
    ]
