"""One gradebook per class: a SQLite database (``OUT/gradebook.db``) that holds the term.

A person is keyed by the LMS's own ids and has one ``handle`` (the folder name every report
uses), fixed when first seen, so a roster given later or another download finds them again
instead of doubling the class; a roster adds names and ids, never people. The tables hold
people, their ids, the roster, submissions, signed runs and their results, TA scores with their
history, late rows and exports; the views (``VIEWS``, made again on every open) count as
``grades.csv`` does.

Every write is one transaction (WAL, ``synchronous=FULL``), so a grader killed mid-batch leaves
a sound database. A run's outcome is signed as ``ledger`` signs its ``outcome.json``, and a run
whose signature does not hold is never read back: who can write the database cannot forge a
grade.

More in docs/gradebook.md (people, every table and view, signatures).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
from contextlib import contextmanager
from pathlib import Path

FILE = "gradebook.db"
VERSION = 2  # 2: results.answer_sha/answer, the late table and the views
REFERENCE, CLASS = "reference", "class"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS people (
    id INTEGER PRIMARY KEY, handle TEXT NOT NULL UNIQUE COLLATE NOCASE, name TEXT NOT NULL DEFAULT '',
    created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ids (
    kind TEXT NOT NULL, value TEXT NOT NULL COLLATE NOCASE, person INTEGER NOT NULL REFERENCES people(id),
    PRIMARY KEY (kind, value));
CREATE TABLE IF NOT EXISTS roster (
    id INTEGER PRIMARY KEY, person INTEGER REFERENCES people(id), row TEXT NOT NULL, given TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY, person INTEGER NOT NULL REFERENCES people(id), lab TEXT NOT NULL, sha256 TEXT,
    lms TEXT NOT NULL DEFAULT '', meta TEXT NOT NULL DEFAULT '{}', submitted_at TEXT, late INTEGER NOT NULL DEFAULT 0,
    seen TEXT NOT NULL, UNIQUE (person, lab, sha256));
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, person INTEGER NOT NULL REFERENCES people(id), lab TEXT NOT NULL,
    fingerprint TEXT, status TEXT NOT NULL, outcome TEXT NOT NULL, signature TEXT NOT NULL, at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_person ON runs (person, lab, id);
CREATE TABLE IF NOT EXISTS results (
    run INTEGER NOT NULL REFERENCES runs(id), check_name TEXT NOT NULL, points REAL, max REAL, status TEXT,
    reason TEXT, answer_sha TEXT, answer TEXT, PRIMARY KEY (run, check_name));
CREATE TABLE IF NOT EXISTS ta_scores (
    id INTEGER PRIMARY KEY, person INTEGER NOT NULL REFERENCES people(id), lab TEXT NOT NULL, check_name TEXT NOT NULL,
    score TEXT NOT NULL, comment TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT '', at TEXT NOT NULL,
    current INTEGER NOT NULL DEFAULT 1, max TEXT NOT NULL DEFAULT '', answer_sha TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS exports (
    id INTEGER PRIMARY KEY, at TEXT NOT NULL, path TEXT NOT NULL, sent INTEGER NOT NULL, note TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS exported (
    export INTEGER NOT NULL REFERENCES exports(id), person INTEGER NOT NULL REFERENCES people(id), lab TEXT NOT NULL,
    score TEXT NOT NULL, PRIMARY KEY (export, person, lab));
CREATE TABLE IF NOT EXISTS late (
    person INTEGER NOT NULL REFERENCES people(id), lab TEXT NOT NULL, points REAL NOT NULL, reason TEXT NOT NULL,
    at TEXT NOT NULL, PRIMARY KEY (person, lab));
"""

