"""Every report of a batch, rebuilt from what its runs left and what the TAs scored.

A batch's output folder holds its manifest and the class's gradebook (``gradebook``: signed
runs, people and their LMS ids, the roster, the exports sent, and the TAs' scores).
``Book.load(out)`` reads them back, ``Book.rows()`` gives the rows of ``grades.csv`` (a
notebook's stored rows, its analysis answers found again and scored by the TA where one has),
and ``Book.write_reports()`` writes ``grades.csv``, ``summary.md``, ``summary.html``,
``final_grades.csv``, ``canvas.csv`` and the feedback pages whose content changed (each rendered
in a limited process, ``render``; kept until its run, rows or renderer change). No notebook runs.

What the LMS said of each submission (``intake``) is kept in the manifest and added to the rows
here: its notes to the ``execution`` row, a ``late`` row to late work. A later batch into the
same folder adds its notebooks to the book: the book is the class, whichever batch graded whom.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.core import inert
from labkit.grading.judge import answers
from labkit.grading.gradebook import exports, report, rubric_change
from labkit.grading.pages import cache, feedback
from labkit.grading.submissions import intake, late
from labkit.grading.run import ledger
from labkit.grading.run.runner import Job

EXPORT_SETTINGS = "export.json"  # the Canvas roster and column names `grade-export` was last given


class PublishError(ValueError):
    """The output folder holds no batch to publish; the message says what to run first."""


def job_record(job: Job) -> dict:
    return {
        "student": job.student,
        "lab": job.lab.key,
        **{k: str(getattr(job, k)) for k in ("source", "executed", "workdir", "log", "private")},
    }


def job_from(d: dict, labs: dict) -> Job:
    return Job(d["student"], labs[d["lab"]], *(Path(d[k]) for k in ("source", "executed", "workdir", "log", "private")))


@dataclass
class Book:
    out: Path
    labs: list  # rubric.Lab, in the batch's order
    jobs: list  # runner.Job, in the batch's order
    refused: list = field(default_factory=list)  # rows of student folders the grader refused
    questions: dict = field(default_factory=dict)  # {(lab, check): answers.Question}
    reference: bool = False
    warning: str = ""
    title: str = "Grades"
    notebooks: str = ""  # the reference notebooks' folder (the similarity report's template)
    intake: dict = field(default_factory=dict)  # {student: {"person": {...}, "labs": {lab: {...}}}} (intake)
    intake_notes: list = field(default_factory=list)  # the intake's notes on what it did not grade
    rubric: str = ""  # the rubric the class was graded under, by path: a later edit is applied or stale
    stale: dict = field(default_factory=dict)  # {lab: why its stored scores are not the rubric's now}
    rubric_notes: list = field(default_factory=list)  # the rubric's edits applied (``rubric_change``)
    canvas: object = None  # canvas.csv's columns as last decided (``exports.Columns``)

    # ------------------------------------------------------------------ the manifest
    def save(self, rubric_text: str, rubric: str | Path = "") -> None:
        self.rubric = str(Path(rubric).resolve()) if rubric else self.rubric
        (self.out / ".grader").mkdir(parents=True, exist_ok=True)
        report.write_text(self.out / ".grader" / "rubric.toml", rubric_text)
        ledger.write_manifest(
            self.out,
            {
                "labs": [lab.key for lab in self.labs],
                "jobs": [job_record(j) for j in self.jobs],
                "refused": self.refused,
                "questions": [asdict(q) for q in self.questions.values()],
                "reference": self.reference,
                "warning": self.warning,
                "title": self.title,
                "notebooks": str(Path(self.notebooks).resolve()) if self.notebooks else "",
                "intake": self.intake,
                "intake_notes": self.intake_notes,
                "rubric": self.rubric,
            },
        )

    @classmethod
    def load(cls, out) -> "Book":
        from labkit.grading.judge.rubric import load_rubric

        out = Path(out)
        man = ledger.read_manifest(out)
        if man is None:
            raise PublishError(
                f"{out} holds no graded batch (no .grader/{ledger.MANIFEST}); grade first: "
                f"`make grade SUBMISSIONS=DIR` (or `python -m labkit grade DIR --out {out}`)"
            )
        rub = load_rubric(out / ".grader" / "rubric.toml")
        qs = [answers.Question(**q) for q in man["questions"]]
        book = cls(
            out,
            [rub.labs[k] for k in man["labs"]],
            [job_from(d, rub.labs) for d in man["jobs"]],
            man["refused"],
            {(q.lab, q.check): q for q in qs},
            man["reference"],
            man["warning"],
            man["title"],
            man.get("notebooks", ""),
            man.get("intake") or {},
            man.get("intake_notes") or [],
            man.get("rubric") or "",
        )
        book.follow_rubric()
        return book

    def follow_rubric(self) -> None:
        """The rubric's edits since grading that run nothing, applied (``rubric_change``); the
        labs whose runs they would alter are ``stale``."""
        from labkit.grading.gradebook import rubric_change

        follows, self.stale, self.rubric_notes = rubric_change.follow(self.labs, self.rubric)
        self.labs = [follows.get(lab.key, lab) for lab in self.labs]
        for job in self.jobs:
            job.lab = follows.get(job.lab.key, job.lab)

    # ------------------------------------------------------------------ rows
    def lab_questions(self, lab_key: str) -> dict:
        return {q.check: q for (lab, _), q in self.questions.items() if lab == lab_key}

    def found(self, job: Job, stored: dict) -> dict | None:
        """{check: Answer} in the submitted notebook as graded (None when it could not be read)."""
        import nbformat

        if not stored.get("input") or not job.clean_input.is_file():
            return None
        try:
            nb = nbformat.read(str(job.clean_input), as_version=4)
        except (OSError, ValueError):
            return None
        return answers.locate(nb, self.lab_questions(job.lab.key))

    def job_rows(self, job: Job, stored: dict, ta: dict) -> tuple[list[dict], dict | None, dict]:
        """(rows, answers, analysis scores) of one graded notebook."""
        found = self.found(job, stored)
        scores = {}
        for name, q in self.lab_questions(job.lab.key).items():
            scores[name] = answers.score(
                q, None if found is None else found.get(name), ta.get((job.lab.key, name, job.student))
            )
        rows = []
        for r in stored["rows"]:
            s = scores.get(r["check"])
            rows.append(
                r if s is None else {**r, "points": s.points, "max": s.max, "status": s.status, "reason": s.reason}
            )
        return self._with_intake(job, rows), found, scores

    def submitted(self, job: Job) -> dict:
        """What the intake recorded of the file ``job`` graded ({} when nothing)."""
        return ((self.intake.get(job.student) or {}).get("labs") or {}).get(job.lab.key) or {}

    def received(self, job: Job) -> list[str]:
        """The files the student handed in that are not notebooks ('notes.pdf', ...): what the
        intake recorded, or what their folder holds."""
        got = [x.get("file", "") for x in (self.intake.get(job.student) or {}).get("received") or []]
        if not got and not self.intake and job.source.parent.is_dir():
            got = sorted(
                p.name
                for p in job.source.parent.iterdir()
                if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".ipynb")
            )
        return [g for g in got if g]

    def _handed_in_nothing_else(self, job: Job) -> bool:
        """Whether the student handed in no notebook of any lab (so what they sent is for every one)."""
        if self.intake:
            return not (self.intake.get(job.student) or {}).get("labs")
        return not any(job.source.parent.glob("*.ipynb"))

    def _not_a_notebook(self, job: Job, rows: list[dict]) -> list[dict]:
        """A lab not submitted by someone who handed in other files: its rows say what came and what
        the grader expects, rather than that nothing came."""
        got = self.received(job) if rows and rows[0]["status"] == "not-submitted" else []
        if not self._handed_in_nothing_else(job):  # a file named for this lab counts; any other, for another lab
            stem = Path(job.lab.notebook).stem.lower()
            got = [g for g in got if Path(intake.plain_name(g)).stem.lower() == stem]
        if not got:
            return rows
        why = (
            f"received {', '.join(got)}, not a notebook; the grader expects {job.lab.notebook}, the lab's Jupyter "
            f"notebook (File > Download as .ipynb), and runs nothing else"
        )
        return [
            {**rows[0], "status": report.NOT_NOTEBOOK, "reason": why},
            *[{**r, "reason": f"the notebook did not run: {why}"} if r["status"] == "not-run" else r for r in rows[1:]],
        ]

    def _with_intake(self, job: Job, rows: list[dict]) -> list[dict]:
        """``rows`` with the intake's notes on the execution row and the late row, if late."""
        rows = self._not_a_notebook(job, rows)
        info = self.submitted(job)
        if not info:
            return rows
        notes = "; ".join(info.get("notes") or [])
        if notes and rows and rows[0]["check"] == report.EXECUTION:
            rows = [{**rows[0], "reason": "; ".join(x for x in (rows[0]["reason"], notes) if x)}, *rows[1:]]
        penalty = late.row(job.student, job.lab, info, sum(r["points"] for r in rows[1:]))
        return rows + [penalty] if penalty else rows

    def gradebook(self):
        """The class's gradebook (``gradebook``), an earlier layout's folder imported into it once."""
        from labkit.grading.gradebook import legacy

        return legacy.open_class(self.out)

    def stored(self) -> dict:
        """{job key: stored outcome} for the notebooks graded so far: each one's last run in the
        gradebook whose signature holds."""
        with self.gradebook() as db:
            return {job.key: out for job in self.jobs if (out := db.latest_run(job.student, job.lab.key)) is not None}

    def rows(self, ta: dict | None = None, stored: dict | None = None) -> list[dict]:
        ta = answers.read_scores(self.out) if ta is None else ta
        stored = self.stored() if stored is None else stored
        rows = list(self.refused)
        for job in self.jobs:
            if job.key in stored:
                rows += self.job_rows(job, stored[job.key], ta)[0]
        return rows

    # ------------------------------------------------------------------ writing
    def write_tables(self, rows: list[dict], log=print, allow_new: bool = False, scale: bool = False) -> list[str]:
        """grades.csv, summary.md/.html, final_grades.csv and canvas.csv, from ``rows`` and the
        gradebook (the roster's people, the last export sent); returns canvas.csv's notes.
        ``allow_new``: a column Canvas would make a new assignment of is accepted; ``scale``: the
        labs Canvas gives other points are scaled to them (``canvas_columns``)."""
        from labkit.grading.pages import stats

        settings = export_settings(self.out)
        with self.gradebook() as db:
            db.keep_late([r for r in rows if r["check"] == report.LATE])
            given = exports.people_only(db.roster_rows())
            sent = db.last_sent()
        roster = [row for _, row in given] if given else None
        columns = self.canvas = self.canvas_columns(roster, settings, allow_new, scale)
        matched = {handle: row for handle, row in given if handle is not None}
        report.write_csv(rows, self.out / "grades.csv")
        report.write_summary(
            rows,
            self.labs,
            self.out / "summary.md",
            self.title,
            self.warning,
            missing=self.missing(rows, given) if roster is not None else None,
            regrades=exports.changes(self.out, rows, self.labs, sent, columns.scaled) if sent else ("", []),
            notes=self.intake_notes,
            canvas=None if self.reference else columns.refused,
        )
        exports.write_wide(rows, self.labs, self.out / "final_grades.csv")
        people = {s: v.get("person") or {} for s, v in self.intake.items()}
        notes = self.rubric_notes + (
            []  # the reference self-check is no class: nothing to import into Canvas
            if self.reference
            else exports.write_canvas(
                self.out / "canvas.csv",
                exports.canvas(
                    rows, self.labs, roster, settings.get("columns"), people, matched, columns, settings.get("test_ids")
                ),
                columns,
            )
        )
        for note in notes:
            log(note if note.startswith(("rubric ", exports.NOT_WRITTEN)) else f"canvas.csv: {note}")
        try:  # figures only: a plot that fails never costs the batch its grades
            kept = self.out / ".grader" / cache.SUMMARY  # drawn again only when what it shows changed
            stats.write_html(rows, self.labs, self.out / "summary.html", self.title, self.warning, kept)
        except (ValueError, TypeError, OSError, RuntimeError) as e:
            log(f"summary.html not written: {type(e).__name__}: {e}")
        return notes

    def canvas_columns(self, roster, settings: dict, allow_new: bool = False, scale: bool = False):
        """Each lab's column in canvas.csv, or why it has none (``exports.lab_columns``): Canvas's
        points for it (the roster's Points Possible row), the scaling agreed, the stale labs."""
        settings = _from_roster(settings)
        canvas = exports.Canvas(points=settings.get("points") or {}, scale=settings.get("scale") or {})
        canvas.stale = {**rubric_change.stale_runs(self.jobs, self.stored()), **self.stale}
        cols = exports.lab_columns(self.labs, roster, settings.get("columns"), allow_new, canvas)
        if scale and not self.reference:
            canvas.scale = {**canvas.scale, **exports.scale_asked(self.labs, cols, canvas)}
            save_export_settings(self.out, None, None, scale=canvas.scale)
            cols = exports.lab_columns(self.labs, roster, settings.get("columns"), allow_new, canvas)
        return cols

    def missing(self, rows: list[dict], given: list[tuple]) -> list[dict]:
        """[{name, login, labs}]: who on the roster (``given``: [(the gradebook's name for them, or
        None, their row)]) has no graded notebook of a lab of this book."""
        submitted = {}
        for r in rows:
            if r["check"] == report.EXECUTION and r["status"] != "not-submitted":
                submitted.setdefault(r["student"], set()).add(r["lab"])
        out = []
        for handle, person in given:
            labs = [lab.key for lab in self.labs if lab.key not in submitted.get(handle, set())]
            if labs:
                out.append(
                    {
                        "name": person.get("Student", ""),
                        "login": person.get("SIS Login ID") or person.get("SIS User ID") or person.get("ID", ""),
                        "labs": labs,
                    }
                )
        return out

    def page_task(self, job: Job, rows: list[dict], stored: dict, force: bool = False):
        """The feedback page of ``job`` to render (``render.Task``), or None when the page on disk
        was written (or fell back) for what it would show now (``cache``): the run, its rows with
        the TAs' scores, the page's arguments and limits, the renderer. ``force``: render it all
        the same (a run that just ended)."""
        from labkit.grading.pages import render

        path = job.executed.with_suffix(".html")
        title = f"{job.student}: {job.lab.key} ({job.lab.title})"
        args = {
            "executed": str(job.executed) if stored.get("executed") else None,
            "rows": rows,
            "path": str(path),
            "title": title,
            "warning": self.warning,
            "descriptions": _descriptions(job.lab),
            "source": str(job.clean_input),
            "output_kb": job.lab.page_output_kb,
        }
        entry = feedback.cache_entry(job, args, stored)
        if not force and entry.current():
            return None
        return render.Task(
            feedback.write_feedback,
            args,
            path,
            lambda why: feedback.plain_page(rows, title, why, self.warning, _descriptions(job.lab)),
            job.private / "page.log",
            cache=entry,
        )

    def write_reports(self, log=print) -> list[dict]:
        """Every table, and every feedback page whose content changed (``page_task``); returns the rows."""
        from labkit.grading.pages import render
        from labkit.core.proc import usable_cores

        ta, stored = answers.read_scores(self.out), self.stored()
        rows, pages = list(self.refused), []
        for job in self.jobs:
            if job.key in stored:
                mine = self.job_rows(job, stored[job.key], ta)[0]
                pages.append(self.page_task(job, mine, stored[job.key]))
                rows += mine
        self.write_tables(rows, log)
        todo = [t for t in pages if t is not None]
        render.run(todo, usable_cores())
        log(f"feedback pages: {len(todo)} rendered, {len(pages) - len(todo)} already up to date")
        return rows

    def answer_items(self) -> list[dict]:
        """Per graded notebook: its student, lab, records, answers and analysis scores."""
        ta, items, held = answers.read_scores(self.out), [], self.stored()
        for job in self.jobs:
            stored = held.get(job.key)
            if stored is not None:
                _, found, scores = self.job_rows(job, stored, ta)
                items.append(
                    {
                        "student": job.student,
                        "lab": job.lab.key,
                        "records": stored.get("records") or {},
                        "answers": found or {},
                        "scores": scores,
                        "group": self.submitted(job).get("group") or [],
                    }
                )
        return items


