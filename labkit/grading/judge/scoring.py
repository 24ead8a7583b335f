"""How one run becomes rows: the one scoring function of a grading batch.

``examine(job, result)`` reads what the run left once (the executed notebook, its records)
and scores the checks that read the notebook; it says what the grader must still check
itself in its own sandboxes (claims to verify, hidden checks: ``checks.Checking``).
``score(job, result, evidence, checked)`` applies those checks' scores and the lab's evidence
gate, and writes the notebook's rows: its execution row, whose reason carries the notes, and
one row per check.

The batch (``batch.Batch``) calls both for every notebook it runs; ``score`` alone (no
``checked``) scores a notebook from its executed file, as a rebuild without the sandboxes would.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.grading.gradebook import report
from labkit.grading.judge.rubric import Score, evaluate, gate
from labkit.grading.run import runner
from labkit.grading.run.runner import Job, RunResult
from labkit.notebook.record import Missing, cell_name, lookup

MAX_EXECUTED_BYTES = 64 * 2**20


@dataclass
class Evidence:
    """What a run left, read once: its records, the scores of the checks that read the
    notebook, and what the grader checks itself (``to_check``)."""

    records: dict
    scores: dict  # {check name: Score}, the notebook's own
    problem: str = ""  # why the executed notebook could not be read ("" when it could)
    verified: list = ()  # (check, claimed value): claims the grader runs again
    hidden: list = ()  # (check, declare.Check): the student's functions on the grader's inputs

    @property
    def to_check(self) -> bool:
        return bool(self.verified or self.hidden)


@dataclass
class Scored:
    """What grading one notebook produced."""

    rows: list[dict]
    records: dict
    values: dict


def examine(job: Job, result: RunResult) -> Evidence:
    """Read the executed notebook of ``job`` and score what it shows (see the module docstring)."""
    nb, records, problem = read_executed(job, result)
    scores = notebook_scores(job, result, nb, records)
    verified = to_verify(job, scores, records)
    return Evidence(records, scores, problem, verified, hidden_checks(job, result))


def score(
    job: Job, result: RunResult, evidence: Evidence | None = None, checked: dict | None = None, notes=()
) -> Scored:
    """(rows, records, values) of ``job``'s run: ``evidence`` (default: ``examine``) with the
    grader's own checks (``checked``: {check name: Score}; without them a hidden check is
    not-run and a verified check keeps its notebook score), gated; ``notes`` join the execution
    row's reason after the run's own and the reading's problem."""
    evidence = evidence if evidence is not None else examine(job, result)
    scores = merge(job, result, evidence.scores, checked or {})
    rows = rows_for(job, result, scores, [evidence.problem, *notes])
    return Scored(rows, evidence.records, {name: s.value for name, s in scores.items()})


def flag_note(job: Job) -> str:
    """The note for what the submitted file carried that only a run may produce ('' for nothing)."""
    if not job.flags:
        return ""
    more = "; ..." if len(job.flags) > 5 else ""
    return (
        f"flagged: the submitted file carried what only a run may produce, ignored ({'; '.join(job.flags[:5])}{more})"
    )


def read_executed(job: Job, result: RunResult):
    """(notebook, records, problem): the executed notebook and its code cells' records."""
    import nbformat

    from labkit.notebook.record import read_records

    if not result.ran or not job.executed.is_file():
        return None, {}, ""
    size = job.executed.stat().st_size
    if size > MAX_EXECUTED_BYTES:
        return (
            None,
            {},
            (
                f"the executed notebook is {size / 2**20:.0f} MB of output, over the "
                f"{MAX_EXECUTED_BYTES // 2**20} MB the grader reads; print less"
            ),
        )
    try:
        nb = nbformat.read(str(job.executed), as_version=4)
        return nb, read_records(nb), ""
    except (OSError, ValueError, KeyError, TypeError) as e:  # a record with a corrupt payload, say
        return None, {}, f"the executed notebook could not be read back: {type(e).__name__}: {e}"


