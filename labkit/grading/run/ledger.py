"""What a batch leaves behind so that the next one resumes: fingerprints and outcomes.

Each notebook's run ends by writing ``.grader/<student>/<stem>/outcome.json`` with the
fingerprint of what it ran (the file's hash, the lab's rubric section, the sandbox, the
grader's code). Grading the same folder again re-runs a notebook only when its fingerprint
changed, it has no outcome (a killed batch resumes with the rest) or its run ``crashed``;
``--force`` re-runs all. The batch's manifest lets the reports be rebuilt from these files.

``.grader`` is the grader's alone, and every outcome and the manifest are signed (HMAC-SHA256
with a key only the grader's user holds, over the content and the student and lab it belongs
to): an outcome that does not hold runs again; a manifest that does not hold stops a rebuild
with ``IntegrityError``. The gradebook signs its runs with the same key (``sign``, ``verify``).

More in docs/internals.md, section labkit.grading (what is fingerprinted, what is signed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
from functools import lru_cache
from pathlib import Path

from labkit.core import atomic

OUTCOME = "outcome.json"
MANIFEST = "batch.json"
VERSION = 1
RERUN = {"crashed"}  # how a run ends when the grader, not the notebook, failed it: run it again
SIGNATURE = "hmac"
KEY_ENV = "LABKIT_GRADER_KEY"
MAX_STATE_BYTES = 256 * 2**20  # an outcome or manifest larger than this is not the grader's


class IntegrityError(ValueError):
    """A file of the grader's state was changed by someone other than the grader."""


def key_path() -> Path:
    """Where the grader's signing key is: ``$LABKIT_GRADER_KEY``, else ``~/.config/labkit/grader.key``."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV])
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "labkit" / "grader.key"


@lru_cache(maxsize=4)
def _key(path: Path) -> bytes:
    """The key at ``path``, made on first use (32 random bytes, mode 0600); refused when another
    user owns it or others may read it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32).hex().encode())
        except FileExistsError:
            pass
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise IntegrityError(
            f"the grader keeps the key that signs its outcomes in {path}, and cannot: {e}; set "
            f"{KEY_ENV} to a file of yours outside the output folder"
        ) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise IntegrityError(f"the grader's key {path} must be yours with mode 0600 (chmod 600 {path})")
        key = f.read().strip()
    if len(key) < 32:
        raise IntegrityError(
            f"the grader's key {path} is too short; remove it and grade again (every notebook runs again)"
        )
    return key


def _signature(data, context: str) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hmac.new(_key(key_path()), f"{context}\0{text}".encode(), hashlib.sha256).hexdigest()


def sign(data, context: str) -> str:
    """The grader's signature of ``data`` (JSON-able) for ``context`` (the gradebook signs its runs so)."""
    return _signature(data, context)


def verify(data, signature, context: str) -> bool:
    """Whether ``signature`` is the grader's of ``data`` for ``context``."""
    return isinstance(signature, str) and hmac.compare_digest(signature, _signature(data, context))


def _write_json(path: Path, data, context: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(json.dumps(data, default=str))  # as it will read back
    if context is not None:
        data = {**data, SIGNATURE: _signature(data, context)}
    atomic.write_text(path, json.dumps(data))


def _read_json(path: Path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            return json.loads(f.read(MAX_STATE_BYTES))
    except (OSError, ValueError):
        return None


def _verified(data, context: str):
    """``data`` without its signature when the signature holds; None otherwise."""
    if not isinstance(data, dict) or not isinstance(data.get(SIGNATURE), str):
        return None
    body = {k: v for k, v in data.items() if k != SIGNATURE}
    return body if hmac.compare_digest(data[SIGNATURE], _signature(body, context)) else None


@lru_cache(maxsize=1)
def kit_hash() -> str:
    """The grader's own code (the labkit package's Python files): a change re-runs every notebook,
    since it may change how a run is scored or what a notebook's imports do."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def lab_hash(lab) -> str:
    """The lab's rubric section, but for ``expected_s`` (it orders a batch), ``late_penalty``
    (applied when the reports are written), ``canvas_assignment`` (the export's column) and
    ``folder`` (where the kit keeps the lab): none changes a run's outcome."""
    fields = {
        k: v
        for k, v in dataclasses.asdict(lab).items()
        if k not in ("expected_s", "late_penalty", "canvas_assignment", "folder")
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint(job, sandbox: str) -> dict | None:
    """What the job's outcome depends on; None when there is no readable submitted file."""
    try:
        data = job.source.read_bytes()
    except OSError:
        return None
    return {
        "version": VERSION,
        "notebook": hashlib.sha256(data).hexdigest(),
        "lab": lab_hash(job.lab),
        "sandbox": sandbox,
        "kit": kit_hash(),
    }


def outcome_path(job) -> Path:
    return Path(job.private) / OUTCOME


def _context(job) -> str:
    return f"outcome\0{job.student}\0{job.lab.key}"


def save_outcome(job, data: dict) -> None:
    _write_json(outcome_path(job), data, _context(job))


def load_outcome(job) -> dict | None:
    """The stored outcome of ``job``, if there is one and its signature holds."""
    data = _verified(_read_json(outcome_path(job)), _context(job))
    return data if isinstance(data, dict) and isinstance(data.get("rows"), list) and data["rows"] else None


def integrity(job) -> str | None:
    """Why ``job``'s stored outcome is not trusted although one is there (None: none, or it holds)."""
    path = outcome_path(job)
    if not path.exists() and not path.is_symlink():
        return None
    if load_outcome(job) is None:
        return (
            f"its stored outcome ({path.parent.name}/{OUTCOME}) was not as the grader wrote it (changed, "
            f"copied from another run, or unsigned), so it was not trusted and the notebook ran again"
        )
    return None


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
        raw = _read_json(path)
        rows = raw.get("rows") if isinstance(raw, dict) else None
        lab = rows[0].get("lab") if isinstance(rows, list) and rows and isinstance(rows[0], dict) else None
        data = _verified(raw, f"outcome\0{path.parent.parent.name}\0{lab}")  # not the grader's: not counted
        row = data["rows"][0] if isinstance(data, dict) and data.get("rows") else {}
        if isinstance(row, dict) and isinstance(row.get("seconds"), (int, float)) and row["seconds"] > 0:
            found.setdefault(str(row.get("lab")), []).append(float(row["seconds"]))
    return {lab: statistics.median(v) for lab, v in found.items()}


def _rubric_hash(out: Path) -> str | None:
    try:
        return hashlib.sha256((Path(out) / ".grader" / "rubric.toml").read_bytes()).hexdigest()
    except OSError:
        return None


def write_manifest(out: Path, data: dict) -> None:
    """The batch's manifest, signed with the hash of the rubric copy beside it."""
    state = Path(out) / ".grader"
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o700)
    _write_json(state / MANIFEST, {**data, "rubric_sha256": _rubric_hash(out)}, "manifest")


def read_manifest(out: Path) -> dict | None:
    """The manifest (None when there is none); ``IntegrityError`` when it, or the rubric copy,
    is not what the grader wrote."""
    path = Path(out) / ".grader" / MANIFEST
    raw = _read_json(path)
    if raw is None:
        return None
    data = _verified(raw, "manifest")
    if data is None or data.get("rubric_sha256") != _rubric_hash(out):
        raise IntegrityError(
            f"{path} or the rubric copy beside it was changed after the grader wrote it, or was "
            f"signed with another key than {key_path()}; grade the batch again to rebuild its "
            f"reports (`python -m labkit grade ... --out {out} --force`)"
        )
    data.pop("rubric_sha256", None)
    return data
