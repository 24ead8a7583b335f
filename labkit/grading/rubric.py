"""The rubric: what each lab notebook must record and show, and how many points each part earns.

``load_rubric(path)`` reads ``notebooks/rubric.toml`` (its header comment documents the
format) and validates it up front, so a typo is reported with the lab, the check and the
key to fix before any notebook runs. ``evaluate(check, nb, records)`` scores one check on an
executed notebook, with partial credit where a fraction has a meaning.
"""
from __future__ import annotations

import math
import operator
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

PLACEHOLDER = "YOUR ANSWER HERE"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")

# Settings a lab inherits from [defaults] and may override.
SETTINGS = {
    "kernel": "python3",          # kernel name papermill starts (the notebook's own kernelspec is ignored)
    "cell_timeout": 300.0,        # s one cell may run
    "notebook_timeout": 900.0,    # s the whole run may take, kernel start included
    "start_timeout": 120.0,       # s for the kernel to start
    "memory_mb": 4096.0,          # per-process data limit (RLIMIT_DATA) and cap on the tree's total RSS
}

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}

# kind -> (required keys, optional keys)
KINDS = {
    "record": ({"records"}, set()),
    "threshold": ({"record"}, {"min", "max", "partial_min", "partial_max"}),
    "all_equal": ({"record"}, {"tolerance"}),
    "sum_equals": ({"record", "total"}, {"tolerance"}),
    "compare": ({"left", "op", "right"}, {"factor", "tolerance"}),
    "figures": (set(), {"cells", "min"}),
    "analysis": (set(), {"cells", "min_chars", "placeholder"}),
}
_COMMON = {"name", "kind", "points", "verify", "description"}


class RubricError(ValueError):
    """The rubric file is malformed; the message names the lab, check and key to fix."""


@dataclass(frozen=True)
class Check:
    lab: str
    name: str
    kind: str
    points: float
    spec: dict                     # the check's table as written
    verify: dict | None = None     # {"name": verifier, ...its arguments}

    @property
    def ref(self) -> str | None:
        """The record (path) whose value the verifier re-checks."""
        return self.spec.get("record") or self.spec.get("left") or (self.spec.get("records") or [None])[0]


@dataclass(frozen=True)
class Lab:
    key: str
    notebook: str                  # file name inside notebooks/ and inside each student's folder
    title: str
    parameters: dict
    checks: tuple[Check, ...]
    kernel: str
    cell_timeout: float
    notebook_timeout: float
    start_timeout: float
    memory_mb: float

    @property
    def max_points(self) -> float:
        return sum(c.points for c in self.checks)


@dataclass(frozen=True)
class Rubric:
    path: Path
    labs: dict[str, Lab] = field(default_factory=dict)

    def lab_for(self, notebook_name: str) -> Lab | None:
        return next((lab for lab in self.labs.values() if lab.notebook == notebook_name), None)


@dataclass
class Score:
    """The outcome of one check: points earned, status and a reason a student can act on."""
    points: float
    max: float
    status: str            # pass | partial | fail | missing | mismatch | unverified | not-run | grader-error
    reason: str = ""
    value: object = None   # the value the check looked at (for report.md)


def load_rubric(path) -> Rubric:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise RubricError(f"rubric {path} not found; create it (see the header of notebooks/rubric.toml)") from None
    except tomllib.TOMLDecodeError as e:
        raise RubricError(f"rubric {path} is not valid TOML: {e}") from None
    unknown = set(raw) - {"defaults", "labs"}
    if unknown:
        raise RubricError(f"{path}: unknown top-level table(s) {sorted(unknown)}; use [defaults] and [labs.NAME]")
    defaults = dict(SETTINGS)
    defaults.update(_settings(raw.get("defaults", {}), f"{path} [defaults]", allow_all=False))
    labs = {}
    for key, table in raw.get("labs", {}).items():
        labs[key] = _lab(key, table, defaults, path)
    notebooks = [lab.notebook for lab in labs.values()]
    dup = {n for n in notebooks if notebooks.count(n) > 1}
    if dup:
        raise RubricError(f"{path}: notebook(s) {sorted(dup)} appear in more than one lab")
    return Rubric(path, labs)


