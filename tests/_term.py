"""A term of the fixture class (``_class``) in one gradebook, driven through the command line: its
rubric with a late penalty, its Canvas roster and its graders' runs."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter
from pathlib import Path

from _class import LATE_RUBRIC, reference_notebooks
from helpers import read_csv


ROSTER_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Alpha (901)", "Beta (902)"]
PEOPLE = [
    ("Smith, John", "12345", "S1001", "jsmith"),
    ("Doe, Jane", "12346", "S1002", "jdoe"),
    ("Roe, Rick", "12347", "S1003", "rroe"),
    ("Lee, Lou", "12348", "S1004", "llee"),
    ("Kim, Kay", "12349", "S1005", "kkim"),
    ("Absent, Abe", "12350", "S1006", "aabsent"),
]


def roster(path: Path, people=PEOPLE) -> Path:
    """Canvas's gradebook export with the term's two assignments, as Canvas heads them."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(ROSTER_HEADER)
        w.writerow(["    Points Possible", "", "", "", "", "6", "2"])
        for display, uid, sis, login in people:
            w.writerow([display, uid, sis, login, "Sec 1", "", ""])
    return path


def cli(*args, timeout=900) -> subprocess.CompletedProcess:
    """``python -m labkit`` with ``args``, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "labkit", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


class Term:
    """A class's term in one output folder, graded by ``labkit grade`` one notebook at a time."""

    def __init__(self, root: Path):
        self.root, self.out = root, root / "out"
        (root / "rubric.toml").write_text(LATE_RUBRIC)
        self.notebooks = reference_notebooks(root)
        self.roster = roster(root / "roster.csv")

    def grade(self, source, *extra, out=None) -> subprocess.CompletedProcess:
        return cli(
            "grade",
            *([source] if source else []),
            "--out",
            out or self.out,
            "--rubric",
            self.root / "rubric.toml",
            "--notebooks",
            self.notebooks,
            "-j",
            "1",
            *extra,
        )

    def rows(self, out=None) -> list[dict]:
        return read_csv((out or self.out) / "grades.csv")

    def totals(self, out=None) -> dict:
        """{(student, lab): the lab's total} from final_grades.csv."""
        return {
            (r["student"], lab): r[f"{lab} total"]
            for r in read_csv((out or self.out) / "final_grades.csv")
            for lab in ("alpha", "beta")
            if r.get(f"{lab} total") not in (None, "")
        }

    def once(self, expected: dict, out=None) -> None:
        """Every (student, lab) of ``expected`` exactly once in grades.csv, nobody else, each at its total."""
        runs = Counter((r["student"], r["lab"]) for r in self.rows(out) if r["check"] == "execution")
        assert set(runs) == set(expected) and set(runs.values()) == {1}, runs
        got = self.totals(out)
        assert {k: float(got[k]) for k in expected} == {k: float(v) for k, v in expected.items()}
