"""The rubric: what each lab notebook must record and show, and how many points each part earns.

``load_rubric(path)`` reads ``notebooks/rubric.toml`` (its header comment documents the format)
and validates it up front, so a typo is reported with the lab, the check and the key to fix
before any notebook runs. ``evaluate(check, nb, records)`` scores one check on an executed
notebook, with partial credit where a fraction has a meaning.

Check kinds are a registry (``KINDS``, filled by ``@kind``): a kind names its keys and who
scores it (``Kind.scorer``): here for kinds that read the notebook, the grader's own check
process for ``hidden`` ones (``labkit.grading.judge.postrun``), people for ``analysis`` answers
(``labkit.grading.judge.answers``). A lab's ``evidence`` names the checks whose value the grader
establishes itself; until every one of them earns points, the lab's other checks, which read
what the notebook printed, earn nothing (``gate``); ``analysis`` answers are scored on their own.
"""

from __future__ import annotations

import math
import operator
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import tomli_w

from labkit.notebook.record import MIN_FIGURE_PIXELS, Missing, figure_count, lookup, named_cells
from labkit.core.registry import Registry

PLACEHOLDER = "YOUR ANSWER HERE"

# Settings a lab inherits from [defaults] and may override.
SETTINGS = {
    "kernel": "python3",  # kernel name papermill starts (the notebook's own kernelspec is ignored)
    "cell_timeout": 300.0,  # s one cell may run
    "notebook_timeout": 900.0,  # s the whole run may take, kernel start included
    "start_timeout": 120.0,  # s for the kernel to start
    "memory_mb": 4096.0,  # the run's memory: per-process data limit and cap on the whole run
    "max_processes": 4096.0,  # the run's processes and threads together (a fork bomb stops here)
    "disk_mb": 1024.0,  # the run's disk (a tmpfs: memory, within memory_mb) and its largest file
    "check_timeout": 300.0,  # s the grader's own checks of one notebook may take (hidden checks, verifiers)
    "check_memory_mb": 3072.0,  # memory of the process that runs them
    "page_output_kb": 1024.0,  # KB of one output (or one cell's text) a feedback page shows; the rest is cut
}
_COMMON = {"name", "kind", "points", "verify", "description"}
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}


class RubricError(ValueError):
    """The rubric file is malformed; the message names the lab, check and key to fix."""


SCORERS = ("notebook", "grader", "people")


@dataclass(frozen=True)
class Kind:
    """A check kind: its keys, and who scores it: ``notebook`` (``score`` reads the executed
    notebook), ``grader`` (the grader's check process) or ``people`` (a TA, ``answers``)."""

    name: str
    required: frozenset
    optional: frozenset
    score: Callable | None  # (spec, nb, records) -> (fraction, reason, value), for "notebook"
    gated: bool = True  # False: scored on its own, whatever the lab's evidence says
    scorer: str = "notebook"


KINDS = Registry("check kind")


def kind(name: str, required=(), optional=(), gated: bool = True):
    """Register a check kind whose function scores it on the executed notebook."""

    def register(fn):
        KINDS.add(name, Kind(name, frozenset(required), frozenset(optional), fn, gated))
        return fn

    return register


@dataclass(frozen=True)
class Check:
    lab: str
    name: str
    kind: str
    points: float
    spec: dict  # the check's table as written
    verify: dict | None = None  # {"name": verifier, ...its arguments}

    @property
    def ref(self) -> str | None:
        """The record (path) whose value the verifier re-checks."""
        return self.spec.get("record") or self.spec.get("left") or (self.spec.get("records") or [None])[0]

    @property
    def external(self) -> bool:
        """Scored by the grader's check process rather than from the notebook's records."""
        return KINDS[self.kind].scorer == "grader"

    @property
    def manual(self) -> bool:
        """Scored by people (a TA), from the submitted text; never from the run."""
        return KINDS[self.kind].scorer == "people"

    @property
    def is_evidence(self) -> bool:
        return self.external or self.verify is not None