def _settings(table: dict, where: str, allow_all: bool) -> dict:
    out = {}
    for k, v in table.items():
        if k not in SETTINGS:
            if allow_all:
                continue
            raise RubricError(f"{where}: unknown key {k!r}; known: {', '.join(SETTINGS)}")
        if k == "kernel":
            if not isinstance(v, str) or not v:
                raise RubricError(f"{where}: kernel must be a kernel name such as 'python3', not {v!r}")
        elif not _is_number(v) or v <= 0:
            raise RubricError(f"{where}: {k} must be a positive number (seconds or MB), not {v!r}")
        out[k] = v if k == "kernel" else float(v)
    return out


def _lab(key: str, table: dict, defaults: dict, path: Path) -> Lab:
    where = f"{path} [labs.{key}]"
    known = set(SETTINGS) | {"notebook", "title", "parameters", "checks"}
    unknown = set(table) - known
    if unknown:
        raise RubricError(f"{where}: unknown key(s) {sorted(unknown)}; known: {', '.join(sorted(known))}")
    notebook = table.get("notebook")
    if not isinstance(notebook, str) or not notebook.endswith(".ipynb") or "/" in notebook:
        raise RubricError(f"{where}: notebook must be a file name like '01_single_node_lr.ipynb', not {notebook!r}")
    params = table.get("parameters", {})
    if not isinstance(params, dict):
        raise RubricError(f"{where}: parameters must be a table ([labs.{key}.parameters])")
    settings = {**defaults, **_settings(table, where, allow_all=True)}
    checks, names = [], set()
    for i, c in enumerate(table.get("checks", [])):
        check = _check(key, i, c, f"{where} checks[{i}]")
        if check.name in names:
            raise RubricError(f"{where}: two checks are named {check.name!r}; names must be unique in a lab")
        names.add(check.name)
        checks.append(check)
    if not checks:
        raise RubricError(f"{where}: no checks; add [[labs.{key}.checks]] tables")
    return Lab(key=key, notebook=notebook, title=table.get("title", key), parameters=params, checks=tuple(checks),
               **settings)


def _check(lab: str, i: int, c: dict, where: str) -> Check:
    if not isinstance(c, dict):
        raise RubricError(f"{where}: each check must be a table")
    kind = c.get("kind")
    if kind not in KINDS:
        raise RubricError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    required, optional = KINDS[kind]
    if kind == "record" and "record" in c and "records" not in c:
        c = {**c, "records": [c["record"]]}
        c.pop("record")
    missing = required - set(c)
    if missing:
        raise RubricError(f"{where} ({kind}): missing key(s) {sorted(missing)}")
    unknown = set(c) - required - optional - _COMMON
    if unknown:
        raise RubricError(f"{where} ({kind}): unknown key(s) {sorted(unknown)}; "
                          f"allowed: {', '.join(sorted(required | optional | _COMMON))}")
    name = c.get("name")
    if not isinstance(name, str) or not name:
        raise RubricError(f"{where}: every check needs a name")
    points = c.get("points")
    if not _is_number(points) or points <= 0:
        raise RubricError(f"{where} {name!r}: points must be a positive number, not {points!r}")
    if kind == "threshold" and "min" not in c and "max" not in c:
        raise RubricError(f"{where} {name!r}: a threshold needs min and/or max")
    for k in ("min", "max", "partial_min", "partial_max", "tolerance", "factor", "min_chars"):
        if k in c and not _is_number(c[k]):
            raise RubricError(f"{where} {name!r}: {k} must be a number, not {c[k]!r}")
    if kind == "figures" and c.get("min", 1) < 1:
        raise RubricError(f"{where} {name!r}: min is the number of figures each cell must show, at least 1")
    for k in ("record", "left"):
        if k in c and not isinstance(c[k], str):
            raise RubricError(f"{where} {name!r}: {k} must be a record name, not {c[k]!r}")
    for k in ("total", "right"):
        if k in c and not (isinstance(c[k], str) or _is_number(c[k])):
            raise RubricError(f"{where} {name!r}: {k} must be a record name or a number, not {c[k]!r}")
    if "partial_min" in c and ("min" not in c or not c["partial_min"] < c["min"]):
        raise RubricError(f"{where} {name!r}: partial_min needs a min above it")
    if "partial_max" in c and ("max" not in c or not c["partial_max"] > c["max"]):
        raise RubricError(f"{where} {name!r}: partial_max needs a max below it")
    if kind == "compare" and c["op"] not in _OPS:
        raise RubricError(f"{where} {name!r}: op must be one of {' '.join(_OPS)}, not {c['op']!r}")
    if kind == "record" and (not isinstance(c["records"], list) or not c["records"]):
        raise RubricError(f"{where} {name!r}: records must be a non-empty list of record names")
    if "cells" in c and (not isinstance(c["cells"], list) or not all(isinstance(x, str) for x in c["cells"])):
        raise RubricError(f"{where} {name!r}: cells must be a list of cell tags or ids")
    verify = c.get("verify")
    if verify is not None:
        if isinstance(verify, str):
            verify = {"name": verify}
        if not isinstance(verify, dict) or not isinstance(verify.get("name"), str):
            raise RubricError(f"{where} {name!r}: verify must be a verifier name or a table with name = ...")
        from labkit.grading.verify import VERIFIERS
        if verify["name"] not in VERIFIERS:
            raise RubricError(f"{where} {name!r}: unknown verifier {verify['name']!r}; "
                              f"registered: {', '.join(sorted(VERIFIERS))}")
    return Check(lab=lab, name=name, kind=kind, points=float(points), spec=c, verify=verify)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ---------------------------------------------------------------------------------------------
