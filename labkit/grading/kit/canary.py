"""``make canary``: the kit tried on the newest TensorFlow, Keras and papermill, before a term.

A scratch virtual environment under ``--out`` gets the grader's requirements with the watched
packages unpinned (so pip takes the newest the registry has), then the reference notebooks are
graded there, at the rubric's sizes, and again with the course's own interpreter as the baseline.
The report sets the two side by side: which versions moved, whether the install resolved (and, if
the course's other pins had to give way, which), each check whose status changed, each record whose
value moved, and warnings the new versions print that the pinned ones do not. Nothing of the
course's environment is touched: the scratch venv is its own, and labkit is installed there in
place from this checkout (a ``.pth`` file, as an editable install makes).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from labkit.core.proc import OwnedProcess

# The packages a term's environment is most likely to meet new releases of, and those that move
# with them (TensorBoard's version follows TensorFlow's).
WATCHED = ("tensorflow-cpu", "tensorflow", "keras", "papermill")
COMPANIONS = ("tensorboard",)
REQUIREMENTS = "requirements-grader.txt"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_WARNING = re.compile(r"\b(\w*Warning)\b: (.*)")


def requirement_lines(path: Path) -> list[str]:
    """The requirement lines of ``path``, ``-r`` includes read in place, comments dropped."""
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            lines += requirement_lines(path.parent / line[3:].strip())
        else:
            lines.append(line)
    return lines


def _name(line: str) -> str:
    m = _NAME.match(line)
    return m.group(1).lower().replace("_", "-") if m else ""


def _pin(line: str) -> tuple[str, str] | None:
    """(package, version) of a line that pins one with ``==``."""
    m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^;\s]+)", line)
    return (_name(line), m.group(2)) if m else None


def _applies(line: str) -> bool:
    """Whether ``line``'s environment marker (if any) holds on this machine."""
    from packaging.markers import Marker

    return ";" not in line or Marker(line.split(";", 1)[1]).evaluate()


def repinned(lines: list[str], newest: dict[str, str], free: set[str]) -> list[str]:
    """``lines`` with each package of ``newest`` pinned to its version there and each of ``free``
    left to pip; the other lines as they are. A line whose marker does not hold here is left out."""
    out = []
    for line in filter(_applies, lines):
        name = _name(line)
        if name in newest:
            line = f"{name}=={newest[name]}"
        elif name in free:
            line = name
        out.append(line)
    return out


def newest(python: Path, name: str) -> str | None:
    """The newest version of ``name`` the registry pip is set up for offers (None: none found)."""
    found = subprocess.run(
        [python, "-m", "pip", "index", "versions", name, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    m = re.search(rf"^{re.escape(name)} \(([^)]+)\)", found.stdout, re.M | re.I)
    return m.group(1) if m else None


@dataclass
class Step:
    """One command of the canary: what it ran, how it ended, and its log."""

    name: str
    code: int | None
    log: Path
    seconds: float = 0.0
    tail: str = ""

    @property
    def ok(self) -> bool:
        return self.code == 0


def run_step(name: str, cmd: list, log: Path, timeout: float, cwd: Path | None = None) -> Step:
    """``cmd`` as an owned process with its log; a timeout is an ending like another."""
    import time

    start = time.monotonic()
    with OwnedProcess(cmd, log, cwd=cwd, timeout=timeout) as p:
        try:
            code = p.wait()
        except subprocess.TimeoutExpired:
            code = None
        tail = p.log_tail(15)
    return Step(name, code, log, round(time.monotonic() - start, 1), tail)


@dataclass
class Environment:
    """The scratch venv: how its install went and what versions it holds."""

    python: Path
    steps: list[Step] = field(default_factory=list)
    newest: dict[str, str] = field(default_factory=dict)  # the watched packages' newest versions
    relaxed: list[str] = field(default_factory=list)  # course pins the install moved
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and self.steps[-1].ok


def build_environment(root: Path, out: Path, timeout: float, log=print) -> Environment:
    """A fresh venv in ``out``/venv with the grader's requirements, the watched packages newest.

    The watched packages are pinned to the newest version the registry offers (left free, pip
    would settle on an older one that fits the course's pins). When pip cannot resolve them against
    the course's other pins, it tries again with those pins freed, and says which."""
    venv = out / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    env = Environment(venv / "bin" / "python")
    env.steps.append(run_step("venv", [sys.executable, "-m", "venv", venv], out / "venv.log", timeout))
    if env.ok:  # the newest pip, as make setup has: ensurepip's may resolve differently
        upgrade = [env.python, "-m", "pip", "install", "--disable-pip-version-check", "--upgrade", "pip"]
        env.steps.append(run_step("pip", upgrade, out / "pip.log", timeout))
    if not env.ok:
        return env
    lines = requirement_lines(root / REQUIREMENTS)
    wanted = {_name(x) for x in filter(_applies, lines)}
    env.newest = {n: v for n in WATCHED if n in wanted and (v := newest(env.python, n))}
    companions = set(COMPANIONS)
    for attempt, free in enumerate((companions, wanted - set(env.newest))):
        reqs = out / f"requirements-{attempt + 1}.txt"
        reqs.write_text("\n".join(repinned(lines, env.newest, free)) + "\n")
        shown = ", ".join(f"{n} {v}" for n, v in env.newest.items())
        log(f"canary: installing {reqs.name} into {venv} ({shown}{'; other pins freed' if attempt else ''})")
        pip = [env.python, "-m", "pip", "install", "--disable-pip-version-check", "-r", reqs]
        env.steps.append(run_step(f"install {attempt + 1}", pip, out / f"install-{attempt + 1}.log", timeout))
        if env.ok:
            break
    if env.ok:
        link_kit(env.python, root)
    if env.ok:
        env.versions = installed(env.python)
        pinned = dict(filter(None, map(_pin, lines)))
        env.relaxed = sorted(n for n, v in pinned.items() if n not in env.newest and env.versions.get(n, v) != v)
    return env


def link_kit(python: Path, root: Path) -> None:
    """labkit from ``root`` on ``python``'s path, as an editable install puts it, with no build."""
    where = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    Path(where.stdout.strip(), "labkit-canary.pth").write_text(f"{root.resolve()}\n")


def installed(python: Path) -> dict[str, str]:
    """``{package: version}`` of what ``python``'s environment holds."""
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed.stdout)}