def notebook_scores(job: Job, result: RunResult, nb, records: dict) -> dict[str, Score]:
    """Scores of the checks that read the notebook; external (hidden) and manual (analysis)
    checks are left out."""
    scores = {}
    for check in job.lab.checks:
        if check.external or check.manual:
            continue
        if nb is None:
            scores[check.name] = Score(0.0, check.points, "not-run", f"the notebook did not run: {result.reason}")
            continue
        try:
            s = evaluate(check, nb, records)
            if s.status == "missing" and result.status != "ok":
                s.reason += f" ({_stopped(result)})"
        except Exception as e:  # a notebook shaped like nothing the checks expect: this row, not the batch
            s = Score(
                0.0, check.points, "grader-error", f"the grader could not check this notebook: {type(e).__name__}: {e}"
            )
        scores[check.name] = s
    return scores


def to_verify(job: Job, scores: dict[str, Score], records: dict) -> list:
    """(check, claimed value) for every check with a verifier that the notebook's records pass."""
    out = []
    for check in job.lab.checks:
        if check.verify and check.name in scores and scores[check.name].status in ("pass", "partial"):
            try:
                out.append((check, lookup(records, check.ref)))
            except Missing as e:
                s = scores[check.name]
                scores[check.name] = Score(0.0, s.max, "unverified", f"nothing to verify: {e}", s.value)
    return out


def hidden_checks(job: Job, result: RunResult) -> list:
    """(check, declare.Check) for the lab's hidden checks, when the notebook ran."""
    external = [c for c in job.lab.checks if c.external] if result.ran else []
    if not external:
        return []
    from labkit.grading.judge.hidden import HIDDEN

    return [(c, HIDDEN[c.spec["check"]]) for c in external]


def merge(job: Job, result: RunResult, scores: dict[str, Score], checked: dict[str, Score]) -> dict[str, Score]:
    """The notebook's scores with the grader's own checks applied, then the lab's evidence gate."""
    scores = dict(scores)
    for check in job.lab.checks:
        got = checked.get(check.name)
        if check.manual:  # scored from the submitted text when the reports are written (publish)
            scores[check.name] = Score(0.0, check.points, report.PENDING, "")
        elif check.external:
            scores[check.name] = got or Score(
                0.0, check.points, "not-run", f"the notebook did not run: {result.reason}"
            )
        elif got is not None and got.status != "pass":
            s = scores[check.name]
            scores[check.name] = Score(0.0, s.max, got.status, got.reason, s.value)
    return gate(job.lab, scores)


def rows_for(job: Job, result: RunResult, scores: dict[str, Score], notes: list[str]) -> list[dict]:
    reason = "; ".join([r for r in [result.reason, *notes] if r])
    rows = [row(job.student, job.lab.key, report.EXECUTION, 0.0, 0.0, result.status, reason, result.seconds)]
    rows += [
        row(
            job.student,
            job.lab.key,
            c.name,
            scores[c.name].points,
            scores[c.name].max,
            scores[c.name].status,
            scores[c.name].reason,
        )
        for c in job.lab.checks
    ]
    return rows


def row(student: str, lab: str, check: str, points, most, status: str, reason: str, seconds="") -> dict:
    """One line of the grade book: a check's points for one student's lab (``execution``: the run)."""
    return {
        "student": student,
        "lab": lab,
        "check": check,
        "points": points,
        "max": most,
        "status": status,
        "reason": reason,
        "seconds": seconds,
    }


def _stopped(result: RunResult) -> str:
    what = result.ename or result.status
    return (
        f"the run stopped in {cell_name(result.cell)}: {what}" if result.cell is not None else f"the run ended: {what}"
    )


def examined(job: Job, result: RunResult):
    """``scoring.examine(job, result)`` (the executed notebook read, its records and the checks
    that read it), done in ``grader_side``'s child; its checks named there, the job's own here."""

    def read():
        e = examine(job, result)
        return e.records, e.scores, e.problem, [(c.name, value) for c, value in e.verified]

    records, scores, problem, verified = runner.grader_side(job, "reading its executed notebook", read)
    checks = {c.name: c for c in job.lab.checks}
    return Evidence(records, scores, problem, [(checks[n], v) for n, v in verified], hidden_checks(job, result))