# Record lookup

class Missing(LookupError):
    """A record (or a key inside one) the check needs is absent."""


def lookup(records: dict, ref: str):
    """The value at ``ref``: a record name, optionally followed by ``.key`` or ``.index``
    parts into its JSON value (``steps.worker0``, ``history.accuracy.-1``). The longest
    prefix that names a record wins, so record names may contain dots."""
    parts = ref.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        if name in records:
            value = records[name]
            for p in parts[cut:]:
                value = _step(value, p, ref)
            if value is None:
                raise Missing(f"record {ref!r} is null (NaN or None was recorded)")
            return value
    raise Missing(f"record {ref!r} not found")


def _step(value, part: str, ref: str):
    if isinstance(value, dict) and part in value:
        return value[part]
    if isinstance(value, list) and re.fullmatch(r"-?\d+", part):
        i = int(part)
        if -len(value) <= i < len(value):
            return value[i]
    raise Missing(f"record {ref!r}: no {part!r} in the recorded value")


def _number(value, ref: str) -> float:
    if not _is_number(value):
        raise Missing(f"record {ref!r} is {value!r}, not a number")
    return float(value)


def _numbers(value, ref: str) -> list[float]:
    items = list(value.values()) if isinstance(value, dict) else value
    if not isinstance(items, list) or not items:
        raise Missing(f"record {ref!r} must be a non-empty list or dict of numbers, not {value!r}")
    return [_number(v, ref) for v in items]


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12) if tol else a == b


# ---------------------------------------------------------------------------------------------
# Evaluation

def evaluate(check: Check, nb, records: dict) -> Score:
    """Score ``check`` on an executed notebook ``nb`` (nbformat node) with its ``records``."""
    try:
        fraction, reason, value = _EVAL[check.kind](check.spec, nb, records)
    except Missing as e:
        return Score(0.0, check.points, "missing", str(e))
    fraction = min(max(fraction, 0.0), 1.0)
    status = "pass" if fraction >= 1 else "partial" if fraction > 0 else "fail"
    return Score(round(check.points * fraction, 2), check.points, status, reason, value)


def _eval_record(c, nb, records):
    present, absent = [], []
    for ref in c["records"]:
        try:
            lookup(records, ref)
            present.append(ref)
        except Missing:
            absent.append(ref)
    names = ", ".join(map(repr, absent))
    if not present:
        raise Missing(f"record {names} not found" if len(absent) == 1 else f"records {names} not found")
    reason = f"missing: {names}" if absent else ""
    return len(present) / len(c["records"]), reason, present


def _eval_threshold(c, nb, records):
    v = _number(lookup(records, c["record"]), c["record"])
    frac, reasons = 1.0, []
    if "min" in c and v < c["min"]:
        lo = c.get("partial_min")
        frac = min(frac, (v - lo) / (c["min"] - lo) if lo is not None and v > lo else 0.0)
        reasons.append(f"{c['record']} = {v:.4g} is below {c['min']:g}"
                       + (f" (partial credit from {lo:g})" if lo is not None else ""))
    if "max" in c and v > c["max"]:
        hi = c.get("partial_max")
        frac = min(frac, (hi - v) / (hi - c["max"]) if hi is not None and v < hi else 0.0)
        reasons.append(f"{c['record']} = {v:.4g} is above {c['max']:g}"
                       + (f" (partial credit up to {hi:g})" if hi is not None else ""))
    return frac, "; ".join(reasons), v