def grade_reference(python: Path, root: Path, out: Path, timeout: float, extra=()) -> Step:
    """The reference notebooks graded by ``python``'s environment into ``out``."""
    cmd = [python, "-m", "labkit", "grade", "--out", out, *extra]
    return run_step(f"grade ({out.name})", cmd, out.parent / f"grade-{out.name}.log", timeout, cwd=root)


def read_report(path: Path) -> dict[tuple, dict]:
    """The reference run's ``report.csv``, keyed by (lab, kind, name)."""
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        return {(r["lab"], r["kind"], r["name"]): r for r in csv.DictReader(f)}


def _number(text: str):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _leaf(text: str):
    """A record's value as JSON where it reads as JSON (a dict or a list), else as it is."""
    try:
        return json.loads(text) if text[:1] in "[{" else text
    except ValueError:
        return text


def differences(a, b, tolerance: float, path: str = "") -> list[str]:
    """Where two record values differ: numbers by more than ``tolerance`` (relative), other text
    unless it is a path (a run's folder differs by construction), shapes that do not match."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), tolerance, f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, tolerance, f"{path}[{i}]")]
    x, y = _number(a) if isinstance(a, str) else a, _number(b) if isinstance(b, str) else b
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        moved = abs(y - x) > tolerance * max(abs(x), abs(y), 1e-12)
        return [f"{path or 'value'}: {x:.4g} -> {y:.4g}"] if moved else []
    if a == b or (isinstance(a, str) and isinstance(b, str) and "/" in a + b):
        return []
    return [f"{path or 'value'}: {str(a)[:40]} -> {str(b)[:40]}"]


def compare(baseline: dict, canary: dict, tolerance: float) -> dict[str, list[str]]:
    """What changed between two reference reports: checks whose status moved, records whose
    number moved by more than ``tolerance`` (relative) or whose text changed, and rows in one only.
    A lab whose notebook did not run at all is one line, with the reason, not one per check."""
    found = {"broke": [], "fixed": [], "moved": [], "missing": [], "new": []}
    before = {k[0] for k, r in baseline.items() if r.get("status") == "not-run"}
    stopped = {k[0]: r["reason"] for k, r in canary.items() if r.get("status") == "not-run" and k[0] not in before}
    found["broke"] += [f"{lab}: {reason}" for lab, reason in sorted(stopped.items())]
    for key in sorted(set(baseline) | set(canary)):
        lab, kind, name = key
        a, b = baseline.get(key), canary.get(key)
        where = f"{lab} {kind} `{name}`"
        if lab in stopped:
            continue
        if a is None or b is None:
            found["new" if a is None else "missing"].append(where)
        elif kind == "check" and a["status"] != b["status"]:
            bucket = "broke" if a["status"] == "pass" else "fixed" if b["status"] == "pass" else "moved"
            why = f" ({b['reason']})" if b.get("reason") else ""
            found[bucket].append(f"{where}: {a['status']} -> {b['status']}{why}")
        elif kind == "record" and a["value"] != b["value"] and not a["value"].endswith("..."):
            # a value report.csv cut short (over 1,000 characters) is no JSON to compare
            moved = differences(_leaf(a["value"]), _leaf(b["value"]), tolerance)
            if moved:
                more = f" (and {len(moved) - 3} more)" if len(moved) > 3 else ""
                found["moved"].append(f"{where}: {'; '.join(moved[:3])}{more}")
    return found


def warnings_in(folder: Path) -> set[str]:
    """The distinct warning lines (``SomethingWarning: text``) in the kernel logs under ``folder``."""
    seen = set()
    for path in folder.rglob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            m = _WARNING.search(line)
            if m:
                seen.add(f"{m.group(1)}: {re.sub(r'/[^ :]+/', '.../', m.group(2))[:200]}")
    return seen


def version_rows(course: dict[str, str], canary: dict[str, str]) -> list[tuple[str, str, str]]:
    """(package, course, canary) for the watched packages either holds, and every other package of
    the course's whose version moved."""
    rows = []
    for name in sorted(set(course) | set(canary)):
        a, b = course.get(name, "-"), canary.get(name, "-")
        if (name in WATCHED + COMPANIONS and (a, b) != ("-", "-")) or (a != b and "-" not in (a, b)):
            rows.append((name, a, b))
    return rows