@dataclass(frozen=True)
class Lab:
    key: str
    notebook: str  # file name inside notebooks/ and inside each student's folder
    title: str
    parameters: dict
    checks: tuple[Check, ...]
    kernel: str
    cell_timeout: float
    notebook_timeout: float
    start_timeout: float
    memory_mb: float
    max_processes: float
    disk_mb: float
    check_timeout: float
    check_memory_mb: float
    page_output_kb: float
    evidence: tuple[str, ...] = ()
    expected_s: float = 0.0  # the reference run's seconds, measured: a batch starts the longest first
    late_penalty: object = None  # late.Policy, or None: late work is shown and costs nothing
    canvas_assignment: str = ""  # the lab's column in Canvas's gradebook, 'Title (assignment id)' (exports)
    folder: str = ""  # the lab's folder (labkit/labs/<lab>), where its notebook is; "": the notebooks folder

    def reference(self, notebooks) -> Path:
        """The lab's own notebook: in its folder, else in ``notebooks``."""
        return Path(self.folder or notebooks) / self.notebook

    @property
    def max_points(self) -> float:
        return sum(c.points for c in self.checks)


@dataclass(frozen=True)
class Rubric:
    path: Path
    labs: dict[str, Lab] = field(default_factory=dict)
    text: str = ""  # the whole rubric as TOML, every lab's section in it (lab folders' too)

    def lab_for(self, notebook_name: str) -> Lab | None:
        return next((lab for lab in self.labs.values() if lab.notebook == notebook_name), None)


@dataclass
class Score:
    """The outcome of one check: points earned, status and a reason a student can act on."""

    points: float
    max: float
    status: str  # pass | partial | fail | missing | mismatch | unverified | not-run | grader-error | pending
    reason: str = ""
    value: object = None  # the value the check looked at (for report.md)


def load_rubric(path) -> Rubric:
    """The rubric at ``path``, its labs gathered from its lab folders (``lab_folders``), checked."""
    path = Path(path)
    raw = _toml(path, f"rubric {path}", "create it (see the header of notebooks/rubric.toml)")
    unknown = set(raw) - {"defaults", "labs", "lab_folders"}
    if unknown:
        raise RubricError(
            f"{path}: unknown top-level key(s) {sorted(unknown)}; use [defaults], lab_folders and [labs.NAME]"
        )
    raw["labs"] = {**_folder_labs(raw.pop("lab_folders", None), path, raw.get("labs", {})), **raw.get("labs", {})}
    text = tomli_w.dumps(raw)  # the rubric whole, its labs in it: what a graded class keeps (.grader/rubric.toml)
    table = dict(raw.get("defaults", {}))
    late_default = _late(table.pop("late_penalty", None), f"{path} [defaults]")
    defaults = dict(SETTINGS)
    defaults.update(_settings(table, f"{path} [defaults]", allow_all=False))
    labs = {}
    for key, table in raw.get("labs", {}).items():
        labs[key] = _lab(key, table, defaults, path, late_default)
    notebooks = [lab.notebook for lab in labs.values()]
    dup = {n for n in notebooks if notebooks.count(n) > 1}
    if dup:
        raise RubricError(f"{path}: notebook(s) {sorted(dup)} appear in more than one lab")
    return Rubric(path, labs, text)


def _toml(path: Path, what: str, hint: str) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise RubricError(f"{what} not found; {hint}") from None
    except tomllib.TOMLDecodeError as e:
        raise RubricError(f"{what} is not valid TOML: {e}") from None