def _eval_all_equal(c, nb, records):
    values = _numbers(lookup(records, c["record"]), c["record"])
    tol = c.get("tolerance", 0)
    if all(_close(v, values[0], tol) for v in values):
        return 1.0, "", values
    return 0.0, f"{c['record']} = {_fmt(values)} are not all equal" + (f" (tolerance {tol:g})" if tol else ""), values


def _eval_sum_equals(c, nb, records):
    values = _numbers(lookup(records, c["record"]), c["record"])
    total_ref = c["total"]
    total = _number(lookup(records, total_ref), total_ref) if isinstance(total_ref, str) else float(total_ref)
    s, tol = sum(values), c.get("tolerance", 0)
    if _close(s, total, tol):
        return 1.0, "", s
    return 0.0, (f"sum of {c['record']} = {s:g} but {total_ref} = {total:g}"
                 + (f" (tolerance {tol:g})" if tol else "")), s


def _eval_compare(c, nb, records):
    left = _number(lookup(records, c["left"]), c["left"])
    right_ref = c["right"]
    right = _number(lookup(records, right_ref), right_ref) if isinstance(right_ref, str) else float(right_ref)
    right *= c.get("factor", 1.0)
    op, tol = c["op"], c.get("tolerance", 0)
    ok = _close(left, right, tol) if op == "==" else _OPS[op](left, right)
    if ok:
        return 1.0, "", left
    rhs = f"{c.get('factor', 1.0):g} x {right_ref}" if "factor" in c else str(right_ref)
    return 0.0, f"expected {c['left']} {op} {rhs}, got {left:.4g} vs {right:.4g}", left


def _eval_figures(c, nb, records):
    need = int(c.get("min", 1))
    names = c.get("cells")
    if not names:
        n = sum(_images(cell) for cell in nb.cells)
        return min(n / need, 1.0), (f"{n} figure(s) in the notebook, expected at least {need}" if n < need else ""), n
    counts, short = {}, []
    for name in names:
        cells = _named(nb, name)
        counts[name] = sum(_images(cell) for cell in cells)
        if not cells:
            short.append(f"no cell tagged {name!r}")
        elif counts[name] < need:
            short.append(f"cell {name!r} shows {counts[name]} figure(s), expected {need}")
    ok = len(names) - len(short)
    return ok / len(names), "; ".join(short), counts


def _eval_analysis(c, nb, records):
    names = c.get("cells") or ["analysis"]
    placeholder = c.get("placeholder", PLACEHOLDER)
    min_chars = int(c.get("min_chars", 80))
    cells = [(name, cell) for name in names for cell in _named(nb, name)]
    if not cells:
        return 0.0, f"no answer cells tagged {', '.join(map(repr, names))} (keep the tag on your answer cells)", 0
    problems = []
    for i, (name, cell) in enumerate(cells):
        text = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        if placeholder.lower() in text.lower():
            problems.append(f"answer {i + 1} ({name}) still has the placeholder")
        elif len(" ".join(text.split())) < min_chars:
            problems.append(f"answer {i + 1} ({name}) is shorter than {min_chars} characters")
    answered = len(cells) - len(problems)
    return answered / len(cells), "; ".join(problems), answered


_EVAL = {"record": _eval_record, "threshold": _eval_threshold, "all_equal": _eval_all_equal,
         "sum_equals": _eval_sum_equals, "compare": _eval_compare, "figures": _eval_figures,
         "analysis": _eval_analysis}


def cell_tags(cell) -> list:
    """A cell's tags; a student's notebook may carry ``"tags": null`` or no metadata at all."""
    return (cell.get("metadata") or {}).get("tags") or []


def _named(nb, name: str) -> list:
    """Cells tagged ``name``, or the cell whose id is ``name``."""
    return [cell for cell in nb.cells if name in cell_tags(cell) or cell.get("id") == name]


def _images(cell) -> int:
    return sum(1 for out in cell.get("outputs", []) if any(m in out.get("data", {}) for m in IMAGE_MIMES))


def _fmt(values) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"