@dataclass
class Findings:
    """Everything the report says, gathered before it is written."""

    env: Environment
    course: dict[str, str]
    baseline: Step | None = None
    canary: Step | None = None
    changes: dict[str, list[str]] = field(default_factory=dict)
    new_warnings: list[str] = field(default_factory=list)

    @property
    def broke(self) -> bool:
        ran = self.canary is not None and self.canary.code is not None
        return not self.env.ok or not ran or bool(self.changes.get("broke") or self.changes.get("missing"))


def _fence(text: str) -> list[str]:
    return ["```", text.replace("```", "'''"), "```"] if text else []


def report_lines(f: Findings) -> list[str]:
    """report.md: the verdict first, then versions, install, grading and what changed."""
    verdict = "something broke (below)" if f.broke else "nothing broke"
    lines = ["# labkit canary: the newest TensorFlow, Keras and papermill", "", f"**Verdict: {verdict}.**", ""]
    lines += ["| package | course | canary |", "|---|---|---|"]
    lines += [
        f"| {n} | {a} | {b}{' (moved)' if a != b else ''} |" for n, a, b in version_rows(f.course, f.env.versions)
    ]
    lines += ["", "## Install", ""]
    for s in f.env.steps:
        lines.append(f"- {s.name}: {'ok' if s.ok else f'failed (exit {s.code})'} in {s.seconds} s, log `{s.log.name}`")
        lines += [] if s.ok else _fence(s.tail)
    if f.env.relaxed:
        lines.append(f"- the newest versions needed the course's other pins freed: {', '.join(f.env.relaxed)}")
    lines += ["", "## Reference grading", ""]
    for s in (f.baseline, f.canary):
        if s is not None:
            how = "timed out" if s.code is None else f"exit {s.code}"
            lines.append(f"- {s.name}: {how} in {s.seconds} s, log `{s.log.name}`")
            lines += _fence(s.tail) if not s.ok else []
    titles = {
        "broke": "Checks that passed on the course's pins and fail on the newest",
        "missing": "Checks or records the canary's run did not produce",
        "fixed": "Checks that now pass",
        "moved": "Statuses or records that changed (relative change above the tolerance)",
        "new": "Checks or records only the canary's run has",
    }
    for key, title in titles.items():
        if f.changes.get(key):
            lines += ["", f"## {title}", ""] + [f"- {x}" for x in f.changes[key]]
    if f.new_warnings:
        lines += ["", "## Warnings only the newest versions print", ""] + [f"- {w}" for w in f.new_warnings]
    return lines + [""]


def run(root: Path, out: Path, baseline: Path | None, tolerance: float, timeout: float, log=print) -> int:
    """Build the scratch environment, grade there and with the course's pins, write report.md.

    Exit 0 when nothing broke, 1 otherwise; the course's environment is never written."""
    out.mkdir(parents=True, exist_ok=True)
    found = Findings(build_environment(root, out, timeout, log), course=installed(Path(sys.executable)))
    if found.env.ok:
        if baseline is None:
            baseline = out / "baseline"
            shutil.rmtree(baseline, ignore_errors=True)
            log(f"canary: grading the reference notebooks with the course's pins into {baseline}")
            found.baseline = grade_reference(Path(sys.executable), root, baseline, timeout)
        shutil.rmtree(out / "newest", ignore_errors=True)
        log(f"canary: grading the reference notebooks with the newest versions into {out / 'newest'}")
        found.canary = grade_reference(found.env.python, root, out / "newest", timeout)
        before, after = read_report(baseline / "report.csv"), read_report(out / "newest" / "report.csv")
        found.changes = compare(before, after, tolerance)
        found.new_warnings = sorted(warnings_in(out / "newest") - warnings_in(baseline))
    (out / "report.md").write_text("\n".join(report_lines(found)))
    log(f"canary: {'something broke' if found.broke else 'nothing broke'}; the report is {out / 'report.md'}")
    return 1 if found.broke else 0
