"""``make grade``: run every notebook (the reference ones, or each student's), score it against
the rubric, re-check its claims, and write the reports.

Layout of a submissions folder: ``DIR/<student>/<lab notebook>.ipynb``. Without one, the
reference notebooks in ``notebooks/`` are graded as student ``reference``. Output in ``out``:

    grades.csv, summary.md            every run (report.md, report.csv too for the reference run)
    <student>/<notebook>.ipynb|.html|.log   executed notebook, feedback page, runner+kernel log
    <notebook>.ipynb|.html|.log       the same for the reference run
    .work/<student>/<notebook stem>/  the fresh directory each notebook ran in (artifacts, runs/)
"""
from __future__ import annotations

import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from labkit.grading import report, verify
from labkit.grading.rubric import Lab, Missing, Score, evaluate, load_rubric, lookup
from labkit.grading.runner import Job, RunResult, prepare, run_all

REFERENCE = "reference"
MARKER = ".labkit-grade"   # marks an output folder as ours, so a rerun may clear it


class GradeError(ValueError):
    """The batch cannot start (bad folder, bad rubric); the message says what to fix."""


@dataclass
class Outcome:
    rows: list[dict]
    out: Path
    reference: bool
    entries: list[dict] = field(default_factory=list)

    @property
    def not_passed(self) -> list[dict]:
        return [r for r in self.rows if r["status"] not in report.GOOD]

    @property
    def exit_code(self) -> int:
        """Reference run: 1 when anything did not pass (the kit checks itself). Submissions:
        0 once the batch completed, since students failing checks is the normal case."""
        return 1 if self.reference and (self.not_passed or not self.rows) else 0


def find_jobs(labs: list[Lab], out: Path, submissions: Path | None, notebooks: Path,
              known: set[str] | None = None) -> tuple[list[Job], list[str]]:
    """The notebooks to run, and notes about files that will not be graded: those no section of
    the rubric names (``known``: every notebook it names; default those of ``labs``)."""
    notes = []
    graded = known if known is not None else {lab.notebook for lab in labs}
    if submissions is None:
        pairs = [(REFERENCE, lab, notebooks / lab.notebook, out) for lab in labs]
        notes += [f"not graded: notebooks/{p.name} has no rubric section" for p in sorted(notebooks.glob("*.ipynb"))
                  if p.name not in graded]
    else:
        if not submissions.is_dir():
            raise GradeError(f"submissions folder {submissions} does not exist; expected DIR/<student>/<notebook>.ipynb")
        students = sorted(p for p in submissions.iterdir()
                          if p.is_dir() and not p.name.startswith((".", "__")))
        if not students:
            loose = sorted(p.name for p in submissions.glob("*.ipynb"))
            raise GradeError(f"no student folders in {submissions}; expected DIR/<student>/<notebook>.ipynb"
                             + (f" (found notebooks directly in it: {', '.join(loose)})" if loose else ""))
        pairs = [(s.name, lab, s / lab.notebook, out / s.name) for s in students for lab in labs]
        for s in students:
            notes += [f"not graded: {s.name}/{p.name} (no rubric section for it)"
                      for p in sorted(s.glob("*.ipynb")) if p.name not in graded]
    jobs = [Job(student, lab, src, where / lab.notebook, out / ".work" / student / Path(lab.notebook).stem,
                (where / lab.notebook).with_suffix(".log")) for student, lab, src, where in pairs]
    return jobs, notes


def score(job: Job, result: RunResult) -> tuple[list[dict], dict, dict]:
    """(rows, records, values): one row for the run and one per check, the records, each check's value."""
    import nbformat

    from labkit.record import read_records

    def row(check, points, most, status, reason, seconds=""):
        return {"student": job.student, "lab": job.lab.key, "check": check, "points": points, "max": most,
                "status": status, "reason": reason, "seconds": seconds}

    rows = [row(report.EXECUTION, 0.0, 0.0, result.status, result.reason, result.seconds)]
    nb, records, values = None, {}, {}
    if result.ran and job.executed.is_file():
        try:
            nb = nbformat.read(str(job.executed), as_version=4)
            records = read_records(nb)
        except (OSError, ValueError, KeyError, TypeError) as e:  # a record with a corrupt payload, say
            rows[0]["reason"] = (rows[0]["reason"] + "; " if rows[0]["reason"] else "") + \
                f"the executed notebook could not be read back: {type(e).__name__}: {e}"
            nb = None
    params = verify.notebook_parameters(nb) if nb is not None else {}
    for check in job.lab.checks:
        if nb is None:
            s = Score(0.0, check.points, "not-run", f"the notebook did not run: {result.reason}")
        else:
            try:
                s = evaluate(check, nb, records)
                if s.status == "missing" and result.status != "ok":
                    s.reason += f" ({_stopped(result)})"
                if check.verify and s.status in ("pass", "partial"):
                    s = _verified(check, s, job, records, params)
            except Exception as e:  # a notebook shaped like nothing the checks expect: this row, not the batch
                s = Score(0.0, check.points, "grader-error",
                          f"the grader could not check this notebook: {type(e).__name__}: {e}")
        values[check.name] = s.value
        rows.append(row(check.name, s.points, s.max, s.status, s.reason))
    return rows, records, values