def _descriptions(lab) -> dict:
    return {c.name: c.spec.get("description", "") for c in lab.checks}


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def export_settings(out: Path) -> dict:
    """The roster and Canvas column names the last ``grade-export`` (or ``grade --roster``) gave."""
    return _read_json(Path(out) / ".grader" / EXPORT_SETTINGS) or {}


def save_export_settings(out: Path, roster: str | None, columns: dict | None, scale: dict | None = None) -> None:
    """Keep the roster (with its Points Possible row and Test Student), the column names and the
    scaling agreed for every later report; what is not given stays as it was."""
    old = export_settings(out)
    canvas = exports.read_canvas_export(Path(roster)) if roster else None
    path = Path(out) / ".grader" / EXPORT_SETTINGS
    path.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(
        path,
        json.dumps(
            {
                "roster": str(Path(roster).resolve()) if roster else old.get("roster"),
                "columns": {**(old.get("columns") or {}), **(columns or {})},
                "points": canvas.points if canvas else old.get("points") or {},
                "test_ids": canvas.test_ids if canvas else old.get("test_ids") or [],
                "scale": old.get("scale") or {} if scale is None else scale,
            }
        ),
    )


def _from_roster(settings: dict) -> dict:
    """``settings`` with Canvas's points and Test Student, read from the roster they name when
    they were kept before the settings held them."""
    if "points" in settings or not settings.get("roster"):
        return settings
    try:
        canvas = exports.read_canvas_export(Path(settings["roster"]))
    except ValueError:
        return settings  # the roster is gone: nothing to check against, as without one
    return {**settings, "points": canvas.points, "test_ids": canvas.test_ids}