def _folder_labs(where, path: Path, inline: dict) -> dict:
    """{lab: its rubric section} from each lab folder's ``lab.toml``: ``where`` is "kit" (the
    folders of ``labkit.labs``) or a folder of lab folders, relative to the rubric. Each section
    gets ``folder``, where the lab's notebook is."""
    if where is None:
        return {}
    if not isinstance(where, str):
        raise RubricError(f'{path}: lab_folders must be "kit" or a folder of lab folders, not {where!r}')
    if where == "kit":
        import labkit.labs

        root = Path(labkit.labs.__path__[0])
    else:
        root = (path.parent / where).resolve()
    if not root.is_dir():
        raise RubricError(f"{path}: lab_folders = {where!r}: {root} is not a folder")
    found = {}
    for toml in sorted(root.glob("*/lab.toml")):
        key = toml.parent.name
        if key in inline:
            raise RubricError(f"{path}: lab {key!r} is both in [labs.{key}] and in {toml}; keep one")
        found[key] = {**_toml(toml, str(toml), "its folder needs one"), "folder": str(toml.parent)}
    return found


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
            raise RubricError(f"{where}: {k} must be a positive number (seconds, MB or a count), not {v!r}")
        out[k] = v if k == "kernel" else float(v)
    return out


def _late(value, where: str):
    from labkit.grading.submissions import late

    try:
        return late.parse(value, where)
    except late.PolicyError as e:
        raise RubricError(str(e)) from None


def _lab(key: str, table: dict, defaults: dict, path: Path, late_default=None) -> Lab:
    where = f"{path} [labs.{key}]"
    known = set(SETTINGS) | {
        "notebook",
        "title",
        "parameters",
        "checks",
        "evidence",
        "expected_s",
        "late_penalty",
        "canvas_assignment",
        "folder",
    }
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
    evidence = table.get("evidence", [])
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise RubricError(f"{where}: evidence must be a list of check names")
    by_name = {c.name: c for c in checks}
    for e in evidence:
        if e not in by_name:
            raise RubricError(f"{where}: evidence names {e!r}, which is not a check of this lab")
        if not by_name[e].is_evidence:
            raise RubricError(
                f"{where}: evidence {e!r} must be a check the grader establishes itself "
                f'(kind = "hidden", or a check with verify = ...)'
            )
    expected = table.get("expected_s", 0.0)
    if not _is_number(expected) or expected < 0:
        raise RubricError(f"{where}: expected_s must be the seconds a run takes (a number >= 0), not {expected!r}")
    late_penalty = _late(table["late_penalty"], where) if "late_penalty" in table else late_default
    canvas = table.get("canvas_assignment", "")
    if not isinstance(canvas, str):
        raise RubricError(
            f"{where}: canvas_assignment must be the assignment's column as Canvas heads it, "
            f"'Title (assignment id)', not {canvas!r}"
        )
    return Lab(
        key=key,
        notebook=notebook,
        title=table.get("title", key),
        parameters=params,
        checks=tuple(checks),
        evidence=tuple(evidence),
        expected_s=float(expected),
        late_penalty=late_penalty,
        canvas_assignment=canvas.strip(),
        folder=_folder(table.get("folder", ""), where),
        **settings,
    )


def _folder(value, where: str) -> str:
    if not isinstance(value, str) or (value and not Path(value).is_dir()):
        raise RubricError(f"{where}: folder must be the lab's folder (where its notebook is), not {value!r}")
    return value


def _check(lab: str, i: int, c: dict, where: str) -> Check:
    if not isinstance(c, dict):
        raise RubricError(f"{where}: each check must be a table")
    kind_name = c.get("kind")
    if kind_name not in KINDS:
        raise RubricError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind_name!r}")
    k = KINDS[kind_name]
    if kind_name == "record" and "record" in c and "records" not in c:
        c = {**c, "records": [c["record"]]}
        c.pop("record")
    missing = k.required - set(c)
    if missing:
        raise RubricError(f"{where} ({kind_name}): missing key(s) {sorted(missing)}")
    unknown = set(c) - k.required - k.optional - _COMMON
    if unknown:
        raise RubricError(
            f"{where} ({kind_name}): unknown key(s) {sorted(unknown)}; "
            f"allowed: {', '.join(sorted(k.required | k.optional | _COMMON))}"
        )
    name = c.get("name")
    if not isinstance(name, str) or not name:
        raise RubricError(f"{where}: every check needs a name")
    points = c.get("points")
    if not _is_number(points) or points <= 0:
        raise RubricError(f"{where} {name!r}: points must be a positive number, not {points!r}")
    _check_keys(kind_name, c, f"{where} {name!r}")
    verify = c.get("verify")
    if verify is not None:
        if isinstance(verify, str):
            verify = {"name": verify}
        if not isinstance(verify, dict) or not isinstance(verify.get("name"), str):
            raise RubricError(f"{where} {name!r}: verify must be a verifier name or a table with name = ...")
        from labkit.grading.judge.verify import discover

        VERIFIERS = discover("verifiers")  # the kit's own and every lab folder's
        if verify["name"] not in VERIFIERS:
            raise RubricError(
                f"{where} {name!r}: unknown verifier {verify['name']!r}; registered: {', '.join(sorted(VERIFIERS))}"
            )
        if k.scorer != "notebook":
            raise RubricError(
                f"{where} {name!r}: a {kind_name} check is not scored from the notebook's records; it takes no verify"
            )
    return Check(lab=lab, name=name, kind=kind_name, points=float(points), spec=c, verify=verify)


