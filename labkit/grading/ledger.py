"""What a batch leaves behind so that the next one resumes: fingerprints and outcomes.

Each notebook's run ends by writing ``.grader/<student>/<stem>/outcome.json``: its rows,
records and values, and the fingerprint of what it ran (``fingerprint``: the submitted file's
content hash, the lab's rubric section, the sandbox, and the grader's own code). The folder is
cleared when the notebook starts again, so a run that never ended leaves no outcome.

Grading the same folder again re-runs a notebook only when its fingerprint changed, it has
no outcome (a batch killed halfway resumes with the rest), or its run ``crashed`` (the grader
could not run it: a runner that died, a cancelled Slurm task); ``--force`` re-runs all. The batch's
manifest (``.grader/batch.json``: the rubric, the notebooks in order, the questions) lets the
reports be rebuilt from these files alone (``grade.publish``), with the TAs' scores.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

OUTCOME = "outcome.json"
MANIFEST = "batch.json"
VERSION = 1
RERUN = {"crashed"}   # how a run ends when the grader, not the notebook, failed it: run it again


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


@lru_cache(maxsize=1)
def kit_hash() -> str:
    """The grader's own code (the labkit package's Python files): a change re-runs every notebook,
    since it may change how a run is scored or what a notebook's imports do."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def lab_hash(lab) -> str:
    """The lab's rubric section, but for ``expected_s`` (it orders a batch) and ``late_penalty``
    (applied when the reports are written): neither changes a run's outcome."""
    fields = {k: v for k, v in dataclasses.asdict(lab).items() if k not in ("expected_s", "late_penalty")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint(job, sandbox: str) -> dict | None:
    """What the job's outcome depends on; None when there is no readable submitted file."""
    try:
        data = job.source.read_bytes()
    except OSError:
        return None
    return {"version": VERSION, "notebook": hashlib.sha256(data).hexdigest(), "lab": lab_hash(job.lab),
            "sandbox": sandbox, "kit": kit_hash()}


def outcome_path(job) -> Path:
    return Path(job.private) / OUTCOME


def save_outcome(job, data: dict) -> None:
    _write_json(outcome_path(job), data)


def load_outcome(job) -> dict | None:
    data = _read_json(outcome_path(job))
    return data if isinstance(data, dict) and data.get("rows") else None


def reusable(job, fp: dict | None) -> dict | None:
    """The stored outcome of ``job`` when it ran exactly what would run now."""
    if fp is None or job.source.is_symlink():
        return None
    data = load_outcome(job)
    if data is None or data.get("fingerprint") != fp or data["rows"][0].get("status") in RERUN:
        return None
    return data


def measured_seconds(out: Path) -> dict[str, float]:
    """Per lab, the median seconds its notebooks ran in earlier batches in ``out`` (the
    execution rows of the stored outcomes): what a batch orders its notebooks by."""
    import statistics

    found: dict[str, list[float]] = {}
    for path in Path(out, ".grader").glob(f"*/*/{OUTCOME}"):
        data = _read_json(path)
        row = data["rows"][0] if isinstance(data, dict) and data.get("rows") else {}
        if isinstance(row, dict) and isinstance(row.get("seconds"), (int, float)) and row["seconds"] > 0:
            found.setdefault(str(row.get("lab")), []).append(float(row["seconds"]))
    return {lab: statistics.median(v) for lab, v in found.items()}


def write_manifest(out: Path, data: dict) -> None:
    _write_json(Path(out) / ".grader" / MANIFEST, data)


def read_manifest(out: Path) -> dict | None:
    return _read_json(Path(out) / ".grader" / MANIFEST)