# ---------------------------------------------------------------------------------------------
# The commands: grade-answers, grade-merge, grade-export


def export_answers(out, log=print, anonymous: bool = False) -> list[Path]:
    """Per question, a CSV to score and a page to read (rendered in limited processes); with
    ``anonymous``, students appear as codes (``answers.codes``). Flagged pairs of the similarity
    report are marked next to their answers."""
    from labkit.grading.pages import render
    from labkit.grading.judge import similarity
    from labkit.core.proc import usable_cores

    book = Book.load(out)
    if not book.questions:
        raise PublishError("the rubric of this batch has no analysis checks; nothing to export")
    pages = answers.export(book.out, book.answer_items(), book.questions, anonymous, similarity.flags(book.out))
    render.run(pages, usable_cores())
    written = [p for t in pages for p in (t.path.with_suffix(".csv"), t.path)]
    pending = sum(1 for r in book.rows() if r["status"] == report.PENDING)
    log(
        f"wrote {len(pages)} question(s) to {book.out / 'answers'}/ (an .html page and a .csv each"
        + (
            ", students as codes; the key to them is .grader/anonymous.csv, which the TAs need not see"
            if anonymous
            else ""
        )
        + f"); {pending} answer(s) await a score"
    )
    return written


def merge_scores(out, files, log=print, prefer: str | None = None) -> list[dict]:
    """Merge the TAs' CSVs; a conflict refuses them all unless ``prefer`` (one of ``files``) wins it."""
    book = Book.load(out)
    current, items = {}, book.answer_items()
    for item in items:
        for check, a in item["answers"].items():
            current[(item["lab"], check, item["student"])] = a.sha
        for check in item["scores"]:
            current.setdefault((item["lab"], check, item["student"]), answers.answer_sha(""))
    for line in answers.merge(
        book.out,
        [Path(f) for f in files],
        book.questions,
        current,
        prefer=Path(prefer) if prefer else None,
        aliases=answers.students_by_code(book.out),
        groups=answers.groups_of(items),
    ):
        log(line)
    rows = book.write_reports(log)
    pending = sum(1 for r in rows if r["status"] == report.PENDING)
    log(
        f"rebuilt {book.out / 'grades.csv'}, summary.md, final_grades.csv, canvas.csv and the feedback pages; "
        f"{pending} answer(s) still pending"
    )
    return rows


