"""An output folder of the layout before the gradebook (``.grader/batch.json``, one
``outcome.json`` per run, ``ta_scores.csv``, ``.grader/exported.json``), imported into its
gradebook once, with nothing lost: every student of the manifest becomes a person (with the
LMS's ids its intake record kept), every signed outcome a run, every TA score a current score,
and the last export a sent one (so the regrade list goes on from it)."""

from __future__ import annotations

import json
from pathlib import Path

from labkit.grading.gradebook import store as gb


def intake_ids(person: dict | None, folder: str) -> dict:
    """{id kind: value} of a student as an intake record names them (``intake._person_record``)."""
    person = person or {}
    ids = {kind: person.get(key) for key, kind in gb.INTAKE_IDS.items()}
    for col, kind in gb.ROSTER_IDS.items():
        ids.setdefault(kind, None)
        if (person.get("roster") or {}).get(col):
            ids[kind] = ids[kind] or person["roster"][col]
    return {**{k: v for k, v in ids.items() if v}, "folder": folder}


def import_folder(book: gb.Gradebook, log=print) -> int:
    """Import ``book.out`` as the earlier layout left it; returns the runs imported (0: nothing there)."""
    from labkit.grading.judge import answers
    from labkit.grading.run import ledger
    from labkit.grading.run.runner import Job

    out = book.out
    try:
        man = ledger.read_manifest(out)
    except ledger.IntegrityError as e:
        log(f"note: the earlier batch in {out} was not imported into its gradebook: {e}")
        return 0
    if man is None:
        return 0
    book.put("kind", gb.REFERENCE if man.get("reference") else gb.CLASS)
    intake = man.get("intake") or {}
    runs = 0
    for d in man.get("jobs") or []:
        student = d["student"]
        entry = intake.get(student) or {}
        person = entry.get("person") or {}
        handle = book.identify(intake_ids(person, student), student, person.get("name") or "")
        info = (entry.get("labs") or {}).get(d["lab"])
        if info:
            book.submitted(handle, d["lab"], None, person.get("lms") or "", info)
        lab = type("L", (), {"key": d["lab"]})()
        job = Job(
            student, lab, Path(d["source"]), Path(d["executed"]), Path(d["workdir"]), Path(d["log"]), Path(d["private"])
        )
        outcome = ledger.load_outcome(job)
        if outcome is not None and book.latest_run(handle, d["lab"]) is None:
            book.record_run(handle, d["lab"], outcome)
            runs += 1
    for (lab, check, student), s in answers.read_scores_csv(out).items():
        handle = book.identify({"folder": student}, student)
        book.ta_scores({(lab, check, handle): s})
    _import_export(book, out)
    if runs:
        log(f"imported the {runs} run(s) graded in {out} before into its gradebook ({gb.FILE})")
    return runs


def _import_export(book: gb.Gradebook, out: Path) -> None:
    from labkit.grading.gradebook.exports import EXPORTED

    try:
        data = json.loads((Path(out) / ".grader" / EXPORTED).read_text())
        scores = {(s, lab): v for s, lab, v in data["scores"]}
    except (OSError, ValueError, KeyError, TypeError):
        return
    book.exported(str(out / "canvas.csv"), scores, True, f"imported: the export of {data.get('when', '')}")


def open_class(out) -> gb.Gradebook:
    """The gradebook of ``out``, with an output folder of the earlier layout (manifest and
    ``outcome.json`` files, no database) imported into it once."""
    book = gb.Gradebook(out)
    if book.get("imported") is None:
        import_folder(book)
        book.put("imported", gb.now())
    return book
