"""The public rubric: what of the grader's rubric a student may know, for ``make check``.

``make release`` writes it into the student kit as ``notebooks/rubric.toml``, in place of the
grader's; ``labkit.notebook.checking`` reads it. ``public_rubric(rubric, notebooks)`` derives it
from the grader's rubric and the reference notebooks: per lab the notebook, its parameters and
limits, the records its checks read, the checks a student's machine can run alone (``record``,
``figures``, ``analysis``), the exercises and the points; of every other check only how many
there are and their points, never a name, input, seed, verifier, reference value or answer
key. ``to_toml`` writes it.

The solution markers and the stub live here, below ``release`` (which replaces each region by
the stub): the exercises are found by the same markers, and ``make check`` looks for the stub.
More in docs/internals.md, section labkit.grading (what is kept, field by field).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import tomli_w

from labkit.notebook.checking import FORMAT
from labkit.grading.judge.answers import questions
from labkit.grading.judge.rubric import Lab, load_rubric

PUBLIC_KINDS = ("record", "figures", "analysis")  # what a student's machine checks as the grader does
LIMITS = ("kernel", "cell_timeout", "notebook_timeout", "start_timeout", "memory_mb")
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")  # what a released exercise holds
HEADER = """\
# The public part of the grader's rubric, written by `make release`: what `make check` runs your
# notebooks with (the grader's parameters and time limits) and checks (the records the grader reads,
# the figures it looks for, your answer cells, your exercises and their self-checks). The grader adds
# checks of its own, which are hidden: this file counts them and their points, and names none of them.
"""


def public_rubric(rubric="notebooks/rubric.toml", notebooks=None, placed: bool = False) -> dict:
    """The public rubric of ``rubric`` (a path), its reference notebooks in ``notebooks`` (default:
    the rubric's folder) or their lab folders, as a dict ``to_toml`` writes. ``placed``: each lab
    says which folder its notebook is in (the instructor's ``make check``; a student's kit has
    every notebook in ``notebooks/``)."""
    rubric = Path(rubric)
    notebooks = Path(notebooks) if notebooks is not None else rubric.parent
    labs = {}
    for key, lab in load_rubric(rubric).labs.items():
        reference = lab.reference(notebooks)
        if not reference.is_file():
            raise ValueError(
                f"{rubric}: lab {key}'s notebook {reference} is not there; the public rubric "
                f"reads the exercises and answer cells from it"
            )
        labs[key] = public_lab(lab, reference) | ({"folder": lab.folder} if placed and lab.folder else {})
    return {"format": FORMAT, "labs": labs}


def public_lab(lab: Lab, reference: Path) -> dict:
    """One lab's public table, from its ``Lab`` and reference notebook."""
    shown = [c for c in lab.checks if c.kind in PUBLIC_KINDS and c.verify is None]
    hidden = [c for c in lab.checks if c not in shown and not c.manual]
    asked = questions(lab, reference)
    return {
        "notebook": lab.notebook,
        "title": lab.title,
        **{k: getattr(lab, k) for k in LIMITS},
        "points": sum(c.points for c in lab.checks if not c.manual),
        "answer_points": sum(c.points for c in lab.checks if c.manual),
        "hidden_checks": len(hidden),
        "hidden_points": sum(c.points for c in hidden),
        "late_penalty": lab.late_penalty.describe() if lab.late_penalty else "none",
        "records": _records(lab),
        "parameters": dict(lab.parameters),
        "checks": [_public_check(c, asked.get(c.name)) for c in shown],
        "exercises": exercises(_read(reference)),
    }


def _public_check(check, question) -> dict:
    spec = check.spec
    out = {"name": check.name, "kind": check.kind, "points": check.points}
    if check.kind == "record":
        out["records"] = list(spec["records"])
    elif check.kind == "figures":
        out["cells"] = list(spec.get("cells", []))
        out["min"] = int(spec.get("min", 1))
    else:  # analysis: the reference's answer cells and the question above each, by id (the release keeps ids)
        out["cells"] = list(question.answer_ids)
        out["questions"] = [qid or "" for qid in question.question_ids]
        out["placeholder"] = question.placeholder
    return out


def _records(lab: Lab) -> list[str]:
    """Every record (path) a check of ``lab`` reads; a number on a check's right is not one."""
    found = []
    for c in lab.checks:
        s = c.spec
        refs = list(s.get("records", [])) if c.kind != "analysis" else []
        refs += [s[k] for k in ("record", "left", "right", "total") if isinstance(s.get(k), str)]
        found += [r for r in refs if r not in found]
    return found


# ---------------------------------------------------------------------------------------------
# Exercises, from the reference notebook


def exercises(nb) -> list[dict]:
    """Each code cell with a solution region: its id, the names its solution defines, the stub a
    released copy holds, and for a function the id of the first later code cell that uses it
    (the notebook's self-check of that function)."""
    cells = nb.cells
    out = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code" or not cell.get("id"):
            continue
        regions = _regions(cell.source)
        if not regions:
            continue
        functions, names = _defined(cell.source, regions)
        entry = {"cell": cell.get("id"), "defines": functions or names, "stub": CODE_STUB[1]}
        check = (
            next(
                (
                    c.get("id")
                    for c in cells[i + 1 :]
                    if c.get("cell_type") == "code" and c.get("id") and _calls(c.source, functions)
                ),
                None,
            )
            if functions
            else None
        )
        if check:
            entry["self_check"] = check
        out.append(entry)
    return out


def _regions(source: str) -> list[tuple[int, int]]:
    """(first, last) line numbers (1-based) of each solution region, markers included."""
    spans, start = [], None
    for n, line in enumerate(source.splitlines(), 1):
        if line.strip() == BEGIN:
            start = n
        elif line.strip() == END and start is not None:
            spans.append((start, n))
            start = None
    return spans


def _defined(source: str, regions) -> tuple[list[str], list[str]]:
    """(functions whose body holds a region, names assigned in a region): of the names assigned,
    those the cell uses after their region when there are any (``record("x", x)``), else all."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell with IPython syntax (%magic): no names to show
        return [], []
    functions = [
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any(n.lineno < a <= n.end_lineno for a, _ in regions)
    ]  # a region begins in its body
    if functions:
        return functions, []
    assigned, used_after = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if any(a <= node.lineno <= b for a, b in regions) and node.id not in assigned:
                assigned.append(node.id)
        elif isinstance(node, ast.Name) and node.lineno > max(b for _, b in regions):
            used_after.add(node.id)
    return [], [n for n in assigned if n in used_after] or assigned


def _calls(source: str, names) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return any(re.search(rf"\b{re.escape(n)}\b", source) for n in names)
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names for n in ast.walk(tree))


def _read(path: Path):
    import nbformat

    return nbformat.read(str(path), as_version=4)


# ---------------------------------------------------------------------------------------------
# TOML, written by tomli-w (tomllib, the standard library's, only reads)


def to_toml(data: dict, header: str = HEADER) -> str:
    """``data`` as TOML that ``tomllib`` reads back equal (checked: a value TOML cannot hold is an error)."""
    try:
        body = tomli_w.dumps(data)
    except TypeError as e:  # None, a set ...: tomli-w names the type
        raise ValueError(f"to_toml: {e}: it has no TOML form") from None
    text = (header.rstrip() + "\n\n" if header else "") + body
    if tomllib.loads(text) != data:
        raise ValueError("to_toml: the written TOML does not read back as the data (a value TOML cannot hold?)")
    return text
