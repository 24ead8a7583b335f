"""``make grade``: run every notebook (the reference ones, or each student's), score it against
the rubric, re-check its claims, and write the reports.

A submissions folder is ``DIR/<student>/<lab notebook>.ipynb`` (Canvas's and Gradescope's
downloads are laid out so first, ``intake``); without one, the reference notebooks are graded
as student ``reference``. A batch adds to the class already graded in ``out``: its notebooks
replace only their own student and lab. Grading the same folder again runs only what changed or
did not end (``ledger``); the reports are rebuilt from the stored runs (``publish``), which is
also how TA scores reach them without a notebook running again.

Every notebook of a submissions folder runs in a sandbox (``labkit.grading.run.sandbox``); where
bubblewrap is missing the batch refuses to start, unless ``--no-sandbox`` says to trust every
notebook, which every report then warns about. Inputs the grader will not run (a symbolic link,
a file that is not a version-4 notebook, an empty or oversized one ...) become rows that say why.
More in docs/internals.md, section labkit.grading (the output folder, re-runs).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from labkit.core import folderlock, inert, scratch
from labkit.grading.judge import answers
from labkit.grading.options import GradeError, GradeOptions
from labkit.labs import stamp
from labkit.grading.submissions import intake
from labkit.grading.submissions.groups import read_group_set
from labkit.grading.run import ledger
from labkit.grading.gradebook import legacy, report
from labkit.grading.gradebook import store as gradebook
from labkit.grading.run import stored as stored_files
from labkit.grading.run.batch import Batch
from labkit.grading.gradebook.publish import Book, PublishError
from labkit.grading.judge.rubric import Lab, load_rubric
from labkit.grading.run.runner import KIT_PREFIX, GraderFault, Job, RunResult, Setup
from labkit.grading.judge.scoring import Scored, flag_note, row
from labkit.grading.pages import warm

REFERENCE = "reference"
REFERENCE_OUT = "out/reference"  # the reference self-check's own folder and gradebook
MARKER = ".labkit-grade"  # marks an output folder as ours, so a rerun may clear it
OWN_FILES = {
    "grades.csv",
    "summary.md",
    "summary.html",
    "report.md",
    "report.csv",
    ".work",
    ".grader",
    ".intake",
    gradebook.FILE,
    gradebook.FILE + "-wal",
    gradebook.FILE + "-shm",
    MARKER,
    folderlock.LOCK,
    "final_grades.csv",
    "canvas.csv",
    "similarity.html",
    "similarity.csv",
    "answers",
    "deliver",
    answers.SCORES_FILE,
}
STUDENT_NAME = re.compile(r"^[^\W_][\w.@+-]{0,99}$")  # one path component: letters, digits, . _ @ + -
UNSANDBOXED = "ran WITHOUT a sandbox (--no-sandbox): the notebook could read and change anything the grader can"


@dataclass
class Outcome:
    rows: list[dict]
    out: Path
    reference: bool
    entries: list[dict] = field(default_factory=list)
    warning: str = ""
    ran: list[tuple] = field(default_factory=list)  # (student, lab) of the notebooks this batch ran
    kept: list[tuple] = field(default_factory=list)  # those whose last run was still good, not run again

    @property
    def not_passed(self) -> list[dict]:
        """Rows that did not pass; an answer awaiting a TA is not a failure."""
        return [r for r in self.rows if r["status"] not in report.GOOD | {report.PENDING, report.LATE}]

    @property
    def exit_code(self) -> int:
        """Reference run: 1 when anything did not pass (the kit checks itself). Submissions:
        0 once the batch completed, since students failing checks is the normal case."""
        return 1 if self.reference and (self.not_passed or not self.rows) else 0


def student_problem(name: str, labs: list[Lab]) -> str | None:
    """Why a student folder name cannot be graded under its own name, or None."""
    own = {n.lower() for n in OWN_FILES} | {lab.notebook.lower() for lab in labs}
    if name.lower() in own:
        return f"the folder name {name!r} is one the grader writes itself; rename the student's folder"
    if not STUDENT_NAME.match(name):
        return (
            f"the folder name {name!r} is not a plain name (letters, digits, '.', '_', '@', '+', '-'); "
            f"rename the student's folder"
        )
    return None


def find_jobs(
    labs: list[Lab],
    out: Path,
    submissions: Path | None,
    notebooks: Path,
    known: set[str] | None = None,
    every: list[Lab] | None = None,
    handles: dict | None = None,
):
    """(the notebooks to run; notes about files that will not be graded (those no section of the
    rubric names, ``known``: default those of ``labs``); rows for refused student folders;
    {(student, lab): note} for notebooks found under another name). ``every``: all the
    rubric's labs, which a misnamed notebook is matched against (default ``labs``). ``handles``:
    {folder name: the gradebook's name for that person} (default: the folder name)."""
    notes, refused, renamed, handles = [], [], {}, handles or {}
    graded = known if known is not None else {lab.notebook for lab in labs}
    if submissions is None:
        pairs = [(REFERENCE, lab, lab.reference(notebooks), out) for lab in labs]
        notes += [
            f"not graded: notebooks/{p.name} has no rubric section"
            for p in sorted(notebooks.glob("*.ipynb"))
            if p.name not in graded
        ]
    else:
        students, refused = student_folders(submissions, labs)
        notes += [
            f"not graded: {p.name} (not a student folder)"
            for p in sorted(submissions.iterdir())
            if not p.is_dir() and not p.name.startswith(".") and p.name != intake.RECORD
        ]
        refs = intake.reference_ids(every or labs, notebooks)
        pairs, seen = [], {}
        for s in students:
            used, who = set(), handles.get(s.name, s.name)
            if who in seen:
                notes.append(f"not graded: {s.name}/ (the gradebook knows it as the same person as {seen[who]}/)")
                continue
            seen[who] = s.name
            for lab in labs:
                src, note = intake.find_notebook(s, lab, every or labs, refs)
                if src is not None:
                    used.add(src.name)
                    if note:
                        renamed[(who, lab.key)] = note
                pairs.append((who, lab, src or s / lab.notebook, out / who))
            notes += [
                f"not graded: {s.name}/{p.name} (no rubric section for it)"
                for p in sorted(s.glob("*.ipynb"))
                if p.name not in graded and p.name not in used
            ]
    jobs = [
        Job(
            student,
            lab,
            src,
            where / lab.notebook,
            out / ".work" / student / Path(lab.notebook).stem,
            (where / lab.notebook).with_suffix(".log"),
            out / ".grader" / student / Path(lab.notebook).stem,
        )
        for student, lab, src, where in pairs
    ]
    return jobs, notes, refused, renamed


def student_folders(submissions: Path, labs: list[Lab]) -> tuple[list[Path], list[dict]]:
    """(the student folders of ``submissions`` to grade, rows for those refused)."""
    if not submissions.is_dir():
        raise GradeError(
            f"submissions folder {submissions} does not exist; expected DIR/<student>/<notebook>.ipynb, "
            f"or Canvas's or Gradescope's download"
        )
    folders = [p for p in sorted(submissions.iterdir()) if p.is_dir() and not p.name.startswith((".", "__"))]
    if not folders:
        loose = sorted(p.name for p in submissions.glob("*.ipynb"))
        raise GradeError(
            f"no student folders in {submissions}; expected DIR/<student>/<notebook>.ipynb, or "
            f"Canvas's or Gradescope's download"
            + (f" (found notebooks directly in it: {', '.join(loose)})" if loose else "")
        )
    students, refused = [], []
    for s in folders:
        why = student_problem(s.name, labs) or (
            f"{s.name}/ is a symbolic link; copy the student's folder in" if s.is_symlink() else None
        )
        if why:
            refused += [r for lab in labs for r in _refused_rows(s.name, lab, why)]
        else:
            students.append(s)
    return students, refused


def present_labs(labs: list[Lab], submissions: Path, notebooks: Path) -> list[Lab]:
    """The labs of which some student folder holds a notebook (by name or by its cells)."""
    students, _ = student_folders(submissions, labs)
    refs = intake.reference_ids(labs, notebooks)
    return [lab for lab in labs if any(intake.find_notebook(s, lab, labs, refs)[0] is not None for s in students)]


def _refused_rows(student: str, lab: Lab, why: str) -> list[dict]:
    rows = [row(student, lab.key, report.EXECUTION, 0.0, 0.0, "refused", why)]
    return rows + [
        row(student, lab.key, c.name, 0.0, c.points, "not-run", f"the notebook did not run: {why}") for c in lab.checks
    ]


# ---------------------------------------------------------------------------------------------
# The batch


def _check_ours(out: Path) -> None:
    """GradeError when ``out`` holds anything but its lock and no mark of ours (checked before the
    lock is made there too, so a folder of someone else's gets nothing of ours)."""
    if out.is_dir() and not (out / MARKER).exists() and any(p.name != folderlock.LOCK for p in out.iterdir()):
        raise GradeError(
            f"{out} is not empty and was not written by labkit grade; pick a new or empty folder with --out"
        )


def _claim(out: Path) -> None:
    """Make ``out`` ours: new, empty, or written by an earlier batch (whose runs it reuses)."""
    _check_ours(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text(
        "written by `python -m labkit grade`; a later batch reuses the runs it still holds (--force: none)\n"
    )


def choose_sandbox(reference: bool, sandbox: str | None, log=print):
    """The sandbox the batch runs in; GradeError when students' notebooks would run without one."""
    from labkit.grading.run.sandbox import APT_LINE, SANDBOXES

    name = sandbox or "bwrap"
    if name not in SANDBOXES:
        raise GradeError(f"unknown sandbox {name!r}; use one of {', '.join(SANDBOXES)}")
    chosen = SANDBOXES[name]
    why = chosen.unavailable()
    if why:
        if not reference or sandbox == "bwrap":
            raise GradeError(
                f"{why}. Students' notebooks run only in a sandbox; install it ({APT_LINE}), or grade "
                f"without one, trusting every notebook with everything you can reach, with --no-sandbox"
            )
        log(f"note: {why}; the reference notebooks run without a sandbox")
        chosen = SANDBOXES["none"]
    return chosen


def make_setup(chosen, log=print) -> tuple[Setup, str]:
    """How to run this batch's notebooks in the sandbox ``chosen`` (``choose_sandbox``), and the
    warning every report carries (or '')."""
    from labkit.grading.run import limits

    warning = ""
    if not chosen.confined:
        warning = UNSANDBOXED
    limits.remove_stale()
    setup = Setup(sandbox=chosen, backend=limits.best_backend())
    if chosen.confined:
        from labkit.grading.kit.release import student_package

        setup.package = Path(__import__("labkit").__file__).resolve().parent
        kit = scratch.make(KIT_PREFIX, mode=0o755)  # the runs' users read it; a killed grader's is removed next time
        setup.student_kit = student_package(kit)
    else:
        setup.package = Path(__import__("labkit").__file__).resolve().parent
    setup.data, setup.data_env = _data_dirs(log)
    return setup, warning


def _data_dirs(log) -> tuple[list[Path], dict]:
    """The dataset folders a kernel reads (read-only), and the LABKIT_DATA that points there.
    MNIST is fetched first when missing (a sandboxed kernel cannot fetch it)."""
    import os

    from labkit.datasets import loaders as data

    if os.environ.get("LABKIT_DATA"):
        root = Path(os.environ["LABKIT_DATA"]).resolve()
        return [root], {"LABKIT_DATA": str(root)}
    try:
        data.locate("mnist", verify=False)
    except data.DataError as e:
        log(f"note: MNIST is not available, so notebooks that load it will fail: {e}")
    root = data.default_root().resolve()
    return ([root], {"LABKIT_DATA": str(root)}) if root.is_dir() else ([], {})


def grade(options: GradeOptions, log=print) -> Outcome:
    """Grade as ``options`` say (``GradeOptions``), running only what changed since the last batch
    in its ``out`` (``force``: everything), and adding the notebooks to the class graded there."""
    rub = load_rubric(options.rubric)
    every = list(rub.labs.values())
    if not every:
        raise GradeError(f"{rub.path} has no labs; add a [labs.NAME] section for each lab notebook")
    if options.labs:
        unknown = [k for k in options.labs if k not in rub.labs and not rub.lab_for(k)]
        if unknown:
            raise GradeError(f"unknown lab(s) {unknown}; the rubric has {', '.join(rub.labs)}")
    box = choose_sandbox(options.sub is None, options.sandbox, log)  # refused before anything is written
    _claim(options.out)
    db = _open_gradebook(options.out, options.sub is None, log)
    try:
        with warm.session():  # the batch's pages share one warm renderer, stopped with the batch
            return _grade(db, rub, every, options, log, box)
    finally:
        db.close()


def _open_gradebook(out: Path, reference: bool, log) -> gradebook.Gradebook:
    """The gradebook of ``out``: the class's, or the reference self-check's (never both)."""
    db = legacy.open_class(out)
    try:
        db.claim(gradebook.REFERENCE if reference else gradebook.CLASS)
    except gradebook.GradebookError as e:
        db.close()
        raise GradeError(str(e)) from None
    return db


def _grade(db, rub, every, req: GradeOptions, log, box) -> Outcome:
    """One batch in the sandbox ``box``: take the submissions in, find the jobs, run and score them."""
    out, notebooks, labs = req.out, req.notebooks, req.labs
    sub, submissions, roster = req.sub, req.submissions, req.roster
    record = {}
    if sub is not None:
        sub, record = _take_in(sub, out, every, notebooks, req, log)
    chosen = (
        [lab for lab in every if lab.key in labs or lab.notebook in labs]
        if labs
        else (every if sub is None else present_labs(every, sub, notebooks))
    )
    if not chosen:
        raise GradeError(
            f"no student in {submissions} submitted a notebook of any lab of {rub.path} "
            f"({', '.join(lab.notebook for lab in every)}), by name or by its cells"
        )
    handles = {} if sub is None else identify(db, sub, record, roster, log)
    record = _by_handle(record, handles)
    jobs, notes, refused, renamed = find_jobs(
        chosen, out, sub, notebooks, known={lab.notebook for lab in every}, every=every, handles=handles
    )
    if req.student is not None:
        jobs, refused, renamed, record = _only(req.student, jobs, refused, renamed, record, handles, submissions)
        folders = {f for f, h in handles.items() if jobs and h == jobs[0].student} | {req.student}
        notes = [n for n in notes if any(f" {f}/" in n for f in folders)]  # of the student's own files only
    setup, warning = make_setup(box, log)
    from labkit.grading.run.limits import shared  # runs that would share their limits run one at a time

    parallel = req.parallel or (1 if shared(setup.backend) else auto_parallel(chosen))
    try:
        executor = make_executor(setup, parallel, req.slurm, req.slurm_args, rub.path, out, log)
        if roster:
            from labkit.grading.gradebook.publish import save_export_settings

            save_export_settings(out, roster, None)
        for n in notes:
            log(n)
        if warning:
            log(f"WARNING: every notebook {warning}")
        book = Book(
            out,
            chosen,
            jobs,
            refused,
            reference=sub is None,
            warning=warning,
            title="Reference notebooks" if sub is None else f"Grades: {submissions}",
            notebooks=str(notebooks),
            intake=_submitted(record, renamed),
            intake_notes=list(record.get("notes") or []),
        )
        carried = [] if sub is None else _add_prior(book, rub, log)
        book.questions = {
            (lab.key, name): q
            for lab in book.labs
            for name, q in answers.questions(lab, lab.reference(notebooks)).items()
        }
        book.save(rub.text, req.rubric)  # the rubric whole, its lab folders' sections in it
        _submissions(db, book, record, {job.key for job in jobs} if req.student is not None else None)
        if req.student is not None:
            log(f"regrading {jobs[0].student if jobs else req.student} only: every other student stays as graded")
        force, frozen = req.force or req.student is not None, req.student is not None
        return _run_batch(book, setup, executor, force, log, req.similar, set(carried), db, frozen)
    finally:
        if setup.student_kit is not None:
            scratch.release(setup.student_kit.parent)


def _only(student: str, jobs, refused, renamed, record: dict, handles: dict, where) -> tuple:
    """(jobs, refused rows, renamed, intake record) of ``student`` alone (a folder name or the
    gradebook's name for them); GradeError naming the students there when it is nobody's."""
    wanted = handles.get(student, student).lower()
    mine = [j for j in jobs if j.student.lower() == wanted]
    gone = [r for r in refused if r["student"].lower() in (wanted, student.lower())]
    if not mine and not gone:
        known = sorted({j.student for j in jobs} | {r["student"] for r in refused})
        raise GradeError(
            f"--student {student}: no such student in {where} ({len(known)} there: "
            f"{', '.join(known[:10])}{', ...' if len(known) > 10 else ''}); give a folder name or the name the "
            f"reports use"
        )
    name = mine[0].student if mine else gone[0]["student"]
    students = {k: v for k, v in (record.get("students") or {}).items() if k == name}
    notes = [n for n in record.get("notes") or [] if n.startswith(f"{name}:")]
    picked = {k: v for k, v in renamed.items() if k[0] == name}
    return mine, gone, picked, ({**record, "students": students, "notes": notes} if record else record)


def _take_in(source: Path, out: Path, labs: list[Lab], notebooks: Path, req: GradeOptions, log) -> tuple[Path, dict]:
    """(the submissions folder to grade, its intake record): an LMS download is laid out in
    ``out/.intake/`` first (``intake``, with the roster and Canvas's group set ``req`` names);
    a folder is graded where it is."""
    from labkit.grading.gradebook import exports
    from labkit.grading.gradebook.publish import export_settings

    roster, due = req.roster, req.due

    if not source.exists():
        raise GradeError(
            f"submissions {source} does not exist; give a folder DIR/<student>/<notebook>.ipynb, or "
            f"Canvas's or Gradescope's download (.zip)"
        )
    try:
        layout = intake.detect(source)
        if layout == "folders":
            if due:
                log("note: --due is for Gradescope's export; a folder of student folders says nothing of when")
            if req.groups:
                log("note: --groups is for Canvas's download; a folder of student folders is graded as it is")
            return source, intake.read_record(source)
        _claim(out)
        roster = roster or export_settings(out).get("roster")
        people = exports.read_roster(Path(roster)) if roster else None
        dest = out / ".intake" / f"{layout}-{intake.digest(source)}"
        members = read_group_set(req.groups) if req.groups else None
        return dest, intake.import_download(source, dest, labs, notebooks, people, due, log, members).record
    except (intake.IntakeError, ValueError, OSError) as e:
        raise GradeError(str(e)) from None


def _submitted(record: dict, renamed: dict) -> dict:
    """The book's intake entries for this batch: the download's record, and the notebooks
    ``find_jobs`` found under another name."""
    students = {
        s: {
            "person": v.get("person") or {},
            "labs": {k: dict(x) for k, x in (v.get("labs") or {}).items()},
            **({"received": v["received"]} if v.get("received") else {}),
        }
        for s, v in (record.get("students") or {}).items()
    }
    for (student, lab), note in renamed.items():
        info = students.setdefault(student, {"person": {}, "labs": {}})["labs"].setdefault(lab, {})
        info["notes"] = [note, *[n for n in info.get("notes", []) if n != note]]
    return students


def identify(db: gradebook.Gradebook, sub: Path, record: dict, roster: str | None, log) -> dict[str, str]:
    """{student folder of ``sub``: the gradebook's name for that person}. A person is found by
    the LMS's ids the intake recorded (a folder of the grader's own layout: by its name, or a
    roster's SIS Login ID), and made the first time; a roster then gives names to those found."""
    from labkit.grading.gradebook import exports
    from labkit.grading.gradebook.legacy import intake_ids
    from labkit.grading.gradebook.publish import export_settings

    people = record.get("students") or {}
    handles = {}
    for folder in sorted(p.name for p in sub.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))):
        person = (people.get(folder) or {}).get("person") or {}
        handles[folder] = db.identify(intake_ids(person, folder), folder, person.get("name") or "")
    moved = {f: h for f, h in handles.items() if f != h}
    if moved:
        log(
            f"the gradebook knows {len(moved)} student(s) by the name an earlier batch gave them: "
            + ", ".join(f"{f} -> {h}" for f, h in sorted(moved.items())[:10])
            + (", ..." if len(moved) > 10 else "")
        )
    roster = roster or export_settings(db.out).get("roster")
    if roster:
        try:
            attached = db.attach_roster(exports.read_roster(Path(roster)), str(roster))
        except (ValueError, OSError) as e:
            raise GradeError(str(e)) from None
        if attached["unmatched"]:
            log(f"roster: {len(attached['unmatched'])} student(s) of it have submitted nothing graded yet")
    return handles