def _check_keys(kind_name: str, c: dict, where: str) -> None:
    """The values of a check's keys: numbers, record names, cell lists, a registered hidden check."""
    if kind_name == "threshold" and "min" not in c and "max" not in c:
        raise RubricError(f"{where}: a threshold needs min and/or max")
    for k in ("min", "max", "partial_min", "partial_max", "tolerance", "factor"):
        if k in c and not _is_number(c[k]):
            raise RubricError(f"{where}: {k} must be a number, not {c[k]!r}")
    if kind_name == "figures" and c.get("min", 1) < 1:
        raise RubricError(f"{where}: min is the number of figures each cell must show, at least 1")
    for k in ("record", "left"):
        if k in c and not isinstance(c[k], str):
            raise RubricError(f"{where}: {k} must be a record name, not {c[k]!r}")
    for k in ("total", "right"):
        if k in c and not (isinstance(c[k], str) or _is_number(c[k])):
            raise RubricError(f"{where}: {k} must be a record name or a number, not {c[k]!r}")
    if "partial_min" in c and ("min" not in c or not c["partial_min"] < c["min"]):
        raise RubricError(f"{where}: partial_min needs a min above it")
    if "partial_max" in c and ("max" not in c or not c["partial_max"] > c["max"]):
        raise RubricError(f"{where}: partial_max needs a max below it")
    if kind_name == "speedup":
        for k in ("fast", "slow", "rate", "by"):
            if k in c and (not isinstance(c[k], str) or not c[k]):
                raise RubricError(f"{where}: {k} must be a name (a row's or a column's), not {c[k]!r}")
        if c["factor"] <= 0:
            raise RubricError(f"{where}: factor must be a positive number, not {c['factor']!r}")
    if kind_name == "compare" and c["op"] not in _OPS:
        raise RubricError(f"{where}: op must be one of {' '.join(_OPS)}, not {c['op']!r}")
    if kind_name == "record" and (not isinstance(c["records"], list) or not c["records"]):
        raise RubricError(f"{where}: records must be a non-empty list of record names")
    if "cells" in c and (not isinstance(c["cells"], list) or not all(isinstance(x, str) for x in c["cells"])):
        raise RubricError(f"{where}: cells must be a list of cell tags or ids")
    if (
        "records" in c
        and kind_name == "analysis"
        and (not isinstance(c["records"], list) or not all(isinstance(x, str) for x in c["records"]))
    ):
        raise RubricError(f"{where}: records must be a list of record names (shown to the TA next to the answer)")
    for k in ("question", "placeholder"):
        if k in c and (not isinstance(c[k], str) or not c[k]):
            raise RubricError(f"{where}: {k} must be a non-empty string")
    if kind_name == "hidden":
        from labkit.grading.judge.hidden import HIDDEN

        if c["check"] not in HIDDEN:
            raise RubricError(f"{where}: unknown hidden check {c['check']!r}; registered: {', '.join(sorted(HIDDEN))}")
        if not isinstance(c.get("args", {}), dict):
            raise RubricError(f"{where}: args must be a table of the hidden check's inputs")
        try:
            HIDDEN[c["check"]].validate(c.get("args", {}))
        except (TypeError, ValueError) as e:
            raise RubricError(f"{where}: hidden check {c['check']!r}: {e}") from None


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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
    score = KINDS[check.kind].score
    if KINDS[check.kind].scorer != "notebook":
        raise ValueError(
            f"check {check.name!r} ({check.kind}) is scored by "
            f"{'people' if check.manual else 'the grader' + chr(39) + 's check process'}"
        )
    try:
        fraction, reason, value = score(check.spec, nb, records)
    except Missing as e:
        return Score(0.0, check.points, "missing", str(e))
    return scored(check, fraction, reason, value)


