"""TA score files as TAs hand them back to ``labkit grade merge``, built for tests."""

from __future__ import annotations

import csv
from pathlib import Path


def _scores(path: Path, rows: list[tuple], base: bool = True) -> Path:
    """A TA's scores file: a row per (lab, check, student, answer_sha[, base], score, comment)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lab", "check", "student", "answer_sha", *(["base"] if base else []), "score", "comment"])
        for r in rows:
            w.writerow(r if base else [*r[:4], *r[5:]])
    return path


def _write_rows(path: Path, rows: list[dict]) -> None:
    """``rows`` (dicts, as an exported answers sheet reads) written back as a CSV file."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