def _by_handle(record: dict, handles: dict) -> dict:
    """The intake record with its students under the gradebook's names."""
    if not record.get("students"):
        return record
    students = {}
    for s, v in record["students"].items():
        labs = {
            k: ({**x, "group": [handles.get(m, m) for m in x["group"]]} if x.get("group") else x)
            for k, x in (v.get("labs") or {}).items()
        }
        students[handles.get(s, s)] = {**v, "labs": labs}
    return {**record, "students": students}


def _submissions(db: gradebook.Gradebook, book: Book, record: dict, only: set | None = None) -> None:
    """Each submitted file of this batch, with what the LMS said of it, into the gradebook
    (``only``: of these jobs alone, when one student is regraded)."""
    import hashlib

    if book.reference:
        return
    for job in book.jobs if only is None else [j for j in book.jobs if j.key in only]:
        info = book.submitted(job)
        try:
            sha = hashlib.sha256(job.source.read_bytes()).hexdigest()
        except OSError:
            sha = None
        if sha or info:
            db.submitted(job.student, job.lab.key, sha, record.get("lms") or "folder", info)


def _add_prior(book: Book, rub, log) -> list[tuple]:
    """Add to ``book`` the notebooks an earlier batch graded into its folder that this batch
    does not replace (same student and lab); returns their keys."""
    try:
        prior = Book.load(book.out)
    except PublishError:  # nothing graded there yet
        return []
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise GradeError(
            f"the class graded in {book.out} cannot be read back ({type(e).__name__}: {e}), so this batch "
            f"would replace it; grade into a new --out"
        ) from None
    if prior.reference:
        return []
    mine = {job.key for job in book.jobs} | {(r["student"], r["lab"]) for r in book.refused}
    gone = sorted({job.lab.key for job in prior.jobs if job.key not in mine and job.lab.key not in rub.labs})
    if gone:
        log(
            f"note: lab(s) {', '.join(gone)} graded in {book.out} before are not in the rubric now; they leave the reports"
        )
    carried = [job for job in prior.jobs if job.key not in mine and job.lab.key in rub.labs]
    for job in carried:
        job.lab = rub.labs[job.lab.key]
    book.jobs = carried + book.jobs
    book.refused = [r for r in prior.refused if (r["student"], r["lab"]) not in mine] + book.refused
    keys = {lab.key for lab in book.labs} | {job.lab.key for job in carried}
    book.labs = [lab for lab in rub.labs.values() if lab.key in keys]
    for student, entry in prior.intake.items():
        for lab, info in (entry.get("labs") or {}).items():
            if (student, lab) not in mine:
                mine_entry = book.intake.setdefault(student, {"person": entry.get("person") or {}, "labs": {}})
                mine_entry["labs"].setdefault(lab, info)
                mine_entry["person"] = mine_entry.get("person") or entry.get("person") or {}
    this_batch = {s for s, _ in mine}
    for student, entry in prior.intake.items():  # what they handed in that is not a notebook, until a batch says anew
        if entry.get("received") and student not in this_batch:
            book.intake.setdefault(student, {"person": entry.get("person") or {}, "labs": {}})["received"] = entry[
                "received"
            ]
    here = tuple(f"{s}:" for s in this_batch)  # what this batch says of them is current
    book.intake_notes = list(
        dict.fromkeys([n for n in prior.intake_notes if not n.startswith(here)] + book.intake_notes)
    )
    if carried:  # the class's title names every batch
        source = book.title.removeprefix("Grades: ")
        book.title = prior.title + ("" if source in prior.title.removeprefix("Grades: ").split(", ") else f", {source}")
    if carried:
        log(
            f"adding to the {len({j.student for j in carried})} student(s) graded in {book.out} before: their "
            f"{len(carried)} notebook(s) stay as graded unless their file or the rubric changed"
        )
    return [job.key for job in carried]