def scored(check: Check, fraction: float, reason: str = "", value=None) -> Score:
    """The Score for ``fraction`` of ``check``'s points."""
    fraction = min(max(fraction, 0.0), 1.0)
    status = "pass" if fraction >= 1 else "partial" if fraction > 0 else "fail"
    return Score(round(check.points * fraction, 2), check.points, status, reason, value)


def gate(lab: Lab, scores: dict[str, Score]) -> dict[str, Score]:
    """Scores after the lab's evidence: while an evidence check earns nothing, every gated
    check (one that reads what the notebook printed) earns nothing either, and says why."""
    failed = [
        f"{name!r} is {scores[name].status}" for name in lab.evidence if name in scores and scores[name].points <= 0
    ]
    if not failed:
        return scores
    out = {}
    for check in lab.checks:
        s = scores[check.name]
        if check.name in lab.evidence or not KINDS[check.kind].gated or s.points <= 0:
            out[check.name] = s
        else:
            out[check.name] = Score(
                0.0,
                s.max,
                "unverified",
                f"no points while the lab's evidence does not hold ({'; '.join(failed)}); "
                f"on its own this check was {s.status}",
                s.value,
            )
    return out


@kind("record", required={"records"})
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


@kind("threshold", required={"record"}, optional={"min", "max", "partial_min", "partial_max"})
def _eval_threshold(c, nb, records):
    v = _number(lookup(records, c["record"]), c["record"])
    frac, reasons = 1.0, []
    if "min" in c and v < c["min"]:
        lo = c.get("partial_min")
        frac = min(frac, (v - lo) / (c["min"] - lo) if lo is not None and v > lo else 0.0)
        reasons.append(
            f"{c['record']} = {v:.4g} is below {c['min']:g}"
            + (f" (partial credit from {lo:g})" if lo is not None else "")
        )
    if "max" in c and v > c["max"]:
        hi = c.get("partial_max")
        frac = min(frac, (hi - v) / (hi - c["max"]) if hi is not None and v < hi else 0.0)
        reasons.append(
            f"{c['record']} = {v:.4g} is above {c['max']:g}"
            + (f" (partial credit up to {hi:g})" if hi is not None else "")
        )
    return frac, "; ".join(reasons), v


@kind("all_equal", required={"record"}, optional={"tolerance"})
def _eval_all_equal(c, nb, records):
    values = _numbers(lookup(records, c["record"]), c["record"])
    tol = c.get("tolerance", 0)
    if all(_close(v, values[0], tol) for v in values):
        return 1.0, "", values
    return 0.0, f"{c['record']} = {_fmt(values)} are not all equal" + (f" (tolerance {tol:g})" if tol else ""), values


@kind("sum_equals", required={"record", "total"}, optional={"tolerance"})
def _eval_sum_equals(c, nb, records):
    values = _numbers(lookup(records, c["record"]), c["record"])
    total_ref = c["total"]
    total = _number(lookup(records, total_ref), total_ref) if isinstance(total_ref, str) else float(total_ref)
    s, tol = sum(values), c.get("tolerance", 0)
    if _close(s, total, tol):
        return 1.0, "", s
    return (
        0.0,
        (f"sum of {c['record']} = {s:g} but {total_ref} = {total:g}" + (f" (tolerance {tol:g})" if tol else "")),
        s,
    )


