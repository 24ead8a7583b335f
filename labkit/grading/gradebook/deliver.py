"""Feedback pages packed for the students (``grade-deliver``), in ``OUT/deliver/``:

- ``students/<student>.zip``: ``<student>/<lab notebook>.html``, the student's page of every lab
  graded, for any LMS (or e-mail): one zip per student, holding nothing of anyone else;
- ``canvas/<lab>.zip``, for labs that came from Canvas's download: every student's page named
  ``<name>_[LATE_]<user id>_<attachment id>_feedback-<lab>.html``, the prefix of the file they
  submitted. Canvas's "Re-Upload Submissions" (on the assignment's page) takes this zip and
  attaches each file as a comment to its student's submission, matching it by the user id and
  the attachment id in its name (canvas-lms ``Assignment#infer_comment_context_from_filename``);
  the attachment must be the submitted file, which the graded notebook's prefix names.

The folder is rebuilt each time from the pages as they are, so a zip never holds a stale page.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from labkit.core import atomic

FOLDER = "deliver"


def _zip(path: Path, files: list[tuple[Path, str]]) -> Path:
    with atomic.replacing(path, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
        for src, name in files:
            zf.write(src, name)
    return path


def pages(book) -> dict[str, list]:
    """{student: [(job, page path)]} of the pages that exist, in the book's order."""
    out: dict[str, list] = {}
    for job in book.jobs:
        page = job.executed.with_suffix(".html")
        if page.is_file():
            out.setdefault(job.student, []).append((job, page))
    return out


def write(book, rows: list[dict]) -> list[Path]:
    """Write ``OUT/deliver/`` (replacing it); returns the zips."""
    folder = Path(book.out) / FOLDER
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "students").mkdir()
    written = []
    by_student = pages(book)
    for student, items in by_student.items():
        written.append(_zip(folder / "students" / f"{student}.zip", [(p, f"{student}/{p.name}") for _, p in items]))
    for lab in book.labs:
        files = [
            (p, f"{prefix}_feedback-{lab.key}.html")
            for items in by_student.values()
            for job, p in items
            if job.lab.key == lab.key and (prefix := book.submitted(job).get("canvas_prefix"))
        ]
        if files:
            (folder / "canvas").mkdir(exist_ok=True)
            written.append(_zip(folder / "canvas" / f"{lab.key}.zip", files))
    return written


def describe(book, written: list[Path]) -> list[str]:
    """What was written and what the instructor does with it."""
    students = [p for p in written if p.parent.name == "students"]
    canvas = [p for p in written if p.parent.name == "canvas"]
    lines = [
        f"wrote {len(students)} student zip(s) to {Path(book.out) / FOLDER / 'students'}/ (<student>.zip: that "
        f"student's feedback pages only)"
    ]
    for p in canvas:
        lines.append(
            f"{p}: on Canvas, open the assignment, choose Re-Upload Submissions and give it this zip; each "
            f"page becomes a comment on its student's submission"
        )
    if not canvas:
        lines.append(
            "send each student their zip (Gradescope and plain folders have no bulk upload of feedback "
            "files; a Canvas download gets a re-upload zip per lab)"
        )
    return lines