# The views, dropped and made again on every open (a gradebook of an earlier version gets them, and
# a changed definition reaches every gradebook). They count as ``publish`` does: a check's points
# are its latest run's, an analysis answer's the current TA score given for that very answer
# (``answer_sha``), a late row's penalty is added. SQL cannot check a run's signature (the key is
# the grader's): "signed" here is a run that carries one; the reports read a run only when it holds.
VIEWS = {
    "latest_runs": """
SELECT runs.* FROM runs WHERE runs.signature != '' AND runs.id = (
    SELECT max(x.id) FROM runs AS x WHERE x.person = runs.person AND x.lab = runs.lab AND x.signature != '')""",
    "check_scores": """
SELECT person, student, lab, run, check_name, max, answer, answer_sha, ta_score, ta_comment, ta_sha,
    CASE WHEN by_ta THEN min(max(CAST(ta_score AS REAL), 0), max) ELSE points END AS points,
    CASE WHEN by_ta THEN (CASE WHEN CAST(ta_score AS REAL) >= max THEN 'pass'
                               WHEN CAST(ta_score AS REAL) > 0 THEN 'partial' ELSE 'fail' END)
         WHEN answer = 'unread' THEN 'not-run' WHEN answer = 'empty' THEN 'fail'
         WHEN answer IN ('missing', 'given') THEN 'pending' ELSE status END AS status
FROM (
    SELECT r.person, p.handle AS student, r.lab, r.id AS run, res.check_name, res.points, res.max, res.status,
        res.answer, res.answer_sha, t.score AS ta_score, t.comment AS ta_comment, t.answer_sha AS ta_sha,
        (t.score IS NOT NULL AND t.score != '' AND coalesce(res.answer, '') != 'unread'
         AND (res.answer IS NULL OR t.answer_sha = res.answer_sha)) AS by_ta
    FROM latest_runs AS r JOIN people AS p ON p.id = r.person JOIN results AS res ON res.run = r.id
    LEFT JOIN ta_scores AS t ON t.person = r.person AND t.lab = r.lab AND t.check_name = res.check_name
        AND t.current = 1
    WHERE res.check_name != 'execution')""",
    "lab_totals": """
SELECT c.person, c.student, c.lab, c.run, sum(c.points) AS points, sum(c.max) AS max,
    sum(CASE WHEN c.status = 'pending' THEN c.max ELSE 0 END) AS pending, coalesce(l.points, 0) AS late,
    sum(c.points) + coalesce(l.points, 0) AS total,
    CASE WHEN sum(c.status = 'pending') > 0 THEN 'pending' ELSE 'graded' END AS status
FROM check_scores AS c LEFT JOIN late AS l ON l.person = c.person AND l.lab = c.lab
GROUP BY c.person, c.lab""",
    "term_totals": """
SELECT t.person, t.student, p.name, count(*) AS labs, sum(t.total) AS total, sum(t.max) AS possible,
    sum(t.pending) AS pending, CASE WHEN sum(t.status = 'pending') > 0 THEN 'pending' ELSE 'graded' END AS status
FROM lab_totals AS t JOIN people AS p ON p.id = t.person GROUP BY t.person""",
    "pending_answers": """
SELECT person, student, lab, check_name, run, max, answer_sha,
    CASE WHEN answer = 'missing' THEN 'answer not found: the TA reads the notebook'
         WHEN ta_score IS NOT NULL AND ta_sha != answer_sha THEN 'a TA scored an earlier version of this answer'
         ELSE 'awaiting a TA''s score' END AS why
FROM check_scores WHERE status = 'pending'""",
}

# Which ids of a person the roster's columns are, and how an intake record names them.
ROSTER_IDS = {"ID": "canvas_user_id", "SIS User ID": "sis_user_id", "SIS Login ID": "sis_login_id"}
INTAKE_IDS = {
    "canvas_user_id": "canvas_user_id",
    "canvas_anon_id": "canvas_anon_id",
    "sid": "gradescope_sid",
    "email": "gradescope_email",
}
# The same person seen from the other LMS: Gradescope's :sid is the SIS User ID, its :email the SIS Login ID.
SAME = {
    "gradescope_sid": ("sis_user_id",),
    "sis_user_id": ("gradescope_sid",),
    "gradescope_email": ("sis_login_id",),
    "sis_login_id": ("gradescope_email", "folder"),
}
# Ids whose case is part of them (Canvas's anonymous ids: AbCdE and abcde are two students). The ids
# table ignores case (an email, a login), so each capital letter of these is kept as ^ and the letter
# (^ itself as ^^): ``_stored`` writes them so, ``_shown`` reads them back.
CASED = {"canvas_anon_id"}