def _stopped(result: RunResult) -> str:
    what = result.ename or result.status
    return f"the run stopped in cell {result.cell}: {what}" if result.cell is not None else f"the run ended: {what}"


def _verified(check, s: Score, job: Job, records: dict, params: dict) -> Score:
    try:
        claimed = lookup(records, check.ref)
    except Missing as e:
        return Score(0.0, s.max, "unverified", f"nothing to verify: {e}", s.value)
    ctx = verify.Context(workdir=job.workdir, records=records, params=params, claimed=claimed)
    try:
        verdict = verify.run(check.verify, ctx)
    except verify.Unverifiable as e:
        return Score(0.0, s.max, "unverified", str(e), s.value)
    if not verdict.ok:
        return Score(0.0, s.max, "mismatch", verdict.reason, s.value)
    return s


def _clear(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise GradeError(f"{out} is not empty and was not written by labkit grade; pick a new or empty "
                             f"folder with --out (grading clears its output folder first)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by `python -m labkit grade`; cleared on the next run\n")


def grade(rubric="notebooks/rubric.toml", submissions=None, out="out/grade", parallel: int = 1,
          labs: list[str] | None = None, notebooks="notebooks", log=print) -> Outcome:
    """Grade the reference notebooks (``submissions=None``) or a submissions folder."""
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise GradeError(f"-j {parallel!r}: give how many notebooks to run at a time, 1 or more")
    rub = load_rubric(rubric)
    chosen = list(rub.labs.values())
    if labs:
        unknown = [k for k in labs if k not in rub.labs and not rub.lab_for(k)]
        if unknown:
            raise GradeError(f"unknown lab(s) {unknown}; the rubric has {', '.join(rub.labs)}")
        chosen = [lab for lab in chosen if lab.key in labs or lab.notebook in labs]
    if not chosen:
        raise GradeError(f"{rub.path} has no labs; add a [labs.NAME] section for each lab notebook")
    out = Path(out)
    sub = Path(submissions) if submissions else None
    jobs, notes = find_jobs(chosen, out, sub, Path(notebooks), known={lab.notebook for lab in rub.labs.values()})
    _clear(out)
    for n in notes:
        log(n)

    outcome = Outcome(rows=[], out=out, reference=sub is None)
    done: dict[tuple, list[dict]] = {}
    order = {job.key: i for i, job in enumerate(jobs)}

    def finished(job: Job, result: RunResult) -> None:
        rows, records, values = score(job, result)
        done[job.key] = rows
        outcome.rows[:] = [r for key in sorted(done, key=order.get) for r in done[key]]
        report.write_csv(outcome.rows, out / "grades.csv")
        name = job.lab.notebook if outcome.reference else f"{job.student}/{job.lab.notebook}"
        report.write_feedback(job.executed if result.ran else None, rows, job.executed.with_suffix(".html"),
                              f"{job.student}: {job.lab.key} ({job.lab.title})")
        if outcome.reference:
            outcome.entries.append({"lab": job.lab, "rows": rows, "records": records, "values": values})
        got = sum(r["points"] for r in rows[1:])
        log(f"[{len(done)}/{len(jobs)}] {name}: {rows[0]['status']}, {got:g}/{job.lab.max_points:g} points"
            + (f", {result.seconds:g} s" if result.ran else "") + (f" ({result.reason})" if result.reason else ""))

    runnable = []
    for job in jobs:
        early = prepare(job)
        if early is None:
            runnable.append(job)
        else:
            finished(job, early)
    try:
        if runnable:
            log(f"running {len(runnable)} notebook(s), {parallel} at a time")
        run_all(runnable, parallel, on_done=finished)
    finally:
        report.write_csv(outcome.rows, out / "grades.csv")
        report.write_summary(outcome.rows, chosen, out / "summary.md",
                             "Reference notebooks" if outcome.reference else f"Grades: {sub}")
        if outcome.reference:
            outcome.entries.sort(key=lambda e: chosen.index(e["lab"]))
            report.write_reference_report(outcome.entries, out / "report.md", out / "report.csv")
    return outcome


def main(args) -> int:
    """The ``grade`` subcommand."""
    from labkit.grading.rubric import RubricError

    def interrupt(signum, frame):  # unwind like Ctrl-C: every running notebook's tree is killed
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)
    try:
        outcome = grade(args.rubric, args.submissions, args.out, args.jobs, args.lab, args.notebooks)
    except (GradeError, RubricError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: the notebooks still running were killed; what finished is in {args.out}/grades.csv",
              file=sys.stderr)
        return 130
    bad = outcome.not_passed
    print(f"wrote {outcome.out / 'grades.csv'} and {outcome.out / 'summary.md'}"
          + (f" and {outcome.out / 'report.md'}" if outcome.reference else "")
          + f"; {len(bad)} row(s) not passed")
    return outcome.exit_code