class ExportError(PublishError):
    """An export Canvas would not take as meant (someone left out, nobody matched, a new
    assignment not asked for); it was written to look at, and is not counted as sent."""


def export_gradebook(
    out, roster: str | None = None, columns: dict | None = None, log=print, allow_new: bool = False, scale=False
) -> list[dict]:
    """final_grades.csv and canvas.csv; the export is kept as sent (the regrade list starts
    from it) only when Canvas can take it as it is, else ``ExportError`` names what is wrong.
    ``scale``: scores of labs Canvas gives other points are scaled to Canvas's (kept for later)."""
    book = Book.load(out)
    if roster:
        canvas = exports.read_canvas_export(Path(roster))  # a bad roster is refused before anything is written
        people = canvas.students
        with book.gradebook() as db:
            attached = db.attach_roster(people, str(Path(roster).resolve()))
        log(
            f"roster {roster}: {len(attached['matched'])} of its {len(people)} student(s) are in the gradebook"
            + (f" (not people: {', '.join(canvas.skipped)})" if canvas.skipped else "")
        )
    save_export_settings(book.out, roster, columns or {})
    rows = book.rows()
    with book.gradebook() as db:
        sent = db.last_sent()
    notes = book.write_tables(rows, log, allow_new=allow_new, scale=scale)
    scaled = book.canvas.scaled
    when, changed = exports.changes(book.out, rows, book.labs, sent, scaled) if sent else ("", [])
    problems = _export_problems(book, rows, notes)
    scores = exports.lab_scores(rows, [lab for lab in book.labs if lab.key not in book.canvas.refused], scaled)
    with book.gradebook() as db:
        db.exported(str(book.out / "canvas.csv"), scores, sent=not problems, note="; ".join(problems))
    if problems:
        raise ExportError(
            (
                f"canvas.csv was not written ({len(problems)} problem(s)):\n  "
                if book.canvas.refused
                else f"canvas.csv was written to look at, but not as an export to send ({len(problems)} problem(s)):\n  "
            )
            + "\n  ".join(problems)
        )
    exports.save_exported(book.out, rows, book.labs, _now(), scaled)
    log(f"wrote {book.out / 'final_grades.csv'} and {book.out / 'canvas.csv'}")
    if changed:
        log(f"{len(changed)} grade(s) changed since the export of {when} (listed in summary.md):")
        for c in changed:
            log(f"  {c['student']} {c['lab']}: {_shown(c['exported'])} -> {_shown(c['now'])}")
    return rows


