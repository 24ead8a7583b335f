"""Downloads as Canvas and Gradescope give them to an instructor, built for tests.

Canvas, "Download Submissions": one zip of loose files named
``<name>_[LATE_]<user id>_<attachment id>_<file name as uploaded>`` (Canvas adds ``-1``, ``-2`` to
a re-uploaded file's name; ``[LATE_]anon_<id>_...`` under anonymous grading; ``..._link.html`` and
``..._text.html`` for URL and text entries), and its gradebook export (the roster). Gradescope, "Export
Submissions": ``assignment_<id>_export/`` with ``submission_metadata.yml`` (Ruby-symbol keys, as
Gradescope writes them) and one ``submission_<id>/`` folder per submission.
"""

from __future__ import annotations

import csv
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class CanvasFile:
    name: str  # Canvas's lower-case name: smithjohn
    user_id: int
    attachment_id: int
    filename: str  # as the student uploaded it (Canvas's -N included)
    data: bytes
    late: bool = False
    anonymous_id: str = ""  # anonymous grading: [LATE_]anon_<id>_<attachment id>_<file>, no name or user id

    @property
    def zip_name(self) -> str:
        return "_".join(_who(self) + [str(self.attachment_id), self.filename])


@dataclass
class CanvasEntry:
    """A website URL (``link``) or text (``text``) entry: ``<name>_[LATE_]<user id>_link.html``, no attachment id."""

    name: str
    user_id: int
    kind: str  # link | text
    late: bool = False
    anonymous_id: str = ""
    data: bytes = b"<html><body><a href='https://colab.research.google.com/drive/1x'>my lab</a></body></html>\n"

    @property
    def zip_name(self) -> str:
        return "_".join(_who(self) + [f"{self.kind}.html"])


def _who(f) -> list[str]:
    """The fields Canvas puts before a file's own (ContentZipper#get_filename)."""
    late = ["LATE"] if f.late else []
    return late + ["anon", f.anonymous_id] if f.anonymous_id else [f.name] + late + [str(f.user_id)]


def canvas_zip(path: Path, files: list) -> Path:
    """Canvas's "Download Submissions" zip of ``files`` (CanvasFile, CanvasEntry), each under its Canvas name."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            zf.writestr(f.zip_name, f.data)
    return path


def canvas_roster(path: Path, people: list[tuple], assignment: str | dict = "Alpha (901)", points: str = "6") -> Path:
    """Canvas's gradebook export: (display name "Last, First", ID, SIS User ID, SIS Login ID) per
    student; ``assignment``: its column, worth ``points``, or {column: points} for several."""
    columns = assignment if isinstance(assignment, dict) else {assignment: points}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *columns])
        w.writerow(["    Points Possible", "", "", "", "", *columns.values()])
        for display, uid, sis, login in people:
            w.writerow([display, str(uid), sis, login, "Sec 1", *["" for _ in columns]])
    return path


def canvas_gradebook(path: Path, people: list[tuple], points: dict, manual_posting: bool = True) -> Path:
    """Canvas's gradebook export as Grades > Export writes it: the header (each assignment as
    ``Title (id)``), a ``Manual Posting`` row (an assignment whose grades are posted by hand: its
    Student and ID cells empty), the ``    Points Possible`` row ({column: points}), then a row
    per (display name "Last, First", ID, SIS User ID, SIS Login ID); Canvas's Test Student is
    one of them ("Student, Test")."""
    columns = list(points)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *columns])
        if manual_posting:
            w.writerow(["", "", "", "", "", *["Manual Posting" for _ in columns]])
        w.writerow(["    Points Possible", "", "", "", "", *[points[c] for c in columns]])
        for display, uid, sis, login in people:
            w.writerow([display, str(uid), sis, login, "1", *["" for _ in columns]])
    return path


@dataclass
class GradescopeSubmission:
    id: int
    submitters: list  # [(name, email, sid)]
    created_at: str  # as Gradescope writes it: 2024-10-01 06:58:05.746365000 Z
    files: dict = field(default_factory=dict)  # {name in the submission's folder: bytes}


def _q(text: str) -> str:
    """``text`` as a single-quoted YAML scalar."""
    return "'" + str(text).replace("'", "''") + "'"


def metadata_yml(subs: list[GradescopeSubmission]) -> str:
    """Gradescope's submission_metadata.yml for ``subs``, Ruby-symbol keys as Gradescope writes them."""
    lines = ["---"]
    for s in subs:
        lines.append(f"submission_{s.id}:")
        lines.append("  :submitters:")
        for name, email, sid in s.submitters:
            lines += [
                f"  - :name: {name}",
                f"    :email: {email}",
                f"    :sid: {_q(sid)}",
                "    section_name: dmls-001",
            ]
        lines += [f"  :created_at: {s.created_at}", "  :score: 0.0", "  :history: []"]
    return "\n".join(lines) + "\n"


def gradescope_zip(path: Path, subs: list[GradescopeSubmission], assignment: int = 4242) -> Path:
    """Gradescope's "Export Submissions" zip: the metadata file and a folder per submission."""
    root = f"assignment_{assignment}_export"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{root}/submission_metadata.yml", metadata_yml(subs))
        for s in subs:
            for name, data in s.files.items():
                zf.writestr(f"{root}/submission_{s.id}/{name}", data)
    return path


def group_set(path: Path, rows: list[tuple]) -> Path:
    """Canvas's group set CSV as "Download Course Roster CSV" writes it: (name, canvas id, sis, login, group)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["name", "canvas_user_id", "user_id", "login_id", "sections", "group_name", "canvas_group_id", "group_id"]
        )
        for name, uid, sis, login, group in rows:
            w.writerow([name, uid, sis, login, "Sec 1", group, {"Group 3": 703, "Group 4": 704}.get(group, ""), ""])
    return path