def _stored(kind: str, value: str) -> str:
    if kind not in CASED:
        return value
    return re.sub(r"[A-Z^]", lambda m: "^^" if m[0] == "^" else "^" + m[0].lower(), value)


def _shown(kind: str, value: str) -> str:
    return re.sub(r"\^(.)", lambda m: "^" if m[1] == "^" else m[1].upper(), value) if kind in CASED else value


def _keep_case(db) -> None:
    """Rewrite as ``_stored`` the cased ids an earlier gradebook kept as given (they hold a capital)."""
    for kind in CASED:
        for rowid, value in db.execute(
            "SELECT rowid, value FROM ids WHERE kind = ? AND value GLOB '*[A-Z]*'", (kind,)
        ).fetchall():
            db.execute("UPDATE ids SET value = ? WHERE rowid = ?", (_stored(kind, value), rowid))


class GradebookError(ValueError):
    """The gradebook refuses a step; the message says what to do instead."""


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def path_of(out) -> Path:
    return Path(out) / FILE


def exists(out) -> bool:
    return path_of(out).is_file()


class Gradebook:
    """The class's gradebook in ``out`` (made on first use)."""

    def __init__(self, out):
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path_of(out), isolation_level=None, timeout=60)
        path_of(out).chmod(0o600)  # the grader's alone, as .grader is (SQLite gives its -wal and -shm the same)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=ON")
        with self.write() as db:
            for stmt in filter(str.strip, SCHEMA.split(";")):
                db.execute(stmt)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (str(VERSION),))
            _add_columns(db, "ta_scores", {"max": "TEXT NOT NULL DEFAULT ''", "answer_sha": "TEXT NOT NULL DEFAULT ''"})
            _keep_case(db)
            _add_columns(db, "results", {"answer_sha": "TEXT", "answer": "TEXT"})
            for name in reversed(VIEWS):  # each may read the ones before it
                db.execute(f"DROP VIEW IF EXISTS {name}")
            for name, select in VIEWS.items():
                db.execute(f"CREATE VIEW {name} AS {select}")

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @contextmanager
    def write(self):
        """One transaction: every write of the block, or none of them."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # ------------------------------------------------------------------ meta
    def get(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def put(self, key: str, value: str) -> None:
        with self.write() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def claim(self, kind: str) -> None:
        """Mark the gradebook as a class's or the reference self-check's; the reference never
        goes into a class's gradebook (it would replace the class in every report)."""
        held = self.get("kind")
        if kind == REFERENCE and held == CLASS and self.people():
            raise GradebookError(
                f"{self.out} holds a class's gradebook ({len(self.people())} student(s)); the reference self-check "
                f"has a folder of its own: run it with --out out/reference (`make grade` without SUBMISSIONS "
                f"writes there); the class is unchanged"
            )
        if held != kind:
            self.put("kind", kind)

    def integrity(self) -> str:
        return self.db.execute("PRAGMA integrity_check").fetchone()[0]

    # ------------------------------------------------------------------ people
    def people(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM people ORDER BY handle").fetchall()

    def ids_of(self, person: int) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for kind, value in self.db.execute(
            "SELECT kind, value FROM ids WHERE person = ? ORDER BY kind, value", (person,)
        ):
            out.setdefault(kind, []).append(_shown(kind, value))
        return out

    def person(self, handle: str) -> sqlite3.Row | None:
        return self.db.execute("SELECT * FROM people WHERE handle = ?", (handle,)).fetchone()

    def find(self, ids: dict) -> list[int]:
        """The people any of ``ids`` ({kind: value}) names, the LMS's own ids first (a folder
        name counts only when no LMS id matches: two students may share one)."""
        lms = {k: v for k, v in ids.items() if k != "folder" and v}
        found = self._lookup(lms)
        if found or not ids.get("folder"):
            return found
        # by the folder name: only someone no LMS id of the same kind tells apart (a namesake is not them)
        return [p for p in self._lookup({"folder": ids["folder"]}) if not set(self.ids_of(p)) & set(lms)]

    def _lookup(self, ids: dict) -> list[int]:
        found = []
        for kind, value in ids.items():
            if not value:
                continue
            for k in (kind, *SAME.get(kind, ())):
                for (person,) in self.db.execute(
                    "SELECT person FROM ids WHERE kind = ? AND value = ?", (k, _stored(k, str(value).strip()))
                ):
                    if person not in found:
                        found.append(person)
        return found

    def identify(self, ids: dict, handle: str, name: str = "") -> str:
        """The handle of the person ``ids`` names, made (with ``handle``, or a free variant of
        it) when none does; the ids not yet known are added to them."""
        ids = {k: str(v).strip() for k, v in ids.items() if v not in (None, "")}
        with self.write() as db:
            found = self.find(ids)
            if found:
                person = found[0]
            else:
                taken = {r[0].lower() for r in db.execute("SELECT handle FROM people")}
                free, n = handle, 1
                while free.lower() in taken:
                    n += 1
                    free = f"{handle}-{n}"
                person = db.execute(
                    "INSERT INTO people (handle, name, created) VALUES (?, ?, ?)", (free, name, now())
                ).lastrowid
            for kind, value in ids.items():
                db.execute("INSERT OR IGNORE INTO ids VALUES (?, ?, ?)", (kind, _stored(kind, value), person))
            if name:
                db.execute("UPDATE people SET name = ? WHERE id = ? AND name = ''", (name, person))
            return db.execute("SELECT handle FROM people WHERE id = ?", (person,)).fetchone()[0]

    def attach_roster(self, roster: list[dict], source: str = "") -> dict:
        """Give the roster's names and ids to the people they match; create nobody.
        {"matched": [handle], "unmatched": [row]}: a row that matches nobody is kept, unattached."""
        matched, unmatched = [], []
        with self.write() as db:
            db.execute("DELETE FROM roster")
            for row in roster:
                ids = {kind: (row.get(col) or "").strip() for col, kind in ROSTER_IDS.items()}
                login = ids.get("sis_login_id", "")
                found = self.find({**{k: v for k, v in ids.items() if v}, **({"folder": login} if login else {})})
                person = found[0] if found else None
                db.execute(
                    "INSERT INTO roster (person, row, given, source) VALUES (?, ?, ?, ?)",
                    (person, json.dumps(row), now(), source),
                )
                if person is None:
                    unmatched.append(row)
                    continue
                for kind, value in ids.items():
                    if value:
                        db.execute("INSERT OR IGNORE INTO ids VALUES (?, ?, ?)", (kind, value, person))
                if row.get("Student"):
                    db.execute("UPDATE people SET name = ? WHERE id = ?", (row["Student"].strip(), person))
                matched.append(db.execute("SELECT handle FROM people WHERE id = ?", (person,)).fetchone()[0])
        return {"matched": matched, "unmatched": unmatched}

    def roster_rows(self) -> list[tuple[str | None, dict]]:
        """[(handle or None, the roster's row)] in the roster's order."""
        return [
            (r["handle"], json.loads(r["row"]))
            for r in self.db.execute(
                "SELECT people.handle, roster.row FROM roster LEFT JOIN people ON people.id = roster.person "
                "ORDER BY roster.id"
            )
        ]

    def roster_of(self, handle: str) -> dict | None:
        row = self.db.execute(
            "SELECT roster.row FROM roster JOIN people ON people.id = roster.person WHERE people.handle = ?", (handle,)
        ).fetchone()
        return json.loads(row[0]) if row else None

    # ------------------------------------------------------------------ submissions
    def submitted(self, handle: str, lab: str, sha256: str | None, lms: str, meta: dict) -> None:
        person = self._id(handle)
        with self.write() as db:
            db.execute(
                "INSERT OR IGNORE INTO submissions (person, lab, sha256, lms, meta, submitted_at, late, seen) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    person,
                    lab,
                    sha256,
                    lms,
                    json.dumps(meta, default=str),
                    meta.get("submitted_at"),
                    int(bool(meta.get("late"))),
                    now(),
                ),
            )

    def submissions(self, handle: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT submissions.* FROM submissions JOIN people ON people.id = submissions.person "
            "WHERE people.handle = ? ORDER BY submissions.id",
            (handle,),
        ).fetchall()

    def _id(self, handle: str) -> int:
        row = self.person(handle)
        if row is None:  # a folder of the grader's own layout: the folder name is all the grader knows
            return self.db.execute(
                "SELECT id FROM people WHERE handle = ?", (self.identify({"folder": handle}, handle),)
            ).fetchone()[0]
        return row["id"]

    # ------------------------------------------------------------------ runs
    def record_run(self, handle: str, lab: str, outcome: dict) -> None:
        """Store a run's outcome (signed) and its check rows, in one transaction."""
        from labkit.grading.run import ledger

        person = self._id(handle)
        body = json.loads(json.dumps(outcome, default=str))
        signature = ledger.sign(body, _context(person, lab))
        rows = body.get("rows") or []
        with self.write() as db:
            run = db.execute(
                "INSERT INTO runs (person, lab, fingerprint, status, outcome, signature, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    person,
                    lab,
                    json.dumps(body.get("fingerprint"), sort_keys=True),
                    rows[0]["status"] if rows else "",
                    json.dumps(body),
                    signature,
                    now(),
                ),
            ).lastrowid
            found = body.get("answers") or {}
            for r in rows:
                a = found.get(r["check"]) or {}
                db.execute(
                    "INSERT OR REPLACE INTO results (run, check_name, points, max, status, reason, answer_sha, answer) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (run, r["check"], r["points"], r["max"], r["status"], r["reason"], a.get("sha"), a.get("state")),
                )

    def latest_run(self, handle: str, lab: str) -> dict | None:
        """The last run of ``handle``'s ``lab`` whose signature holds (None: none)."""
        from labkit.grading.run import ledger

        for r in self.db.execute(
            "SELECT runs.* FROM runs JOIN people ON people.id = runs.person "
            "WHERE people.handle = ? AND runs.lab = ? ORDER BY runs.id DESC",
            (handle, lab),
        ):
            body = json.loads(r["outcome"])
            if ledger.verify(body, r["signature"], _context(r["person"], lab)):
                return body
        return None

    def keep_late(self, rows: list[dict]) -> None:
        """The late rows (``late``) the reports were just written with, in place of the last ones,
        so the views add the same penalties (a handle the gradebook does not know is left out)."""
        with self.write() as db:
            db.execute("DELETE FROM late")
            for r in rows:
                person = db.execute("SELECT id FROM people WHERE handle = ?", (r["student"],)).fetchone()
                if person is not None:
                    db.execute(
                        "INSERT OR REPLACE INTO late VALUES (?, ?, ?, ?, ?)",
                        (person[0], r["lab"], float(r["points"]), str(r.get("reason") or ""), now()),
                    )

    def run_count(self) -> int:
        return self.db.execute("SELECT count(*) FROM runs").fetchone()[0]

    # ------------------------------------------------------------------ TA scores
    def ta_scores(self, given: dict[tuple, dict]) -> int:
        """Keep TA scores ({(lab, check, handle): score, comment, source, max, answer_sha}) as the
        current ones, all in one transaction; returns how many changed."""
        people = {handle: self._id(handle) for _, _, handle in given}  # a folder's name may make a person first
        changed = 0
        with self.write() as db:
            for (lab, check, handle), s in sorted(given.items()):
                changed += self._keep_score(db, people[handle], lab, check, s)
        return changed

    @staticmethod
    def _keep_score(db, person: int, lab: str, check: str, s: dict) -> bool:
        new = tuple(str(s.get(k) or "") for k in ("score", "comment", "answer_sha"))
        cur = db.execute(
            "SELECT score, comment, answer_sha FROM ta_scores "
            "WHERE person = ? AND lab = ? AND check_name = ? AND current = 1",
            (person, lab, check),
        ).fetchone()
        if cur is not None and tuple(cur) == new:
            return False
        db.execute(
            "UPDATE ta_scores SET current = 0 WHERE person = ? AND lab = ? AND check_name = ?", (person, lab, check)
        )
        db.execute(
            "INSERT INTO ta_scores (person, lab, check_name, score, comment, source, at, current, max, answer_sha) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
            (
                person,
                lab,
                check,
                new[0],
                new[1],
                str(s.get("source") or ""),
                s.get("given") or now(),
                str(s.get("max") or ""),
                new[2],
            ),
        )
        return True

    def current_ta_scores(self) -> dict[tuple, dict]:
        """{(lab, check, handle): the current score}, as ``ta_scores.csv`` lists them."""
        rows = self.db.execute(
            "SELECT ta_scores.*, people.handle FROM ta_scores JOIN people ON people.id = ta_scores.person "
            "WHERE current = 1"
        ).fetchall()
        return {
            (r["lab"], r["check_name"], r["handle"]): {
                "lab": r["lab"],
                "check": r["check_name"],
                "student": r["handle"],
                "score": r["score"],
                "max": r["max"],
                "comment": r["comment"],
                "answer_sha": r["answer_sha"],
                "source": r["source"],
                "given": r["at"],
            }
            for r in rows
        }

    def ta_history(self, handle: str, lab: str, check: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT ta_scores.* FROM ta_scores JOIN people ON people.id = ta_scores.person "
            "WHERE people.handle = ? AND lab = ? AND check_name = ? ORDER BY ta_scores.id",
            (handle, lab, check),
        ).fetchall()

    # ------------------------------------------------------------------ exports
    def exported(self, path: str, scores: dict[tuple, str], sent: bool, note: str = "") -> int:
        """Keep an export: {(handle, lab): score}; only a ``sent`` one is what Canvas holds."""
        with self.write() as db:
            export = db.execute(
                "INSERT INTO exports (at, path, sent, note) VALUES (?, ?, ?, ?)", (now(), str(path), int(sent), note)
            ).lastrowid
            for (handle, lab), score in sorted(scores.items()):
                person = db.execute("SELECT id FROM people WHERE handle = ?", (handle,)).fetchone()
                if person is not None:
                    db.execute("INSERT INTO exported VALUES (?, ?, ?, ?)", (export, person[0], lab, score))
            return export

    def last_sent(self) -> tuple[str, dict[tuple, str]] | None:
        """(when, {(handle, lab): score}) of the last export that was sent; None before one."""
        row = self.db.execute("SELECT id, at FROM exports WHERE sent = 1 ORDER BY id DESC LIMIT 1").fetchone()
        if row is None:
            return None
        scores = {
            (h, lab): s
            for h, lab, s in self.db.execute(
                "SELECT people.handle, exported.lab, exported.score FROM exported JOIN people ON people.id = "
                "exported.person WHERE exported.export = ?",
                (row["id"],),
            )
        }
        return row["at"], scores


def _context(person: int, lab: str) -> str:
    return f"gradebook-run\0{person}\0{lab}"


def _add_columns(db, table: str, columns: dict[str, str]) -> None:
    """Add the columns a gradebook made by an earlier version lacks (its rows get the default)."""
    have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
    for name, decl in columns.items():
        if name not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