def _export_problems(book: Book, rows: list[dict], notes: list[str]) -> list[str]:
    """What keeps canvas.csv from being sent: labs refused (it is not written then), students
    left out, nobody in it."""
    out = [n for n in notes if ": not exported (" in n]
    gone = exports.left_out(notes)
    if gone:
        out.append(
            f"{len(gone)} graded student(s) match nobody in the roster, so the export leaves them out: "
            f"{', '.join(gone)}; give the roster that has them (Canvas: Grades > Export)"
        )
    graded = {r["student"] for r in rows}
    if graded and len(gone) == len(graded):
        out.append("the export matches nobody: no graded student is in the roster")
    return out


def _now() -> str:
    import datetime as dt

    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _shown(score) -> str:
    return "not exported" if score is None else "blank" if score == "" else score


def deliver_pages(out, log=print) -> list[Path]:
    """Every feedback page brought up to date, then packed for the LMS (``deliver``)."""
    from labkit.grading.gradebook import deliver

    book = Book.load(out)
    if book.reference:
        raise PublishError(f"{book.out} holds the reference run; delivering is for a class's submissions")
    rows = book.write_reports(log)
    written = deliver.write(book, rows)
    for line in deliver.describe(book, written):
        log(line)
    return written


def _run(fn) -> int:
    import sys

    from labkit.grading.judge.rubric import RubricError

    try:
        fn()
    except (PublishError, answers.ScoresError, RubricError, ValueError) as e:
        inert.say(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def main_answers(args) -> int:
    """``grade-answers``: the TA's pages and CSVs, one per question."""
    return _run(lambda: export_answers(args.out, anonymous=getattr(args, "anonymous", False)))


def main_merge(args) -> int:
    """``grade-merge``: the TA's filled-in CSVs into every report."""
    return _run(lambda: merge_scores(args.out, args.files, prefer=args.prefer))


def main_deliver(args) -> int:
    """``grade-deliver``: one zip of feedback pages per student, and Canvas's re-upload zips."""
    return _run(lambda: deliver_pages(args.out))


def main_export(args) -> int:
    """``grade-export``: final_grades.csv and canvas.csv, with a Canvas roster and column names."""

    def columns():
        out = {}
        for item in args.column or []:
            lab, sep, name = item.partition("=")
            if not sep or not lab or not name:
                raise ValueError(f"--column {item!r}: write LAB=NAME, e.g. lab1='Lab 1 (12345)'")
            out[lab] = name
        return out

    return _run(
        lambda: export_gradebook(
            args.out,
            args.roster,
            columns(),
            allow_new=getattr(args, "new_assignment", False),
            scale=getattr(args, "scale_to_canvas", False),
        )
    )