@kind("compare", required={"left", "op", "right"}, optional={"factor", "tolerance"})
def _eval_compare(c, nb, records):
    left = _number(lookup(records, c["left"]), c["left"])
    right_ref = c["right"]
    right = _number(lookup(records, right_ref), right_ref) if isinstance(right_ref, str) else float(right_ref)
    right *= c.get("factor", 1.0)
    op, tol = c["op"], c.get("tolerance", 0)
    ok = _close(left, right, tol) if op == "==" else _OPS[op](left, right)
    if ok:
        return 1.0, "", left
    if isinstance(right_ref, str) and "factor" not in c:  # two of the student's own records: nothing to give away
        return 0.0, f"expected {c['left']} {op} {right_ref}, got {left:.4g} vs {right:.4g}", left
    # a number of the rubric's, or a factor (a formula): the page says what is checked, never the target
    return 0.0, f"{c['left']} is {left:.4g}, which this check does not accept: {c.get('description', c['name'])}", left


@kind("speedup", required={"record", "fast", "slow", "rate", "factor"}, optional={"by"})
def _eval_speedup(c, nb, records):
    """In a recorded table (a list of rows), row ``fast`` is at least ``factor`` times row ``slow``
    by column ``rate`` (a row is named by its ``by`` field, default ``version``). Both rates are
    this run's own measurements and the factor answers no question, so the reason names all three,
    passed or not: a student sees how far the run was from the bar."""
    table, by = lookup(records, c["record"]), c.get("by", "version")

    def rate(row_name: str) -> float:
        rows = [r for r in table if isinstance(r, dict) and r.get(by) == row_name] if isinstance(table, list) else []
        if not rows:
            raise Missing(f"record {c['record']!r} has no row whose {by} is {row_name!r}")
        return _number(rows[0].get(c["rate"]), f"{c['record']} {row_name} {c['rate']}")

    fast, slow = rate(c["fast"]), rate(c["slow"])
    if fast <= 0 or slow <= 0:
        raise Missing(f"record {c['record']!r}: {c['rate']} must be positive, not {fast:g} and {slow:g}")
    ratio = fast / slow
    reason = (
        f"{c['fast']} {fast:,.0f} vs {c['slow']} {slow:,.0f} {c['rate']}: {ratio:.2f}x, "
        f"the check asks at least {c['factor']:g}x"
    )
    return (1.0 if ratio >= c["factor"] else 0.0), reason, round(ratio, 3)


@kind("figures", optional={"cells", "min"})
def _eval_figures(c, nb, records):
    need = int(c.get("min", 1))
    names = c.get("cells")
    if not names:
        n = sum(figure_count(cell) for cell in nb.cells)
        return min(n / need, 1.0), (f"{n} figure(s) in the notebook, expected at least {need}" if n < need else ""), n
    counts, short = {}, []
    for name in names:
        cells = named_cells(nb, name)
        counts[name] = sum(figure_count(cell) for cell in cells)
        if not cells:
            short.append(f"no cell tagged {name!r}")
        elif counts[name] < need:
            short.append(
                f"cell {name!r} shows {counts[name]} figure(s) of at least {MIN_FIGURE_PIXELS} x "
                f"{MIN_FIGURE_PIXELS} pixels, expected {need}"
            )
    ok = len(names) - len(short)
    return ok / len(names), "; ".join(short), counts


# An analysis answer: people score it (labkit.grading.judge.answers finds the answer cells, by id or
# tag, in the submitted notebook, and merges the TA's scores); nothing here reads the run.
KINDS.add(
    "analysis",
    Kind(
        "analysis",
        frozenset(),
        frozenset({"cells", "placeholder", "question", "records"}),
        None,
        gated=False,
        scorer="people",
    ),
)

# A hidden check: the grader imports the student's functions into a fresh sandboxed process and
# runs them on its own inputs (labkit.grading.judge.hidden); scored there, never from the notebook.
KINDS.add("hidden", Kind("hidden", frozenset({"check"}), frozenset({"args"}), None, scorer="grader"))


def _fmt(values) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"