def auto_parallel(labs: list[Lab]) -> int:
    """Notebooks to run at once by default: one per usable core, as many as memory holds at the
    largest lab's limit. A run leaves its cores idle for part of its time (kernel start, imports,
    single-process cells, idle baselines), which a second run fills; the grader's checks and
    pages take no slot (``batch``)."""
    import psutil

    from labkit.core.proc import usable_cores

    cores = usable_cores()
    largest = max(max(lab.memory_mb, lab.check_memory_mb) for lab in labs) * 2**20
    return max(1, min(cores, int(psutil.virtual_memory().available // largest)))


def expected_seconds(jobs: list[Job], measured: dict[str, float]) -> dict:
    """{job.key: seconds expected}: its lab's in earlier batches here (``ledger.measured_seconds``),
    else the rubric's ``expected_s`` (0: unknown)."""
    return {job.key: measured.get(job.lab.key) or job.lab.expected_s for job in jobs}


def longest_first(jobs: list[Job], expected: dict) -> list[Job]:
    """The jobs, longest ``expected`` first (ties keep their order), so a batch does not end on
    one long notebook running alone while the other slots stand idle."""
    return sorted(jobs, key=lambda job: -expected[job.key])


class Progress:
    """One line per notebook: how it ended, its time, and the batch's elapsed time and ETA.

    ``expected``: each job's expected seconds (0: unknown). The ETA scales the time so far by
    the expected seconds left over those done (with any unknown, by the count of notebooks), so
    a batch that starts with its longest notebooks does not promise as late an end as the count
    would. Notebooks still running count as left, so with ``-j N`` the first lines run high."""

    def __init__(self, expected: dict, log=print):
        self.expected, self.log, self.done, self.t0 = dict(expected), log, [], time.monotonic()

    def line(self, key, name: str, text: str) -> None:
        self.done.append(key)
        elapsed = time.monotonic() - self.t0
        left = [k for k in self.expected if k not in self.done]
        known = all(self.expected.values())
        share = (
            sum(self.expected[k] for k in left) / sum(self.expected[k] for k in self.done)
            if known
            else len(left) / len(self.done)
        )
        eta = f", ETA {_clock(elapsed * share)}" if left else ", done"
        self.log(
            f"[{len(self.done)}/{len(self.expected)}] {_one_line(name)}: {_one_line(text)}; batch {_clock(elapsed)}{eta}"
        )


def _one_line(text: str) -> str:
    """A student's name or reason on a progress line: one line, no control character (``inert``),
    so it cannot rewrite another student's line or write one of its own."""
    return inert.visible(text, inert.LINE)


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def make_executor(setup: Setup, parallel: int, slurm: str | None, slurm_args, rubric, out: Path, log):
    """What runs the notebooks (``executor``): here, ``parallel`` at a time, or as Slurm job
    arrays in the partition ``slurm``."""
    from labkit.grading.run import EXECUTORS, executor

    name, options = (
        (
            "slurm",
            {
                "partition": slurm,
                "rubric": rubric,
                "folder": out / ".grader" / "slurm",
                "sbatch_args": list(slurm_args),
            },
        )
        if slurm
        else ("local", {"parallel": parallel})
    )
    try:
        return EXECUTORS[name](setup, log=log, **options)
    except executor.ExecutorError as e:
        raise GradeError(str(e)) from None


def _run_batch(
    book: Book,
    setup: Setup,
    executor,
    force: bool,
    log,
    similar: float | None = None,
    carried: set = frozenset(),
    db=None,
    frozen: bool = False,
) -> Outcome:
    """Run on ``executor`` the notebooks of ``book`` that changed since the last batch in its
    folder (``force``: all; ``carried``: those an earlier batch graded, which ``frozen`` keeps as
    graded whatever changed), then rebuild every report."""
    outcome = Outcome(rows=list(book.refused), out=book.out, reference=book.reference, warning=book.warning)
    sink = _Recorder(book, outcome, log, db, frozen)
    to_run = sink.plan(force, carried, setup.sandbox.name)
    try:
        _announce(outcome, to_run, executor, setup, log)
        with executor:
            Batch(executor, setup, sink).run(to_run)
    finally:
        _publish(book, outcome, sink.stored, log, similar)
    return outcome


class _Recorder:
    """The batch's sink (``batch.Batch``): which stored outcomes are kept, then each notebook as
    it is scored: its outcome stored (``ledger``), grades.csv rewritten, its progress line, and
    its feedback page to render."""

    def __init__(self, book: Book, outcome: Outcome, log, db=None, frozen: bool = False):
        self.book, self.outcome, self.log, self.db, self.frozen = book, outcome, log, db, frozen
        self.stored: dict[tuple, dict] = {}  # {job key: outcome}, kept or graded in this batch
        self.prints: dict[tuple, dict | None] = {}
        self.untrusted: dict[tuple, str] = {}  # stored outcomes whose signature did not hold (ledger.integrity)
        self.current: dict[tuple, list] = {}  # {job key: its rows now}
        self.ta = answers.read_scores(book.out)
        self.progress = Progress({}, log)
        self.followers: dict[tuple, list[Job]] = {}  # {job key: the group members credited with its run}

    def plan(self, force: bool, carried: set, sandbox: str) -> list[Job]:
        """The notebooks to run, longest first; every other one keeps its stored outcome."""
        to_run = []
        for job in self.book.jobs:
            self.prints[job.key] = ledger.fingerprint(job, sandbox)
            kept = self._kept(job, force, carried)
            if kept is None and self.frozen and job.key in carried:
                continue  # another student's, with no run to keep: left as the gradebook holds it
            if kept is not None:
                self._in_gradebook(job, kept)
                self.stored[job.key] = kept
                self.current[job.key] = self.book.job_rows(job, kept, self.ta)[0]
                self.outcome.kept.append(job.key)
                continue
            leader = self._leader(job, to_run)
            if leader is not None:
                self.followers.setdefault(leader.key, []).append(job)
                continue
            to_run.append(job)
            if why := ledger.integrity(job):
                self.untrusted[job.key] = why
                self.log(f"note: {job.student}/{job.lab.notebook}: {why}")
        expected = expected_seconds(to_run, ledger.measured_seconds(self.book.out))
        self.progress = Progress(expected, self.log)
        return longest_first(to_run, expected)

    def _leader(self, job: Job, to_run: list[Job]) -> Job | None:
        """The member of ``job``'s group whose run of the same file it shares (None: it runs itself)."""
        group = set(self.book.submitted(job).get("group") or ())
        fp = self.prints[job.key]
        for other in to_run:
            if (
                other.student in group
                and other.lab.key == job.lab.key
                and fp is not None
                and self.prints[other.key] == fp
            ):
                return other
        return None

    def _credit(self, leader: Job, stored: dict) -> None:
        """Credit the run of a group's file to every other member: their outcome is the leader's,
        under their own name, with the executed notebook and the submitted copy beside it."""
        for job in self.followers.get(leader.key, []):
            mine = {**stored, "rows": [{**r, "student": job.student} for r in stored["rows"]]}
            for src, dest in ((leader.executed, job.executed), (leader.clean_input, job.clean_input)):
                if src.is_file():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dest)
            if self.db is not None:
                self.db.record_run(job.student, job.lab.key, mine)
            ledger.save_outcome(job, mine)
            self.stored[job.key] = mine
            self.current[job.key] = self.book.job_rows(job, mine, self.ta)[0]
            self.outcome.ran.append(job.key)
            self.log(
                f"{job.student}/{job.lab.notebook}: the group's file, run once as {leader.student}'s: "
                f"credited to {job.student} too"
            )

    def _kept(self, job: Job, force: bool, carried: set) -> dict | None:
        """``job``'s stored outcome when it need not run again, else None."""
        if self.frozen and job.key in carried:
            return ledger.load_outcome(job)
        kept = None if force else ledger.reusable(job, self.prints[job.key])
        if kept is None and job.key in carried and self.prints[job.key] is None:
            kept = ledger.load_outcome(job)  # graded by an earlier batch whose file is gone: it stays as graded
        return kept

    def _in_gradebook(self, job: Job, kept: dict) -> None:
        """A run kept from before is in the gradebook too (one whose batch was killed between
        writing its outcome and its gradebook row is written now)."""
        if self.db is not None:
            held = self.db.latest_run(job.student, job.lab.key)
            if "answers" not in kept and self.book.lab_questions(job.lab.key):  # graded before runs kept them
                kept["answers"] = self._answers(job, kept)
            if (
                held is None
                or held.get("fingerprint") != kept.get("fingerprint")
                or held.get("rows") != kept["rows"]
                or held.get("answers") != kept.get("answers")
            ):
                self.db.record_run(job.student, job.lab.key, kept)

    def _answers(self, job: Job, stored: dict) -> dict:
        """What the run's submitted notebook answers (``answers.states``), kept with the run."""
        return answers.states(self.book.found(job, stored), self.book.lab_questions(job.lab.key))

    def notes(self, job: Job) -> list[str]:
        """The execution row's notes besides the run's: a stored outcome someone changed, what the
        submitted file carried, the kit it was written against when not the grader's, the batch's warning."""
        kit = "" if self.book.reference else stamp.note(job.written_for)  # the kit's own notebooks carry no stamp
        return [self.untrusted.get(job.key, ""), flag_note(job), kit, self.book.warning]

    def record(self, job: Job, result: RunResult, scored: Scored):
        """Store ``job``'s outcome and rewrite grades.csv with its rows; returns its page (``render.Task``)."""
        stored = self.stored[job.key] = {
            "fingerprint": self.prints[job.key],
            "rows": scored.rows,
            "records": scored.records,
            "values": scored.values,
            "input": job.clean_input.is_file() and result.status not in report.NEVER_RAN,
            "executed": result.ran,
            "written_for": job.written_for,  # the kit version the notebook carries (``labs.stamp``)
        }
        cut = stored_files.cut(job.executed, job.clean_input, job.lab.page_output_kb)
        if cut and scored.rows:
            scored.rows[0]["reason"] = "; ".join(x for x in (scored.rows[0]["reason"], cut) if x)
        stored["answers"] = self._answers(job, stored)
        with _own_files(job):
            if self.db is not None:  # the gradebook first: an outcome file without its run there runs again
                self.db.record_run(job.student, job.lab.key, stored)
            ledger.save_outcome(job, stored)
        rows = self.current[job.key] = self.book.job_rows(job, stored, self.ta)[0]
        with _own_files(job):
            self._credit(job, stored)
        self.outcome.rows[:] = self.book.refused + [r for j in self.book.jobs for r in self.current.get(j.key, [])]
        with _own_files(job):
            report.write_csv(self.outcome.rows, self.book.out / "grades.csv")
        self.outcome.ran.append(job.key)
        name = job.lab.notebook if self.book.reference else f"{job.student}/{job.lab.notebook}"
        self.progress.line(job.key, name, _ending(job, rows, result))
        return self.book.page_task(job, rows, stored, force=True)


@contextlib.contextmanager
def _own_files(job: Job):
    """The grader writing its own files for ``job``: their failure (a full disk, a gradebook it
    cannot write) is the batch's error (``GraderFault``), never a row of the student's."""
    import sqlite3

    try:
        yield
    except (OSError, sqlite3.OperationalError) as e:
        raise GraderFault(
            f"the grader could not record {job.student}/{job.lab.notebook} ({type(e).__name__}: {e}), so it "
            f"stopped; once the cause is fixed, grading again runs what it did not record"
        ) from e


def _ending(job: Job, rows: list[dict], result: RunResult) -> str:
    """How a notebook ended, for its progress line: status, points, seconds, reason."""
    got, most, pending = report.totals(rows)[job.key][:3]
    return (
        f"{rows[0]['status']}, {report.pts(got, most)} points"
        + (f" (+{pending:g} pending)" if pending else "")
        + (f", {result.seconds:g} s" if result.ran else "")
        + (f" ({result.reason})" if result.reason else "")
    )


def _announce(outcome: Outcome, to_run: list[Job], executor, setup: Setup, log) -> None:
    if outcome.kept:
        log(
            f"kept {len(outcome.kept)} notebook(s) whose submission, rubric and grader are unchanged since their "
            f"last run (--force runs them again)"
        )
    if to_run:
        log(
            f"running {len(to_run)} notebook(s), {executor.describe()}, "
            f"{'in a ' + setup.sandbox.name + ' sandbox' if setup.sandbox.confined else 'without a sandbox'}, "
            f"limits by {setup.backend}"
        )


def _publish(book: Book, outcome: Outcome, stored: dict, log, similar: float | None) -> None:
    """Every report rebuilt from the stored runs (``publish``); the reference run's report.md too."""
    outcome.rows[:] = book.write_reports(log)
    _similarity(book, log, similar)
    if not outcome.reference:
        return
    for job in book.jobs:
        if job.key in stored:
            outcome.entries.append(
                {
                    "lab": job.lab,
                    "records": stored[job.key].get("records") or {},
                    "rows": [r for r in outcome.rows if (r["student"], r["lab"]) == job.key],
                    "values": stored[job.key].get("values") or {},
                }
            )
    report.write_reference_report(outcome.entries, book.out / "report.md", book.out / "report.csv", book.warning)


def _similarity(book: Book, log, threshold: float | None = None) -> None:
    """similarity.html: flags only; a failure to compare never costs the batch its reports."""
    from labkit.grading.judge import similarity

    if book.reference:
        return
    try:
        pairs = similarity.report(book, similarity.THRESHOLD if threshold is None else threshold)
    except (OSError, ValueError) as e:
        log(f"similarity report not written: {type(e).__name__}: {e}")
        return
    if pairs:
        log(
            f"similarity.html: {len(pairs)} pair(s) of notebooks share code or answers above the threshold "
            f"(flags only: no points change)"
        )


def main(args) -> int:
    """The ``grade`` subcommand."""
    from labkit.grading.judge.rubric import RubricError

    def interrupt(signum, frame):  # unwind like Ctrl-C: every running notebook's group is killed
        raise KeyboardInterrupt(f"signal {signum}")

    if args.slurm and args.jobs is not None:
        print(
            f"error: -j {args.jobs} (JOBS) does not apply with --slurm (SLURM): Slurm decides how many notebooks "
            f"run at once; give each its cores with --slurm-args='--cpus-per-task=N' (SLURM_ARGS), and leave -j out",
            file=sys.stderr,
        )
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too: a background shell ignores it
        signal.signal(sig, interrupt)
    args.out = args.out or ("out/grade" if args.submissions else REFERENCE_OUT)
    held, waiting = contextlib.ExitStack(), True  # the folder's lock (folderlock), for the whole batch
    try:
        _check_ours(Path(args.out))
        held.enter_context(folderlock.hold(args.out, getattr(args, "wait", None)))
        waiting = False
        outcome = grade(GradeOptions.from_args(args, args.out))
    except folderlock.LockError as e:
        inert.say(f"error: {e}", file=sys.stderr)
        return folderlock.BUSY_EXIT if isinstance(e, folderlock.FolderBusy) else 2
    except (GradeError, RubricError, PublishError, ledger.IntegrityError) as e:
        inert.say(f"error: {e}", file=sys.stderr)
        return 2
    except GraderFault as e:
        inert.say(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if waiting:
            print(f"interrupted while waiting for {args.out}: nothing was written", file=sys.stderr)
            return 130
        print(
            f"interrupted: the notebooks still running were killed; what finished is in {args.out}/grades.csv, "
            f"and grading again resumes with the rest",
            file=sys.stderr,
        )
        return 130
    finally:
        held.close()
    bad = outcome.not_passed
    waiting = sum(1 for r in outcome.rows if r["status"] == report.PENDING)
    print(
        f"wrote {outcome.out / 'grades.csv'} and {outcome.out / 'summary.md'}"
        + (f" and {outcome.out / 'report.md'}" if outcome.reference else "")
        + f"; {len(bad)} row(s) not passed"
        + (f", {waiting} answer(s) awaiting a TA" if waiting else "")
    )
    return outcome.exit_code


def main_import(args) -> int:
    """The ``grade-import`` subcommand: lay out an LMS download for inspection, grading nothing."""
    from labkit.grading.gradebook import exports
    from labkit.grading.judge.rubric import RubricError

    try:
        labs = list(load_rubric(args.rubric).labs.values())
        people = exports.read_roster(Path(args.roster)) if args.roster else None
        members = read_group_set(args.groups) if args.groups else None
        intake.import_download(args.download, args.into, labs, args.notebooks, people, args.due, groups=members)
    except (intake.IntakeError, RubricError, ValueError, OSError) as e:
        inert.say(f"error: {e}", file=sys.stderr)
        return 2
    print(f"grade it with: make grade SUBMISSIONS={args.into}")
    return 0
